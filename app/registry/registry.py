"""ServiceRegistry: the one entry point from config events to Services and endpoints.

It routes each ConfigEvent to the Kubernetes and ServiceEntry controllers, which share one
EndpointIndex, and answers with a precise RegistryDelta: which Services (the objects, not
their endpoints) changed, and which endpoint shards changed. An endpoint-only change gives
an empty ``services_changed`` so the push pipeline can take the EDS-only path.

When a Kubernetes Service and a ServiceEntry define the same (hostname, namespace), the
Kubernetes Service wins, as in istiod's PushContext (no "domain squatting"); endpoints from
both stay in the shard. It also keeps an IP -> services index for a proxy's own inbound
service targets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from app.config.model import ConfigEvent, Kind
from app.model.service import Endpoint, Protocol, Resolution, Service, ServicePort
from app.registry.endpoint_index import EndpointIndex, ServiceKey
from app.registry.kube import Changes, KubeController
from app.registry.serviceentry import ServiceEntryController, WorkloadSelectingService

_KUBE_KINDS = frozenset({Kind.SERVICE, Kind.POD, Kind.ENDPOINT_SLICE, Kind.NAMESPACE})
_ENTRY_KINDS = frozenset({Kind.SERVICE_ENTRY, Kind.WORKLOAD_ENTRY, Kind.POD})


@dataclass(frozen=True, slots=True)
class RegistryDelta:
    """What one or more events changed, by (hostname, namespace)."""

    services_changed: frozenset[ServiceKey] = frozenset()
    endpoints_changed: frozenset[ServiceKey] = frozenset()

    def merge(self, other: RegistryDelta) -> RegistryDelta:
        if other.empty:
            return self
        if self.empty:
            return other
        return RegistryDelta(
            self.services_changed | other.services_changed,
            self.endpoints_changed | other.endpoints_changed,
        )

    @property
    def empty(self) -> bool:
        return not self.services_changed and not self.endpoints_changed


EMPTY_DELTA = RegistryDelta()


class ServiceRegistry:
    """Kubernetes + ServiceEntry registries behind one synchronous, I/O-free interface."""

    def __init__(self, *, domain_suffix: str = "cluster.local", trust_domain: str = "cluster.local") -> None:
        self._index = EndpointIndex()
        self._kube = KubeController(self._index, domain_suffix=domain_suffix, trust_domain=trust_domain)
        self._entries = ServiceEntryController(self._index, trust_domain=trust_domain)
        self._services: dict[ServiceKey, Service] = {}
        self._sorted: tuple[Service, ...] | None = ()
        self._ips_by_key: dict[ServiceKey, frozenset[str]] = {}
        self._keys_by_ip: dict[str, set[ServiceKey]] = {}
        self._ips_dirty: set[ServiceKey] = set()  # shards to re-read before the next IP lookup

    # --- events ----------------------------------------------------------------------------

    def apply(self, event: ConfigEvent) -> RegistryDelta:
        kind = event.obj.kind
        if kind not in _KUBE_KINDS and kind not in _ENTRY_KINDS:
            return EMPTY_DELTA
        changes = Changes()
        if kind in _KUBE_KINDS:
            changes.update(self._kube.apply(event))
            if kind is Kind.SERVICE:
                for key in changes.services:
                    selecting = self._workload_selecting_service(key)
                    changes.update(self._entries.set_kube_service(key, selecting))
        if kind in _ENTRY_KINDS:
            changes.update(self._entries.apply(event))
        return self._settle(changes)

    def apply_all(self, events: Iterable[ConfigEvent]) -> RegistryDelta:
        delta = EMPTY_DELTA
        for event in events:
            delta = delta.merge(self.apply(event))
        return delta

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
        self._ips_dirty |= changes.endpoints
        if not services_changed and not changes.endpoints:
            return EMPTY_DELTA
        return RegistryDelta(frozenset(services_changed), frozenset(changes.endpoints))

    def _reindex_ips(self, key: ServiceKey) -> None:
        new = frozenset(ep.address for ep in self._index.endpoints(*key))
        old = self._ips_by_key.get(key, frozenset())
        if new == old:
            return
        for ip in old - new:
            keys = self._keys_by_ip[ip]
            keys.discard(key)
            if not keys:
                del self._keys_by_ip[ip]
        for ip in new - old:
            self._keys_by_ip.setdefault(ip, set()).add(key)
        if new:
            self._ips_by_key[key] = new
        else:
            self._ips_by_key.pop(key, None)

    # --- reads -----------------------------------------------------------------------------

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

    def service_targets(self, ip: str) -> list[tuple[Service, ServicePort, Endpoint]]:
        """The (Service, port, endpoint) triples served at an IP: a proxy's own inbound targets."""
        if self._ips_dirty:
            for key in self._ips_dirty:
                self._reindex_ips(key)
            self._ips_dirty.clear()
        out: list[tuple[Service, ServicePort, Endpoint]] = []
        for key in sorted(self._keys_by_ip.get(ip, ())):
            svc = self._services.get(key)
            if svc is None:
                continue
            for ep in self._index.endpoints(*key):
                if ep.address != ip:
                    continue
                port = svc.port_by_name(ep.service_port_name)
                if port is not None:
                    out.append((svc, port, ep))
        return out
