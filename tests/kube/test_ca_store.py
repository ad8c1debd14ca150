"""One CA for every replica, through the real kube-apiserver, with pilotfish's account given what
istiod's chart gives istiod (Secrets in the system namespace): replicas racing on an empty
namespace end with one root in ``istio-ca-secret``, written as istiod's code writes it (its keys,
type and arguments read from the pinned istio module) and read back by a restart; a plugged-in
``cacerts`` in istiod's layout and in the ``kubernetes.io/tls`` layout signs, and an incomplete
one is refused naming the Secret."""

from __future__ import annotations

import asyncio
import base64
import datetime
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from app.agent.certs import build_csr
from app.security.ca import CertificateAuthority
from app.security.ca_secret import istio_ca_secret
from app.security.ca_store import CaStoreError, KubeCaStore
from app.sources.kube.client import api_client
from app.supervise import Backoff
from tests.support.cluster import Cluster
from tests.support.peers import istio_module_dir
from tests.support.plugged_ca import cacerts, chain_reaches, intermediate, new_root, pem
from tests.support.rbac import grant_istiod_ca_rules

TD = "cluster.local"


@pytest.fixture
def system(kube: Cluster) -> str:
    namespace = kube.namespace("system")
    grant_istiod_ca_rules(kube, namespace)
    return namespace


@pytest.fixture
async def stores(pilotfish_kubeconfig: Path, system: str) -> AsyncIterator[list[KubeCaStore]]:
    """Four replicas' CA stores, each with a client of its own."""
    clients = [api_client(pilotfish_kubeconfig) for _ in range(4)]
    try:
        yield [KubeCaStore(c, system, lambda: CertificateAuthority.self_signed(TD)) for c in clients]
    finally:
        for c in clients:
            await c.close()


# --- what istiod's code writes (security/pkg/pki/ca/ca.go, read from the pinned module) -----------


def istiod_ca_secret_layout() -> tuple[str, str, dict[str, str]]:
    """(Secret name, type, key -> what istiod's NewSelfSignedIstioCAOptions puts there: ``nil``,
    ``pemCert`` or ``pemKey``), from BuildSecret's data map, its parameters and the call."""
    source = (istio_module_dir() / "security" / "pkg" / "pki" / "ca" / "ca.go").read_text()
    consts = dict(re.findall(r'^\s*(\w+)\s*=\s*"([^"]*)"', source, re.M))
    params = re.search(r"func BuildSecret\(scrtName, namespace string, ([^)]*) \[\]byte", source)
    call = re.search(r"BuildSecret\(caCertName, namespace, ([^)]*)\)", source)
    data = re.search(r"Data: map\[string\]\[\]byte\{([^}]*)\}", source)
    assert params and call and data, "istiod's BuildSecret is not where it was: read ca.go again"
    names = [p.strip() for p in params.group(1).split(",")]
    *args, secret_type = [a.strip() for a in call.group(1).split(",")]
    given = dict(zip(names, args, strict=True))
    keys = {consts[k]: given[v] for k, v in re.findall(r"(\w+):\s*(\w+),", data.group(1))}
    return consts["CASecret"], consts[secret_type], keys


async def test_replicas_racing_on_an_empty_namespace_end_with_one_root_in_istiods_format(
    kube: Cluster, system: str, stores: list[KubeCaStore]
) -> None:
    loaded = await asyncio.gather(*(s.load() for s in stores))
    assert len({ca.root_pem for ca in loaded}) == 1  # one root, whoever won
    assert sum(s.created for s in stores) == 1  # one create taken; the others read the winner's
    assert {s.secret_name for s in stores} == {"istio-ca-secret"}

    name, secret_type, keys = istiod_ca_secret_layout()
    secret = kube.get("v1", "Secret", system, name)
    assert secret is not None and secret["type"] == secret_type == "istio.io/ca-root"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert set(data) == set(keys) == {"ca-cert.pem", "ca-key.pem", "cert-chain.pem", "key.pem", "root-cert.pem"}
    root = loaded[0].root_pem.encode()
    for key, what in keys.items():
        assert data[key] == {"nil": b"", "pemCert": root, "pemKey": data["ca-key.pem"]}[what], key
    # as istiod's loadSelfSignedCaSecret reads it: ca-cert.pem and a key Go's ParsePemEncodedKey takes
    assert data["ca-key.pem"].startswith(b"-----BEGIN RSA PRIVATE KEY-----")  # PKCS#1, as Go writes it
    cert = x509.load_pem_x509_certificate(data["ca-cert.pem"])
    signing_key = serialization.load_pem_private_key(data["ca-key.pem"], None)
    assert isinstance(signing_key, rsa.RSAPrivateKey) and signing_key.key_size == 2048
    assert cert.public_key().public_numbers() == signing_key.public_key().public_numbers()  # type: ignore[union-attr]
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == TD
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert abs(lifetime - datetime.timedelta(days=3650)) < datetime.timedelta(minutes=5)

    # a restart reads it back: the same root, nothing created
    again = KubeCaStore(stores[0]._client, system, lambda: pytest.fail("no new root on a restart"))
    assert (await again.load()).root_pem == loaded[0].root_pem and not again.created


async def test_a_replica_whose_create_loses_reads_the_winners_root(
    kube: Cluster, system: str, pilotfish_kubeconfig: Path
) -> None:
    winner = CertificateAuthority.self_signed(TD)

    def made_while_we_generated() -> CertificateAuthority:
        # another replica (istiod, say) creates it between this one's read and its create
        kube.create(istio_ca_secret(winner, "istio-ca-secret", system), system)
        return CertificateAuthority.self_signed(TD)

    client = api_client(pilotfish_kubeconfig)
    try:
        store = KubeCaStore(client, system, made_while_we_generated)
        ca = await store.load()
    finally:
        await client.close()
    assert not store.created and ca.root_pem == winner.root_pem


# --- plugged-in cacerts ----------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["istiod", "tls"])
async def test_a_plugged_in_cacerts_signs_in_either_layout_istiod_reads(
    kube: Cluster, system: str, stores: list[KubeCaStore], layout: str
) -> None:
    root = new_root("root A")
    signer = intermediate(root, "intermediate A")
    kube.create(cacerts(layout, signer, [root[0]]), system)
    ca = await stores[0].load()
    assert stores[0].secret_name == "cacerts" and not stores[0].self_signed
    assert ca.root_pem == pem(root[0]) and ca.signing_cert == signer[0]
    chain = ca.sign_csr(
        build_csr(ec.generate_private_key(ec.SECP256R1()), "spiffe://cluster.local/ns/a/sa/b"),
        ["spiffe://cluster.local/ns/a/sa/b"],
    )
    assert chain_reaches(chain, root[0])
    # istiod's response: the leaf, the chain (istiod layout: cert-chain.pem; tls: tls.crt + ca.crt), the root
    assert chain[1:] == [pem(signer[0]), pem(root[0]), pem(root[0])]
    assert kube.get("v1", "Secret", system, "istio-ca-secret") is None  # nothing self-signed made


async def test_an_incomplete_or_foreign_cacerts_stops_the_load_naming_the_secret(
    kube: Cluster, system: str, stores: list[KubeCaStore]
) -> None:
    root, other = new_root("root A"), new_root("root B")
    signer = intermediate(root, "intermediate A")
    secret = cacerts("istiod", signer, [root[0]])
    secret["data"].pop("cert-chain.pem")
    kube.create(secret, system)
    with pytest.raises(
        CaStoreError, match=rf"Secret {system}/cacerts: incomplete signing CA bundle detected: cert-chain.pem missing"
    ):
        await stores[0].load()
    kube.delete("v1", "Secret", system, "cacerts")
    kube.create(cacerts("tls", signer, [other[0]]), system)  # signed by a root it does not carry
    with pytest.raises(CaStoreError, match=rf"Secret {system}/cacerts: cannot verify the cert with the provided root"):
        await stores[1].load()


async def test_with_use_cacerts_the_self_signed_root_is_kept_in_an_istio_generated_cacerts(
    kube: Cluster, system: str, pilotfish_kubeconfig: Path
) -> None:
    """USE_CACERTS_FOR_SELF_SIGNED_CA, as istiod: the new root goes to ``cacerts`` marked
    ``istio-generated``; a replica with the flag reads it as its self-signed root (rotated by
    it), one without takes the complete bundle as a plugged-in CA, as istiod does."""
    client = api_client(pilotfish_kubeconfig)
    try:
        first = KubeCaStore(client, system, lambda: CertificateAuthority.self_signed(TD), use_cacerts=True)
        ca = await first.load()
        assert (first.created, first.secret_name, first.self_signed) == (True, "cacerts", True)
        secret = kube.get("v1", "Secret", system, "cacerts")
        assert secret is not None and secret["type"] == "istio.io/ca-root" and "istio-generated" in secret["data"]
        assert kube.get("v1", "Secret", system, "istio-ca-secret") is None
        again = KubeCaStore(client, system, lambda: pytest.fail("there is a root"), use_cacerts=True)
        assert (await again.load()).root_pem == ca.root_pem and again.self_signed and not again.created
        plain = KubeCaStore(client, system, lambda: pytest.fail("there is a root"))
        assert (await plain.load()).root_pem == ca.root_pem and not plain.self_signed
    finally:
        await client.close()


async def test_a_replica_not_yet_allowed_to_write_the_ca_secret_waits_for_its_role(
    kube: Cluster, pilotfish_kubeconfig: Path
) -> None:
    """RBAC bound after pilotfish starts (a GitOps tool applying the Deployment before the Role):
    istiod's NewSelfSignedIstioCAOptions retries every failure, a 403 included, within its 20
    minutes; the load waits for the Role rather than ending serve."""
    namespace = kube.namespace("latecomer")
    client = api_client(pilotfish_kubeconfig)
    store = KubeCaStore(client, namespace, lambda: CertificateAuthority.self_signed(TD), backoff=Backoff(0.2, 1.0))
    try:
        loading = asyncio.ensure_future(store.load())
        await asyncio.sleep(2)
        assert not loading.done(), loading.exception() if loading.done() else None
        await asyncio.to_thread(grant_istiod_ca_rules, kube, namespace)
        ca = await asyncio.wait_for(loading, 30)
        assert store.created and store.secret_name == "istio-ca-secret"
        stored = kube.get("v1", "Secret", namespace, "istio-ca-secret")
        assert stored is not None
        assert base64.b64decode(stored["data"]["ca-cert.pem"]).decode() == ca.root_pem
    finally:
        await client.close()
