"""ServiceRegistry: the one entry point from config events to Services and endpoints.

It routes each ConfigEvent to the Kubernetes and ServiceEntry controllers, which share one
EndpointIndex, and answers with a precise RegistryDelta: which Services (the objects, not
their endpoints) changed, and which endpoint shards changed. An endpoint-only change gives
an empty ``services_changed`` so the push pipeline can take the EDS-only path.

When a Kubernetes Service and a ServiceEntry define the same (hostname, namespace), the
Kubernetes Service wins, as in istiod's PushContext (no "domain squatting"); endpoints from
both stay in the shard. It also keeps an IP -> services index for a proxy's own inbound
service targets.

An endpoint change that alters more than endpoints is reported as such, as istiod's
EndpointIndex does (endpointshards.go): a shard whose service accounts changed
(``identities_changed``: clusters carry them as SANs, so CDS must follow) and the workload IPs
whose own service targets changed (``target_ips``: those proxies' inbound listeners and
clusters, istiod ``ProxyUpdate``), and the Pods whose labels changed or that came
(``relabeled_pods``: the proxies in them take their labels from their Pod,
``with_workload_labels``, and are recomputed and pushed, istiod ``ProxyUpdate`` again).
``snapshot()`` hands the push pipeline an immutable view of every shard and of the service
targets, so generators never read live state.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from app.config.host import is_ip_address
from app.config.objects import ConfigEvent, ConfigObject, EventType, Kind
from app.model.proxy import Proxy
from app.model.service import Endpoint, Protocol, Resolution, Service, ServicePort
from app.registry.endpoint_index import EndpointIndex, ServiceKey
from app.registry.kube import Changes, KubeController
from app.registry.locality import NodeLocalities, ObjectKey
from app.registry.proxy_labels import pod_key_by_proxy, with_workload
from app.registry.serviceentry import BATCHED_KINDS, ServiceEntryController, WorkloadSelectingService

_KUBE_KINDS = frozenset({Kind.SERVICE, Kind.POD, Kind.ENDPOINT_SLICE, Kind.NAMESPACE})
_ENTRY_KINDS = frozenset({Kind.SERVICE_ENTRY, Kind.WORKLOAD_ENTRY, Kind.POD})


@dataclass(frozen=True, slots=True)
class RegistryDelta:
    """What one or more events changed, by (hostname, namespace); ``target_ips`` by workload IP;
    ``relabeled_pods`` the (namespace, name) of Pods whose labels changed or that came, whose
    proxies' labels are recomputed (istiod ProxyUpdate)."""

    services_changed: frozenset[ServiceKey] = frozenset()
    endpoints_changed: frozenset[ServiceKey] = frozenset()
    identities_changed: frozenset[ServiceKey] = frozenset()  # a subset of endpoints_changed
    target_ips: frozenset[str] = frozenset()
    relabeled_pods: frozenset[ObjectKey] = frozenset()

    @property
    def empty(self) -> bool:
        return not (self.services_changed or self.endpoints_changed or self.target_ips or self.relabeled_pods)

    @staticmethod
    def union(deltas: Iterable[RegistryDelta]) -> RegistryDelta:
        """Several merged, at once: merged one by one, each copied the sets grown so far
        (quadratic in the Pods of a start-up's list)."""
        parts = [delta for delta in deltas if not delta.empty]
        if len(parts) <= 1:
            return parts[0] if parts else EMPTY_DELTA
        return RegistryDelta(
            frozenset().union(*(d.services_changed for d in parts)),
            frozenset().union(*(d.endpoints_changed for d in parts)),
            frozenset().union(*(d.identities_changed for d in parts)),
            frozenset().union(*(d.target_ips for d in parts)),
            frozenset().union(*(d.relabeled_pods for d in parts)),
        )


EMPTY_DELTA = RegistryDelta()

ServiceTarget = tuple[Service, ServicePort, Endpoint]


@dataclass(frozen=True, slots=True)
class _Targets:
    """What a shard serves, for the IP index: (IP, endpoint port name, target port) triples (a
    change of them is a target change), their IPs, and those of them that are addresses (a DNS
    name is no proxy's)."""

    triples: frozenset[tuple[str, str, int]]
    ips: frozenset[str]
    addresses: frozenset[str]


_NO_TARGETS = _Targets(frozenset(), frozenset(), frozenset())


def _targets(endpoints: tuple[Endpoint, ...]) -> _Targets:
    triples = frozenset((ep.address, ep.service_port_name, ep.port) for ep in endpoints)
    ips = frozenset(ip for ip, _, _ in triples)
    return _Targets(triples, ips, frozenset(filter(is_ip_address, ips)))


@dataclass(frozen=True, slots=True)
class RegistrySnapshot:
    """The registry's endpoints and service targets at one moment; immutable, so a PushContext
    (and every cache key made from it) reads exactly what its push was built from."""

    shards: Mapping[ServiceKey, tuple[Endpoint, ...]]
    services: Mapping[ServiceKey, Service]
    keys_by_ip: Mapping[str, frozenset[ServiceKey]]

    def endpoints(self, hostname: str, namespace: str) -> tuple[Endpoint, ...]:
        return self.shards.get((hostname, namespace), ())

    def service_targets(self, ip: str) -> list[ServiceTarget]:
        """The (Service, port, endpoint) triples served at an IP: a proxy's own inbound targets."""
        out: list[ServiceTarget] = []
        for key in sorted(self.keys_by_ip.get(ip, ())):
            svc = self.services.get(key)
            if svc is None:
                continue
            for ep in self.endpoints(*key):
                if ep.address != ip:
                    continue
                port = svc.port_by_name(ep.service_port_name)
                if port is not None:
                    out.append((svc, port, ep))
        return out


@dataclass(slots=True)
class _IpMoves:
    """The IPs shards start or stop serving in one settle, applied to the IP index at once, one
    new set per IP (an IP in 256 shards copied its set once per shard), and by IP set: the
    shards holding one tuple (the hosts of a ServiceEntry) share theirs, so 256 shards of 4,096
    IPs are one group of moves, not 1M."""

    added: dict[int, tuple[frozenset[str], set[ServiceKey]]] = field(default_factory=dict)
    removed: dict[int, tuple[frozenset[str], set[ServiceKey]]] = field(default_factory=dict)

    def move(self, key: ServiceKey, old: frozenset[str], new: frozenset[str]) -> None:
        if old is new:
            return
        for ips, by_set in ((new - old if old else new, self.added), (old - new if new else old, self.removed)):
            if ips:
                by_set.setdefault(id(ips), (ips, set()))[1].add(key)

    def apply(self, keys_by_ip: dict[str, frozenset[ServiceKey]]) -> None:
        added = _by_ip(self.added)
        removed = _by_ip(self.removed)
        for ip in added.keys() | removed.keys():
            keys = (keys_by_ip.get(ip, frozenset()) - removed.get(ip, set())) | added.get(ip, set())
            if keys:
                keys_by_ip[ip] = frozenset(keys)
            else:
                keys_by_ip.pop(ip, None)


def _by_ip(groups: Mapping[int, tuple[frozenset[str], set[ServiceKey]]]) -> dict[str, set[ServiceKey]]:
    out: dict[str, set[ServiceKey]] = {}
    for ips, keys in groups.values():
        for ip in ips:
            found = out.get(ip)
            if found is None:
                out[ip] = set(keys)
            else:
                found |= keys
    return out


# runs of events ``apply_all`` takes as one; any other event is taken alone
_ENTRIES, _SLICES, _ALONE = "entries", "slices", "alone"


def _batch(event: ConfigEvent) -> str:
    kind = event.obj.kind
    if kind in BATCHED_KINDS:
        return _ENTRIES
    return _SLICES if kind is Kind.ENDPOINT_SLICE else _ALONE


class ServiceRegistry:
    """Kubernetes + ServiceEntry registries behind one synchronous, I/O-free interface."""

    def __init__(self, *, domain_suffix: str = "cluster.local", trust_domain: str = "cluster.local") -> None:
        self._index = EndpointIndex()
        self._nodes = NodeLocalities()
        self._kube = KubeController(
            self._index, domain_suffix=domain_suffix, trust_domain=trust_domain, nodes=self._nodes
        )
        self._entries = ServiceEntryController(
            self._index,
            trust_domain=trust_domain,
            nodes=self._nodes,
            namespace_annotations=self._kube.namespace_annotations,
        )
        self._services: dict[ServiceKey, Service] = {}
        self._sorted: tuple[Service, ...] | None = ()
        self._targets_by_key: dict[ServiceKey, _Targets] = {}
        self._keys_by_ip: dict[str, frozenset[ServiceKey]] = {}
        self._identities: dict[ServiceKey, frozenset[str]] = {}
        self._snapshot: RegistrySnapshot | None = None

    # --- events ----------------------------------------------------------------------------

    def apply(self, event: ConfigEvent) -> RegistryDelta:
        kind = event.obj.kind
        if kind is Kind.NODE:
            return self._on_node(event)
        if kind not in _KUBE_KINDS and kind not in _ENTRY_KINDS:
            return EMPTY_DELTA
        changes = Changes()
        if kind in _KUBE_KINDS:
            kube_changes = self._kube.apply(event)
            changes.update(kube_changes)
            for namespace in kube_changes.distribution_namespaces:
                changes.update(self._entries.convert_namespace(namespace))
            if kind is Kind.SERVICE:
                for key in changes.services:
                    selecting = self._workload_selecting_service(key)
                    changes.update(self._entries.set_kube_service(key, selecting))
        if kind in _ENTRY_KINDS:
            changes.update(self._entries.apply(event))
        return self._settle(changes)

    def apply_all(self, events: Iterable[ConfigEvent]) -> RegistryDelta:
        """The events in order; a run of ServiceEntry and WorkloadEntry events, or of
        EndpointSlice events, is taken as one (each host they touch made again once, after all
        of them: ``ServiceEntryController.apply_entries``, ``KubeController.apply_slices``)."""
        deltas: list[RegistryDelta] = []
        for batch, run in itertools.groupby(events, key=_batch):
            if batch == _ENTRIES:
                deltas.append(self._settle(self._entries.apply_entries(list(run))))
            elif batch == _SLICES:
                deltas.append(self._settle(self._kube.apply_slices(list(run))))
            else:
                deltas.extend(self.apply(event) for event in run)
        return RegistryDelta.union(deltas)

    def _on_node(self, event: ConfigEvent) -> RegistryDelta:
        """A Node's topology labels are the locality of the pods on it that have no locality
        label of their own: when they change, those pods' endpoints change (endpoints only)."""
        name = event.obj.meta.name
        labels = None if event.type is EventType.DELETE else event.obj.meta.labels
        if not self._nodes.set(name, labels):
            return EMPTY_DELTA
        changes = self._kube.relocate(name)
        changes.update(self._entries.relocate(name))
        return self._settle(changes)

    def _workload_selecting_service(self, key: ServiceKey) -> WorkloadSelectingService | None:
        """A Kubernetes Service as the WorkloadEntries it selects see it (istiod: EDS services only)."""
        svc = self._kube.service(*key)
        spec = self._kube.service_spec(*key)
        if (
            svc is None
            or spec is None
            or svc.selector is None
            or svc.resolution is not Resolution.CLIENT_SIDE_LB
        ):
            return None
        ports = tuple(
            (p.name, p.port, p.target_port)
            for p, sp in zip(spec.ports, svc.ports, strict=True)
            if sp.protocol is not Protocol.UDP
        )
        return WorkloadSelectingService(svc.hostname, svc.namespace, svc.selector, ports)

    def _settle(self, changes: Changes) -> RegistryDelta:
        services_changed: set[ServiceKey] = set()
        for key in changes.services:
            new = self._kube.service(*key) or self._entries.service(*key)
            old = self._services.get(key)
            if new is old or new == old:
                continue
            if new is None:
                del self._services[key]
            else:
                self._services[key] = new
            services_changed.add(key)
        if services_changed:
            self._sorted = None
        relabeled = frozenset(changes.relabeled)
        if not services_changed and not changes.endpoints:
            return RegistryDelta(relabeled_pods=relabeled) if relabeled else EMPTY_DELTA
        self._snapshot = None
        identities: set[ServiceKey] = set()
        target_ips: set[str] = set()
        moves = _IpMoves()
        # shards often hold one tuple (every host of a ServiceEntry): each is read once
        read: dict[int, tuple[tuple[Endpoint, ...], frozenset[str], _Targets]] = {}
        ips_seen: set[int] = set()  # target IP sets already in target_ips
        for key in changes.endpoints:
            endpoints = self._index.endpoints(*key)
            found = read.get(id(endpoints))
            if found is None or found[0] is not endpoints:
                accounts = frozenset(ep.service_account for ep in endpoints if ep.service_account)
                found = read[id(endpoints)] = (endpoints, accounts, _targets(endpoints))
            if self._reindex_identities(key, found[1]):
                identities.add(key)
            changed = self._reindex_targets(key, found[2], moves)
            if id(changed) not in ips_seen:
                ips_seen.add(id(changed))
                target_ips |= changed
        moves.apply(self._keys_by_ip)
        return RegistryDelta(
            frozenset(services_changed),
            frozenset(changes.endpoints),
            frozenset(identities),
            frozenset(target_ips),
            relabeled,
        )

    def _reindex_identities(self, key: ServiceKey, new: frozenset[str]) -> bool:
        """Record the shard's service accounts; True when they changed."""
        if new == self._identities.get(key, frozenset()):
            return False
        if new:
            self._identities[key] = new
        else:
            self._identities.pop(key, None)
        return True

    def _reindex_targets(self, key: ServiceKey, new: _Targets, moves: _IpMoves) -> frozenset[str]:
        """Record the IPs a shard serves (their moves in ``moves``); returns the addresses whose
        targets in it changed (all of a shard that comes or goes: the very set it holds)."""
        old = self._targets_by_key.get(key, _NO_TARGETS)
        if new.triples == old.triples:
            return frozenset()
        if not old.triples:
            changed = new.addresses
        elif not new.triples:
            changed = old.addresses
        else:
            changed = frozenset(ip for ip, _, _ in new.triples ^ old.triples) & (new.addresses | old.addresses)
        moves.move(key, old.ips, new.ips)
        if new.triples:
            self._targets_by_key[key] = new
        else:
            self._targets_by_key.pop(key, None)
        return changed

    # --- reads -----------------------------------------------------------------------------

    def config_object(self, kind: Kind, namespace: str, name: str) -> ConfigObject | None:
        """The Kubernetes Service or ServiceEntry object of that name, as last applied."""
        if kind is Kind.SERVICE:
            return self._kube.service_object(namespace, name)
        if kind is Kind.SERVICE_ENTRY:
            return self._entries.entry(namespace, name)
        return None

    def services(self) -> tuple[Service, ...]:
        """Every Service, ordered by (hostname, namespace); the same tuple until one changes."""
        if self._sorted is None:
            self._sorted = tuple(self._services[k] for k in sorted(self._services))
        return self._sorted

    def service(self, hostname: str, namespace: str) -> Service | None:
        return self._services.get((hostname, namespace))

    def endpoints(self, hostname: str, namespace: str) -> tuple[Endpoint, ...]:
        return self._index.endpoints(hostname, namespace)

    @property
    def endpoint_index(self) -> EndpointIndex:
        return self._index

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return self._kube.namespace_labels(namespace)

    def with_workload_labels(self, proxy: Proxy) -> Proxy:
        """The proxy with the labels and locality istiod gives it from the Pod it runs in, as the
        registry knows that Pod now (app/registry/proxy_labels.py: SetWorkloadLabels,
        setTopologyLabels); a proxy whose Pod is unknown keeps what its node sent."""
        key = pod_key_by_proxy(proxy)
        return with_workload(proxy, self._kube.pod_workload(*key) if key is not None else None)

    def snapshot(self) -> RegistrySnapshot:
        """Endpoints and service targets as of now; the same object until something changes."""
        if self._snapshot is None:
            self._snapshot = RegistrySnapshot(self._index.snapshot(), dict(self._services), dict(self._keys_by_ip))
        return self._snapshot

    def service_targets(self, ip: str) -> list[ServiceTarget]:
        """The (Service, port, endpoint) triples served at an IP, as of now."""
        return self.snapshot().service_targets(ip)
