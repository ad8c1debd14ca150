"""Sidecar injection as the real API server calls it: a MutatingWebhookConfiguration in istiod's
shape (pods, CREATE, namespaces labelled istio-injection=enabled) pointing at a local
``pilotfish serve``; the API server sends pilotfish each new pod and applies the JSONPatch it
answers. A pod created directly and one a Deployment's ReplicaSet creates come back with
istiod's sidecar, pointed at pilotfish; a pod in an unlabelled namespace, or one that opts out,
is left alone."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.e2e.processes import run_pilotfish
from tests.support.cluster import Cluster, free_port

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "hello", "labels": {"app": "hello"}},
    "spec": {"containers": [{
        "name": "hello", "image": "example.com/hello:1", "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}},
    }]},
}  # fmt: skip


def mutating_webhook(url: str, ca_pem: bytes, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "sidecar-injector.istio.io",
            "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"istio-injection": "enabled"}},
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "reinvocationPolicy": "Never",
        }],
    }  # fmt: skip


@pytest.fixture
def injecting(kube: Cluster, pilotfish_kubeconfig: Path, tmp_path: Path) -> Iterator[str]:
    """pilotfish injecting through the API server; a namespace labelled for injection."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(tmp_path / "webhook.crt")
    cert.private_key_pem.write_to_path(tmp_path / "webhook.key")
    port = free_port()
    args = (
        "--webhook-address", f"127.0.0.1:{port}",
        "--webhook-cert", str(tmp_path / "webhook.crt"),
        "--webhook-key", str(tmp_path / "webhook.key"),
    )  # fmt: skip
    with run_pilotfish(None, tmp_path, kubeconfig=pilotfish_kubeconfig, extra_args=args):
        config = mutating_webhook(f"https://127.0.0.1:{port}/inject", ca.cert_pem.bytes(), f"pilotfish-inject-{port}")
        kube.apply(config)
        try:
            namespace = kube.namespace("inject", labels={"istio-injection": "enabled"})
            path = kube.path("v1", "Pod", namespace)
            # the API server takes the configuration up within a moment: a dry run shows when
            kube.wait_for(
                "the injection webhook", lambda: _names(kube.request("POST", path, POD, query={"dryRun": "All"}))
            )
            yield namespace
        finally:
            kube.delete(
                "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "", config["metadata"]["name"]
            )


def _names(pod: dict[str, Any]) -> list[str]:
    spec = pod["spec"]
    return [c["name"] for c in [*spec.get("initContainers", []), *spec["containers"]] if c["name"].startswith("istio")]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_a_pod_gets_istiods_sidecar_pointed_at_pilotfish(kube: Cluster, injecting: str) -> None:
    pod = kube.create(POD, namespace=injecting)
    inits = {c["name"]: c for c in pod["spec"].get("initContainers", [])}
    assert list(inits) == ["istio-init", "istio-proxy"]  # a native sidecar after the iptables setup
    proxy = inits["istio-proxy"]
    assert proxy["restartPolicy"] == "Always"
    assert proxy["args"][:2] == ["proxy", "sidecar"]
    env = _env(proxy)
    assert env["CA_ADDR"] == "istiod.istio-system.svc:15012"
    # the discovery address is the mesh default, istiod's Service, which the chart points at
    # pilotfish: nothing differs from the defaults, so nothing is spelled out (as istiod)
    assert json.loads(env["PROXY_CONFIG"]) == {}
    assert env["ISTIO_META_APP_CONTAINERS"] == "hello"
    # the application's probe now goes through pilot-agent, which keeps the original
    assert pod["spec"]["containers"][0]["readinessProbe"]["httpGet"] == {
        "path": "/app-health/hello/readyz", "port": 15020, "scheme": "HTTP"
    }  # fmt: skip
    assert json.loads(env["ISTIO_KUBE_APP_PROBERS"]) == {
        "/app-health/hello/readyz": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"}, "timeoutSeconds": 1}
    }  # fmt: skip
    annotations = pod["metadata"]["annotations"]
    status = json.loads(annotations["sidecar.istio.io/status"])
    assert status["initContainers"] == ["istio-init", "istio-proxy"] and status["revision"] == "default"
    assert annotations["kubectl.kubernetes.io/default-container"] == "hello"
    assert annotations["prometheus.io/port"] == "15020"
    assert pod["metadata"]["labels"]["security.istio.io/tlsMode"] == "istio"


def test_a_deployments_pod_is_injected_with_the_deployment_as_owner(kube: Cluster, injecting: str) -> None:
    """A pod as the ReplicaSet controller creates it (this cluster runs no deployment controller):
    a generated name, its ReplicaSet as controller, the template hash label."""
    meta = {
        "generateName": "web-5d8f7-", "labels": {"app": "web", "pod-template-hash": "5d8f7"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f7", "controller": True,
                             "uid": "6f1e2b8c-0000-4000-8000-000000000001"}],
    }  # fmt: skip
    pod = kube.create({**POD, "metadata": meta}, namespace=injecting)
    proxy = next(c for c in pod["spec"]["initContainers"] if c["name"] == "istio-proxy")
    env = _env(proxy)
    assert env["ISTIO_META_WORKLOAD_NAME"] == "web"
    assert env["ISTIO_META_OWNER"] == f"kubernetes://apis/apps/v1/namespaces/{injecting}/deployments/web"
    assert pod["metadata"]["labels"]["service.istio.io/canonical-name"] == "web"


def test_pods_the_policy_skips_are_left_alone(kube: Cluster, injecting: str) -> None:
    opted_out = {**POD, "metadata": {"name": "out", "labels": {"sidecar.istio.io/inject": "false"}}}
    pod = kube.create(opted_out, namespace=injecting)
    assert _names(pod) == [] and "sidecar.istio.io/status" not in pod["metadata"].get("annotations", {})
    elsewhere = kube.namespace("plain")
    assert _names(kube.create(POD, namespace=elsewhere)) == []


def test_a_proxy_config_resource_reaches_the_pods_created_after_it(kube: Cluster, injecting: str) -> None:
    """A ProxyConfig made through the API server (read by pilotfish's informer, with the chart's
    RBAC) is in the injection of the next pods it selects, as istiod's webhook reads it."""
    spec = {"selector": {"matchLabels": {"app": "hello"}}, "concurrency": 2, "environmentVariables": {"TIER": "web"}}
    config = {"apiVersion": "networking.istio.io/v1beta1", "kind": "ProxyConfig", "metadata": {"name": "hello"},
              "spec": spec}  # fmt: skip
    kube.create(config, namespace=injecting)
    path = kube.path("v1", "Pod", injecting)

    def proxy_env() -> dict[str, Any]:
        pod = kube.request("POST", path, POD, query={"dryRun": "All"})
        return _env(next(c for c in pod["spec"]["initContainers"] if c["name"] == "istio-proxy"))

    env = kube.wait_for("the ProxyConfig in the injection", lambda: (e := proxy_env()).get("TIER") and e)
    assert json.loads(env["PROXY_CONFIG"]) == {"concurrency": 2, "proxyMetadata": {"TIER": "web"}}
    other = {**POD, "metadata": {"name": "other", "labels": {"app": "other"}}}
    pod = kube.create(other, namespace=injecting)
    proxy = next(c for c in pod["spec"]["initContainers"] if c["name"] == "istio-proxy")
    assert "TIER" not in _env(proxy)
