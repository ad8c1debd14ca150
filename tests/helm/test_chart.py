"""The Helm chart (charts/pilotfish) and the Dockerfile: ``helm lint``; ``helm template`` with
default and non-default values, every manifest valid against the Kubernetes schemas
(kubernetes-validate, strict); a golden file of the default render (regenerate with
UPDATE_GOLDEN=1); hadolint on the Dockerfile."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pilotfish"
GOLDEN = ROOT / "tests" / "golden" / "helm" / "default.yaml"
DASHBOARD = CHART / "dashboards" / "pilotfish.json"
KUBERNETES_VERSION = "1.31.0"


def tool(name: str) -> str:
    beside = Path(sys.executable).parent / name  # installed into the venv by make
    found = shutil.which(name) or (str(beside) if beside.exists() else None)
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail(f"{name} not found (CI requires it; make test installs it)")
    pytest.skip(f"{name} not found")


def helm(*args: str) -> str:
    done = subprocess.run([tool("helm"), *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def render(*values: str) -> list[dict[str, Any]]:
    out = helm("template", "pilotfish", str(CHART), "--namespace", "istio-system", *values)
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in docs}


def config_maps(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "ConfigMap"}


def assert_valid(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"{doc['kind']} {doc['metadata']['name']}: {e.message} at {list(e.path)}") from None


def test_helm_lint() -> None:
    helm("lint", "--strict", str(CHART))


def test_default_render_is_valid_and_matches_the_golden_file() -> None:
    docs = render()
    assert_valid(docs)
    kinds = by_kind(docs)
    assert set(kinds) == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Service",
        "Deployment",
        "Secret",
        "ValidatingWebhookConfiguration",
        "HorizontalPodAutoscaler",
    }  # no PodDisruptionBudget with autoscaleMin 1, as istiod's (tests/helm/test_pdb.py)
    container = kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "grpc-xds": 15010,
        "http-monitoring": 15014,
        "https-webhook": 15017,
    }
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": 15014}
    assert "replicas" not in kinds["Deployment"]["spec"]  # the autoscaler owns it
    # read-only RBAC, but for TokenReviews of agents' service-account tokens
    rules = kinds["ClusterRole"]["rules"]
    writes = [rule for rule in rules if set(rule["verbs"]) - {"get", "list", "watch"}]
    assert writes == [{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}]
    # the webhook trusts the CA that signed the served certificate
    secret, hook = kinds["Secret"], kinds["ValidatingWebhookConfiguration"]["webhooks"][0]
    assert base64.b64decode(hook["clientConfig"]["caBundle"]).startswith(b"-----BEGIN CERTIFICATE-----")
    assert base64.b64decode(secret["data"]["tls.key"]).startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    service = {"name": "pilotfish", "namespace": "istio-system", "path": "/validate", "port": 443}
    assert hook["clientConfig"]["service"] == service
    maps = config_maps(docs)
    assert set(maps) == {"istio", "pilotfish-dashboard"}
    assert yaml.safe_load(maps["istio"]["data"]["mesh"])["rootNamespace"] == "istio-system"
    dashboard = maps["pilotfish-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["pilotfish.json"]) == json.loads(DASHBOARD.read_text())
    text = _masked(helm("template", "pilotfish", str(CHART), "--namespace", "istio-system"))
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "the default render changed; UPDATE_GOLDEN=1 and read the diff"


def test_non_default_values() -> None:
    docs = render(
        "--set", "pilot.autoscaleEnabled=false",
        "--set", "pilot.replicaCount=3",
        "--set", "webhook.enabled=false",
        "--set", "global.defaultPodDisruptionBudget.enabled=false",
        "--set", "configMap=true",
        "--set", "dashboards.enabled=false",
        "--set", "pilot.ca.enabled=true",
        "--set", "pilot.ca.secretName=cacerts",
        "--set-string", "pilot.env.PILOT_DEBOUNCE_AFTER=200ms",
        "--set", "global.hub=registry.example/mesh",
        "--set-json", 'meshConfig={"rootNamespace":"istio-system","discoverySelectors":[{"matchLabels":{"m":"on"}}]}',
    )  # fmt: skip
    assert_valid(docs)
    kinds = by_kind(docs)
    left_out = {"HorizontalPodAutoscaler", "ValidatingWebhookConfiguration", "Secret", "PodDisruptionBudget"}
    assert not left_out & set(kinds)
    deployment = kinds["Deployment"]
    assert deployment["spec"]["replicas"] == 3
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/mesh/pilotfish:0.1.0"
    assert {"name": "PILOT_DEBOUNCE_AFTER", "value": "200ms"} in container["env"]
    assert not any(arg.startswith("--webhook") for arg in container["args"])
    # three replicas share one plugged-in CA (istiod's cacerts Secret), mounted read-only
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert volumes == [{"name": "cacerts", "secret": {"secretName": "cacerts"}}]
    assert container["volumeMounts"] == [{"name": "cacerts", "mountPath": "/etc/cacerts", "readOnly": True}]
    assert "--ca-dir=/etc/cacerts" in container["args"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["grpc-xds-tls"] == 15012
    maps = config_maps(docs)
    assert set(maps) == {"istio"}  # dashboards.enabled=false
    assert yaml.safe_load(maps["istio"]["data"]["mesh"])["discoverySelectors"] == [{"matchLabels": {"m": "on"}}]
    assert "https-webhook" not in {p["name"] for p in kinds["Service"]["spec"]["ports"]}


def test_dockerfile_passes_hadolint() -> None:
    done = subprocess.run([tool("hadolint"), str(ROOT / "Dockerfile")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _masked(text: str) -> str:
    """The render with the generated certificate material replaced (it is new on every render)."""
    text = re.sub(r"(tls\.crt|tls\.key|caBundle): \S+", r"\1: <generated>", text)
    return re.sub(r"(checksum/webhook-certs): \S+", r"\1: <generated>", text)


def test_dashboard_queries_only_metrics_pilotfish_exposes() -> None:
    """Every PromQL expression of the dashboard names metrics (and labels) that /metrics has:
    istiod's names as pilotfish exposes them (tests/unit/test_xds_server.py) and its own."""
    from tests.unit.test_xds_server import ISTIOD_METRICS, PILOTFISH_METRICS

    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert exprs
    for expr in exprs:
        names = set(re.findall(r"\b((?:pilot|pilotfish)_[a-z_]+?)(?:_bucket)?\b", expr))
        assert names, expr
        assert names <= ISTIOD_METRICS | PILOTFISH_METRICS, (expr, names)
    titles = " ".join(panel["title"].lower() for panel in dashboard["panels"])
    for topic in ("convergence", "queue", "pushes by type", "rejected", "connected proxies"):
        assert topic in titles, topic
