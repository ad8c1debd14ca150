"""Access logging from a Telemetry resource as a real Envoy takes it: a Telemetry written while the
sidecar is connected reaches it on the next push, its filter expression (Envoy's CEL access log
filter) keeps only the requests it selects, and disabling it stops the log.

The sidecar (no iptables: one egress listener on 127.0.0.1) reaches ``app``; a request for a
host no route serves goes to the passthrough cluster, which has no upstream here: Envoy's own
503, which the filter ``response.code >= 400`` keeps."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.e2e.conftest import StartBackends, StartEnvoy, StartPilotfish
from tests.e2e.harness import TEMPLATES, ConfigDir, KubernetesRegistration, free_port, routed_to, send, wait_until
from tests.e2e.processes import SIDECAR

ADDRESSES = {"v1": "127.0.0.71"}
FQDN = "app.default.svc.cluster.local"


def _telemetry(spec: dict[str, object]) -> str:
    meta = {"name": "logs", "namespace": "default"}
    return json.dumps({"apiVersion": "telemetry.istio.io/v1", "kind": "Telemetry", "metadata": meta, "spec": spec})


def test_a_telemetry_written_while_envoy_runs_logs_what_its_filter_selects(
    config_dir: ConfigDir,
    start_backends: StartBackends,
    start_pilotfish: StartPilotfish,
    start_envoy: StartEnvoy,
    tmp_path: Path,
) -> None:
    backends = start_backends(ADDRESSES)
    port = free_port()
    KubernetesRegistration(ADDRESSES, cluster_ip="10.96.0.71", service_port=port).write(config_dir, backends.port)
    config_dir.render("sidecar/sidecar.yaml", egress_port=port)
    log = tmp_path / "errors.log"
    mesh = yaml.safe_load((TEMPLATES / "mesh.yaml").read_text())
    text = "%RESPONSE_CODE% %REQ(:AUTHORITY)%"
    mesh["extensionProviders"] = [
        {"name": "errors", "envoyFileAccessLog": {"path": str(log), "logFormat": {"text": text}}}
    ]
    config_dir.write("mesh.yaml", yaml.safe_dump(mesh))
    server = start_pilotfish(config_dir)
    envoy = start_envoy(server, SIDECAR)
    wait_until(routed_to(port, "v1", host=FQDN), f"the egress listener to route {FQDN}")
    assert send(port, host="nowhere.example").status == 503 and not log.exists()  # no Telemetry: no log

    filtered = {"providers": [{"name": "errors"}], "filter": {"expression": "response.code >= 400"}}
    config_dir.write("telemetry.yaml", _telemetry({"accessLogging": [filtered]}))

    def logged_503() -> bool:
        send(port, host=FQDN)  # a 200: the filter keeps it out
        send(port, host="nowhere.example")
        return log.exists() and "503 nowhere.example" in log.read_text()

    wait_until(logged_503, "the Telemetry's log of the 503 (pushed while Envoy ran)")
    assert all(line.startswith("503 ") for line in log.read_text().splitlines()), log.read_text()
    assert envoy.xds_stream()[0] == 1  # the same stream: pushed, not reconnected

    config_dir.write("telemetry.yaml", _telemetry({"accessLogging": [{**filtered, "disabled": True}]}))
    wait_until(lambda: not _logs_to(envoy.config_dump(), str(log)), "the disabled provider's log to go")
    before = log.read_text()
    assert send(port, host="nowhere.example").status == 503
    assert log.read_text() == before


def _logs_to(dump: object, path: str) -> bool:
    return path in json.dumps(dump)
