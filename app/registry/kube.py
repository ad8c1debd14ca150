"""KubeController: Kubernetes Services, EndpointSlices, Pods and Namespaces as Services + endpoints.

It owns the conversion istiod's kube controller does (pilot/pkg/serviceregistry/kube): a
Service becomes ``name.ns.svc.<domain>`` with ports typed by appProtocol or port name; the
endpoints of a Service come from its EndpointSlices, decorated with what the Pod named in
each endpoint's targetRef says (labels, locality, service account, sidecar). A Pod's locality
is its locality label, else its Node's (app/registry/locality.py), so a Node whose topology
labels change rebuilds the slices of the pods on it. Endpoints are built per slice and cached,
so a Pod, Node or slice change rebuilds only the slices it touches; the merged result goes into
the EndpointIndex under the source ``Kubernetes``.

It also holds the workload helpers the ServiceEntry controller shares (``Workload``: a Pod
or WorkloadEntry as an endpoint template) and the ``Changes`` both controllers report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from types import MappingProxyType

from app.config.kube import EndpointSliceSpec, KubeServicePort, KubeServiceSpec, PodSpec, SliceEndpoint
from app.config.labels import NETWORK_LABEL
from app.config.objects import EMPTY_LABELS, ConfigEvent, ConfigObject, EventType, Kind
from app.model.service import (
    TRAFFIC_DISTRIBUTION_ANNOTATION,
    Endpoint,
    HealthStatus,
    Protocol,
    Registry,
    Resolution,
    Service,
    ServicePort,
    parse_protocol,
    protocol_from_port_name,
    traffic_distribution,
)
from app.registry.endpoint_index import EndpointIndex, ServiceKey
from app.registry.locality import NodeLocalities, ObjectKey, PodsByNode, locality_label

SOURCE_KUBERNETES = "Kubernetes"
EXPORT_TO_ANNOTATION = "networking.istio.io/exportTo"
SIDECAR_STATUS_ANNOTATION = "sidecar.istio.io/status"
TLS_MODE_LABEL = "security.istio.io/tlsMode"
TLS_ISTIO = "istio"
TLS_DISABLED = "disabled"

EMPTY_PORTS: Mapping[str, int] = MappingProxyType({})


@dataclass(slots=True)
class Changes:
    """What one event touched: Service keys to re-check, shards whose endpoints changed, Pods
    whose labels changed (or that came: the proxies in them take their labels)."""

    services: set[ServiceKey] = field(default_factory=set)
    endpoints: set[ServiceKey] = field(default_factory=set)
    relabeled: set[ObjectKey] = field(default_factory=set)
    # namespaces whose traffic-distribution annotation changed: their ServiceEntries read it too
    distribution_namespaces: set[str] = field(default_factory=set)

    def update(self, other: Changes) -> None:
        self.services |= other.services
        self.endpoints |= other.endpoints
        self.relabeled |= other.relabeled
        self.distribution_namespaces |= other.distribution_namespaces


# --- workloads: what a Pod or WorkloadEntry contributes to every endpoint it backs ---------


@dataclass(frozen=True, slots=True)
class Workload:
    """A Pod or WorkloadEntry reduced to what its endpoints carry."""

    name: str
    namespace: str
    address: str
    labels: Mapping[str, str]
    ports: Mapping[str, int]  # named ports: container ports by name, or WorkloadEntry ports
    locality: str = ""
    weight: int = 0
    network: str = ""
    service_account: str = ""
    tls_mode: str = TLS_DISABLED
    health: HealthStatus = HealthStatus.HEALTHY
    hostname: str = ""  # a Pod's DNS hostname, when it sets spec.subdomain
    subdomain: str = ""
    node_name: str = ""  # a Pod's spec.nodeName

    def endpoint(self, port: int, service_port_name: str, address: str | None = None) -> Endpoint:
        return Endpoint(
            address=self.address if address is None else address,
            port=port,
            service_port_name=service_port_name,
            labels=self.labels,
            locality=self.locality,
            weight=self.weight,
            health=self.health,
            network=self.network,
            service_account=self.service_account,
            namespace=self.namespace,
            workload_name=self.name,
            tls_mode=self.tls_mode,
            hostname=self.hostname,
            subdomain=self.subdomain,
        )


def spiffe_identity(trust_domain: str, namespace: str, service_account: str) -> str:
    return f"spiffe://{trust_domain}/ns/{namespace}/sa/{service_account}"


def pod_locality_node(obj: ConfigObject) -> str:
    """The Node a Pod takes its locality from: its ``spec.nodeName``, unless a locality label
    gives the Pod one of its own ("" then)."""
    spec: PodSpec = obj.spec
    return "" if locality_label(obj.meta.labels) else spec.node_name


def pod_tls_mode(obj: ConfigObject) -> str:
    """``istio`` when the Pod runs a sidecar (tlsMode label or injection status annotation)."""
    if obj.meta.labels.get(TLS_MODE_LABEL) == TLS_ISTIO or SIDECAR_STATUS_ANNOTATION in obj.meta.annotations:
        return TLS_ISTIO
    return TLS_DISABLED


def pod_workload(obj: ConfigObject, trust_domain: str, node_locality: str = "") -> Workload:
    """A Pod as an endpoint template; ``node_locality``: the locality of the Pod's Node
    (``pod_locality_node``), which its locality label overrides (istiod getPodLocality)."""
    spec: PodSpec = obj.spec
    labels = obj.meta.labels
    ports = {p.name: p.container_port for p in spec.container_ports if p.name}
    return Workload(
        name=obj.meta.name,
        namespace=obj.meta.namespace,
        address=spec.pod_ips[0] if spec.pod_ips else "",
        labels=labels,
        ports=MappingProxyType(ports) if ports else EMPTY_PORTS,
        locality=locality_label(labels) or node_locality,
        network=labels.get(NETWORK_LABEL, ""),
        service_account=spiffe_identity(trust_domain, obj.meta.namespace, spec.service_account)
        if spec.service_account
        else "",
        tls_mode=pod_tls_mode(obj),
        health=HealthStatus.HEALTHY if spec.ready else HealthStatus.UNHEALTHY,
        # istiod endpoint_builder.go: the hostname counts only with a subdomain, the Pod's name
        # when spec.hostname is unset
        hostname=(spec.hostname or obj.meta.name) if spec.subdomain else "",
        subdomain=spec.subdomain,
        node_name=spec.node_name,
    )


def pod_is_terminal(obj: ConfigObject) -> bool:
    spec: PodSpec = obj.spec
    return spec.phase in ("Succeeded", "Failed")


# --- Services ------------------------------------------------------------------------------


def kube_port_protocol(port: KubeServicePort) -> Protocol:
    """istiod's kube.ConvertProtocol: UDP, else appProtocol, else the port name convention."""
    if port.protocol.upper() == "UDP":
        return Protocol.UDP
    if port.app_protocol:
        return parse_protocol(port.app_protocol)
    return protocol_from_port_name(port.name)


def parse_export_to(annotations: Mapping[str, str]) -> frozenset[str]:
    raw = annotations.get(EXPORT_TO_ANNOTATION, "")
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


def service_hostname(name: str, namespace: str, domain_suffix: str) -> str:
    return f"{name}.{namespace}.svc.{domain_suffix}"


def convert_service(
    obj: ConfigObject, domain_suffix: str, namespace_annotations: Mapping[str, str] = EMPTY_LABELS
) -> Service:
    spec: KubeServiceSpec = obj.spec
    meta = obj.meta
    external = spec.type == "ExternalName" and bool(spec.external_name)
    if external:
        resolution = Resolution.DNS_LB
    elif spec.headless:
        resolution = Resolution.PASSTHROUGH
    else:
        resolution = Resolution.CLIENT_SIDE_LB
    return Service(
        hostname=service_hostname(meta.name, meta.namespace, domain_suffix),
        namespace=meta.namespace,
        ports=tuple(ServicePort(p.name, p.port, kube_port_protocol(p)) for p in spec.ports),
        registry=Registry.KUBERNETES,
        name=meta.name,
        addresses=tuple(ip for ip in spec.cluster_ips if ip and ip != "None"),
        resolution=resolution,
        mesh_external=external,
        export_to=parse_export_to(meta.annotations),
        labels=meta.labels,
        selector=spec.selector if spec.selector else None,
        creation_timestamp=meta.creation_timestamp,
        external_name=spec.external_name if external else "",
        publish_not_ready=spec.publish_not_ready,
        traffic_distribution=traffic_distribution(spec.traffic_distribution, meta.annotations, namespace_annotations),
    )


_NO_POD = Workload("", "", "", EMPTY_LABELS, EMPTY_PORTS)


def _slice_health(sep: SliceEndpoint, svc: Service) -> HealthStatus:
    """istiod endpointHealthStatus: a condition not set reads as true, so an endpoint not ready
    whose slice does not say it is not terminating is terminating (as the endpointslice
    mirroring controller writes an Endpoints' notReadyAddresses); it drains only for a Service
    with persistent sessions, while still serving."""
    if sep.ready:
        return HealthStatus.HEALTHY
    terminating = sep.terminating is not False
    if svc.supports_draining_endpoints and sep.serving is not False and terminating:
        return HealthStatus.DRAINING
    return HealthStatus.TERMINATING if terminating else HealthStatus.UNHEALTHY


def _slice_view(pod: Workload | None) -> tuple[object, ...] | None:
    """What ``KubeController._build_slice`` takes from a Pod for the endpoints that name it."""
    if pod is None:
        return None
    return (
        pod.labels, pod.locality, pod.network, pod.service_account, pod.tls_mode, pod.hostname, pod.subdomain,
        pod.node_name,
    )  # fmt: skip


def _merge_slices(
    parts: list[tuple[Endpoint, ...]], keys: list[frozenset[tuple[str, str]]]
) -> tuple[Endpoint, ...]:
    """Concatenate slices, one endpoint per (address, port name), a healthy one preferred.

    ``keys`` are each part's (address, port name) set, kept per slice, so the usual case (no
    endpoint in two slices) is a set union and a concatenation, not a loop in Python.
    """
    if len(parts) == 1 and len(keys[0]) == len(parts[0]):
        return parts[0]
    size = sum(len(p) for p in parts)
    if sum(len(k) for k in keys) == size and len(frozenset().union(*keys)) == size:
        return tuple(chain.from_iterable(parts))
    seen: dict[tuple[str, str], int] = {}
    out: list[Endpoint] = []
    for part in parts:
        for ep in part:
            k = (ep.address, ep.service_port_name)
            i = seen.get(k)
            if i is None:
                seen[k] = len(out)
                out.append(ep)
            elif out[i].health is not HealthStatus.HEALTHY and ep.health is HealthStatus.HEALTHY:
                out[i] = ep
    return tuple(out)


def _pod_refs(spec: EndpointSliceSpec) -> set[ObjectKey]:
    """The (namespace, name) of every Pod a slice's endpoints point at (as their targetRefs say)."""
    pods = (ep for ep in spec.endpoints if ep.target_kind == "Pod" and ep.target_name)
    return {(ep.target_namespace, ep.target_name) for ep in pods}


class KubeController:
    """Kubernetes objects in, Services and ``Kubernetes``-source endpoint shards out."""

    def __init__(
        self,
        index: EndpointIndex,
        *,
        domain_suffix: str = "cluster.local",
        trust_domain: str = "cluster.local",
        nodes: NodeLocalities | None = None,
    ) -> None:
        """``nodes``: the Nodes' localities, shared with the registry that records them."""
        self._index = index
        self.domain_suffix = domain_suffix
        self.trust_domain = trust_domain
        self._nodes = nodes if nodes is not None else NodeLocalities()
        self._service_objs: dict[ObjectKey, ConfigObject] = {}
        self._services: dict[ServiceKey, Service] = {}
        self._pod_workloads: dict[ObjectKey, Workload] = {}
        self._pods_by_node = PodsByNode()
        self._slices: dict[ObjectKey, ConfigObject] = {}
        self._slice_endpoints: dict[ObjectKey, tuple[Endpoint, ...]] = {}
        self._slice_keys: dict[ObjectKey, frozenset[tuple[str, str]]] = {}  # (address, port name)
        self._slices_by_service: dict[ObjectKey, set[str]] = {}  # (ns, service) -> slice names
        self._slices_by_pod: dict[ObjectKey, set[ObjectKey]] = {}  # (ns, pod) -> slice keys
        self._namespaces: dict[str, ConfigObject] = {}

    # --- reads -----------------------------------------------------------------------------

    def service(self, hostname: str, namespace: str) -> Service | None:
        return self._services.get((hostname, namespace))

    def services(self) -> Mapping[ServiceKey, Service]:
        return MappingProxyType(self._services)

    def service_object(self, namespace: str, name: str) -> ConfigObject | None:
        """The Kubernetes Service object of that name (its file or resourceVersion)."""
        return self._service_objs.get((namespace, name))

    def pod_workload(self, namespace: str, name: str) -> Workload | None:
        """The Pod of that name as its endpoints carry it (labels, locality); None if unknown."""
        return self._pod_workloads.get((namespace, name))

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        obj = self._namespaces.get(namespace)
        return obj.meta.labels if obj is not None else EMPTY_LABELS

    def hostname(self, name: str, namespace: str) -> str:
        return service_hostname(name, namespace, self.domain_suffix)

    def service_spec(self, hostname: str, namespace: str) -> KubeServiceSpec | None:
        """The parsed Kubernetes spec behind a Service (target ports are not in the model)."""
        svc = self._services.get((hostname, namespace))
        if svc is None:
            return None
        spec: KubeServiceSpec = self._service_objs[(namespace, svc.name)].spec
        return spec

    # --- events ----------------------------------------------------------------------------

    def apply(self, event: ConfigEvent) -> Changes:
        obj = event.obj
        deleted = event.type is EventType.DELETE
        if obj.kind is Kind.SERVICE:
            return self._on_service(obj, deleted)
        if obj.kind is Kind.ENDPOINT_SLICE:
            return self.apply_slices([event])
        if obj.kind is Kind.POD:
            return self._on_pod(obj, deleted)
        if obj.kind is Kind.NAMESPACE:
            before = self.namespace_annotations(obj.meta.name).get(TRAFFIC_DISTRIBUTION_ANNOTATION, "")
            if deleted:
                self._namespaces.pop(obj.meta.name, None)
            else:
                self._namespaces[obj.meta.name] = obj
            after = self.namespace_annotations(obj.meta.name).get(TRAFFIC_DISTRIBUTION_ANNOTATION, "")
            # the one annotation of a namespace its Services read: most namespace events change nothing
            return self._on_namespace(obj.meta.name) if after != before else Changes()
        return Changes()

    def namespace_annotations(self, namespace: str) -> Mapping[str, str]:
        obj = self._namespaces.get(namespace)
        return obj.meta.annotations if obj is not None else EMPTY_LABELS

    def _on_namespace(self, namespace: str) -> Changes:
        """Its Services, converted again: the namespace's traffic-distribution annotation is
        theirs when they set none (istiod's Namespaces-TrafficDistribution handler)."""
        changes = Changes(distribution_namespaces={namespace})
        annotations = self.namespace_annotations(namespace)
        for (ns, _), obj in self._service_objs.items():
            if ns != namespace:
                continue
            key = (self.hostname(obj.meta.name, ns), ns)
            new = convert_service(obj, self.domain_suffix, annotations)
            if self._services.get(key) != new:
                self._services[key] = new
                changes.services.add(key)
        return changes

    def _on_service(self, obj: ConfigObject, deleted: bool) -> Changes:
        okey = (obj.meta.namespace, obj.meta.name)
        key = (self.hostname(obj.meta.name, obj.meta.namespace), obj.meta.namespace)
        changes = Changes(services={key})
        old = self._services.get(key)
        if deleted:
            self._service_objs.pop(okey, None)
            self._services.pop(key, None)
        else:
            self._service_objs[okey] = obj
            new = convert_service(obj, self.domain_suffix, self.namespace_annotations(obj.meta.namespace))
            if old is not None and old == new:
                # the Service model is the same (an annotation, a targetPort): endpoints are too,
                # but the registry still re-reads what WorkloadEntries would select
                return changes
            self._services[key] = new
        # ports or type may have changed: rebuild every slice of this Service
        for slice_name in self._slices_by_service.get(okey, ()):
            self._build_slice((obj.meta.namespace, slice_name))
        self._refresh(okey, changes)
        return changes

    def apply_slices(self, events: Sequence[ConfigEvent]) -> Changes:
        """EndpointSlice events, each Service they belong to (or belonged to) merged again once,
        after all of them: merging all of a Service's slices after each of them grew with the
        square of its slices (a start-up's list of a 50,000-pod Service's 500)."""
        services: set[ObjectKey] = set()
        for event in events:
            services |= self._take_slice(event.obj, event.type is EventType.DELETE)
        changes = Changes()
        for okey in sorted(services):
            self._refresh(okey, changes)
        return changes

    def _take_slice(self, obj: ConfigObject, deleted: bool) -> set[ObjectKey]:
        """Record a slice (or its deletion); the Services whose endpoints it may change."""
        skey = (obj.meta.namespace, obj.meta.name)
        services: set[ObjectKey] = set()
        previous = self._slices.get(skey)
        if previous is not None:
            self._unlink_slice(skey, previous)
            if deleted or previous.spec.service_name != obj.spec.service_name:
                services.add((skey[0], previous.spec.service_name))
        if deleted:
            return services
        self._slices[skey] = obj
        self._link_slice(skey, obj)
        self._build_slice(skey)
        services.add((skey[0], obj.spec.service_name))
        return services

    def _on_pod(self, obj: ConfigObject, deleted: bool) -> Changes:
        pkey = (obj.meta.namespace, obj.meta.name)
        previous = self._pod_workloads.get(pkey)
        if deleted:
            self._pods_by_node.set(pkey, "")
            self._pod_workloads.pop(pkey, None)
            workload = None
        else:
            node = pod_locality_node(obj)
            self._pods_by_node.set(pkey, node)
            workload = pod_workload(obj, self.trust_domain, self._nodes.locality(node))
            self._pod_workloads[pkey] = workload
        changes = Changes()
        if workload is not None and (previous is None or previous.labels != workload.labels):
            # istiod PodCache.labelFilter / addPod: the proxy in it is updated (ProxyUpdate)
            changes.relabeled.add(pkey)
        if _slice_view(workload) == _slice_view(previous):
            # nothing its slices' endpoints take from it changed (its readiness, IP or ports are the
            # slices' own: a pod's every readiness flip would rebuild and merge all of them)
            return changes
        self._rebuild_pods([pkey], changes)
        return changes

    def relocate(self, node: str) -> Changes:
        """The pods on ``node`` that read its locality take the one it has now (its labels
        changed, or it came or went): their slices are rebuilt."""
        locality = self._nodes.locality(node)
        moved: list[ObjectKey] = []
        for pkey in self._pods_by_node.pods(node):
            workload = self._pod_workloads[pkey]
            if workload.locality != locality:
                self._pod_workloads[pkey] = replace(workload, locality=locality)
                moved.append(pkey)
        changes = Changes()
        self._rebuild_pods(moved, changes)
        return changes

    def _rebuild_pods(self, pods: list[ObjectKey], changes: Changes) -> None:
        """Rebuild every slice naming one of these pods, and refresh their Services."""
        services: set[ObjectKey] = set()
        for pkey in pods:
            for skey in self._slices_by_pod.get(pkey, ()):
                self._build_slice(skey)
                services.add((skey[0], self._slices[skey].spec.service_name))
        for okey in sorted(services):
            self._refresh(okey, changes)

    # --- slices ----------------------------------------------------------------------------

    def _link_slice(self, skey: ObjectKey, obj: ConfigObject) -> None:
        self._slices_by_service.setdefault((skey[0], obj.spec.service_name), set()).add(skey[1])
        for pkey in _pod_refs(obj.spec):
            self._slices_by_pod.setdefault(pkey, set()).add(skey)

    def _unlink_slice(self, skey: ObjectKey, obj: ConfigObject) -> None:
        spec: EndpointSliceSpec = obj.spec
        del self._slices[skey]
        self._slice_endpoints.pop(skey, None)
        self._slice_keys.pop(skey, None)
        okey = (skey[0], spec.service_name)
        names = self._slices_by_service.get(okey)
        if names is not None:
            names.discard(skey[1])
            if not names:
                del self._slices_by_service[okey]
        for pkey in _pod_refs(spec):
            refs = self._slices_by_pod.get(pkey)
            if refs is not None:
                refs.discard(skey)
                if not refs:
                    del self._slices_by_pod[pkey]

    def _build_slice(self, skey: ObjectKey) -> None:
        """(Re)build one slice's endpoints against its Service's ports and the Pods it names."""
        obj = self._slices[skey]
        spec: EndpointSliceSpec = obj.spec
        ns = skey[0]
        svc = self._services.get((self.hostname(spec.service_name, ns), ns))
        if svc is None or svc.external_name or spec.address_type == "FQDN":
            self._slice_endpoints[skey] = ()
            self._slice_keys[skey] = frozenset()
            return
        names = {p.name for p in svc.ports}
        ports = [p for p in spec.ports if p.name in names]
        out: list[Endpoint] = []
        for sep in spec.endpoints:
            health = _slice_health(sep, svc)
            named = sep.target_kind == "Pod"
            pod_name = sep.target_name if named else ""
            pod_ns = sep.target_namespace or ns
            # the Pod gives labels, identity, sidecar and locality (never the slice's zone:
            # istiod's EndpointBuilder reads none); the slice gives health. An endpoint naming a
            # Pod not known (yet) is left out until it comes, as istiod's getPod leaves it (by
            # the targetRef's own namespace: one that names none names no Pod)
            pod = self._pod_workloads.get((sep.target_namespace, pod_name)) if named else _NO_POD
            if pod is None:
                continue
            for address in sep.addresses:
                for p in ports:
                    out.append(
                        Endpoint(
                            address=address,
                            port=p.port,
                            service_port_name=p.name,
                            labels=pod.labels,
                            locality=pod.locality,
                            health=health,
                            network=pod.network,
                            service_account=pod.service_account,
                            namespace=pod_ns,
                            workload_name=pod_name,
                            tls_mode=pod.tls_mode,
                            hostname=pod.hostname,
                            subdomain=pod.subdomain,
                            node_name=pod.node_name,
                        )
                    )
        endpoints = tuple(out)
        self._slice_endpoints[skey] = endpoints
        self._slice_keys[skey] = frozenset((ep.address, ep.service_port_name) for ep in endpoints)

    def _refresh(self, okey: ObjectKey, changes: Changes) -> None:
        """Recompute one Service's ``Kubernetes`` endpoints into the index."""
        ns, name = okey
        hostname = self.hostname(name, ns)
        svc = self._services.get((hostname, ns))
        endpoints: tuple[Endpoint, ...]
        if svc is None:
            endpoints = ()
        elif svc.external_name:
            endpoints = tuple(
                Endpoint(address=svc.external_name, port=p.port, service_port_name=p.name, namespace=ns)
                for p in svc.ports
            )
        else:
            names = sorted(self._slices_by_service.get(okey, ()))
            parts = [self._slice_endpoints.get((ns, n), ()) for n in names]
            endpoints = _merge_slices(parts, [self._slice_keys.get((ns, n), frozenset()) for n in names])
        if self._index.update(hostname, ns, SOURCE_KUBERNETES, endpoints):
            changes.endpoints.add((hostname, ns))
