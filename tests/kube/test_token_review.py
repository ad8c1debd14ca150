"""Service-account tokens checked with a TokenReview by the real kube-apiserver, through the real
pilotfish's client with the credentials charts/pilotfish gives pilotfish (istiod's
KubeJWTAuthenticator): a TokenRequest token for the ``istio-ca`` audience is its service
account; a forged token and one for another audience are refused; a storm of one token costs
one review; a pilotfish reading the cluster issues certificates for such tokens. Error statuses
and a slow server stay on the emulator (test_token_review_faults.py)."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest
from cryptography import x509
from grpclib.exceptions import GRPCError

from app.agent.certs import CaClient, CertificateManager, private_dir
from app.runtime import Runtime
from app.security.token_review import TokenReviewer, service_account
from app.settings import Settings
from app.sources.kube.client import api_client
from tests.support.cluster import Cluster, Requests


def test_usernames_as_the_api_server_writes_them() -> None:
    assert service_account("system:serviceaccount:shop:web") == ("shop", "web")
    assert service_account("system:serviceaccount:shop") is None
    assert service_account("alice") is None


async def test_a_reviewed_token_is_its_service_account_and_a_storm_is_one_review(
    kube: Cluster, pilotfish_kubeconfig: Path
) -> None:
    ns = kube.namespace("web")
    kube.service_account(ns, "web")
    token = kube.token(ns, "web", audiences=["istio-ca"])
    client = api_client(pilotfish_kubeconfig)
    requests = Requests(client)
    try:
        reviewer = TokenReviewer(client)
        results = await asyncio.gather(*(reviewer.authenticate(token) for _ in range(50)))
        assert set(results) == {(ns, "web")}
        assert await reviewer.authenticate(token) == (ns, "web")

        def reviews() -> int:
            return sum(path.endswith("/tokenreviews") for path, _ in requests.seen)

        assert reviews() == 1 and reviewer.reviews == 1  # one in flight, then cached
        assert await reviewer.authenticate("forged") is None
        assert await reviewer.authenticate("forged") is None
        assert reviews() == 2  # a refusal is cached too, briefly
        # a real token of the account, but for the API server's own audience: not for the CA
        assert await reviewer.authenticate(kube.token(ns, "web")) is None
    finally:
        await client.close()


async def test_a_pilotfish_reading_kubernetes_issues_certificates_for_service_account_tokens(
    tmp_path: Path, kube: Cluster, pilotfish_kubeconfig: Path
) -> None:
    system, ns = kube.namespace("system"), kube.namespace("shop")
    kube.service_account(ns, "web")
    settings = Settings(
        config_dir=None,
        kubeconfig=pilotfish_kubeconfig,
        system_namespace=system,
        xds_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        secure_xds_address="127.0.0.1:0",
        ca_dir=tmp_path / "ca",
    )
    runtime = Runtime(settings)
    stop = asyncio.Event()
    task = asyncio.create_task(runtime.run(stop))
    try:
        await asyncio.wait_for(runtime.started.wait(), 30)
        assert runtime.ca is not None and runtime.secure is not None
        (tmp_path / "token").write_text(kube.token(ns, "web", audiences=["istio-ca"]))
        ca = CaClient(("127.0.0.1", runtime.secure.port), runtime.ca.root_pem, tmp_path / "token", private_dir())
        certs = CertificateManager(ca, f"spiffe://cluster.local/ns/{ns}/sa/web")
        cert = await certs.renew()
        leaf = x509.load_pem_x509_certificate(cert.chain_pem.encode())
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert san.get_values_for_type(x509.UniformResourceIdentifier) == [f"spiffe://cluster.local/ns/{ns}/sa/web"]
        (tmp_path / "token").write_text("forged")
        refused = CertificateManager(
            CaClient(("127.0.0.1", runtime.secure.port), runtime.ca.root_pem, tmp_path / "token", private_dir()),
            f"spiffe://cluster.local/ns/{ns}/sa/web",
        )
        with pytest.raises(GRPCError):
            await refused.renew()
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
        gc.unfreeze()
