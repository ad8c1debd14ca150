"""The load benchmark's mesh (scenario mesh-1k and smaller variants) as a config dir, the changes
the push scenarios make to it, and the sidecars that belong to it.

``--services`` Kubernetes Services (default 1,000) in ``--namespaces`` namespaces (default 50:
``ns-0`` holds svc-0..svc-19, ``ns-1`` svc-20..svc-39, ...). Each Service has http 80 -> 8080
and tcp-db 5432 (as bench/generate_xds.py), an EndpointSlice of 3 endpoints and their 3 Pods
(labels ``app=svc-i``, ``version`` v1/v2). Every 10th service (svc-0, svc-10, ...) also has a
DestinationRule (subsets v1/v2, ``connectionPool.tcp.maxConnections``) and a VirtualService
(header ``x-version: v2`` to v2, else v1): 100 of each at mesh-1k. ``--sidecars`` adds one
Sidecar per namespace with egress hosts ``./*`` and ``istio-system/*``.

Files, per namespace: ``ns-K/services.yaml`` (Services, EndpointSlices, Pods),
``ns-K/destination-rules.yaml``, ``ns-K/virtual-services.yaml`` and ``ns-K/sidecar.yaml``. A change
rewrites one file atomically (write a hidden temp file, then ``os.replace``), as a user or a
ConfigMap mount would; pilotfish ignores files starting with ".". Usage, to look at the mesh or
serve it by hand:
    python -m bench.mesh DIR [--services N] [--namespaces M] [--sidecars]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_SERVICE = """apiVersion: v1
kind: Service
metadata: {{name: svc-{i}, namespace: {ns}}}
spec:
  clusterIP: 10.96.{a}.{b}
  selector: {{app: svc-{i}}}
  ports: [{{name: http, port: 80, targetPort: 8080}}, {{name: tcp-db, port: 5432}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: svc-{i}-1, namespace: {ns}, labels: {{kubernetes.io/service-name: svc-{i}}}}}
addressType: IPv4
ports: [{{name: http, port: 8080}}, {{name: tcp-db, port: 5432}}]
endpoints:
{endpoints}"""
_ENDPOINT = (
    "- {{addresses: [{ip}], conditions: {{ready: true}}, targetRef: {{kind: Pod, name: {pod}, namespace: {ns}}}}}\n"
)
_POD = """apiVersion: v1
kind: Pod
metadata: {{name: {pod}, namespace: {ns}, labels: {{app: svc-{i}, version: {version}}}}}
status: {{podIP: {ip}}}
"""
_DESTINATION_RULE = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: svc-{i}, namespace: {ns}}}
spec:
  host: svc-{i}
  trafficPolicy: {{connectionPool: {{tcp: {{maxConnections: {max_connections}}}}}}}
  subsets: [{{name: v1, labels: {{version: v1}}}}, {{name: v2, labels: {{version: v2}}}}]
"""
_VIRTUAL_SERVICE = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: svc-{i}, namespace: {ns}}}
spec:
  hosts: [svc-{i}]
  http:
  - match: [{{headers: {{x-version: {{exact: v2}}}}}}]
    route: [{{destination: {{host: svc-{i}, subset: v2}}}}]
  - route: [{{destination: {{host: svc-{i}, subset: v1}}}}]
    timeout: 5s
"""
_SERVICE_ENTRY = """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: ext-{k}, namespace: {ns}}}
spec:
  hosts: [ext-{k}.partner.example]
  addresses: [240.10.{a}.{b}]
  ports: [{{number: 443, name: tls, protocol: TLS}}]
  resolution: STATIC
  endpoints: [{{address: 198.18.{a}.{b}}}]
"""
_SIDECAR = """apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: default, namespace: {ns}}}
spec:
  egress: [{{hosts: ["./*", "istio-system/*"]}}]
"""
PODS_PER_SERVICE = 3
TRAFFIC_RULE_EVERY = 10  # every 10th service has a DestinationRule and a VirtualService
CHANGED_SERVICE = 0  # what the scenarios change: svc-0 (ns-0) has a DestinationRule
DELETED_SERVICE = 1  # what ``service-delete`` removes: svc-1 has none
MAX_CONNECTIONS = 100
SERVICES = 1000  # mesh-1k
NAMESPACES = 50
ISTIO_VERSION = "1.24.0"
CONTAINER_PORTS = (8080, 5432)  # what the Services' ports target


@dataclass(frozen=True, slots=True)
class MeshSpec:
    services: int = SERVICES
    namespaces: int = NAMESPACES
    sidecars: bool = False

    def namespace_of(self, service: int) -> str:
        return f"ns-{service * self.namespaces // self.services}"

    def services_in(self, namespace: int) -> list[int]:
        """The services of ``ns-<namespace>``: a contiguous block."""
        return [i for i in range(self.services) if i * self.namespaces // self.services == namespace]

    @staticmethod
    def has_traffic_rules(service: int) -> bool:
        return service % TRAFFIC_RULE_EVERY == 0


@dataclass(frozen=True, slots=True)
class Pod:
    name: str
    namespace: str
    ip: str
    labels: dict[str, str]


def pod(service: int, k: int, namespace: str) -> Pod:
    """The k-th pod of svc-<service>; k 0..2 exist from the start, k 3 is the one a scenario adds."""
    ip = f"10.{10 + k}.{service >> 8}.{service & 255}"
    return Pod(f"p-{service}-{k}", namespace, ip, {"app": f"svc-{service}", "version": f"v{k % 2 + 1}"})


@dataclass(frozen=True, slots=True)
class SidecarIdentity:
    """One simulated sidecar: what Envoy sends as node id and metadata (one of the mesh's pods)."""

    pod: Pod
    agent: bool = False  # an agent's upstream: DNS capture on, NDS beside the Envoy types
    # set: the metadata pilot-agent sends (for a control plane that reads the pod from a cluster,
    # istiod too), with this ISTIO_VERSION; None: the few keys a config-dir server reads
    pilot_agent: str | None = None

    @property
    def namespace(self) -> str:
        return self.pod.namespace

    @property
    def node_id(self) -> str:
        p = self.pod
        return f"sidecar~{p.ip}~{p.name}.{p.namespace}~{p.namespace}.svc.cluster.local"

    def metadata(self) -> dict[str, object]:
        out: dict[str, object] = {
            "NAMESPACE": self.pod.namespace,
            "LABELS": dict(self.pod.labels),
            "INTERCEPTION_MODE": "REDIRECT",
            "ISTIO_VERSION": ISTIO_VERSION,
            "INSTANCE_IPS": self.pod.ip,
        }
        if self.pilot_agent is not None:
            out.update(self._pilot_agent_metadata(self.pilot_agent))
        if self.agent:
            out["DNS_CAPTURE"] = "true"
        return out

    def _pilot_agent_metadata(self, istio_version: str) -> dict[str, object]:
        """What pkg/bootstrap/config.go GetNodeMetaData adds from the environment istiod's injection
        template gives istio-proxy (as tests/differential/scene.py ``Workload.node``)."""
        p = self.pod
        workload = p.labels["app"]
        return {
            "NAME": p.name,
            "SERVICE_ACCOUNT": "default",
            "ISTIO_VERSION": istio_version,
            "CLUSTER_ID": "Kubernetes",
            "MESH_ID": "cluster.local",
            "WORKLOAD_NAME": workload,
            "OWNER": f"kubernetes://apis/apps/v1/namespaces/{p.namespace}/deployments/{workload}",
            "APP_CONTAINERS": "app",
            "POD_PORTS": json.dumps([{"containerPort": port, "protocol": "TCP"} for port in CONTAINER_PORTS]),
            "NODE_NAME": "node-1",
            "ENVOY_STATUS_PORT": 15021,
            "ENVOY_PROMETHEUS_PORT": 15090,
        }


def sidecars(spec: MeshSpec, count: int, agents: int = 0, pilot_agent: str | None = None) -> list[SidecarIdentity]:
    """``count`` sidecars spread round-robin over the namespaces, each one of its namespace's pods
    (in order; a namespace with more sidecars than pods reuses them); the first ``agents`` of
    them (so spread over the namespaces too) connect as node agents; ``pilot_agent``: the
    ISTIO_VERSION of full pilot-agent metadata (``SidecarIdentity.pilot_agent``)."""
    pods_by_ns = [
        [pod(i, k, f"ns-{n}") for i in spec.services_in(n) for k in range(PODS_PER_SERVICE)]
        for n in range(spec.namespaces)
    ]
    out = []
    for j in range(count):
        pods = pods_by_ns[j % spec.namespaces]
        out.append(SidecarIdentity(pods[(j // spec.namespaces) % len(pods)], j < agents, pilot_agent))
    return out


@dataclass
class Mesh:
    """The mesh as files in ``root``, and its current state (what the changes have done)."""

    spec: MeshSpec
    root: Path
    max_connections: dict[int, int] = field(default_factory=dict)  # service -> its DR's value
    extra_pods: dict[int, int] = field(default_factory=dict)  # service -> pods added
    service_entries: int = 0  # ServiceEntries added to ns-0
    deleted: set[int] = field(default_factory=set)  # services removed

    def write(self) -> None:
        for n in range(self.spec.namespaces):
            self._write_namespace(n)

    def change_destination_rule(self, service: int) -> float:
        """Bump svc-<service>'s maxConnections; returns the monotonic time the file was replaced."""
        assert self.spec.has_traffic_rules(service), f"svc-{service} has no DestinationRule"
        self.max_connections[service] = self.max_connections.get(service, MAX_CONNECTIONS) + 1
        return self._replace(service, "destination-rules.yaml", self._destination_rules)

    def add_endpoint(self, service: int) -> float:
        """Add one Pod and its endpoint to svc-<service>; returns when the file was replaced."""
        self.extra_pods[service] = self.extra_pods.get(service, 0) + 1
        return self._replace(service, "services.yaml", self._services)

    def add_service_entry(self) -> float:
        """Add a ServiceEntry (a new host with an address, visible mesh-wide) to ns-0: a change
        every proxy's clusters, listeners and routes and every agent's name table follow."""
        self.service_entries += 1
        entries = [service_entry(k) for k in range(1, self.service_entries + 1)]
        return self._write_file(0, "service-entries.yaml", "---\n".join(entries))

    def delete_service(self, service: int) -> float:
        """Remove svc-<service> and its pods (one without traffic rules): every proxy drops its
        clusters, listener and route, and Envoy its endpoint names; returns when written."""
        assert not self.spec.has_traffic_rules(service), f"svc-{service} has rules that would name it"
        self.deleted.add(service)
        return self._replace(service, "services.yaml", self._services)

    def add_mesh_policy(self) -> float:
        """An ALLOW AuthorizationPolicy in the root namespace: every sidecar's inbound listeners
        get its RBAC filter (a mesh-wide policy change: each proxy rebuilds its own listeners)."""
        return self._write_file(0, "mesh-policy.yaml", _MESH_POLICY)

    def add_sidecars(self) -> float:
        """One Sidecar per namespace (``./*``, ``istio-system/*``): every proxy's scope shrinks to
        its namespace; returns when the last file was written."""
        written = 0.0
        for n in range(self.spec.namespaces):
            written = self._write_file(n, "sidecar.yaml", sidecar(f"ns-{n}"))
        return written

    def _replace(self, service: int, name: str, render: Callable[[int], str]) -> float:
        namespace = int(self.spec.namespace_of(service).removeprefix("ns-"))
        return self._write_file(namespace, name, render(namespace))

    def _write_namespace(self, n: int) -> None:
        self._write_file(n, "services.yaml", self._services(n))
        self._write_file(n, "destination-rules.yaml", self._destination_rules(n))
        self._write_file(n, "virtual-services.yaml", self._virtual_services(n))
        if self.spec.sidecars:
            self._write_file(n, "sidecar.yaml", sidecar(f"ns-{n}"))

    def _write_file(self, namespace: int, name: str, text: str) -> float:
        directory = self.root / f"ns-{namespace}"
        directory.mkdir(parents=True, exist_ok=True)
        staging = directory / f".{name}.tmp"  # hidden: not a config file for pilotfish
        staging.write_text(text)
        os.replace(staging, directory / name)
        return time.monotonic()

    def _services(self, n: int) -> str:
        ns = f"ns-{n}"
        docs = []
        for i in self.spec.services_in(n):
            if i in self.deleted:
                continue
            pods = [pod(i, k, ns) for k in range(PODS_PER_SERVICE + self.extra_pods.get(i, 0))]
            endpoints = "".join(_ENDPOINT.format(ip=p.ip, pod=p.name, ns=ns) for p in pods)
            docs.append(_SERVICE.format(i=i, ns=ns, a=i >> 8, b=i & 255, endpoints=endpoints))
            docs.extend(_POD.format(i=i, ns=ns, pod=p.name, version=p.labels["version"], ip=p.ip) for p in pods)
        return "---\n".join(docs)

    def _destination_rules(self, n: int) -> str:
        return "---\n".join(
            destination_rule(i, f"ns-{n}", self.max_connections.get(i, MAX_CONNECTIONS))
            for i in self.spec.services_in(n)
            if self.spec.has_traffic_rules(i)
        )

    def _virtual_services(self, n: int) -> str:
        return "---\n".join(
            virtual_service(i, f"ns-{n}") for i in self.spec.services_in(n) if self.spec.has_traffic_rules(i)
        )


_MESH_POLICY = """apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: mesh-allow, namespace: istio-system}
spec:
  action: ALLOW
  rules: [{to: [{operation: {methods: [GET, POST]}}]}]
"""


# one object of the mesh as YAML text: the files above and the Kubernetes mode (bench/kube_mesh.py)
def destination_rule(service: int, namespace: str, max_connections: int = MAX_CONNECTIONS) -> str:
    return _DESTINATION_RULE.format(i=service, ns=namespace, max_connections=max_connections)


def virtual_service(service: int, namespace: str) -> str:
    return _VIRTUAL_SERVICE.format(i=service, ns=namespace)


def service_entry(k: int, namespace: str = "ns-0") -> str:
    """The k-th ServiceEntry a scenario adds (k from 1)."""
    return _SERVICE_ENTRY.format(k=k, ns=namespace, a=k >> 8, b=k & 255)


def sidecar(namespace: str) -> str:
    return _SIDECAR.format(ns=namespace)


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the load benchmark's mesh into a directory.")
    parser.add_argument("dir", type=Path)
    parser.add_argument("--services", type=int, default=SERVICES)
    parser.add_argument("--namespaces", type=int, default=NAMESPACES)
    parser.add_argument("--sidecars", action="store_true", help="one Sidecar per namespace (./*, istio-system/*)")
    args = parser.parse_args()
    Mesh(MeshSpec(args.services, args.namespaces, args.sidecars), args.dir).write()


if __name__ == "__main__":
    main()
