"""credentialName secrets over ADS, as istiod's SecretGen serves them (pilot/pkg/xds/sds.go,
pilot/pkg/credentials/kube/secrets.go): resource names, who may have which Secret, the keys a
Secret is read by, and a Secret change pushing secrets only."""

from __future__ import annotations

import base64
import dataclasses
import logging

import pytest
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2
from envoy.service.discovery.v3 import discovery_pb2

from app.config.kube import SecretSpec
from app.config.loader import load_documents
from app.model.proxy import Proxy, ProxyType, build_proxy
from app.translate.secrets import generate_secrets, parse_resource_name
from app.xds.connection import Connection
from app.xds.delta import DeltaSession
from app.xds.type_urls import SECRET
from app.xds.watch import counter_nonces
from tests.support.bookinfo_mesh import Mesh

GATEWAY = Proxy(
    type=ProxyType.ROUTER, id="gw.bookinfo", ip_addresses=("10.1.0.50",), namespace="bookinfo",
    dns_domain="bookinfo.svc.cluster.local", verified=True,
)  # fmt: skip
TLS = SecretSpec("kubernetes.io/tls", {"tls.crt": b"CERT", "tls.key": b"KEY", "ca.crt": b"CA", "ca.crl": b"CRL"})
GENERIC = SecretSpec("Opaque", {"cert": b"GCERT", "key": b"GKEY", "cacert": b"GCA"})
STORE = {("bookinfo", "tls"): TLS, ("bookinfo", "generic"): GENERIC, ("other", "tls"): TLS}


def served(proxy: Proxy, *names: str) -> dict[str, secret_pb2.Secret]:
    return {s.name: s for s in generate_secrets(proxy, lambda ns, n: STORE.get((ns, n)), names)}


def test_parse_resource_name_defaults_to_the_proxys_namespace() -> None:
    assert parse_resource_name("kubernetes://tls", "bookinfo") == ("bookinfo", "tls")
    assert parse_resource_name("kubernetes://other/tls", "bookinfo") == ("other", "tls")
    assert parse_resource_name("default", "bookinfo") is None
    assert parse_resource_name("kubernetes://", "bookinfo") is None


def test_a_tls_secret_is_a_key_pair_and_its_cacert_name_the_ca_with_its_crl() -> None:
    got = served(GATEWAY, "kubernetes://tls", "kubernetes://tls-cacert")
    pair = got["kubernetes://tls"].tls_certificate
    assert (pair.certificate_chain.inline_bytes, pair.private_key.inline_bytes) == (b"CERT", b"KEY")
    ca = got["kubernetes://tls-cacert"].validation_context
    assert (ca.trusted_ca.inline_bytes, ca.crl.inline_bytes) == (b"CA", b"CRL")


def test_generic_keys_are_read_first_as_istiod_extract_cert_info() -> None:
    got = served(GATEWAY, "kubernetes://generic", "kubernetes://generic-cacert")
    assert got["kubernetes://generic"].tls_certificate.certificate_chain.inline_bytes == b"GCERT"
    assert got["kubernetes://generic-cacert"].validation_context.trusted_ca.inline_bytes == b"GCA"


def test_no_verified_identity_no_secrets() -> None:
    assert served(dataclasses.replace(GATEWAY, verified=False), "kubernetes://tls") == {}


def test_an_account_the_api_server_refuses_gets_only_ca_certificates(caplog: pytest.LogCaptureFixture) -> None:
    """istiod filterAuthorizedResources: a key pair needs Authorize, a CA-only name does not; the
    refused names are logged once, with Authorize's error."""
    refused = dataclasses.replace(GATEWAY, secrets_denied="sleep/bookinfo is not authorized to read secrets: ")
    with caplog.at_level(logging.WARNING):
        got = served(refused, "kubernetes://tls", "kubernetes://generic", "kubernetes://tls-cacert", "kubernetes://x")
    assert list(got) == ["kubernetes://tls-cacert"]
    assert caplog.messages == [
        "proxy gw.bookinfo attempted to access unauthorized certificates tls, generic, and 1 others: "
        "sleep/bookinfo is not authorized to read secrets: "
    ]


def test_another_namespaces_secret_is_refused_and_a_missing_one_is_not_served() -> None:
    assert served(GATEWAY, "kubernetes://other/tls", "kubernetes://missing", "kubernetes://bookinfo/tls") == {
        "kubernetes://bookinfo/tls": served(GATEWAY, "kubernetes://bookinfo/tls")["kubernetes://bookinfo/tls"]
    }


def test_a_secret_without_a_key_pair_is_not_served() -> None:
    only_ca = {("bookinfo", "ca"): SecretSpec("Opaque", {"ca.crt": b"CA"})}
    got = generate_secrets(GATEWAY, lambda ns, n: only_ca.get((ns, n)), ["kubernetes://ca", "kubernetes://ca-cacert"])
    assert [s.name for s in got] == ["kubernetes://ca-cacert"]


SECRET_YAML = """apiVersion: v1
kind: Secret
metadata: {{name: gw-cert, namespace: bookinfo}}
type: kubernetes.io/tls
data: {{tls.crt: {crt}, tls.key: {key}}}
"""


def secret_yaml(crt: bytes) -> str:
    return SECRET_YAML.format(crt=base64.b64encode(crt).decode(), key=base64.b64encode(b"KEY").decode())


def test_a_secret_that_is_not_base64_is_rejected_naming_the_key() -> None:
    result = load_documents(SECRET_YAML.format(crt="'!!'", key="S0VZ"), "s.yaml")
    [rejection] = result.rejected
    assert "data.tls.crt" in str(rejection.error) and "base64" in str(rejection.error)


def test_a_secret_change_pushes_the_secret_and_nothing_else() -> None:
    mesh = Mesh()
    mesh.apply(secret_yaml(b"CERT-1"))
    node = "router~10.1.0.50~gw.bookinfo~bookinfo.svc.cluster.local"
    proxy = dataclasses.replace(build_proxy(node), verified=True)
    conn = Connection("gw", proxy, DeltaSession(counter_nonces(), None), mesh.source)
    Req = discovery_pb2.DeltaDiscoveryRequest
    [first] = conn.on_request(Req(type_url=SECRET, resource_names_subscribe=["kubernetes://gw-cert"]))
    conn.on_request(Req(type_url=SECRET, response_nonce=first.nonce))
    pair = secret_pb2.Secret.FromString(first.resources[0].body.value).tls_certificate
    assert pair.certificate_chain.inline_bytes == b"CERT-1"
    out = conn.on_push(mesh.apply(secret_yaml(b"CERT-2")))
    assert [r.type_url for r in out] == [SECRET]
    [rotated] = out[0].resources
    assert secret_pb2.Secret.FromString(rotated.body.value).tls_certificate.certificate_chain.inline_bytes == b"CERT-2"
