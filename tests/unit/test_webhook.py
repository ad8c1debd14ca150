"""The validating webhook: AdmissionReview decisions as istiod makes them
(pkg/webhooks/validation/server/server.go), and the HTTPS endpoint answering real reviews."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from app.webhook.admission import ReviewError, review
from app.webhook.file_certificate import file_context
from app.webhook.server import WebhookServer

RULE = {
    "apiVersion": "networking.istio.io/v1",
    "kind": "DestinationRule",
    "metadata": {"name": "cart", "namespace": "shop"},
    "spec": {"host": "cart", "trafficPolicy": {"connectionPool": {"tcp": {"maxConnections": 5}}}},
}


def admission(obj: Any, operation: str = "CREATE", namespace: str = "shop") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": operation, "namespace": namespace, "object": obj},
    }


def bad_rule() -> dict[str, Any]:
    rule = json.loads(json.dumps(RULE))
    rule["spec"]["trafficPolicy"]["connectionPool"]["tcp"]["maxConnections"] = "lots"
    return rule


def test_a_valid_object_is_allowed_and_the_uid_echoed() -> None:
    out = review(admission(RULE))
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    assert out["response"] == {"uid": "u-1", "allowed": True}


def test_an_invalid_object_is_denied_naming_object_field_and_reason() -> None:
    response = review(admission(bad_rule()))["response"]
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith("configuration is invalid: DestinationRule shop/cart")
    assert "maxConnections" in message


def test_the_namespace_of_the_request_is_the_objects_when_it_names_none() -> None:
    rule = bad_rule()
    del rule["metadata"]["namespace"]
    assert "DestinationRule shop/cart" in review(admission(rule))["response"]["status"]["message"]


def test_unknown_top_level_fields_are_denied_as_istiod_does() -> None:
    response = review(admission({**RULE, "extra": {}}))["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == "unknown field 'extra' on DestinationRule resource shop/cart"


def test_deletes_and_kinds_pilotfish_does_not_read_are_allowed() -> None:
    assert review(admission(bad_rule(), operation="DELETE"))["response"]["allowed"] is True
    kind = "WasmPlugin"  # not read: admitted unchecked
    policy = {"apiVersion": "extensions.istio.io/v1alpha1", "kind": kind, "metadata": {"name": "p"}, "spec": 1}
    assert review(admission(policy))["response"]["allowed"] is True
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}}
    assert review(admission(deployment))["response"] == {"uid": "u-1", "allowed": True}


def test_an_istio_kind_pilotfish_does_not_apply_is_admitted_with_a_warning_saying_so() -> None:
    # istiod applies WasmPlugins; pilotfish does not, and kubectl prints the warning
    meta = {"name": "auth", "namespace": "shop"}
    plugin = {"apiVersion": "extensions.istio.io/v1alpha1", "kind": "WasmPlugin", "metadata": meta}
    response = review(admission({**plugin, "spec": {"url": "oci://example.com/auth:1"}}))["response"]
    assert response["allowed"] is True
    [warning] = response["warnings"]
    assert "WasmPlugin 'shop/auth': not applied" in warning and "pilotfish applies no WasmPlugin" in warning


def test_an_envoy_filter_is_validated_as_istiod_validates_it() -> None:
    # admitted with istiod's warnings (its general one; a value field the Envoy API lacks),
    # refused for what istiod refuses, naming the field
    lua_type = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"
    lua = {"name": "envoy.lua", "typed_config": {"@type": lua_type, "inlineCode": "-- x", "inline_kode": "typo"}}
    patch = {"applyTo": "HTTP_FILTER", "patch": {"operation": "INSERT_BEFORE", "value": lua}}
    meta = {"name": "lua", "namespace": "shop"}
    envoy_filter = {"apiVersion": "networking.istio.io/v1alpha3", "kind": "EnvoyFilter", "metadata": meta}
    response = review(admission({**envoy_filter, "spec": {"configPatches": [patch]}}))["response"]
    assert response["allowed"] is True
    general, unknown = response["warnings"]
    assert "EnvoyFilter exposes internal implementation details" in general
    assert "configPatches[0].patch.value" in unknown and "inline_kode" in unknown
    unknown_type = {**lua, "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.nope.v3.Nope"}}
    for bad, field, reason in (
        ({"applyTo": "HTTP_FILTER", "patch": {"operation": "REMOVE"}, "match": {"cluster": {"name": "a"}}},
         "configPatches[0].match", "cannot have non listener match"),
        ({"patch": {"operation": "REMOVE"}}, "configPatches[0].applyTo", "missing applyTo"),
        ({"applyTo": "CLUSTER", "patch": {"operation": "MERGE"}},
         "configPatches[0].patch.value", "missing patch value"),
        ({"applyTo": "HTTP_FILTER", "patch": {"operation": "ADD", "value": unknown_type}},
         "configPatches[0].patch.value", "referenced type unknown"),
    ):  # fmt: skip
        response = review(admission({**envoy_filter, "spec": {"configPatches": [bad]}}))["response"]
        message = response["status"]["message"]
        assert response["allowed"] is False and field in message and reason in message, message


def test_a_review_without_a_request_is_an_error() -> None:
    with pytest.raises(ReviewError):
        review({"kind": "AdmissionReview"})
    with pytest.raises(ReviewError):
        review([])


@pytest.fixture
async def webhook(tmp_path: Path) -> AsyncIterator[tuple[WebhookServer, ssl.SSLContext]]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    server = WebhookServer(partial(file_context, cert_file, key_file))
    await server.start("127.0.0.1:0")
    client = ssl.create_default_context()
    ca.configure_trust(client)
    yield server, client
    await server.stop()


async def test_the_https_endpoint_answers_real_reviews(webhook: tuple[WebhookServer, ssl.SSLContext]) -> None:
    server, tls = webhook
    url = f"https://127.0.0.1:{server.port}/validate"
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=admission(bad_rule()), ssl=tls) as resp:
            assert resp.status == 200
            body = await resp.json()
            assert body["response"]["uid"] == "u-1" and body["response"]["allowed"] is False
        async with session.post(url, json=admission(RULE), ssl=tls) as resp:
            assert (await resp.json())["response"]["allowed"] is True
        # malformed: not JSON, no body, the wrong content type; the server keeps answering
        async with session.post(url, data=b"{not json", headers={"Content-Type": "application/json"}, ssl=tls) as resp:
            body = await resp.json()
            assert resp.status == 200 and body["response"]["allowed"] is False
            assert body["response"]["status"]["message"].startswith("could not decode body")
        async with session.post(url, data=b"", headers={"Content-Type": "application/json"}, ssl=tls) as resp:
            assert resp.status == 400
        async with session.post(url, data=b"x", headers={"Content-Type": "text/plain"}, ssl=tls) as resp:
            assert resp.status == 415
        async with session.post(url + "/", json=admission(RULE), ssl=tls) as resp:
            assert (await resp.json())["response"]["allowed"] is True


def test_an_envoy_filter_may_name_the_istio_proxys_own_filter_configs() -> None:
    # istiod links istio.io/api's envoy protos (stats.PluginConfig, the ALPN filter's config):
    # a patch of Istio's stats filter, as the Telemetry-less way of customizing metrics, builds
    metric = {"name": "requests_total", "dimensions": {"destination_port": "string(destination.port)"}}
    stats = {"@type": "type.googleapis.com/stats.PluginConfig", "metrics": [metric]}
    match = {"context": "SIDECAR_OUTBOUND", "listener": {"filterChain": {"filter": {
        "name": "envoy.filters.network.http_connection_manager", "subFilter": {"name": "istio.stats"}}}}}  # fmt: skip
    patch = {
        "applyTo": "HTTP_FILTER",
        "match": match,
        "patch": {"operation": "MERGE", "value": {"typed_config": stats}},
    }
    meta = {"name": "stats", "namespace": "istio-system"}
    doc = {"apiVersion": "networking.istio.io/v1alpha3", "kind": "EnvoyFilter", "metadata": meta}
    response = review(admission({**doc, "spec": {"configPatches": [patch]}}, namespace="istio-system"))["response"]
    assert response["allowed"] is True, response
    assert response["warnings"] == [response["warnings"][0]]  # istiod's general warning only
