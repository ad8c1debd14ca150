"""What was deleted in the API server while ``pilotfish serve --kubeconfig`` was down is gone from
Envoy after the restart, over SotW and Delta.

A sleep sidecar's Sidecar imports its own namespace and ``other``; ``third`` is in the mesh but
not imported. While pilotfish is down (SIGKILL: no goodbye) a Service and a DestinationRule with
a subset are deleted, the app pod is deleted (its EndpointSlice empties), ``other`` is relabelled
out of the discoverySelectors and the Sidecar is deleted. pilotfish starts again on the same
ports; Envoy reconnects holding all of it (Delta: ``initial_resource_versions`` naming the gone
clusters and routes), and must lose every cluster, virtual host and endpoint that is gone and
gain ``third`` (no Sidecar: the whole mesh is visible), as istiod sends it (pilot/pkg/xds/delta.go
takes the initial names as watched, so the first full push removes what it no longer generates).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from tests.e2e.harness import TEMPLATES, free_port, wait_until
from tests.e2e.processes import Envoy, ProxyIdentity, run_envoy, run_pilotfish
from tests.e2e.test_restart_convergence import crash
from tests.support.cluster import Cluster, chart_role, machine_address

NETWORKING = "networking.istio.io/v1"


def service(name: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": port, "targetPort": 8080}]},
    }


def virtual_hosts(envoy: Envoy) -> set[str]:
    return {vh["name"] for route in envoy.route_configs().values() for vh in route.get("virtual_hosts", [])}


def sleep_in(ns: str) -> ProxyIdentity:
    """A sleep sidecar in ``ns`` without traffic capture (the test pods have no iptables)."""
    return ProxyIdentity(
        node_id=f"sidecar~127.0.0.1~sleep-1.{ns}~{ns}.svc.cluster.local",
        cluster=f"sleep.{ns}",
        namespace=ns,
        labels={"app": "sleep"},
        interception_mode="NONE",
    )


def mesh_root(kube: Cluster, selected: dict[str, str]) -> str:
    """A root namespace of its own: the chart's role, and the mesh ConfigMap whose
    discoverySelectors pick the namespaces labelled ``selected``."""
    system = kube.namespace("system")
    chart_role(kube, system)
    mesh = (TEMPLATES / "mesh.yaml").read_text().replace("rootNamespace: istio-system", f"rootNamespace: {system}")
    [(key, value)] = selected.items()
    mesh += f"discoverySelectors:\n- matchLabels: {{{key}: '{value}'}}\n"
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "istio", "namespace": system},
                "data": {"mesh": mesh}})  # fmt: skip
    return system


def test_what_was_deleted_while_pilotfish_was_down_is_removed_after_the_restart(
    kube: Cluster, pilotfish_kubeconfig: Path, api_type: str, tmp_path: Path
) -> None:
    selected = {"pilotfish-e2e": secrets.token_hex(4)}
    ns, other, third = (kube.namespace(prefix, selected) for prefix in ("app", "other", "third"))
    system = mesh_root(kube, selected)
    port = free_port()
    for name, namespace in (("app", ns), ("gone", ns), ("far", other), ("third", third)):
        kube.apply(service(name, port), namespace=namespace)
    kube.apply({"apiVersion": NETWORKING, "kind": "DestinationRule", "metadata": {"name": "app", "namespace": ns},
                "spec": {"host": "app", "subsets": [{"name": "v1", "labels": {"version": "v1"}}]}})  # fmt: skip
    egress = {"port": {"number": port, "protocol": "HTTP", "name": "http"}, "bind": "127.0.0.1",
              "captureMode": "NONE", "hosts": ["./*", f"{other}/*"]}  # fmt: skip
    kube.apply({"apiVersion": NETWORKING, "kind": "Sidecar", "metadata": {"name": "default", "namespace": ns},
                "spec": {"egress": [egress]}})  # fmt: skip
    pod = {"metadata": {"name": "app-v1", "labels": {"app": "app", "version": "v1"}},
           "spec": {"containers": [{"name": "app", "ports": [{"containerPort": 8080}]}]}}  # fmt: skip
    kube.run_pod(pod, machine_address(), namespace=ns)
    sleep = sleep_in(ns)

    def cluster(name: str, namespace: str, subset: str = "") -> str:
        return f"outbound|{port}|{subset}|{name}.{namespace}.svc.cluster.local"

    app = cluster("app", ns)
    gone = {cluster("app", ns, "v1"), cluster("gone", ns), cluster("far", other)}
    args = ("--system-namespace", system)
    with (
        run_pilotfish(None, tmp_path, kubeconfig=pilotfish_kubeconfig, extra_args=args) as server,
        run_envoy(server, sleep, api_type, tmp_path) as envoy,
    ):
        wait_until(lambda: {app, *gone} <= set(envoy.active_clusters()), "every cluster")
        wait_until(lambda: envoy.cluster_hosts().get(app), "app's endpoint")
        assert {f"gone.{ns}.svc.cluster.local:{port}", f"far.{other}.svc.cluster.local:{port}"} <= virtual_hosts(envoy)
        assert cluster("third", third) not in envoy.active_clusters()

        crash(server)
        kube.delete("v1", "Service", ns, "gone")
        kube.delete(NETWORKING, "DestinationRule", ns, "app")
        kube.request("DELETE", kube.path("v1", "Pod", ns, "app-v1"), query={"gracePeriodSeconds": "0"})
        kube.patch("v1", "Namespace", "", other, {"metadata": {"labels": {"pilotfish-e2e": "left"}}})
        kube.delete(NETWORKING, "Sidecar", ns, "default")
        kube.wait_for("app's EndpointSlice to empty", lambda: not any(
            s.get("endpoints") for s in kube.list("discovery.k8s.io/v1", "EndpointSlice", ns,
                                                  labelSelector="kubernetes.io/service-name=app")
        ))  # fmt: skip

        (tmp_path / "again").mkdir()
        ports = (server.xds_port, server.http_port)
        with run_pilotfish(None, tmp_path / "again", kubeconfig=pilotfish_kubeconfig, extra_args=args, ports=ports):
            wait_until(lambda: cluster("third", third) in envoy.active_clusters(), "third, seen without the Sidecar")
            wait_until(lambda: not gone & set(envoy.active_clusters()), "the gone clusters removed")
            assert app in envoy.active_clusters()
            wait_until(lambda: virtual_hosts(envoy) == {"allow_any", f"app.{ns}.svc.cluster.local:{port}",
                                                        f"third.{third}.svc.cluster.local:{port}"},
                       "the gone virtual hosts removed")  # fmt: skip
            wait_until(lambda: not envoy.cluster_hosts().get(app), "app's endpoint removed")
