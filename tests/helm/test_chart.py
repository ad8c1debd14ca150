"""The Helm chart (charts/pilotfish) and the Dockerfile: ``helm lint``; ``helm template`` with
default and non-default values, every manifest valid against the Kubernetes schemas
(kubernetes-validate, strict); the same render twice is the same text (nothing generated at
render time); a golden file of the default render (regenerate with UPDATE_GOLDEN=1); the
revision's names; hadolint on the Dockerfile."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from app.config.validation.spec import istio_warnings
from app.sources.files import load_config_file
from tests.helm.rendering import CHART, ROOT, assert_valid, by_kind, helm, named, render, render_text, tool

GOLDEN = ROOT / "tests" / "golden" / "helm" / "default.yaml"
DASHBOARD = CHART / "dashboards" / "pilotfish.json"


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
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Service",
        "Deployment",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "HorizontalPodAutoscaler",
    }  # no PodDisruptionBudget with autoscaleMin 1, as istiod's (tests/helm/test_pdb.py); no Secret
    pod = kinds["Deployment"]["spec"]["template"]
    [container] = pod["spec"]["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "grpc-xds": 15010,
        "tls-xds": 15012,
        "https-webhooks": 15017,
        "http-monitoring": 15014,
    }
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": 15014}
    assert "replicas" not in kinds["Deployment"]["spec"]  # the autoscaler owns it
    # the control plane's own pods are never injected, whatever their namespace says
    assert pod["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
    assert pod["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    # the CA is on, as istiod's, and keeps no key in the pod: no emptyDir, nothing writable
    assert "--secure-xds-address=0.0.0.0:15012" in container["args"]
    assert not any(e["name"] == "ENABLE_CA_SERVER" for e in container["env"])  # on by default, as istiod
    assert not any("emptyDir" in volume for volume in pod["spec"]["volumes"])
    assert all(mount["readOnly"] for mount in container["volumeMounts"])
    args = dict(arg.split("=", 1) for arg in container["args"] if "=" in arg)
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v["configMap"]["name"] for v in pod["spec"]["volumes"]}
    assert volumes[mounts["/etc/istio/config"]] == "istio" and args["--mesh-config"] == "/etc/istio/config/mesh"
    assert volumes[mounts["/var/lib/istio/inject"]] == "istio-sidecar-injector"
    assert (args["--inject-config"], args["--inject-values"]) == (
        "/var/lib/istio/inject/config",
        "/var/lib/istio/inject/values",
    )
    assert args["--revision"] == "default"
    # the Service injected proxies reach, by the name Istio's injection template gives it
    assert kinds["Service"]["metadata"]["name"] == "istiod"
    assert {p["name"]: p["port"] for p in kinds["Service"]["spec"]["ports"]}["https-dns"] == 15012
    maps = named(docs, "ConfigMap")
    assert set(maps) == {"istio", "istio-sidecar-injector", "pilotfish-dashboard"}
    mesh = yaml.safe_load(maps["istio"]["data"]["mesh"])
    assert mesh["rootNamespace"] == "istio-system"
    assert mesh["defaultConfig"]["discoveryAddress"] == "istiod.istio-system.svc:15012"
    dashboard = maps["pilotfish-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["pilotfish.json"]) == json.loads(DASHBOARD.read_text())
    text = render_text()
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "the default render changed; UPDATE_GOLDEN=1 and read the diff"


@pytest.mark.parametrize(
    "values",
    [(), ("--set", "revision=pilotfish"), ("--set", "pilot.autoscaleMin=3", "--set", "pilot.ca.enabled=false",
      "--set", "webhook.certSecretName=tls", "--set", "webhook.caBundle=Q0E=")],
    ids=["default", "revision", "no-ca"],
)  # fmt: skip
def test_two_renders_are_the_same_text(values: tuple[str, ...]) -> None:
    """Nothing is generated at render time (no genCA, no random names): an upgrade with the same
    values changes nothing, and no certificate differs between what is served and trusted."""
    assert render_text(*values) == render_text(*values)


def test_a_revision_beside_istiod_names_everything_after_it() -> None:
    docs = render("--set", "revision=pilotfish")
    assert_valid(docs)
    kinds = by_kind(docs)
    assert kinds["Service"]["metadata"]["name"] == "istiod-pilotfish"  # Istio's template: istiod-REV
    assert kinds["Service"]["spec"]["selector"] == {"app": "pilotfish", "istio.io/rev": "pilotfish"}
    assert kinds["Deployment"]["metadata"]["name"] == "pilotfish-pilotfish"
    for doc in docs:  # every object carries the revision
        assert doc["metadata"]["labels"]["istio.io/rev"] == "pilotfish", doc["metadata"]["name"]
    maps = named(docs, "ConfigMap")
    assert set(maps) == {"istio-pilotfish", "istio-sidecar-injector-pilotfish", "pilotfish-pilotfish-dashboard"}
    mesh = yaml.safe_load(maps["istio-pilotfish"]["data"]["mesh"])
    assert mesh["defaultConfig"]["discoveryAddress"] == "istiod-pilotfish.istio-system.svc:15012"
    assert json.loads(maps["istio-sidecar-injector-pilotfish"]["data"]["values"])["revision"] == "pilotfish"
    assert set(named(docs, "MutatingWebhookConfiguration")) == {"istio-sidecar-injector-pilotfish"}
    assert set(named(docs, "ValidatingWebhookConfiguration")) == {"istio-validator-pilotfish-istio-system"}
    [container] = kinds["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert "--revision=pilotfish" in container["args"]


@pytest.mark.parametrize("values", [(), ("--set", "revision=pilotfish")], ids=["default", "revision"])
def test_the_mesh_config_is_one_pilotfish_takes_without_a_warning(values: tuple[str, ...], tmp_path: Path) -> None:
    [mesh_map] = [doc for name, doc in named(render(*values), "ConfigMap").items() if name.startswith("istio")
                  and "mesh" in doc["data"]]  # fmt: skip
    (tmp_path / "mesh").write_text(mesh_map["data"]["mesh"])
    result = load_config_file(tmp_path / "mesh", mesh=True)
    assert result is not None and not result.rejected
    [mesh] = result.objects
    assert not istio_warnings(mesh.spec)


def test_non_default_values() -> None:
    docs = render(
        "--set", "pilot.autoscaleEnabled=false",
        "--set", "pilot.replicaCount=3",
        "--set", "global.configValidation=false",
        "--set", "global.operatorManageWebhooks=true",
        "--set", "global.defaultPodDisruptionBudget.enabled=false",
        "--set", "configMap=false",
        "--set", "dashboards.enabled=false",
        "--set", "pilot.ca.enabled=false",
        "--set", "webhook.certSecretName=pilotfish-tls",
        "--set", "webhook.caBundle=Q0E=",
        "--set-string", "pilot.env.PILOT_DEBOUNCE_AFTER=200ms",
        "--set", "pilot.hub=registry.example/mesh",
        "--set-json", 'global.imagePullSecrets=["registry-login"]',
    )  # fmt: skip
    assert_valid(docs)
    kinds = by_kind(docs)
    left_out = {"HorizontalPodAutoscaler", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
    assert not left_out & set(kinds)
    assert not {"Secret", "PodDisruptionBudget"} & set(kinds)
    deployment = kinds["Deployment"]
    assert deployment["spec"]["replicas"] == 3
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/mesh/pilotfish:0.1.0"
    assert {"name": "PILOT_DEBOUNCE_AFTER", "value": "200ms"} in container["env"]
    assert kinds["ServiceAccount"]["imagePullSecrets"] == [{"name": "registry-login"}]
    # without the CA the webhooks are served with the given Secret
    assert {"name": "ENABLE_CA_SERVER", "value": "false"} in container["env"]
    assert not any(arg.startswith("--secure-xds") for arg in container["args"])
    assert "--webhook-cert=/var/run/secrets/istiod/tls/tls.crt" in container["args"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-cert"] == {"name": "webhook-cert", "secret": {"secretName": "pilotfish-tls"}}
    assert "tls-xds" not in {p["name"] for p in container["ports"]}
    # configMap=false: the mesh ConfigMap is the user's, mounted all the same
    assert set(named(docs, "ConfigMap")) == {"istio-sidecar-injector"}
    assert volumes["config-volume"]["configMap"] == {"name": "istio"}


def test_without_the_ca_the_webhooks_need_a_certificate() -> None:
    done = subprocess.run(
        [tool("helm"), "template", "pilotfish", str(CHART), "--set", "pilot.ca.enabled=false"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "webhook.certSecretName" in done.stderr


def test_dockerfile_passes_hadolint() -> None:
    done = subprocess.run([tool("hadolint"), str(ROOT / "Dockerfile")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


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
