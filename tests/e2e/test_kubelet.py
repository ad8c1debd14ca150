"""The kubelet stand-in (tests/support/kubelet.py) does what a kubelet does with a Deployment's pod:
the replicaset controller makes the pod, the kubelet binds it, gives it an address, resolves its
environment and volumes as the spec says, runs its containers and reports them Ready, so the
endpointslice controller lists it; a Service's ClusterIP reaches it; deleting it stops its process
and removes it for good."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import wait_until
from tests.support.cluster import Cluster
from tests.support.kubelet import Kubelet, running_kubelet

# prints what the container sees, then serves it over HTTP on 8080 (its readiness probe's port)
PROGRAM = r"""
import http.server, json, os, pathlib, sys
def read(path):
    p = pathlib.Path(path)
    return sorted(str(f.relative_to(p)) for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.read_text()
seen = {
    "argv": sys.argv[1:], "cwd": os.getcwd(),
    "env": {k: v for k, v in os.environ.items() if k.startswith(("MY_", "KUBERNETES_SERVICE", "ECHO_"))},
    "podinfo": read("/etc/podinfo/labels"), "config": read("/etc/config/greeting"),
    "secret": read("/etc/secret/password"),
    "token": read("/var/run/secrets/tokens/token"),
    "sa": read("/var/run/secrets/kubernetes.io/serviceaccount"),
    "hosts": pathlib.Path("/etc/hosts").read_text(),
}
body = json.dumps(seen).encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(body)
http.server.HTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
"""


def deployment(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "echo", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "echo"}},
            "template": {
                "metadata": {"labels": {"app": "echo", "version": "v1"}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "echo",
                        "image": "docker.io/library/python:3.11",
                        "command": ["python3", "-c", PROGRAM],
                        "args": ["$(MY_POD_NAME)", "$$(MY_POD_NAME)", "$(UNDEFINED)"],
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "resources": {"limits": {"cpu": "1500m", "memory": "64Mi"}},
                        "env": [
                            {"name": "MY_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "MY_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            {"name": "MY_APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                            {"name": "MY_ACCOUNT", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
                            {"name": "MY_CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                            {"name": "MY_MEMORY_MI", "valueFrom": {"resourceFieldRef": {
                                "resource": "limits.memory", "divisor": "1Mi"}}},
                            {"name": "MY_GREETING", "valueFrom": {"configMapKeyRef": {
                                "name": "echo", "key": "greeting"}}},
                            {"name": "MY_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "echo", "key": "password"}}},
                            {"name": "MY_URL", "value": "http://$(MY_POD_IP):8080"},
                        ],
                        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
                        "volumeMounts": [
                            {"name": "podinfo", "mountPath": "/etc/podinfo"},
                            {"name": "config", "mountPath": "/etc/config"},
                            {"name": "secret", "mountPath": "/etc/secret", "readOnly": True},
                            {"name": "token", "mountPath": "/var/run/secrets/tokens"},
                        ],
                    }],
                    "volumes": [
                        {"name": "podinfo", "downwardAPI": {"items": [
                            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                        {"name": "config", "configMap": {"name": "echo"}},
                        {"name": "secret", "secret": {"secretName": "echo"}},
                        {"name": "token", "projected": {"sources": [{"serviceAccountToken": {
                            "path": "token", "audience": "istio-ca", "expirationSeconds": 3600}}]}},
                    ],
                },
            },
        },
    }  # fmt: skip


@pytest.fixture
def kubelet(kube: Cluster, tmp_path: Path) -> Iterator[Kubelet]:
    with running_kubelet(kube, tmp_path) as kubelet:
        yield kubelet


def test_a_deployments_pod_runs_with_its_environment_and_volumes(kube: Cluster, kubelet: Kubelet) -> None:
    ns = kube.namespace("kubelet")
    kubelet.watch(ns)
    kube.apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "echo"}, "data": {"greeting": "hello"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "echo"}, "stringData": {"password": "s3cret"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo"},
         "spec": {"selector": {"app": "echo"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}},
        deployment(ns),
        namespace=ns,
    )  # fmt: skip
    [pod] = kube.wait_for("the replicaset controller to make the pod", lambda: kube.list("v1", "Pod", ns))
    name = pod["metadata"]["name"]
    running = kubelet.ready(ns, name)

    stored = kube.get("v1", "Pod", ns, name)
    assert stored is not None
    assert stored["spec"]["nodeName"] == "node-1", "the kubelet binds an unscheduled pod to its node"
    status = stored["status"]
    assert status["phase"] == "Running" and status["podIP"] == running.ip, status
    assert status["hostIP"] == kubelet.network.node_ip, status
    [container] = status["containerStatuses"]
    assert container["ready"] and container["started"] and "running" in container["state"], container
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {"PodScheduled": "True", "Initialized": "True", "ContainersReady": "True", "Ready": "True"}

    # the endpointslice controller lists the ready pod; the Service's ClusterIP reaches it
    vip = kube.get("v1", "Service", ns, "echo")["spec"]["clusterIP"]  # type: ignore[index]
    reply = wait_until(lambda: _get(running, f"http://{vip}:80/"), "the Service's ClusterIP to reach the pod")
    seen = json.loads(reply)
    env = seen["env"]
    assert seen["argv"] == [name, "$(MY_POD_NAME)", "$(UNDEFINED)"], "$(VAR) expanded, $$ escaped, unknown kept"
    assert env["MY_POD_NAME"] == name and env["MY_POD_IP"] == running.ip and env["MY_APP"] == "echo", env
    assert env["MY_ACCOUNT"] == "default" and env["MY_CPU"] == "2" and env["MY_MEMORY_MI"] == "64", env
    assert env["MY_GREETING"] == "hello" and env["MY_URL"] == f"http://{running.ip}:8080", env
    assert env["ECHO_SERVICE_HOST"] == vip and env["KUBERNETES_SERVICE_PORT"] == "443", env
    assert seen["podinfo"].splitlines()[0] == 'app="echo"', seen["podinfo"]
    assert seen["config"] == "hello" and seen["secret"] == "s3cret", seen
    assert seen["sa"] == ["ca.crt", "namespace", "token"], "the ServiceAccount admission plugin's volume"
    assert f"{vip} echo.{ns}.svc" in seen["hosts"], seen["hosts"]
    review = kube.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": seen["token"], "audiences": ["istio-ca"]},
    })["status"]  # fmt: skip
    assert review["authenticated"], review
    assert review["user"]["username"] == f"system:serviceaccount:{ns}:default", review
    assert review["user"]["extra"]["authentication.kubernetes.io/pod-name"] == [name], "bound to the pod"

    # deleting the pod stops its container and removes it for good
    kube.delete("v1", "Pod", ns, name)
    wait_until(lambda: kube.get("v1", "Pod", ns, name) is None, "the kubelet to finish deleting the pod")
    assert running.stopped.wait(10) and running.main[0].process is not None
    assert running.main[0].process.poll() is not None, "the container's process ended"


def test_a_container_failing_its_liveness_probe_is_restarted(kube: Cluster, kubelet: Kubelet) -> None:
    ns = kube.namespace("liveness")
    kubelet.watch(ns)
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dead", "namespace": ns},
        "spec": {"containers": [{
            "name": "sleeper", "image": "python:3.11", "command": ["python3", "-c", "import time; time.sleep(600)"],
            # nothing listens on 9: every probe fails
            "livenessProbe": {"tcpSocket": {"port": 9}, "periodSeconds": 1, "failureThreshold": 2},
        }]},
    }  # fmt: skip
    kube.create(pod)

    def restarted() -> dict[str, Any] | None:
        stored = kube.get("v1", "Pod", ns, "dead") or {}
        statuses = stored.get("status", {}).get("containerStatuses") or [{}]
        return statuses[0] if statuses[0].get("restartCount", 0) >= 1 and "running" in statuses[0]["state"] else None

    status = wait_until(restarted, "the kubelet to kill and restart the container that fails its liveness probe")
    assert status["lastState"]["terminated"]["exitCode"] == 137, status  # SIGKILL, as the runtime reports it


def _get(running: Any, url: str) -> str | None:
    result = running.exec(
        "echo",
        ["python3", "-c", f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=3).read().decode())"],
    )
    return result.stdout if result.returncode == 0 else None
