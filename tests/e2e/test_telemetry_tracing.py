"""Tracing from a Telemetry resource as a real Envoy takes it: a Telemetry naming the mesh
config's Zipkin provider, written while the sidecar is connected, reaches it on the next push
without a rejected update, and Envoy reports the spans of the requests it proxies to the
collector, through the collector Service's outbound cluster; disabling span reporting takes the
tracer away again.

The sidecar (no iptables: one egress listener on 127.0.0.1) reaches ``app``, whose pod is also
the collector here: it records what Envoy posts to the Zipkin span path."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator

import pytest
import yaml
from aiohttp import web

from tests.e2e.backends import Backends
from tests.e2e.conftest import StartEnvoy, StartPilotfish
from tests.e2e.harness import TEMPLATES, ConfigDir, KubernetesRegistration, free_port, routed_to, send, wait_until
from tests.e2e.processes import SIDECAR

ADDRESSES = {"v1": "127.0.0.72"}
FQDN = "app.default.svc.cluster.local"
SPANS = "/api/v2/spans"


class Collector:
    """The ``app`` backend, which also takes Zipkin's span reports and keeps them."""

    def __init__(self) -> None:
        self.reports: list[list[dict[str, object]]] = []
        self.backends = Backends(ADDRESSES, self._handler)

    def _handler(self, name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            if request.method == "POST" and request.path == SPANS:
                self.reports.append(await request.json())
                return web.Response(status=202)
            return web.json_response({"backend": name}, headers={"x-backend": name})

        return handle

    def spans(self) -> list[dict[str, object]]:
        return [span for report in self.reports for span in report]


@pytest.fixture
def collector() -> Iterator[Collector]:
    found = Collector()
    found.backends.start()
    try:
        yield found
    finally:
        found.backends.stop()


def _telemetry(spec: dict[str, object]) -> str:
    meta = {"name": "traces", "namespace": "default"}
    return json.dumps({"apiVersion": "telemetry.istio.io/v1", "kind": "Telemetry", "metadata": meta, "spec": spec})


def test_a_telemetry_written_while_envoy_runs_reports_spans_to_its_zipkin_collector(
    config_dir: ConfigDir, collector: Collector, start_pilotfish: StartPilotfish, start_envoy: StartEnvoy
) -> None:
    port = free_port()
    registration = KubernetesRegistration(ADDRESSES, cluster_ip="10.96.0.72", service_port=port)
    registration.write(config_dir, collector.backends.port)
    config_dir.render("sidecar/sidecar.yaml", egress_port=port)
    mesh = yaml.safe_load((TEMPLATES / "mesh.yaml").read_text())
    mesh["enableTracing"] = False  # no tracing until the Telemetry names the provider
    mesh["extensionProviders"] = [{"name": "collector", "zipkin": {"service": FQDN, "port": port}}]
    config_dir.write("mesh.yaml", yaml.safe_dump(mesh))
    server = start_pilotfish(config_dir)
    envoy = start_envoy(server, SIDECAR)
    wait_until(routed_to(port, "v1", host=FQDN), f"the egress listener to route {FQDN}")
    assert not _traced(envoy.config_dump())

    traced = {"providers": [{"name": "collector"}], "randomSamplingPercentage": 100}
    config_dir.write("telemetry.yaml", _telemetry({"tracing": [traced]}))
    wait_until(lambda: _traced(envoy.config_dump()), "the Zipkin tracer pushed")

    def reported() -> bool:
        send(port, host=FQDN)  # Envoy flushes its span buffer every five spans (min_flush_spans)
        return any(span.get("kind") == "CLIENT" for span in collector.spans())

    wait_until(reported, "a span reported to the collector")
    span = next(span for span in collector.spans() if span.get("kind") == "CLIENT")
    tags = span.get("tags")
    assert isinstance(tags, dict) and tags.get("istio.namespace") == "default", span
    assert tags.get("upstream_cluster") == f"outbound|{port}||{FQDN}", span
    assert envoy.rejected_updates().get("listener_manager.lds.update_rejected") == 0
    assert envoy.xds_stream()[0] == 1  # the same stream: pushed, not reconnected

    config_dir.write("telemetry.yaml", _telemetry({"tracing": [{**traced, "disableSpanReporting": True}]}))
    wait_until(lambda: not _traced(envoy.config_dump()), "the tracer to go")


def _traced(dump: dict[str, object]) -> bool:
    """Whether the listeners Envoy holds trace to Zipkin (the bootstrap's own tracer aside)."""
    return "envoy.tracers.zipkin" in json.dumps(dump["ListenersConfigDump"])
