"""The secure port of a running pilotfish (istiod :15012): ADS over TLS with the mesh root, a
client certificate or a bearer token as the credential, and only a proxy's own identity gets its
config (istiod pilot/pkg/xds/auth.go checkConnectionIdentity); the CA on the same port."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import struct_pb2

from app.agent.certs import build_csr
from app.api import ca as ca_api
from app.runtime import Runtime
from app.xds.type_urls import CLUSTER
from tests.support.bookinfo import NODE
from tests.support.secure import secure_runtime

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
CSR = "/istio.v1.auth.IstioCertificateService/CreateCertificate"


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    async with secure_runtime(tmp_path) as rt:
        yield rt


def secure_channel(rt: Runtime, cert: tuple[str, bytes] | None = None) -> grpc.aio.Channel:
    assert rt.ca is not None and rt.secure is not None
    creds = grpc.ssl_channel_credentials(
        rt.ca.root_pem.encode(),
        private_key=cert[1] if cert else None,
        certificate_chain=cert[0].encode() if cert else None,
    )
    options = [("grpc.ssl_target_name_override", "pilotfish.istio-system.svc")]
    return grpc.aio.secure_channel(f"127.0.0.1:{rt.secure.port}", creds, options=options)


def request(node_id: str = NODE, account: str = "") -> discovery_pb2.DiscoveryRequest:
    req = discovery_pb2.DiscoveryRequest(type_url=CLUSTER)
    req.node.id = node_id
    labels = struct_pb2.Struct()
    labels.update({"app": "productpage", "version": "v1"})
    req.node.metadata.fields["LABELS"].struct_value.CopyFrom(labels)
    if account:
        req.node.metadata.fields["SERVICE_ACCOUNT"].string_value = account
    return req


def ads_stream(ch: grpc.aio.Channel, token: str | None) -> Any:
    """A SotW ADS call, with ``token`` as its bearer credential."""
    return ch.stream_stream(
        ADS,
        request_serializer=discovery_pb2.DiscoveryRequest.SerializeToString,
        response_deserializer=discovery_pb2.DiscoveryResponse.FromString,
    )(metadata=(("authorization", f"Bearer {token}"),) if token else None)


async def first_response(ch: grpc.aio.Channel, token: str | None, req: Any) -> Any:
    call = ads_stream(ch, token)
    await call.write(req)
    try:
        return await asyncio.wait_for(call.read(), 10)
    finally:
        call.cancel()


async def get_json(rt: Runtime, path: str) -> Any:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{rt.http.port}{path}") as resp:
        return await resp.json()


async def test_a_token_for_the_proxys_namespace_gets_its_config_over_tls(runtime: Runtime) -> None:
    async with secure_channel(runtime) as ch:
        resp = await first_response(ch, "bookinfo-token", request())
    assert resp.type_url == CLUSTER and resp.resources


async def test_an_identity_of_another_namespace_gets_permission_denied_and_nothing_else(runtime: Runtime) -> None:
    # istiod checkConnectionIdentity: "authorization failed: no identities (...) matched NS/SA"
    async with secure_channel(runtime) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await first_response(ch, "other-token", request())
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert e.value.details() == (
        "authorization failed: no identities ([spiffe://cluster.local/ns/shop/sa/web]) matched bookinfo/"
    )
    assert not runtime.xds.streams  # it never connected
    syncz = await get_json(runtime, "/debug/syncz")
    assert syncz[-1]["proxy"] == "productpage-v1-0.bookinfo"
    assert syncz[-1]["refused"].startswith("PERMISSION_DENIED: authorization failed")
    metrics = runtime.metrics_text()
    assert 'pilotfish_xds_auth_failures{code="PERMISSION_DENIED"} 1' in metrics


async def test_the_service_account_must_match_too_when_the_node_names_one(runtime: Runtime) -> None:
    async with secure_channel(runtime) as ch:
        ok = await first_response(ch, "bookinfo-token", request(account="bookinfo-productpage"))
        assert ok.resources
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await first_response(ch, "bookinfo-token", request(account="bookinfo-reviews"))
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize("token", [None, "made-up"])
async def test_no_credential_on_the_secure_port_is_unauthenticated(runtime: Runtime, token: str | None) -> None:
    async with secure_channel(runtime) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await first_response(ch, token, request())
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_certificate_from_the_ca_is_the_credential_and_shows_in_syncz(runtime: Runtime) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    async with secure_channel(runtime) as ch:
        issue = ch.unary_unary(CSR)
        raw = await issue(
            ca_api.IstioCertificateRequest(csr=build_csr(key, "spiffe://x/ns/y/sa/z")).SerializeToString(),
            metadata=(("authorization", "Bearer bookinfo-token"),),
        )
    chain = list(ca_api.IstioCertificateResponse.FromString(raw).cert_chain)
    encoding, form = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    pem = key.private_bytes(encoding, form, serialization.NoEncryption())
    async with secure_channel(runtime, ("".join(chain[:-1]), pem)) as ch:
        call = ads_stream(ch, None)
        await call.write(request())
        assert (await asyncio.wait_for(call.read(), 10)).resources
        [status] = await get_json(runtime, "/debug/syncz")
        assert status["identity"] == "spiffe://cluster.local/ns/bookinfo/sa/bookinfo-productpage"
        call.cancel()
    metrics = runtime.metrics_text()
    assert "citadel_server_success_cert_issuance_count 1" in metrics


async def test_the_plaintext_port_stays_unauthenticated_and_the_root_is_published(runtime: Runtime) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}") as ch:
        assert (await first_response(ch, None, request())).resources
        # istiod registers its CA on the secure server only: unknown on 15010
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await ch.unary_unary(CSR)(b"", metadata=(("authorization", "Bearer bookinfo-token"),))
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    configmap = await get_json(runtime, "/debug/istio-ca-root-cert")
    assert configmap["metadata"]["name"] == "istio-ca-root-cert"
    assert runtime.ca is not None and configmap["data"]["root-cert.pem"] == runtime.ca.root_pem


# --- istiod's debug types, as istioctl proxy-status --xds-address asks for them ------------------

SYNCZ, CONFIG_DUMP = "istio.io/debug/syncz", "istio.io/debug/config_dump"


def istioctl_request(
    type_url: str, names: tuple[str, ...] = (), namespace: str = "istio-system", account: str = "default"
) -> Any:
    """As istioctl's adsc sends it: an odd node of its own, GENERATOR=event, a time as nonce."""
    req = discovery_pb2.DiscoveryRequest(type_url=type_url, resource_names=names, response_nonce="2026-11-27T12:00:00Z")
    req.node.id = "sidecar~10.0.0.9~test-1.default~default.svc.cluster.local"
    req.node.metadata.update({"GENERATOR": "event", "NAMESPACE": namespace, "SERVICE_ACCOUNT": account})
    return req


async def test_istioctl_debug_syncz_lists_every_proxy_with_its_sync_state(runtime: Runtime) -> None:
    from envoy.config.core.v3 import base_pb2  # noqa: F401  (ClientConfig's node)
    from envoy.service.status.v3 import csds_pb2

    async with secure_channel(runtime) as ch:
        proxy = ads_stream(ch, "bookinfo-token")
        await proxy.write(request())
        sent = await asyncio.wait_for(proxy.read(), 10)  # CDS sent, not yet ACKed: STALE
        resp = await first_response(ch, "istioctl-token", istioctl_request(SYNCZ))
        [status] = resp.resources
        config = csds_pb2.ClientConfig()
        assert status.Unpack(config)
        assert config.node.id == "productpage-v1-0.bookinfo"
        assert config.node.metadata["NAMESPACE"] == "bookinfo"
        states = {c.type_url: csds_pb2.ConfigStatus.Name(c.config_status) for c in config.generic_xds_configs}
        assert states == {CLUSTER: "STALE"}
        identifier = json.loads(resp.control_plane.identifier)  # istioctl's ISTIOD column and version
        assert identifier["Component"] == "istiod" and identifier["Info"]["version"]

        ack = request()
        ack.version_info, ack.response_nonce = sent.version_info, sent.nonce
        await proxy.write(ack)
        await asyncio.sleep(0.2)
        config.ParseFromString((await first_response(ch, "istioctl-token", istioctl_request(SYNCZ))).resources[0].value)
        assert csds_pb2.ConfigStatus.Name(config.generic_xds_configs[0].config_status) == "SYNCED"

        # a caller outside the root namespace sees only its own namespace's proxies (istiod)
        shop = await first_response(ch, "other-token", istioctl_request(SYNCZ, namespace="shop", account="web"))
        assert list(shop.resources) == []
        proxy.cancel()


async def test_istioctl_debug_config_dump_has_the_served_clusters_listeners_and_routes(runtime: Runtime) -> None:
    from envoy.admin.v3 import config_dump_shared_pb2

    async with secure_channel(runtime) as ch:
        proxy = ads_stream(ch, "bookinfo-token")
        await proxy.write(request())
        served = await asyncio.wait_for(proxy.read(), 10)
        dump = await first_response(ch, "istioctl-token", istioctl_request(CONFIG_DUMP, ("productpage-v1-0.bookinfo",)))
        kinds = [r.type_url.rsplit(".", 1)[-1] for r in dump.resources]
        assert kinds == [
            "BootstrapConfigDump", "ClustersConfigDump", "ListenersConfigDump", "ScopedRoutesConfigDump",
            "RoutesConfigDump", "SecretsConfigDump", "EcdsConfigDump",
        ]  # fmt: skip
        clusters = config_dump_shared_pb2.ClustersConfigDump()
        assert dump.resources[1].Unpack(clusters)
        assert len(clusters.dynamic_active_clusters) == len(served.resources)
        unknown = await first_response(ch, "istioctl-token", istioctl_request(CONFIG_DUMP, ("nobody.nowhere",)))
        assert list(unknown.resources) == []
        proxy.cancel()


async def test_debug_types_need_an_authenticated_caller(runtime: Runtime) -> None:
    # istiod ENABLE_DEBUG_ENDPOINT_AUTH: the plaintext port has no identity to show
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await first_response(ch, None, istioctl_request(SYNCZ))
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_connections_the_secure_port_refuses_are_counted_in_metrics(runtime: Runtime) -> None:
    assert runtime.secure is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", runtime.secure.port)
    writer.write(b"GET / HTTP/1.1\r\n\r\n")  # not TLS at all
    await writer.drain()
    await asyncio.wait_for(reader.read(), 15)  # the port closes it
    writer.close()
    for _ in range(100):
        if 'pilotfish_secure_port_refused{reason="handshake_error"} 1' in runtime.metrics_text():
            break
        await asyncio.sleep(0.05)
    assert 'pilotfish_secure_port_refused{reason="handshake_error"} 1' in runtime.metrics_text()
