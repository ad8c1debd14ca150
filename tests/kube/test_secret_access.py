"""Secrets guarded as istiod guards them, on the real kube-apiserver with real RBAC: the Secrets
informer lists with istiod's field selector (no Helm release, no service-account token); a
SubjectAccessReview asks whether a proxy's service account may list its namespace's Secrets
(istiod Authorize), answers cached; through a running pilotfish, a gateway whose account may
gets its ``credentialName`` key pair over ADS, a sidecar whose account may not gets nothing and
istiod's message is logged, and repeated asks cost no more reviews."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2
from envoy.service.discovery.v3 import discovery_pb2

from app.config.objects import Kind
from app.runtime import Runtime
from app.security.secret_access import SecretAccessReviewer
from app.settings import Settings
from app.sources.kube.client import api_client
from app.sources.kube.source import KubeSource
from app.xds.type_urls import SECRET
from tests.kube.common import started
from tests.support.cluster import Cluster, Requests
from tests.support.plugged_ca import key_pem, new_root, pem
from tests.support.rbac import grant, grant_istiod_ca_rules, may, service_account_user
from tests.support.runtime import running

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
READ_SECRETS = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "get", "watch"]}]


def tls_secret(name: str) -> dict[str, Any]:
    cert, key = new_root(name)
    data = {"tls.crt": pem(cert), "tls.key": key_pem(key)}
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "kubernetes.io/tls",
        "data": encoded,
    }


@pytest.fixture
def gateway_ns(kube: Cluster) -> str:
    """A namespace with a TLS Secret ``gw-cert``, account ``gw`` may read Secrets (as Istio's
    gateway chart lets its gateways), account ``sleep`` may not."""
    ns = kube.namespace("gw")
    kube.service_account(ns, "gw")
    kube.service_account(ns, "sleep")
    kube.create(tls_secret("gw-cert"), ns)
    grant(kube, ns, "gateway-secrets", (ns, "gw"), READ_SECRETS)
    assert not may(kube, service_account_user(ns, "sleep"), "list", "secrets", ns)
    return ns


async def test_the_secrets_informer_holds_no_helm_release_or_service_account_token(
    kube: Cluster, pilotfish_kubeconfig: Path
) -> None:
    ns = kube.namespace("secrets")
    kube.service_account(ns, "app")
    opaque = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "generic"}, "data": {"cert": "eA=="}}
    helm = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sh.helm.release.v1.app.v1"},
            "type": "helm.sh/release.v1", "data": {"release": "eA=="}}  # fmt: skip
    account = {"kubernetes.io/service-account.name": "app"}
    token = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
             "metadata": {"name": "app-token", "annotations": account}}  # fmt: skip
    for doc in (tls_secret("tls"), opaque, helm, token):
        kube.create(doc, ns)
    client = api_client(pilotfish_kubeconfig)
    requests = Requests(client)
    source = KubeSource(client, system_namespace=kube.namespace("system"))
    try:
        events = await started(source)
        held = {e.obj.key.name for e in events if e.obj.key.kind is Kind.SECRET and e.obj.key.namespace == ns}
        assert held == {"tls", "generic"}
        selector = "type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token"  # istiod SecretsFieldSelector
        assert {q.get("fieldSelector") for q in requests.lists("secrets")} == {selector}
    finally:
        await source.close()


async def test_a_review_per_account_and_namespace_cached_as_istiods(
    kube: Cluster, gateway_ns: str, pilotfish_kubeconfig: Path
) -> None:
    grant_istiod_ca_rules(kube, kube.namespace("system"))
    ns = gateway_ns
    client = api_client(pilotfish_kubeconfig)
    now = [0.0]
    reviewer = SecretAccessReviewer(client, clock=lambda: now[0])
    try:
        answers = await asyncio.gather(*(reviewer.authorize(ns, "gw") for _ in range(20)))
        assert answers == [None] * 20 and reviewer.reviews == 1  # one in flight, then cached
        refusal = await reviewer.authorize(ns, "sleep")
        assert refusal == f"sleep/{ns} is not authorized to read secrets: "  # istiod's words (RBAC gives no reason)
        assert await reviewer.authorize(ns, "sleep") == refusal and reviewer.reviews == 2
        # istiod's TTLs: a refusal is asked again after a minute, an allowed account after five
        now[0] = 61.0
        assert await reviewer.authorize(ns, "gw") is None and reviewer.reviews == 2
        assert await reviewer.authorize(ns, "sleep") == refusal and reviewer.reviews == 3
        grant(kube, ns, "sleep-secrets", (ns, "sleep"), READ_SECRETS)  # the operator lets it
        assert await reviewer.authorize(ns, "sleep") == refusal and reviewer.reviews == 3  # still cached
        now[0] = 122.0
        assert await reviewer.authorize(ns, "sleep") is None and reviewer.reviews == 4
        now[0] = 301.0
        assert await reviewer.authorize(ns, "gw") is None and reviewer.reviews == 5
    finally:
        await client.close()


# --- through a running pilotfish ---------------------------------------------------------------------


@pytest.fixture
async def pilotfish(kube: Cluster, pilotfish_kubeconfig: Path) -> AsyncIterator[Runtime]:
    system = kube.namespace("system")
    grant_istiod_ca_rules(kube, system)
    settings = Settings(
        config_dir=None,
        kubeconfig=pilotfish_kubeconfig,
        system_namespace=system,
        xds_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        secure_xds_address="127.0.0.1:0",
        ca_server=True,
        debounce_after=0.01,
    )
    async with running(settings) as rt:
        yield rt


def secret_request(ns: str, pod: str, kind: str, account: str) -> discovery_pb2.DiscoveryRequest:
    req = discovery_pb2.DiscoveryRequest(type_url=SECRET, resource_names=["kubernetes://gw-cert"])
    req.node.id = f"{kind}~10.0.0.9~{pod}.{ns}~{ns}.svc.cluster.local"
    req.node.metadata.fields["NAMESPACE"].string_value = ns
    req.node.metadata.fields["SERVICE_ACCOUNT"].string_value = account
    return req


async def ask_for_the_secret(rt: Runtime, token: str, req: discovery_pb2.DiscoveryRequest, wait: float) -> Any:
    """A SotW ADS stream over the secure port with ``token``: the first response, or None."""
    assert rt.ca is not None and rt.secure is not None
    creds = grpc.ssl_channel_credentials(rt.ca.root_pem.encode())
    options = [("grpc.ssl_target_name_override", "localhost")]
    async with grpc.aio.secure_channel(f"127.0.0.1:{rt.secure.port}", creds, options=options) as channel:
        call = channel.stream_stream(
            ADS,
            request_serializer=discovery_pb2.DiscoveryRequest.SerializeToString,
            response_deserializer=discovery_pb2.DiscoveryResponse.FromString,
        )(metadata=(("authorization", f"Bearer {token}"),))
        await call.write(req)
        try:
            return await asyncio.wait_for(call.read(), wait)
        except TimeoutError:
            return None
        finally:
            call.cancel()


async def test_a_gateway_that_may_read_secrets_gets_its_credential_a_sidecar_that_may_not_gets_none(
    kube: Cluster, gateway_ns: str, pilotfish: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    ns, rt = gateway_ns, pilotfish
    gw_token = kube.token(ns, "gw", audiences=["istio-ca"])
    for _ in range(3):  # reconnects: the review is cached
        response = await ask_for_the_secret(rt, gw_token, secret_request(ns, "gw-0", "router", "gw"), 10)
        assert response is not None and [r.type_url for r in response.resources] == [SECRET]
        secret = secret_pb2.Secret.FromString(response.resources[0].value)
        assert secret.name == "kubernetes://gw-cert" and secret.tls_certificate.private_key.inline_bytes

    sleep_token = kube.token(ns, "sleep", audiences=["istio-ca"])
    with caplog.at_level(logging.WARNING):
        response = await ask_for_the_secret(rt, sleep_token, secret_request(ns, "sleep-0", "sidecar", "sleep"), 2)
        assert response is None  # nothing to send: no response at all, as istiod's SDS
        message = (
            f"proxy sleep-0.{ns} attempted to access unauthorized certificates gw-cert: "
            f"sleep/{ns} is not authorized to read secrets: "
        )
        assert message in caplog.text
        response = await ask_for_the_secret(rt, sleep_token, secret_request(ns, "sleep-0", "sidecar", "sleep"), 2)
        assert response is None
    reviewer = rt.xds.secret_access
    assert isinstance(reviewer, SecretAccessReviewer) and reviewer.reviews == 2  # one per account


async def test_a_changed_credential_is_pushed_to_the_gateway_that_may_read_it(
    kube: Cluster, gateway_ns: str, pilotfish: Runtime
) -> None:
    ns, rt = gateway_ns, pilotfish
    assert rt.ca is not None and rt.secure is not None
    creds = grpc.ssl_channel_credentials(rt.ca.root_pem.encode())
    options = [("grpc.ssl_target_name_override", "localhost")]
    token = kube.token(ns, "gw", audiences=["istio-ca"])
    async with grpc.aio.secure_channel(f"127.0.0.1:{rt.secure.port}", creds, options=options) as channel:
        call = channel.stream_stream(
            ADS,
            request_serializer=discovery_pb2.DiscoveryRequest.SerializeToString,
            response_deserializer=discovery_pb2.DiscoveryResponse.FromString,
        )(metadata=(("authorization", f"Bearer {token}"),))
        req = secret_request(ns, "gw-0", "router", "gw")
        await call.write(req)
        first = await asyncio.wait_for(call.read(), 10)
        ack = discovery_pb2.DiscoveryRequest(
            type_url=SECRET, resource_names=req.resource_names, version_info=first.version_info,
            response_nonce=first.nonce,
        )  # fmt: skip
        await call.write(ack)
        kube.patch("v1", "Secret", ns, "gw-cert", {"data": tls_secret("gw-cert")["data"]})  # a renewed certificate
        pushed = await asyncio.wait_for(call.read(), 20)
        call.cancel()
    before, after = (secret_pb2.Secret.FromString(r.resources[0].value) for r in (first, pushed))
    assert after.tls_certificate.certificate_chain.inline_bytes != before.tls_certificate.certificate_chain.inline_bytes
