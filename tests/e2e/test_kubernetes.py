"""``pilotfish serve --kubeconfig`` on a real cluster (tests/support/cluster.py): the mesh lives in
a real kube-apiserver, read by pilotfish's client with the ServiceAccount token
and RBAC charts/pilotfish gives pilotfish; the app's pods are "run" (bound to a node, status
written as a kubelet would) and the real endpointslice controller makes their EndpointSlices; a
real Envoy carries traffic with the config pilotfish derives from it; a VirtualService changed
in the API server moves that traffic without a restart; a status write and a managedFields-only
write push nothing.

EndpointSlice validation refuses loopback addresses, so the pods' address is this machine's own
(non-loopback) one, and the two versions' backends listen there on two ports, which each pod
names ``http`` (the Services' ``targetPort``). One address for both versions rules out subsets
of one Service: istiod keeps one endpoint per (address, port name) of a Service, and so does
pilotfish. So each version has its Service (``app-v1``, ``app-v2``) and the VirtualService of
``app`` routes to one or the other. The mesh's discoverySelectors keep pilotfish to this test's
namespaces of the shared cluster.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.backends import Backends
from tests.e2e.conftest import StartEnvoy
from tests.e2e.harness import TEMPLATES, backends_seen, free_port, routed_to, wait_until
from tests.e2e.processes import Pilotfish, ProxyIdentity, run_pilotfish
from tests.support.cluster import Cluster, chart_role, machine_address

VERSIONS = ("v1", "v2")


@dataclass
class Scene:
    kube: Cluster
    app: str  # the namespace of app and of the sleep sidecar
    other: str  # a namespace the sidecar's Sidecar does not import
    system: str  # the root namespace: the mesh ConfigMap
    egress_port: int

    @property
    def fqdn(self) -> str:
        return f"app.{self.app}.svc.cluster.local"

    @property
    def sleep(self) -> ProxyIdentity:
        return ProxyIdentity(
            node_id=f"sidecar~127.0.0.1~sleep-1.{self.app}~{self.app}.svc.cluster.local",
            cluster=f"sleep.{self.app}",
            namespace=self.app,
            labels={"app": "sleep"},
            interception_mode="NONE",  # no iptables here: listeners must bind for real
        )

    def virtual_service(self, default: str) -> dict[str, Any]:
        """Mesh routing for app: ``x-version: v2`` to app-v2, everything else to app-``default``."""
        return {
            "apiVersion": "networking.istio.io/v1",
            "kind": "VirtualService",
            "metadata": {"name": "app", "namespace": self.app},
            "spec": {
                "hosts": ["app"],
                "http": [
                    {
                        "name": "v2-by-header",
                        "match": [{"headers": {"x-version": {"exact": "v2"}}}],
                        "route": [{"destination": {"host": "app-v2"}}],
                    },
                    {"name": "default", "route": [{"destination": {"host": f"app-{default}"}}]},
                ],
            },
        }

    def marker(self) -> dict[str, Any]:
        return {
            "apiVersion": "networking.istio.io/v1",
            "kind": "DestinationRule",
            "metadata": {"name": "marker", "namespace": self.other},
            "spec": {"host": f"marker.{self.other}.svc.cluster.local"},
        }


def template(name: str, into: str, **values: object) -> list[dict[str, Any]]:
    """tests/data/e2e/``name`` with its placeholders filled, its objects moved to namespace ``into``."""
    text = string.Template((TEMPLATES / name).read_text()).substitute({k: str(v) for k, v in values.items()})
    docs = [d for d in yaml.safe_load_all(text) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = into
    return docs


@pytest.fixture
def scene(kube: Cluster) -> Iterator[Scene]:
    address = machine_address()
    backends = {version: Backends({version: address}).start() for version in VERSIONS}
    try:
        selected = {"pilotfish-e2e": secrets.token_hex(4)}
        scene = Scene(kube, kube.namespace("app", selected), kube.namespace("apps", selected), kube.namespace("system"),
                      free_port())  # fmt: skip
        chart_role(kube, scene.system)  # the CA keeps its root in a Secret of the system namespace
        mesh = (TEMPLATES / "mesh.yaml").read_text()
        mesh = mesh.replace("rootNamespace: istio-system", f"rootNamespace: {scene.system}")
        # quoted: a hex token of digits only (or like 1e5) would be a YAML number, which a label
        # value may not be (istiod refuses such a mesh config too)
        mesh += f"discoverySelectors:\n- matchLabels: {{pilotfish-e2e: '{selected['pilotfish-e2e']}'}}\n"
        kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "istio", "namespace": scene.system},
                    "data": {"mesh": mesh}})  # fmt: skip
        for name, selector in (("app", {}), *((f"app-{v}", {"version": v}) for v in VERSIONS)):
            service = {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "labels": {"app": "app"}},
                "spec": {
                    "selector": {"app": "app", **selector},
                    "ports": [{"name": "http", "port": scene.egress_port, "targetPort": "http", "protocol": "TCP"}],
                },
            }
            kube.apply(service, namespace=scene.app)
        for version in VERSIONS:
            pod = {
                "metadata": {"name": f"app-{version}", "labels": {"app": "app", "version": version}},
                "spec": {
                    "serviceAccountName": "app",
                    "containers": [
                        {"name": "app", "ports": [{"name": "http", "containerPort": backends[version].port}]}
                    ],
                },
            }
            kube.run_pod(pod, address, namespace=scene.app)
        sidecar = template("sidecar/sidecar.yaml", scene.app, egress_port=scene.egress_port)
        kube.apply(scene.virtual_service("v1"), *sidecar)
        for version in VERSIONS:
            want = {(address, backends[version].port)}
            kube.wait_for(f"the endpointslice controller's slice of app-{version}",
                          lambda v=version, w=want: ready_endpoints(kube, scene.app, f"app-{v}") == w)  # fmt: skip
        yield scene
    finally:
        for running in backends.values():
            running.stop()


def ready_endpoints(kube: Cluster, namespace: str, service: str) -> set[tuple[str, int]]:
    """(address, port) of every ready endpoint in the slices the controller made for ``service``."""
    slices = kube.list("discovery.k8s.io/v1", "EndpointSlice", namespace, labelSelector=(
        f"kubernetes.io/service-name={service},endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io"
    ))  # fmt: skip
    return {
        (address, port["port"])
        for s in slices
        for port in s.get("ports") or ()
        for e in s.get("endpoints") or ()
        if (e.get("conditions") or {}).get("ready")
        for address in e["addresses"]
    }


def test_a_virtual_service_changed_in_the_api_server_moves_traffic(
    scene: Scene, pilotfish_kubeconfig: Path, start_envoy: StartEnvoy, tmp_path: Path
) -> None:
    kube, port, fqdn = scene.kube, scene.egress_port, scene.fqdn
    args = ("--system-namespace", scene.system)
    with run_pilotfish(None, tmp_path, kubeconfig=pilotfish_kubeconfig, extra_args=args) as server:
        envoy = start_envoy(server, scene.sleep)
        wait_until(routed_to(port, "v1", host=fqdn), "the egress listener to route app to v1")
        assert backends_seen(port, 10, host=fqdn) == {"v1": 10}
        assert backends_seen(port, 3, host=fqdn, headers={"x-version": "v2"}) == {"v2": 3}
        stream = envoy.xds_stream()

        kube.apply(scene.virtual_service("v2"))
        wait_until(routed_to(port, "v2", host=fqdn), "the changed VirtualService to move traffic to v2")
        assert backends_seen(port, 10, host=fqdn) == {"v2": 10}

        # a status write and a second owner applying the same spec (managedFields only), then a
        # marker the proxy's scope does not import: once the marker's push was skipped, the two
        # before it were seen, and pushed nothing
        before = _pushes(server)
        kube.patch_status("networking.istio.io/v1", "VirtualService", scene.app, "app", {"observedGeneration": 2})
        kube.apply(scene.virtual_service("v2"), manager="another-manager")
        kube.apply(scene.marker())
        wait_until(lambda: sum(_pushes(server)) > sum(before), "the marker's push")
        assert _pushes(server) == (before[0], before[1] + 1), "a status or managedFields write pushed"
        assert envoy.xds_stream() == stream, "the xDS stream was re-established"
        envoy.assert_nothing_rejected()


def _pushes(server: Pilotfish) -> tuple[int, int]:
    """(pushes that sent something, pushes the dependency filter skipped) of the one stream."""
    [stream] = server.sync_status()
    return int(stream["pushes"]), int(stream["pushesSkipped"])
