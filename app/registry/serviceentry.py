"""ServiceEntryController: ServiceEntries, WorkloadEntries and selected Pods as Services + endpoints.

It owns istiod's serviceentry controller conversion (pilot/pkg/serviceregistry/serviceentry):
one Service per ServiceEntry host; endpoints from the inline ``endpoints``, from the
WorkloadEntries and Pods its ``workloadSelector`` picks in its namespace, or, for a DNS
entry with neither, the host itself. When several ServiceEntries in one namespace name the
same host, they make one Service: the oldest defines it and compatible newer ones add their
ports (``merge_same_host_services``); all of them contribute endpoints.

It also owns the cross-controller case: a Kubernetes Service with a selector selects
WorkloadEntries of its namespace (``WorkloadSelectingService``, fed by the registry); those
endpoints go into the Kubernetes Service's shard under their own source.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from types import MappingProxyType

from app.api import networking as net
from app.config.host import is_ip_address
from app.config.labels import selector_matches
from app.config.objects import EMPTY_LABELS, ConfigEvent, ConfigObject, EventType, Kind, ObjectMeta
from app.model.service import (
    Endpoint,
    HealthStatus,
    Registry,
    Resolution,
    Service,
    ServicePort,
    parse_protocol,
    traffic_distribution,
)
from app.registry.endpoint_index import EndpointIndex, ServiceKey
from app.registry.kube import (
    EMPTY_PORTS,
    TLS_DISABLED,
    TLS_ISTIO,
    TLS_MODE_LABEL,
    Changes,
    Workload,
    pod_is_terminal,
    pod_locality_node,
    pod_workload,
    spiffe_identity,
)
from app.registry.locality import NodeLocalities, ObjectKey, PodsByNode, locality_label

SOURCE_EXTERNAL = "External"
SOURCE_K8S_SELECTED = "External/k8s-selected"
UNIX_PREFIX = "unix://"
AUTO_REGISTRATION_GROUP = "istio.io/autoRegistrationGroup"  # annotation of an auto-registered WorkloadEntry
WORKLOAD_NAME_LABEL = "service.istio.io/workload-name"

_RESOLUTIONS: Mapping[int, Resolution] = {
    net.ServiceEntry.NONE: Resolution.PASSTHROUGH,
    net.ServiceEntry.STATIC: Resolution.CLIENT_SIDE_LB,
    net.ServiceEntry.DNS: Resolution.DNS_LB,
    net.ServiceEntry.DNS_ROUND_ROBIN: Resolution.DNS_ROUND_ROBIN_LB,
    # the model has no dynamic-DNS resolution yet; STRICT_DNS is the nearest behaviour
    net.ServiceEntry.DYNAMIC_DNS: Resolution.DNS_LB,
}
_DNS_RESOLUTIONS = frozenset({net.ServiceEntry.DNS, net.ServiceEntry.DNS_ROUND_ROBIN})


@dataclass(frozen=True, slots=True)
class WorkloadSelectingService:
    """A selector-bearing, client-side-LB Kubernetes Service: it also selects WorkloadEntries.

    ``ports`` are (service port name, service port, targetPort as a number or a name).
    """

    hostname: str
    namespace: str
    selector: Mapping[str, str]
    ports: tuple[tuple[str, int, int | str], ...]


AUTOALLOCATE_LABEL = "networking.istio.io/enable-autoallocate-ip"


def _allocated(obj: ConfigObject) -> Mapping[str, tuple[str, ...]]:
    """The addresses istiod's allocation controller recorded for each host, when the entry may
    use them (ip_autoallocation.go shouldV2AutoAllocateIP: not resolution NONE, no addresses of
    its own, not opted out by label); the last of each IP family, as convertServices keeps."""
    se: net.ServiceEntry = obj.spec
    if not obj.status or se.resolution == net.ServiceEntry.NONE or len(se.addresses):
        return {}
    if obj.meta.labels.get(AUTOALLOCATE_LABEL, "").lower() == "false":
        return {}
    by_host: dict[str, dict[bool, str]] = {}
    for host, address in obj.status:
        by_host.setdefault(host, {})[":" in address] = address
    return {host: tuple(found[v6] for v6 in (False, True) if v6 in found) for host, found in by_host.items()}


def convert_service_entry(
    obj: ConfigObject, namespace_annotations: Mapping[str, str] = EMPTY_LABELS
) -> tuple[Service, ...]:
    """One Service per host (istiod's convertServices)."""
    se: net.ServiceEntry = obj.spec
    meta = obj.meta
    allocated = _allocated(obj)
    ports = tuple(ServicePort(p.name, p.number, parse_protocol(p.protocol)) for p in se.ports)
    resolution = _RESOLUTIONS.get(se.resolution, Resolution.PASSTHROUGH)
    overrides = tuple((p.number, p.target_port) for p in se.ports if p.target_port) if (
        resolution is Resolution.PASSTHROUGH
    ) else ()
    selector = (
        MappingProxyType(dict(se.workload_selector.labels)) if se.HasField("workload_selector") else None
    )
    return tuple(
        Service(
            hostname=host,
            namespace=meta.namespace,
            ports=ports,
            registry=Registry.EXTERNAL,
            name=meta.name,
            addresses=tuple(se.addresses),
            resolution=resolution,
            passthrough_target_ports=overrides,
            mesh_external=se.location == net.ServiceEntry.MESH_EXTERNAL,
            export_to=frozenset(se.export_to),
            labels=meta.labels,
            selector=selector,
            service_accounts=tuple(se.subject_alt_names),
            creation_timestamp=meta.creation_timestamp,
            auto_addresses=allocated.get(host, ()),
            traffic_distribution=traffic_distribution("", meta.annotations, namespace_annotations),
        )
        for host in se.hosts
    )


def merge_same_host_services(services: Sequence[Service]) -> Service:
    """One Service for a host that several ServiceEntries of one namespace name (oldest first).

    istiod keeps a Service per ServiceEntry and every SidecarScope folds them together
    (sidecar.go appendSidecarServices): the oldest stays as it is, so its resolution, addresses,
    location and name win, and a newer one adds the port numbers it lacks when the two could be
    one service (canMergeServices: same resolution, labels, selector and exportTo). A newer
    one that differs is ignored; its endpoints still join the host's shard."""
    oldest = services[0]
    ports = {p.port: p for p in reversed(oldest.ports)}  # a number's first port, as port_by_number
    added: list[ServicePort] = []
    for svc in services[1:]:
        if (
            svc.resolution == oldest.resolution
            and svc.labels == oldest.labels
            and svc.selector == oldest.selector
            and svc.export_to == oldest.export_to
        ):
            for port in svc.ports:
                if port.port not in ports:
                    ports[port.port] = port
                    added.append(port)
    # the ports gathered in one pass: merging one entry at a time copied the growing list for each
    # (2,000 entries of one host took 80 s to load)
    return replace(oldest, ports=oldest.ports + tuple(added)) if added else oldest


def workload_entry_name(meta: ObjectMeta) -> str:
    """The workload name a WorkloadEntry's endpoints report (istiod labels.WorkloadNameFromWorkloadEntry):
    its auto-registration group, else its service.istio.io/workload-name label, else its name."""
    if AUTO_REGISTRATION_GROUP in meta.annotations:
        return meta.annotations[AUTO_REGISTRATION_GROUP]
    return meta.labels.get(WORKLOAD_NAME_LABEL, meta.name)


def workload_entry_workload(we: net.WorkloadEntry, name: str, namespace: str, trust_domain: str) -> Workload:
    """A WorkloadEntry (standalone, or inline in a ServiceEntry) as an endpoint template."""
    labels = MappingProxyType(dict(we.labels))
    tls_label = labels.get(TLS_MODE_LABEL)
    if tls_label is not None:
        tls_mode = TLS_ISTIO if tls_label == TLS_ISTIO else TLS_DISABLED
    else:  # istiod: a workload with an identity is assumed to run a sidecar
        tls_mode = TLS_ISTIO if we.service_account else TLS_DISABLED
    locality = we.locality or locality_label(labels)  # istiod convertWorkloadEntryToWorkloadInstance
    return Workload(
        name=name,
        namespace=namespace,
        address=we.address,
        labels=labels,
        ports=MappingProxyType(dict(we.ports)) if we.ports else EMPTY_PORTS,
        locality=locality,
        weight=we.weight,
        network=we.network,
        service_account=spiffe_identity(trust_domain, namespace, we.service_account)
        if we.service_account
        else "",
        tls_mode=tls_mode,
        health=HealthStatus.UNKNOWN,  # istiod convertWorkloadEntryToWorkloadInstance sets none
    )


# the kinds ``apply_entries`` takes, a run of them at a time
BATCHED_KINDS = frozenset({Kind.SERVICE_ENTRY, Kind.WORKLOAD_ENTRY})


@dataclass(slots=True)
class _Dirty:
    """What events taken together leave to refresh, once each."""

    services: set[ServiceKey] = field(default_factory=set)  # hosts whose entries changed
    endpoints: set[ServiceKey] = field(default_factory=set)  # hosts whose selected workloads changed
    kube: set[ServiceKey] = field(default_factory=set)  # Kubernetes Services selecting WorkloadEntries


class ServiceEntryController:
    """Istio ServiceEntry / WorkloadEntry objects (and Pods) in; Services and endpoint shards out."""

    def __init__(
        self,
        index: EndpointIndex,
        *,
        trust_domain: str = "cluster.local",
        nodes: NodeLocalities | None = None,
        namespace_annotations: Callable[[str], Mapping[str, str]] = lambda _: EMPTY_LABELS,
    ) -> None:
        """``nodes``: the Nodes' localities (its pods'), shared with the registry that records them;
        ``namespace_annotations``: a namespace's (its traffic distribution is its entries')."""
        self._index = index
        self._namespace_annotations = namespace_annotations
        self.trust_domain = trust_domain
        self._nodes = nodes if nodes is not None else NodeLocalities()
        self._pods_by_node = PodsByNode()
        self._entries: dict[ObjectKey, ConfigObject] = {}
        self._entry_services: dict[ObjectKey, tuple[Service, ...]] = {}
        self._entries_by_host: dict[ServiceKey, set[ObjectKey]] = {}
        self._services: dict[ServiceKey, Service] = {}
        self._selecting_entries: dict[str, dict[str, Mapping[str, str]]] = {}  # ns -> SE name -> selector
        self._workload_entries: dict[str, dict[str, Workload]] = {}  # ns -> name -> workload
        self._pods: dict[str, dict[str, Workload]] = {}  # ns -> name -> workload (has an IP)
        self._kube: dict[ServiceKey, WorkloadSelectingService] = {}
        self._kube_by_namespace: dict[str, set[ServiceKey]] = {}

    # --- reads -----------------------------------------------------------------------------

    def service(self, hostname: str, namespace: str) -> Service | None:
        return self._services.get((hostname, namespace))

    def services(self) -> Mapping[ServiceKey, Service]:
        return MappingProxyType(self._services)

    def entry(self, namespace: str, name: str) -> ConfigObject | None:
        """The ServiceEntry object of that name (its file or resourceVersion)."""
        return self._entries.get((namespace, name))

    # --- events ----------------------------------------------------------------------------

    def apply(self, event: ConfigEvent) -> Changes:
        obj = event.obj
        deleted = event.type is EventType.DELETE
        if obj.kind in BATCHED_KINDS:
            return self.apply_entries([event])
        ns, name = obj.meta.namespace, obj.meta.name
        if obj.kind is Kind.POD:
            pod, node = None, ""
            if not deleted and not pod_is_terminal(obj):
                node = pod_locality_node(obj)
                pod = pod_workload(obj, self.trust_domain, self._nodes.locality(node))
                if not pod.address:
                    pod, node = None, ""  # not scheduled yet: nothing to route to
            self._pods_by_node.set((ns, name), node)
            return self._on_workload(self._pods, ns, name, pod, kube_selectable=False)
        return Changes()

    def convert_namespace(self, namespace: str) -> Changes:
        """The namespace's annotations changed: its entries whose Services read them differently
        (their traffic distribution) are taken again."""
        changes = Changes()
        annotations = self._namespace_annotations(namespace)
        for (ns, _), obj in list(self._entries.items()):
            if ns == namespace and convert_service_entry(obj, annotations) != self._entry_services[(ns, obj.meta.name)]:
                changes.update(self.apply_entries([ConfigEvent(EventType.UPDATE, obj)]))
        return changes

    def relocate(self, node: str) -> Changes:
        """The pods on ``node`` that read its locality take the one it has now."""
        locality = self._nodes.locality(node)
        changes = Changes()
        for ns, name in self._pods_by_node.pods(node):
            pod = self._pods[ns][name]
            if pod.locality != locality:
                changes.update(
                    self._on_workload(self._pods, ns, name, replace(pod, locality=locality), kube_selectable=False)
                )
        return changes

    def set_kube_service(self, key: ServiceKey, selecting: WorkloadSelectingService | None) -> Changes:
        """Record (or forget) a Kubernetes Service that selects WorkloadEntries."""
        changes = Changes()
        previous = self._kube.get(key)
        if previous == selecting:
            return changes
        if selecting is None:
            del self._kube[key]
            keys = self._kube_by_namespace[key[1]]
            keys.discard(key)
            if not keys:
                del self._kube_by_namespace[key[1]]
        else:
            self._kube[key] = selecting
            self._kube_by_namespace.setdefault(key[1], set()).add(key)
        self._refresh_kube_selected(key, changes)
        return changes

    def apply_entries(self, events: Sequence[ConfigEvent]) -> Changes:
        """ServiceEntry and WorkloadEntry events, each host they touch refreshed once, after all
        of them: a refresh reads every entry of its host, or every workload its entries select, so
        refreshing after each of 2,000 entries of one host read 2,000,000 of them (a 15 s load),
        and after each of 2,000 WorkloadEntries that one entry selects, as many (10 s)."""
        dirty = _Dirty()
        for event in events:
            obj, deleted = event.obj, event.type is EventType.DELETE
            if obj.kind is Kind.SERVICE_ENTRY:
                dirty.services |= self._take_entry(obj, deleted)
            else:
                ns = obj.meta.namespace
                we_name = workload_entry_name(obj.meta)
                workload = None if deleted else workload_entry_workload(obj.spec, we_name, ns, self.trust_domain)
                self._take_workload(self._workload_entries, ns, obj.meta.name, workload, dirty, kube_selectable=True)
        return self._refresh(dirty)

    def _refresh(self, dirty: _Dirty) -> Changes:
        changes = Changes()
        shared: dict[ObjectKey, tuple[Endpoint, ...]] = {}
        for hkey in sorted(dirty.services):
            if not self._entries_by_host.get(hkey):
                self._entries_by_host.pop(hkey, None)
            self._refresh_service(hkey, changes)
        for hkey in sorted(dirty.services | dirty.endpoints):
            self._refresh_external(hkey, changes, shared)
        for kkey in sorted(dirty.kube):
            self._refresh_kube_selected(kkey, changes)
        return changes

    def _take_entry(self, obj: ConfigObject, deleted: bool) -> set[ServiceKey]:
        """Record an entry (or its deletion); the hosts it named before and names now."""
        ekey = (obj.meta.namespace, obj.meta.name)
        ns = obj.meta.namespace
        hosts: set[ServiceKey] = {s.key for s in self._entry_services.pop(ekey, ())}
        for hkey in hosts:
            self._entries_by_host[hkey].discard(ekey)
        selecting = self._selecting_entries.get(ns)
        if selecting is not None:
            selecting.pop(obj.meta.name, None)
            if not selecting:
                del self._selecting_entries[ns]
        if deleted:
            self._entries.pop(ekey, None)
        else:
            self._entries[ekey] = obj
            services = convert_service_entry(obj, self._namespace_annotations(ns))
            self._entry_services[ekey] = services
            for svc in services:
                hosts.add(svc.key)
                self._entries_by_host.setdefault(svc.key, set()).add(ekey)
            se: net.ServiceEntry = obj.spec
            if se.HasField("workload_selector") and not se.endpoints:
                selector = MappingProxyType(dict(se.workload_selector.labels))
                self._selecting_entries.setdefault(ns, {})[obj.meta.name] = selector
        return hosts

    def _on_workload(
        self,
        store: dict[str, dict[str, Workload]],
        ns: str,
        name: str,
        workload: Workload | None,
        *,
        kube_selectable: bool,
    ) -> Changes:
        dirty = _Dirty()
        self._take_workload(store, ns, name, workload, dirty, kube_selectable=kube_selectable)
        return self._refresh(dirty)

    def _take_workload(
        self,
        store: dict[str, dict[str, Workload]],
        ns: str,
        name: str,
        workload: Workload | None,
        dirty: _Dirty,
        *,
        kube_selectable: bool,
    ) -> None:
        """Record a workload (None: gone); ``dirty`` gets the hosts whose endpoints it may change."""
        by_name = store.get(ns)
        previous = by_name.get(name) if by_name is not None else None
        if previous == workload:
            return
        if workload is None:
            if by_name is not None:
                by_name.pop(name, None)
                if not by_name:
                    del store[ns]
        else:
            store.setdefault(ns, {})[name] = workload
        label_sets = [w.labels for w in (previous, workload) if w is not None]
        for se_name, selector in self._selecting_entries.get(ns, {}).items():
            if any(selector_matches(selector, labels) for labels in label_sets):
                dirty.endpoints.update(s.key for s in self._entry_services.get((ns, se_name), ()))
        if kube_selectable:
            for kkey in self._kube_by_namespace.get(ns, ()):
                selector = self._kube[kkey].selector
                if any(labels and selector_matches(selector, labels) for labels in label_sets):
                    dirty.kube.add(kkey)

    # --- recomputation -----------------------------------------------------------------------

    def _ordered_entries(self, hkey: ServiceKey) -> list[ConfigObject]:
        entries = [self._entries[e] for e in self._entries_by_host.get(hkey, ())]
        entries.sort(key=ConfigObject.creation_order)
        return entries

    def _refresh_service(self, hkey: ServiceKey, changes: Changes) -> None:
        """The Service of a host in a namespace, from every ServiceEntry naming it there."""
        changes.services.add(hkey)
        services = [
            svc
            for entry in self._ordered_entries(hkey)
            for svc in self._entry_services[(entry.meta.namespace, entry.meta.name)]
            if svc.key == hkey
        ]
        if services:
            self._services[hkey] = merge_same_host_services(services)
        else:
            self._services.pop(hkey, None)

    def _refresh_external(
        self, hkey: ServiceKey, changes: Changes, shared: dict[ObjectKey, tuple[Endpoint, ...]]
    ) -> None:
        """The endpoints of a host from the entries naming it. ``shared``: the endpoints of the
        entries already converted in this pass, by entry. An entry's workload endpoints are the
        same for each of its hosts, so they are converted once and every host of a lone entry
        holds the one tuple: an entry of 256 hosts and 4,096 endpoints (within its CRD's bounds)
        was 1M Endpoints built on the event loop in 13 s, and held."""
        parts: list[tuple[Endpoint, ...]] = []
        for entry in self._ordered_entries(hkey):
            ekey = (entry.meta.namespace, entry.meta.name)
            found = shared.get(ekey)
            if found is None:
                found = tuple(self._entry_endpoints(entry, hkey[0]))
                if not _named_after_host(entry.spec):
                    shared[ekey] = found
            parts.append(found)
        out = parts[0] if len(parts) == 1 else tuple(chain.from_iterable(parts))
        if self._index.update(hkey[0], hkey[1], SOURCE_EXTERNAL, out):
            changes.endpoints.add(hkey)

    def _entry_endpoints(self, obj: ConfigObject, hostname: str) -> list[Endpoint]:
        """The endpoints of an entry for one of its hosts: its inline endpoints, or the
        workloads it selects, else (DNS resolution) the host itself."""
        se: net.ServiceEntry = obj.spec
        ns = obj.meta.namespace
        out: list[Endpoint] = []
        if se.endpoints:
            # istiod convertServiceEntryToInstances: inline endpoint i is the workload NAME-i
            inline = [
                workload_entry_workload(we, f"{obj.meta.name}-{i}", ns, self.trust_domain)
                for i, we in enumerate(se.endpoints)
            ]
            for port in se.ports:
                for w in inline:
                    out.append(_entry_port_endpoint(w, port))
        elif se.HasField("workload_selector"):
            selector = se.workload_selector.labels
            for store in (self._workload_entries, self._pods):
                by_name = store.get(ns, {})
                matched = [
                    by_name[n] for n in sorted(by_name) if selector_matches(selector, by_name[n].labels)
                ]
                for port in se.ports:
                    for w in matched:
                        out.append(_entry_port_endpoint(w, port))
        elif se.resolution in _DNS_RESOLUTIONS:
            for port in se.ports:
                out.append(
                    Endpoint(
                        address=hostname,
                        port=port.target_port or port.number,
                        service_port_name=port.name,
                        namespace=ns,
                        workload_name=obj.meta.name,  # istiod convertServiceEntryToInstances: the entry
                        health=HealthStatus.UNKNOWN,  # istiod convertServiceEntryToInstances sets none
                    )
                )
        return out

    def _refresh_kube_selected(self, key: ServiceKey, changes: Changes) -> None:
        """WorkloadEntries a Kubernetes Service's selector picks, on that Service's ports."""
        out: list[Endpoint] = []
        selecting = self._kube.get(key)
        if selecting is not None:
            by_name = self._workload_entries.get(key[1], {})
            for name in sorted(by_name):
                w = by_name[name]
                if (
                    not w.labels
                    or not is_ip_address(w.address)
                    or not selector_matches(selecting.selector, w.labels)
                ):
                    continue
                for port_name, number, target in selecting.ports:
                    if isinstance(target, str):  # a named targetPort must be a named WorkloadEntry port
                        port = w.ports.get(target, 0)
                        if not port:
                            continue
                    else:
                        port = w.ports.get(port_name, 0) or target or number
                    out.append(w.endpoint(port, port_name))
        if self._index.update(key[0], key[1], SOURCE_K8S_SELECTED, tuple(out)):
            changes.endpoints.add(key)


def _named_after_host(se: net.ServiceEntry) -> bool:
    """Whether an entry's endpoints are its hosts themselves (DNS resolution, no workloads)."""
    return not se.endpoints and not se.HasField("workload_selector") and se.resolution in _DNS_RESOLUTIONS


def _entry_port_endpoint(w: Workload, port: net.ServicePort) -> Endpoint:
    """istiod's priority: unix address (port 0) > workload's named port > targetPort > number."""
    if w.address.startswith(UNIX_PREFIX):
        return w.endpoint(0, port.name, w.address.removeprefix(UNIX_PREFIX))
    return w.endpoint(w.ports.get(port.name, 0) or port.target_port or port.number, port.name)
