"""The webhooks count what istiod's count, by istiod's names (the control-plane dashboard's
"Validation" and "Sidecar Injection" panels query galley_validation_passed / _failed and
sidecar_injection_success_total / _failure_total): real reviews over HTTPS to a real WebhookServer
(worker processes included) reporting to PilotMetrics, read back from its Prometheus text."""

from __future__ import annotations

import re
import ssl
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from app.config.mesh import default_mesh_config
from app.inject.inputs import InjectionInputs
from app.telemetry.pilot import MAX_VALIDATED_RESOURCES, PilotMetrics
from app.webhook.file_certificate import file_context
from app.webhook.server import WebhookServer

RULE = {
    "apiVersion": "networking.istio.io/v1",
    "kind": "DestinationRule",
    "metadata": {"name": "cart", "namespace": "shop"},
    "spec": {"host": "cart"},
}
BAD_RULE = {**RULE, "spec": {"host": "cart", "trafficPolicy": {"connectionPool": {"tcp": {"maxConnections": "lots"}}}}}
DR_RESOURCE = {"group": "networking.istio.io", "version": "v1", "resource": "destinationrules"}
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "hello", "labels": {"app": "hello"}},
    "spec": {"containers": [{"name": "hello", "image": "example.com/hello:1"}]},
}


def review(obj: Any, operation: str = "CREATE", resource: dict[str, str] = DR_RESOURCE, **more: Any) -> dict[str, Any]:
    request = {"uid": "u-1", "operation": operation, "namespace": "shop", "object": obj, "resource": resource, **more}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@pytest.fixture
async def webhook(tmp_path: Path) -> AsyncIterator[tuple[str, ssl.SSLContext, PilotMetrics]]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    inputs = InjectionInputs(None, None, default_mesh_config().SerializeToString(), native_sidecars=False)
    metrics = PilotMetrics()
    tls = partial(file_context, tmp_path / "tls.crt", tmp_path / "tls.key")
    server = WebhookServer(tls, injection=lambda: inputs, metrics=metrics)
    await server.start("127.0.0.1:0")
    client = ssl.create_default_context()
    ca.configure_trust(client)
    yield f"https://127.0.0.1:{server.port}", client, metrics
    await server.stop()


def samples(metrics: PilotMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Each sample line by its name as written (prometheus_client's parser renames a counter's
    samples with _total, which istiod's and pilotfish's counters do not all carry)."""
    out = {}
    for line in metrics.render().splitlines():
        if found := _SAMPLE.fullmatch(line):
            labels = tuple(sorted(_LABEL.findall(found.group(2) or "")))
            out[(found.group(1), labels)] = float(found.group(3))
    return out


async def post(session: aiohttp.ClientSession, url: str, tls: ssl.SSLContext, body: Any) -> dict[str, Any]:
    async with session.post(url, json=body, ssl=tls) as resp:
        assert resp.status == 200
        answer: dict[str, Any] = await resp.json()
        assert set(answer) == {"apiVersion", "kind", "response"}  # nothing of the count leaks out
        return answer["response"]


async def test_validation_is_counted_as_istiod_counts_it(webhook: tuple[str, ssl.SSLContext, PilotMetrics]) -> None:
    base, tls, metrics = webhook
    url = f"{base}/validate"
    async with aiohttp.ClientSession() as session:
        assert (await post(session, url, tls, review(RULE)))["allowed"] is True
        assert (await post(session, url, tls, review(BAD_RULE)))["allowed"] is False
        assert (await post(session, url, tls, review(BAD_RULE, dryRun=True)))["allowed"] is False  # not counted
        assert (await post(session, url, tls, review(RULE, "DELETE")))["allowed"] is True
        async with session.post(url, data=b"{}", headers={"Content-Type": "text/plain"}, ssl=tls) as resp:
            assert resp.status == 415
    got = samples(metrics)
    dr = {"group": "networking.istio.io", "resource": "destinationrules", "version": "v1"}

    def key(name: str, **more: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        return name, tuple(sorted({**dr, **more}.items()))

    assert got[key("galley_validation_passed")] == 1
    assert got[key("galley_validation_failed", reason="invalid_resource")] == 1  # the dry run's not counted
    assert got[key("galley_validation_failed", reason="unsupported_operation")] == 1
    assert got[("galley_validation_http_error", (("status", "415"),))] == 1


async def test_made_up_resources_cannot_grow_the_validation_series(
    webhook: tuple[str, ssl.SSLContext, PilotMetrics],
) -> None:
    base, tls, metrics = webhook
    async with aiohttp.ClientSession() as session:
        huge = {"group": "g" * 100_000, "version": "v1", "resource": "r"}  # not a label value
        await post(session, f"{base}/validate", tls, review(RULE, resource=huge))
        for i in range(MAX_VALIDATED_RESOURCES + 10):
            made_up = {"group": "made.up", "version": "v1", "resource": f"r{i}"}
            await post(session, f"{base}/validate", tls, review(RULE, resource=made_up))
    passed = {labels: v for (name, labels), v in samples(metrics).items() if name == "galley_validation_passed"}
    assert len(passed) == MAX_VALIDATED_RESOURCES + 1
    assert passed[(("group", "other"), ("resource", "other"), ("version", "other"))] == 11


async def test_injection_is_counted_as_istiod_counts_it(webhook: tuple[str, ssl.SSLContext, PilotMetrics]) -> None:
    base, tls, metrics = webhook
    url = f"{base}/inject"
    pod = {"group": "", "version": "v1", "resource": "pods"}
    async with aiohttp.ClientSession() as session:
        assert "patch" in await post(session, url, tls, review(POD, resource=pod))
        host_network = {**POD, "spec": {**POD["spec"], "hostNetwork": True}}
        assert "patch" not in await post(session, url, tls, review(host_network, resource=pod))  # skipped
        bad = {**POD, "metadata": {"name": "hello", "annotations": {"status.sidecar.istio.io/port": "http"}}}
        assert (await post(session, url, tls, review(bad, resource=pod)))["allowed"] is False
        async with session.post(url, data=b"", headers={"Content-Type": "application/json"}, ssl=tls) as resp:
            assert resp.status == 400
    got = samples(metrics)
    # istiod: every review written is a success (a refused one too), every error a failure
    assert got[("sidecar_injection_requests_total", ())] == 4
    assert got[("sidecar_injection_success_total", ())] == 3
    assert got[("sidecar_injection_skip_total", ())] == 1
    assert got[("sidecar_injection_failure_total", ())] == 2
    assert got[("sidecar_injection_time_seconds_count", ())] == 4
