"""A real Envoy rejects a cluster a DestinationRule made, and pilotfish names the rule: in the
NACK's log line, in ``/debug/rejections``, in ``pilotfish_xds_rejects_by_config`` and in the
NACK span of the push's trace (the console exporter writes it to the server's log).

The rule passes validation (istiod's too: it checks no range) but asks for a ring hash ring of
more entries than Envoy allows (``minimum_ring_size`` at most 8M), which Envoy's CDS refuses as
"Error adding/updating cluster(s) NAME: Proto constraint validation failed ...".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import StartPilotfish
from tests.e2e.harness import ConfigDir, wait_until
from tests.e2e.processes import GATEWAY, Envoy, Pilotfish, http_get, run_envoy

APP = "outbound|80||app.default.svc.cluster.local"
OTHER = "outbound|80||other.default.svc.cluster.local"
RING_TOO_LARGE = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: app-ring, namespace: default}
spec:
  host: app.default.svc.cluster.local
  trafficPolicy:
    loadBalancer:
      consistentHash:
        httpHeaderName: x-user
        ringHash: {minimumRingSize: 10000000}
"""


def debug(server: Pilotfish, path: str) -> str:
    status, body = http_get(f"http://127.0.0.1:{server.http_port}{path}")
    assert status == 200, f"{path}: HTTP {status}: {body[:300]}"
    return body


def has_clusters(envoy: Envoy) -> bool:
    clusters = envoy.active_clusters()
    return APP in clusters and OTHER in clusters


def test_a_cluster_envoy_rejects_is_traced_to_the_destination_rule_that_made_it(
    config_dir: ConfigDir,
    start_pilotfish: StartPilotfish,
    api_type: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")  # spans reach the log within the wait
    config_dir.render("destinationrules/services.yaml", "services.yaml")
    server = start_pilotfish(config_dir)
    with run_envoy(server, GATEWAY, api_type, tmp_path, rejecting=True) as envoy:
        wait_until(lambda: has_clusters(envoy), "the outbound clusters")
        check_rejection_named(server, envoy, config_dir)


def check_rejection_named(server: Pilotfish, envoy: Envoy, config_dir: ConfigDir) -> None:
    rule = config_dir.write("dr-ring.yaml", RING_TOO_LARGE)

    def nacks() -> list[str]:
        return [e for e in json.loads(debug(server, "/debug/rejections")) if "NACK" in e]

    [entry, *_] = wait_until(nacks, "Envoy's NACK in /debug/rejections")
    # Envoy's message holds the cluster it refused, by name, and why
    assert entry.startswith(
        "cds NACK from istio-ingressgateway-1.istio-system, made from DestinationRule default/app-ring"
    )
    assert f'name: "{APP}"' in entry and "MinimumRingSize: value must be less than or equal to 8388608" in entry
    assert f"made from DestinationRule default/app-ring ({rule}), Service default/app (" in entry
    assert "cluster_manager.cds.update_rejected" in {k for k, v in envoy.rejected_updates().items() if v}
    # Envoy keeps its last good config: the rejected rule changed nothing it runs
    assert "ring_hash_lb_config" not in envoy.active_clusters()[APP]

    logged = [line for line in server.log().splitlines() if "cds NACK from" in line]
    assert logged and "made from DestinationRule default/app-ring" in logged[0], server.log_tail()
    metrics = debug(server, "/metrics")
    counted = [
        line
        for line in metrics.splitlines()
        if line.startswith("pilotfish_xds_rejects_by_config")
        and 'kind="DestinationRule"' in line
        and 'name="app-ring"' in line
        and 'namespace="default"' in line
    ]
    assert counted and float(counted[0].rsplit(" ", 1)[1]) >= 1, metrics

    def nack_span() -> str | None:
        log = server.log()
        at = log.find('"pilotfish.nack.configs"')
        return log[at : at + 300] if at >= 0 else None

    span = wait_until(nack_span, "the NACK span in the trace")
    assert "DestinationRule default/app-ring" in span

    def nacked_push() -> str | None:
        """The ``pilotfish.push`` root the NACK ended (the console exporter's JSON of it)."""
        log = server.log()
        at = log.find('"pilotfish.push.nacked_proxies"')
        begin = log.rfind('"name": "pilotfish.push"', 0, at)
        return log[begin:at] if at >= 0 and begin >= 0 else None

    # the push's trace arrives, over SotW as over Delta: ended by the NACK, an error naming it
    root = wait_until(nacked_push, "the push's root span, ended by the NACK")
    assert '"status_code": "ERROR"' in root and "rejected the push" in root, root
    assert '"pilotfish.push.converged": false' in root, root
