"""The CA follows its Secret on the real kube-apiserver, as istiod follows its mounted ``cacerts``
and its ``istio-ca-secret``: a rotated ``cacerts`` (a new intermediate under a new root, the
root bundle holding both, ISTIO_MULTIROOT_MESH) is served by a running pilotfish at once: the
secure port's serving certificate, issued workload certificates and the root-changed hook; a
root replaced outright is refused as istiod refuses it; an ``istio-ca-secret`` another replica
rotated is reloaded; a self-signed root near its end is renewed from its key, once."""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from app.agent.certs import CaClient, CertificateManager, build_csr, private_dir
from app.runtime import Runtime
from app.security.ca import CertificateAuthority
from app.security.ca_secret import istio_ca_secret
from app.security.ca_store import KubeCaStore
from app.settings import Settings
from app.sources.kube.client import api_client
from tests.support.cluster import Cluster
from tests.support.plugged_ca import cacerts, intermediate, new_root, pem
from tests.support.rbac import grant_istiod_ca_rules
from tests.support.runtime import running

TD = "cluster.local"


@pytest.fixture
def system(kube: Cluster) -> str:
    namespace = kube.namespace("system")
    grant_istiod_ca_rules(kube, namespace)
    return namespace


async def eventually(what: str, check: object, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def serving_issuer(port: int) -> x509.Name:
    """The issuer of the certificate the secure port presents to a new handshake."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, context.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).issuer


@pytest.fixture
async def plugged(kube: Cluster, system: str, pilotfish_kubeconfig: Path) -> AsyncIterator[tuple[Runtime, list[str]]]:
    """A pilotfish on a plugged-in ``cacerts`` (root A, intermediate A1), multi-root on, with
    the roots its hook was told."""
    root_a = new_root("root A")
    kube.create(cacerts("istiod", intermediate(root_a, "intermediate A1"), [root_a[0]]), system)
    settings = Settings(
        config_dir=None,
        kubeconfig=pilotfish_kubeconfig,
        system_namespace=system,
        xds_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        secure_xds_address="127.0.0.1:0",
        ca_server=True,
        multi_root_mesh=True,
    )
    roots: list[str] = []
    async with running(settings) as rt:
        rt.on_root_changed(roots.append)
        assert roots == [pem(root_a[0])]  # told at once: there is a CA
        yield rt, roots


async def test_a_rotated_cacerts_is_served_at_once_signing_port_and_hook(
    kube: Cluster, system: str, plugged: tuple[Runtime, list[str]], tmp_path: Path
) -> None:
    rt, roots = plugged
    assert rt.ca is not None and rt.secure is not None
    root_a = x509.load_pem_x509_certificate(roots[0].encode())
    # rotation as Istio documents it: a new root B, the bundle A + B, an intermediate under B
    root_b = new_root("root B")
    signer = intermediate(root_b, "intermediate B1")
    bundle = pem(root_a) + pem(root_b[0])
    rotated = cacerts("istiod", signer, [root_a, root_b[0]])
    kube.patch("v1", "Secret", system, "cacerts", {"data": rotated["data"]})
    await eventually("the rotated root reported", lambda: roots[-1] == bundle)
    assert rt.ca.signing_cert == signer[0] and rt.ca.root_pem == bundle
    # istiod's expiry gauges: the first root of the bundle (A), the first of the chain (B1)
    metrics = rt.metrics_text()
    root_expiry = int(root_a.not_valid_after_utc.timestamp())
    assert f"citadel_server_root_cert_expiry_timestamp {root_expiry}" in metrics
    assert f"citadel_server_cert_chain_expiry_timestamp {int(signer[0].not_valid_after_utc.timestamp())}" in metrics
    # the port presents a certificate of B1 to new handshakes
    assert await asyncio.to_thread(serving_issuer, rt.secure.port) == signer[0].subject

    # a workload's certificate, through the certificate service with a service-account token
    ns = kube.namespace("shop")
    kube.service_account(ns, "web")
    (tmp_path / "token").write_text(kube.token(ns, "web", audiences=["istio-ca"]))
    client = CaClient(("127.0.0.1", rt.secure.port), bundle, tmp_path / "token", private_dir())
    cert = await CertificateManager(client, f"spiffe://{TD}/ns/{ns}/sa/web").renew()
    assert cert.root_pem == bundle
    leaf = x509.load_pem_x509_certificate(cert.chain_pem.encode())
    leaf.verify_directly_issued_by(signer[0])


async def test_a_root_replaced_outright_is_refused_and_the_ca_stays(
    kube: Cluster, system: str, plugged: tuple[Runtime, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    rt, roots = plugged
    assert rt.ca is not None
    before = rt.ca
    root_c = new_root("root C")  # not a bundle holding A: istiod refuses it even with multi-root
    with caplog.at_level(logging.WARNING, logger="pilotfish.security"):
        kube.patch(
            "v1", "Secret", system, "cacerts", {"data": cacerts("tls", intermediate(root_c, "C1"), [root_c[0]])["data"]}
        )
        await eventually("the refusal logged", lambda: "Updating new ROOT-CA not supported" in caplog.text)
    assert rt.ca is before and len(roots) == 1


async def test_an_istio_ca_secret_another_replica_rotated_is_reloaded(
    kube: Cluster, system: str, pilotfish_kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = api_client(pilotfish_kubeconfig)
    store = KubeCaStore(client, system, lambda: CertificateAuthority.self_signed(TD))
    changes: list[CertificateAuthority] = []
    try:
        first = await store.load()
        assert store.created
        watching = asyncio.create_task(store.watch(changes.append))
        await asyncio.sleep(0.5)  # its first list: the Secret as loaded, no change
        assert changes == []
        rotated = CertificateAuthority.self_signed(TD)  # what istiod's rotator writes back
        secret = istio_ca_secret(rotated, "istio-ca-secret", system)
        kube.patch("v1", "Secret", system, "istio-ca-secret", {"data": secret["data"]})
        await eventually("the rotated root", lambda: bool(changes))
        assert changes[-1].root_pem == rotated.root_pem != first.root_pem and store.ca is changes[-1]
        # a Secret emptied by hand is not a CA: logged, the rotated one stays
        with caplog.at_level(logging.ERROR, logger="pilotfish.security"):
            garbage = {"ca-key.pem": base64.b64encode(b"x").decode()}
            kube.patch("v1", "Secret", system, "istio-ca-secret", {"data": garbage})
            await eventually("the bad Secret logged", lambda: "the CA in force stays" in caplog.text)
        assert len(changes) == 1 and store.ca is changes[-1]
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
    finally:
        await client.close()


async def test_without_multi_root_a_new_root_bundle_is_refused(
    kube: Cluster, system: str, pilotfish_kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root_a, root_b = new_root("root A"), new_root("root B")
    kube.create(cacerts("istiod", intermediate(root_a, "A1"), [root_a[0]]), system)
    client = api_client(pilotfish_kubeconfig)
    store = KubeCaStore(client, system, lambda: pytest.fail("plugged in: no self-signed root"))
    changes: list[CertificateAuthority] = []
    try:
        await store.load()
        watching = asyncio.create_task(store.watch(changes.append))
        await asyncio.sleep(0.5)
        # the same root, a new intermediate: allowed (istiod: only updating intermediate CA)
        a2 = intermediate(root_a, "A2")
        kube.patch("v1", "Secret", system, "cacerts", {"data": cacerts("istiod", a2, [root_a[0]])["data"]})
        await eventually("the new intermediate", lambda: bool(changes))
        assert changes[-1].signing_cert == a2[0]
        # the bundle A + B: istiod refuses it unless ISTIO_MULTIROOT_MESH
        rotated = cacerts("istiod", intermediate(root_b, "B1"), [root_a[0], root_b[0]])
        with caplog.at_level(logging.WARNING, logger="pilotfish.security"):
            kube.patch("v1", "Secret", system, "cacerts", {"data": rotated["data"]})
            await eventually("the refusal logged", lambda: "Multi root is disabled" in caplog.text)
        assert len(changes) == 1 and store.ca is changes[-1]
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
    finally:
        await client.close()


async def test_a_root_near_its_end_is_renewed_from_its_key_once_for_all_replicas(
    kube: Cluster, system: str, pilotfish_kubeconfig: Path
) -> None:
    """istiod's root rotator: in the last 20 % of its life the root is renewed from its own key
    and written back; what the old root signed verifies under the new one; of two replicas
    checking at once, one writes (the other's update is refused: it reads the winner's)."""
    now = datetime.datetime.now(datetime.UTC)
    old = CertificateAuthority.self_signed(
        TD, now=now - datetime.timedelta(seconds=80), ttl=datetime.timedelta(seconds=100)
    )
    kube.create(istio_ca_secret(old, "istio-ca-secret", system), system)
    spiffe = f"spiffe://{TD}/ns/a/sa/b"
    leaf = old.sign_csr(build_csr(ec.generate_private_key(ec.SECP256R1()), spiffe), [spiffe])[0]
    clients = [api_client(pilotfish_kubeconfig) for _ in range(2)]
    changes: list[CertificateAuthority] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        for client in clients:
            store = KubeCaStore(client, system, lambda: pytest.fail("there is a root"))
            assert (await store.load()).root_pem == old.root_pem
            rotate = store.rotate_root(
                changes.append, check_interval=0.3, grace_percent=20, ttl=datetime.timedelta(days=3650), jitter=False
            )
            tasks.append(asyncio.create_task(rotate))
        await eventually("the root renewed", lambda: bool(changes))
        await asyncio.sleep(1.0)  # further checks: not due any more, and the other replica lost
        assert len(changes) == 1
        renewed = changes[0]
        assert renewed.signing_cert != old.signing_cert and renewed.signing_cert.subject == old.signing_cert.subject
        assert renewed.signing_cert.not_valid_after_utc - now > datetime.timedelta(days=3649)
        x509.load_pem_x509_certificate(leaf.encode()).verify_directly_issued_by(renewed.signing_cert)
        secret = kube.get("v1", "Secret", system, "istio-ca-secret")
        assert secret is not None
        assert base64.b64decode(secret["data"]["ca-cert.pem"]).decode() == renewed.root_pem
        assert secret["data"]["ca-key.pem"] == istio_ca_secret(old, "istio-ca-secret", system)["data"]["ca-key.pem"]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in clients:
            await client.close()
