"""The load benchmark's mesh (bench/mesh.py) as Kubernetes objects in a real API server, and the
changes the push scenarios make to it, made through the API server.

Per namespace ``ns-K`` (labelled for the mesh's discoverySelectors): the Services (the API server
allocates their ClusterIPs), their Pods run as a kubelet would leave them (``Cluster.run_pod``:
bound to the node, Running, Ready, the pod's address), so the real endpointslice controller makes
the EndpointSlices; the DestinationRules and VirtualServices. The root namespace holds the mesh
ConfigMap ``istio``, which istiod and pilotfish both read. Loading writes from a few threads (each
request is its own HTTPS connection) and returns once every Service has a slice of its ready pods.

Every change returns ``time.monotonic()`` from just before its first API request: the clock of a
push starts when the client asks, as a ``kubectl apply`` would. ``reset()`` undoes every change,
so the next control plane starts on the same cluster state the previous one did.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import yaml

from bench.mesh import (
    CONTAINER_PORTS,
    MAX_CONNECTIONS,
    PODS_PER_SERVICE,
    MeshSpec,
    Pod,
    destination_rule,
    pod,
    service_entry,
    sidecar,
    virtual_service,
)
from tests.differential.scene import MESH
from tests.support.cluster import Cluster

SELECTOR_LABEL = "pilotfish-bench"
WRITERS = 6  # concurrent API requests while loading
SLICES_TIMEOUT = 600.0  # the endpointslice controller writes at its client's QPS (20 by default)


@dataclass
class KubeMesh:
    spec: MeshSpec
    kube: Cluster
    system: str  # the root namespace: the mesh ConfigMap, istiod's and pilotfish's own objects
    max_connections: dict[int, int] = field(default_factory=dict)  # service -> its DR's value, when changed
    extra_pods: dict[int, int] = field(default_factory=dict)  # service -> pods added
    service_entries: int = 0  # ServiceEntries added to ns-0
    sidecars: bool = False  # the per-namespace Sidecars applied
    deleted: set[int] = field(default_factory=set)  # services removed

    @property
    def namespaces(self) -> list[str]:
        return [f"ns-{n}" for n in range(self.spec.namespaces)]

    def load(self) -> dict[str, float]:
        """Everything into the API server; seconds each step took."""
        steps: dict[str, float] = {}
        began = time.monotonic()
        labels = {SELECTOR_LABEL: "true"}
        for namespace in (self.system, *self.namespaces):
            self.kube.apply(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}
            )
        # the differential test's mesh (istiod's chart values), selecting the bench's namespaces
        mesh = MESH.format(system=self.system, label=SELECTOR_LABEL, token="true")
        config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "istio", "namespace": self.system}}
        self.kube.apply({**config_map, "data": {"mesh": mesh}})
        for namespace in self.namespaces:  # run_pod's admission needs the account; made once here
            self.kube.service_account(namespace, "default")
        steps["namespaces"] = time.monotonic() - began
        services = range(self.spec.services)
        rules = [i for i in services if self.spec.has_traffic_rules(i)]
        docs = [_service(i, self.spec.namespace_of(i)) for i in services]
        docs += [yaml.safe_load(destination_rule(i, self.spec.namespace_of(i))) for i in rules]
        docs += [yaml.safe_load(virtual_service(i, self.spec.namespace_of(i))) for i in rules]
        self._parallel(lambda doc: self.kube.apply(doc), docs)
        steps["services_and_rules"] = time.monotonic() - sum(steps.values()) - began
        pods = [pod(i, k, self.spec.namespace_of(i)) for i in services for k in range(PODS_PER_SERVICE)]
        self._parallel(self._run, pods)
        steps["pods"] = time.monotonic() - sum(steps.values()) - began
        self.wait_for_slices()
        steps["endpoint_slices"] = time.monotonic() - sum(steps.values()) - began
        return {name: round(seconds, 1) for name, seconds in steps.items()}

    def wait_for_slices(self) -> None:
        """Until every Service's EndpointSlices hold exactly its ready pods' addresses."""
        want = {
            (self.spec.namespace_of(i), f"svc-{i}"): {
                pod(i, k, "").ip for k in range(PODS_PER_SERVICE + self.extra_pods.get(i, 0))
            }
            for i in range(self.spec.services)
        }

        def done() -> bool:
            return self._slice_addresses() == want

        self.kube.wait_for("every Service's EndpointSlices", done, timeout=SLICES_TIMEOUT)

    def _slice_addresses(self) -> dict[tuple[str, str], set[str]]:
        out: dict[tuple[str, str], set[str]] = {}
        for namespace in self.namespaces:
            for s in self.kube.list("discovery.k8s.io/v1", "EndpointSlice", namespace):
                service = s["metadata"].get("labels", {}).get("kubernetes.io/service-name", "")
                held = out.setdefault((namespace, service), set())
                for endpoint in s.get("endpoints") or ():
                    if (endpoint.get("conditions") or {}).get("ready"):
                        held.update(endpoint["addresses"])
        return out

    # --- the scenarios' changes -----------------------------------------------------------------

    def change_destination_rule(self, service: int) -> float:
        """Bump svc-<service>'s maxConnections."""
        assert self.spec.has_traffic_rules(service), f"svc-{service} has no DestinationRule"
        self.max_connections[service] = self.max_connections.get(service, MAX_CONNECTIONS) + 1
        t0 = time.monotonic()
        self._apply_rule(service)
        return t0

    def add_endpoint(self, service: int) -> float:
        """One more Ready pod of svc-<service>: the endpointslice controller adds its endpoint."""
        k = PODS_PER_SERVICE + self.extra_pods.get(service, 0)
        self.extra_pods[service] = self.extra_pods.get(service, 0) + 1
        t0 = time.monotonic()
        self._run(pod(service, k, self.spec.namespace_of(service)))
        return t0

    def add_service_entry(self) -> float:
        """One more ServiceEntry in ns-0 (a new host with an address, visible mesh-wide)."""
        self.service_entries += 1
        t0 = time.monotonic()
        self.kube.apply(service_entry(self.service_entries))
        return t0

    def delete_service(self, service: int) -> float:
        """Delete svc-<service> (one without traffic rules; its pods stay, the garbage collector
        takes its EndpointSlices)."""
        assert not self.spec.has_traffic_rules(service), f"svc-{service} has rules that would name it"
        self.deleted.add(service)
        t0 = time.monotonic()
        self.kube.delete("v1", "Service", self.spec.namespace_of(service), f"svc-{service}")
        return t0

    def add_sidecars(self) -> float:
        """One Sidecar per namespace (egress ``./*`` and ``istio-system/*``): every proxy's scope
        shrinks to its namespace."""
        self.sidecars = True
        t0 = time.monotonic()
        self._parallel(lambda namespace: self.kube.apply(sidecar(namespace)), self.namespaces)
        return t0

    def reset(self) -> None:
        """Undo every change (no control plane running): the loaded state again."""
        for service in list(self.max_connections):
            del self.max_connections[service]
            self._apply_rule(service)
        for service, added in self.extra_pods.items():
            for k in range(PODS_PER_SERVICE, PODS_PER_SERVICE + added):
                self._delete_pod(pod(service, k, self.spec.namespace_of(service)))
        self.extra_pods.clear()
        for k in range(1, self.service_entries + 1):
            self.kube.delete("networking.istio.io/v1", "ServiceEntry", "ns-0", f"ext-{k}")
        self.service_entries = 0
        if self.sidecars:
            for namespace in self.namespaces:
                self.kube.delete("networking.istio.io/v1", "Sidecar", namespace, "default")
            self.sidecars = False
        for service in self.deleted:  # back once the old one's slices are collected
            self.kube.wait_for(f"svc-{service}'s EndpointSlices collected", self._slices_gone(service))
            self.kube.apply(_service(service, self.spec.namespace_of(service)))
        self.deleted.clear()
        self.wait_for_slices()

    def _slices_gone(self, service: int) -> Callable[[], bool]:
        namespace, selector = self.spec.namespace_of(service), f"kubernetes.io/service-name=svc-{service}"
        return lambda: not self.kube.list("discovery.k8s.io/v1", "EndpointSlice", namespace, labelSelector=selector)

    def _apply_rule(self, service: int) -> None:
        value = self.max_connections.get(service, MAX_CONNECTIONS)
        self.kube.apply(destination_rule(service, self.spec.namespace_of(service), value))

    def _run(self, p: Pod) -> None:
        container = {"name": "app", "ports": [{"containerPort": port} for port in CONTAINER_PORTS]}
        doc = {"metadata": {"name": p.name, "labels": dict(p.labels)}, "spec": {"containers": [container]}}
        self.kube.run_pod(doc, p.ip, namespace=p.namespace)

    def _delete_pod(self, p: Pod) -> None:
        path = self.kube.path("v1", "Pod", p.namespace, p.name)
        self.kube.request("DELETE", path, query={"gracePeriodSeconds": "0"}, ok=(200, 404))
        self.kube.wait_for(
            f"pod {p.namespace}/{p.name} gone", lambda: self.kube.get("v1", "Pod", p.namespace, p.name) is None
        )

    def _parallel(self, write: Callable[[Any], object], items: Iterable[Any]) -> None:
        with ThreadPoolExecutor(WRITERS) as pool:
            for _ in pool.map(write, items):  # re-raises the first failure
                pass


def _service(i: int, namespace: str) -> dict[str, Any]:
    ports = [{"name": "http", "port": 80, "targetPort": 8080}, {"name": "tcp-db", "port": 5432}]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"svc-{i}", "namespace": namespace},
        "spec": {"selector": {"app": f"svc-{i}"}, "ports": ports},
    }
