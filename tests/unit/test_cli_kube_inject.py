"""``pilotfish kube-inject``, as ``istioctl kube-inject``: every document of a manifest back, in
order and separated by ``---``; the kinds it injects with istiod's sidecar in their pod template,
others exactly as written. With no files given, istiod's chart defaults; offline, no native
sidecars unless ENABLE_NATIVE_SIDECARS=true."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import main

MANIFEST = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web, version: v2}
    spec:
      containers:
      - name: web
        image: example.com/web:1
        ports: [{name: http, containerPort: 8080}]
        livenessProbe: {tcpSocket: {port: http}}
---
apiVersion: v1
kind: Service
metadata:
  name: web   # passed through as written
spec:
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata:
  name: client
  annotations: {proxy.istio.io/config: "holdApplicationUntilProxyStarts: true"}
spec:
  containers:
  - name: client
    image: example.com/client:1
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - name: job
            image: example.com/job:1
"""


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def _inject(tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[str, list[Any]]:
    (tmp_path / "app.yaml").write_text(MANIFEST)
    assert main(["kube-inject", "-f", str(tmp_path / "app.yaml"), *flags]) == 0
    out = capsys.readouterr().out
    return out, list(yaml.safe_load_all(out))


def test_a_manifest_comes_back_injected_document_by_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENABLE_NATIVE_SIDECARS", raising=False)
    out, docs = _inject(tmp_path, capsys)
    assert out.count("---\n") == 4 and out.endswith("---\n")
    deployment, service, pod, cronjob, end = docs
    assert end is None
    # the Service is the text it was, comment included
    assert "  name: web   # passed through as written\n" in out
    assert service == yaml.safe_load(MANIFEST.split("---\n")[1])

    template = deployment["spec"]["template"]
    assert [c["name"] for c in template["spec"]["containers"]] == ["web", "istio-proxy"]
    assert [c["name"] for c in template["spec"]["initContainers"]] == ["istio-init"]
    proxy = template["spec"]["containers"][1]
    env = _env(proxy)
    assert env["ISTIO_META_OWNER"] == "kubernetes://apis/apps/v1/namespaces/shop/deployments/web"
    assert env["CA_ADDR"] == "istiod.istio-system.svc:15012"  # the chart's defaults: no cluster to ask
    # the TCP liveness probe goes through pilot-agent, the named port resolved
    assert json.loads(env["ISTIO_KUBE_APP_PROBERS"]) == {"/app-health/web/livez": {"tcpSocket": {"port": 8080}}}
    assert template["spec"]["containers"][0]["livenessProbe"] == {
        "httpGet": {"path": "/app-health/web/livez", "port": 15020}
    }  # fmt: skip
    assert template["metadata"]["labels"]["service.istio.io/canonical-revision"] == "v2"

    # the pod's own proxy config: the proxy starts first, the application waits for it
    containers = pod["spec"]["containers"]
    assert [c["name"] for c in containers] == ["istio-proxy", "client"]
    assert containers[0]["lifecycle"]["postStart"]["exec"]["command"] == ["pilot-agent", "wait"]
    assert json.loads(_env(containers[0])["PROXY_CONFIG"]) == {"holdApplicationUntilProxyStarts": True}

    job_pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert [c["name"] for c in job_pod["containers"]] == ["job", "istio-proxy"]
    assert _env(job_pod["containers"][1])["ISTIO_META_OWNER"].endswith("/namespaces/default/cronjobs/nightly")


def test_files_give_the_config_values_and_mesh(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENABLE_NATIVE_SIDECARS", "true")
    (tmp_path / "config.yaml").write_text("policy: enabled\ndefaultTemplates: [sidecar]\n")  # the chart's templates
    values = {"global": {"hub": "registry.example.com/istio", "tag": "1.30.0", "proxy": {"statusPort": 15020}}}
    (tmp_path / "values.json").write_text(json.dumps(values))
    (tmp_path / "mesh.yaml").write_text("defaultConfig:\n  discoveryAddress: pilotfish.istio-system.svc:15012\n")
    _, docs = _inject(
        tmp_path, capsys, "--injectConfigFile", str(tmp_path / "config.yaml"),
        "--valuesFile", str(tmp_path / "values.json"), "--meshConfigFile", str(tmp_path / "mesh.yaml"),
    )  # fmt: skip
    spec = docs[0]["spec"]["template"]["spec"]
    proxy = next(c for c in spec["initContainers"] if c["name"] == "istio-proxy")  # a native sidecar
    assert proxy["image"] == "registry.example.com/istio/proxyv2:1.30.0"
    assert proxy["restartPolicy"] == "Always"
    assert json.loads(_env(proxy)["PROXY_CONFIG"]) == {"discoveryAddress": "pilotfish.istio-system.svc:15012"}


@pytest.mark.parametrize("value", ["auto", "false", "True", "1"])
def test_offline_auto_has_no_nodes_to_ask_and_an_unknown_value_is_false(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """istioctl kube-inject without a cluster: auto turns native sidecars off (no node client),
    and so does anything but exactly true, false or auto (istiod's tri-state)."""
    monkeypatch.setenv("ENABLE_NATIVE_SIDECARS", value)
    _, docs = _inject(tmp_path, capsys)
    spec = docs[0]["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["web", "istio-proxy"]
    assert [c["name"] for c in spec["initContainers"]] == ["istio-init"]


def test_a_bad_annotation_fails_with_istiods_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n"
    bad += "    traffic.sidecar.istio.io/includeOutboundIPRanges: 10.0.0.0/33\n"
    bad += "spec:\n  containers: [{name: a, image: b}]\n"
    (tmp_path / "bad.yaml").write_text(bad)
    assert main(["kube-inject", "-f", str(tmp_path / "bad.yaml")]) == 2
    err = capsys.readouterr().err
    assert "invalid value '10.0.0.0/33' for annotation 'traffic.sidecar.istio.io/includeOutboundIPRanges'" in err
    assert "includeIPRanges invalid" in err
