"""Service-account tokens checked with a TokenReview against the API server emulator, through
the real kubernetes-asyncio client (istiod's KubeJWTAuthenticator): the identity, refusals, and
a storm of the same token costing one review."""

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
from tests.kube.test_source import MESH
from tests.support.kube_api import KubeApi


def test_usernames_as_the_api_server_writes_them() -> None:
    assert service_account("system:serviceaccount:shop:web") == ("shop", "web")
    assert service_account("system:serviceaccount:shop") is None
    assert service_account("alice") is None


async def test_a_reviewed_token_is_its_service_account_and_a_storm_is_one_review(tmp_path: Path) -> None:
    api = KubeApi(service_account_tokens={"jwt-of-web": "system:serviceaccount:shop:web"})
    async with api.serve(tmp_path) as kubeconfig:
        client = await api_client(kubeconfig)
        try:
            reviewer = TokenReviewer(client)
            results = await asyncio.gather(*(reviewer.authenticate("jwt-of-web") for _ in range(50)))
            assert set(results) == {("shop", "web")}
            assert await reviewer.authenticate("jwt-of-web") == ("shop", "web")
            assert api.token_reviews == 1 and reviewer.reviews == 1  # one in flight, then cached
            assert await reviewer.authenticate("forged") is None
            assert await reviewer.authenticate("forged") is None
            assert api.token_reviews == 2  # a refusal is cached too, briefly
        finally:
            await client.close()


async def test_an_unreachable_api_server_refuses_without_caching(tmp_path: Path) -> None:
    api = KubeApi(service_account_tokens={"jwt-of-web": "system:serviceaccount:shop:web"})
    async with api.serve(tmp_path) as kubeconfig:
        client = await api_client(kubeconfig)
        try:
            reviewer = TokenReviewer(client)
            api.fail(1, 503)
            assert await reviewer.authenticate("jwt-of-web") is None
            assert await reviewer.authenticate("jwt-of-web") == ("shop", "web")  # asked again
        finally:
            await client.close()


async def test_a_pilotfish_reading_kubernetes_issues_certificates_for_service_account_tokens(tmp_path: Path) -> None:
    api = KubeApi(service_account_tokens={"jwt-of-web": "system:serviceaccount:shop:web"})
    api.apply(MESH)
    async with api.serve(tmp_path) as kubeconfig:
        settings = Settings(
            config_dir=None,
            kubeconfig=kubeconfig,
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
            (tmp_path / "token").write_text("jwt-of-web")
            ca = CaClient(("127.0.0.1", runtime.secure.port), runtime.ca.root_pem, tmp_path / "token", private_dir())
            certs = CertificateManager(ca, "spiffe://cluster.local/ns/shop/sa/web")
            cert = await certs.renew()
            leaf = x509.load_pem_x509_certificate(cert.chain_pem.encode())
            san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            assert san.get_values_for_type(x509.UniformResourceIdentifier) == ["spiffe://cluster.local/ns/shop/sa/web"]
            (tmp_path / "token").write_text("forged")
            refused = CertificateManager(
                CaClient(("127.0.0.1", runtime.secure.port), runtime.ca.root_pem, tmp_path / "token", private_dir()),
                "spiffe://cluster.local/ns/shop/sa/web",
            )
            with pytest.raises(GRPCError):
                await refused.renew()
        finally:
            stop.set()
            await asyncio.wait_for(task, 15)
            gc.unfreeze()


async def test_a_caller_that_gives_up_does_not_cancel_the_review_others_wait_for(tmp_path: Path) -> None:
    api = KubeApi(service_account_tokens={"jwt-of-web": "system:serviceaccount:shop:web"}, delay=0.3)
    async with api.serve(tmp_path) as kubeconfig:
        client = await api_client(kubeconfig)
        try:
            reviewer = TokenReviewer(client)
            impatient = asyncio.create_task(reviewer.authenticate("jwt-of-web"))
            patient = asyncio.create_task(reviewer.authenticate("jwt-of-web"))
            await asyncio.sleep(0.1)
            impatient.cancel()
            assert await asyncio.wait_for(patient, 10) == ("shop", "web")
        finally:
            await client.close()
