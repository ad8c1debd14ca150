"""Environment: the ConfigStore and the ServiceRegistry fed from one event stream, and the
PushContext built from them (istiod's model.Environment). Pure and synchronous: the serving
pipeline and the offline config-dump share it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.config.model import ConfigEvent, Kind
from app.config.store import ConfigStore
from app.model.push_context import PushContext, PushInputs
from app.model.service import Resolution
from app.registry.endpoint_index import ServiceKey
from app.registry.registry import EMPTY_DELTA, RegistryDelta, ServiceRegistry

# kinds the ConfigStore keeps for the PushContext (the registry keeps the rest)
_STORE_KINDS = frozenset(
    {Kind.DESTINATION_RULE, Kind.VIRTUAL_SERVICE, Kind.SIDECAR, Kind.GATEWAY, Kind.MESH_CONFIG}
)

_CDS_ENDPOINTS = frozenset({Resolution.DNS_LB, Resolution.DNS_ROUND_ROBIN_LB})


@dataclass(frozen=True, slots=True)
class Change:
    """What a batch of events changed: config kinds (for the PushContext) and registry keys."""

    kinds: frozenset[Kind] = frozenset()
    registry: RegistryDelta = EMPTY_DELTA


class Environment:
    def __init__(self, *, domain_suffix: str = "cluster.local") -> None:
        self.domain_suffix = domain_suffix
        self.store = ConfigStore()
        self.registry = ServiceRegistry(domain_suffix=domain_suffix)

    def apply(self, events: Iterable[ConfigEvent]) -> Change:
        kinds: set[Kind] = set()
        delta = EMPTY_DELTA
        for event in events:
            kind = event.obj.kind
            if kind in _STORE_KINDS:
                if self.store.apply(event):
                    kinds.add(kind)
                continue
            d = self.registry.apply(event)
            if d.services_changed or self._endpoints_in_clusters(d.endpoints_changed):
                kinds.add(kind)
            delta = delta.merge(d)
        return Change(frozenset(kinds), delta)

    def _endpoints_in_clusters(self, keys: Iterable[ServiceKey]) -> bool:
        """DNS services carry their endpoints inside the cluster (CDS), so a change to them is a
        config change, not an EDS-only one (istiod does a full push for them too)."""
        for hostname, namespace in keys:
            svc = self.registry.service(hostname, namespace)
            if svc is not None and svc.resolution in _CDS_ENDPOINTS:
                return True
        return False

    def push_inputs(self) -> PushInputs:
        """What a PushContext is built from, as immutable tuples taken now: the build itself
        may then run off the event loop while events keep arriving."""
        return PushInputs(
            mesh=self.store.mesh,
            services=self.registry.services(),
            virtual_services=self.store.list(Kind.VIRTUAL_SERVICE),
            destination_rules=self.store.list(Kind.DESTINATION_RULE),
            sidecars=self.store.list(Kind.SIDECAR),
            gateways=self.store.list(Kind.GATEWAY),
            endpoints=self.registry,
            domain_suffix=self.domain_suffix,
        )

    def build_push_context(self, previous: PushContext | None, change: Change | None = None) -> PushContext:
        return PushContext.build(previous, self.push_inputs(), None if change is None else change.kinds)
