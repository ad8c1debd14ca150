"""PushContext: an immutable snapshot of everything generators read, with istiod's indexes.

``PushContext.build(previous, inputs, changed)`` recomputes only the indexes the changed kinds
can affect and reuses the rest from ``previous``. Lookups need no locks: the snapshot is
published by swapping one reference. SidecarScopes are computed lazily per (namespace, Sidecar)
and memoised in the snapshot; a memo entry depends only on the snapshot's own indexes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from app.config.labels import selector_matches
from app.config.mesh import MeshConfig
from app.config.model import ConfigObject, Kind
from app.model.destination_rule import DestinationRuleIndex
from app.model.proxy import Proxy
from app.model.service import Endpoint, Service, ServicePort
from app.model.service_index import ServiceIndex
from app.model.sidecar_scope import SidecarScope, build_sidecar_scope
from app.model.virtual_service import VirtualServiceIndex


class EndpointView(Protocol):
    """What the snapshot needs from the registry's live endpoint state."""

    def endpoints(self, hostname: str, namespace: str) -> tuple[Endpoint, ...]: ...

    def service_targets(self, ip: str) -> list[tuple[Service, ServicePort, Endpoint]]: ...


@dataclass(frozen=True, slots=True)
class PushInputs:
    mesh: MeshConfig
    services: tuple[Service, ...]
    virtual_services: tuple[ConfigObject, ...]
    destination_rules: tuple[ConfigObject, ...]
    sidecars: tuple[ConfigObject, ...]
    gateways: tuple[ConfigObject, ...]
    endpoints: EndpointView
    domain_suffix: str = "cluster.local"  # for short names in VirtualService / DestinationRule hosts


# which indexes a change of each kind invalidates; None in `changed` means all
_SERVICE_KINDS = frozenset({Kind.SERVICE, Kind.SERVICE_ENTRY, Kind.WORKLOAD_ENTRY, Kind.POD, Kind.NAMESPACE})


def _default_export(values: Iterable[str]) -> frozenset[str]:
    return frozenset(values) or frozenset({"*"})


def _build_service_index(inputs: PushInputs) -> ServiceIndex:
    return ServiceIndex.build(inputs.services, _default_export(inputs.mesh.default_service_export_to))


def _build_vs_index(inputs: PushInputs) -> VirtualServiceIndex:
    export_to = _default_export(inputs.mesh.default_virtual_service_export_to)
    return VirtualServiceIndex.build(inputs.virtual_services, export_to, inputs.domain_suffix)


def _build_dr_index(inputs: PushInputs) -> DestinationRuleIndex:
    mesh = inputs.mesh
    export_to = _default_export(mesh.default_destination_rule_export_to)
    return DestinationRuleIndex.build(inputs.destination_rules, mesh.root_namespace, export_to, inputs.domain_suffix)


def _sidecars_by_namespace(sidecars: Iterable[ConfigObject]) -> dict[str, tuple[ConfigObject, ...]]:
    by_ns: dict[str, list[ConfigObject]] = {}
    for obj in sidecars:
        by_ns.setdefault(obj.meta.namespace, []).append(obj)
    return {ns: tuple(sorted(v, key=_sidecar_order)) for ns, v in by_ns.items()}


def _sidecar_order(obj: ConfigObject) -> tuple[bool, str, str]:
    # selector Sidecars first, then oldest first (istiod sorts them so)
    return (not obj.spec.HasField("workload_selector"), obj.meta.creation_timestamp, obj.meta.name)


@dataclass(frozen=True, slots=True)
class PushContext:
    mesh: MeshConfig
    version: int
    service_index: ServiceIndex
    virtual_service_index: VirtualServiceIndex
    destination_rule_index: DestinationRuleIndex
    sidecars_by_namespace: Mapping[str, tuple[ConfigObject, ...]]
    gateways: tuple[ConfigObject, ...]
    endpoint_view: EndpointView
    _scopes: dict[tuple[str, str | None], SidecarScope] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(
        cls, previous: PushContext | None, inputs: PushInputs, changed: frozenset[Kind] | None = None
    ) -> PushContext:
        """A new snapshot; with ``previous`` and ``changed``, unaffected indexes are reused."""
        mesh = inputs.mesh
        if previous is None or changed is None or Kind.MESH_CONFIG in changed or previous.mesh != mesh:
            return cls._build_all(inputs, 1 if previous is None else previous.version + 1)
        services = previous.service_index
        if changed & _SERVICE_KINDS:
            services = _build_service_index(inputs)
        vs = previous.virtual_service_index
        if Kind.VIRTUAL_SERVICE in changed:
            vs = _build_vs_index(inputs)
        dr = previous.destination_rule_index
        if Kind.DESTINATION_RULE in changed:
            dr = _build_dr_index(inputs)
        sidecars = previous.sidecars_by_namespace
        if Kind.SIDECAR in changed:
            sidecars = _sidecars_by_namespace(inputs.sidecars)
        scopes_valid = not changed & (_SERVICE_KINDS | {Kind.VIRTUAL_SERVICE, Kind.DESTINATION_RULE, Kind.SIDECAR})
        return cls(
            mesh=mesh,
            version=previous.version + 1,
            service_index=services,
            virtual_service_index=vs,
            destination_rule_index=dr,
            sidecars_by_namespace=sidecars,
            gateways=inputs.gateways if Kind.GATEWAY in changed else previous.gateways,
            endpoint_view=inputs.endpoints,
            _scopes=dict(previous._scopes) if scopes_valid else {},
        )

    @classmethod
    def _build_all(cls, inputs: PushInputs, version: int) -> PushContext:
        return cls(
            mesh=inputs.mesh,
            version=version,
            service_index=_build_service_index(inputs),
            virtual_service_index=_build_vs_index(inputs),
            destination_rule_index=_build_dr_index(inputs),
            sidecars_by_namespace=_sidecars_by_namespace(inputs.sidecars),
            gateways=inputs.gateways,
            endpoint_view=inputs.endpoints,
        )

    # --- lookups ---------------------------------------------------------------------

    def sidecar_for(self, proxy: Proxy) -> ConfigObject | None:
        """The Sidecar resource that governs this proxy, or None for the default scope.

        Gateways always get the default scope. A sidecar uses its namespace's Sidecar whose
        workloadSelector matches its labels, else the namespace's Sidecar without selector,
        else the root namespace's Sidecar without selector."""
        if proxy.is_gateway:
            return None
        for obj in self.sidecars_by_namespace.get(proxy.namespace, ()):
            selector = obj.spec.workload_selector.labels if obj.spec.HasField("workload_selector") else None
            if selector is None or selector_matches(selector, proxy.labels):
                return obj
        for obj in self.sidecars_by_namespace.get(self.mesh.root_namespace, ()):
            if not obj.spec.HasField("workload_selector"):
                return obj
        return None

    def sidecar_scope(self, proxy: Proxy) -> SidecarScope:
        sidecar = self.sidecar_for(proxy)
        key = (proxy.namespace, sidecar.namespaced_name if sidecar is not None else None)
        scope = self._scopes.get(key)
        if scope is None:
            mode = MeshConfig.OutboundTrafficPolicy.Mode.Name(self.mesh.outbound_traffic_policy.mode)
            scope = build_sidecar_scope(
                sidecar,
                proxy.namespace,
                self.service_index,
                self.virtual_service_index,
                self.destination_rule_index,
                mode,
            )
            self._scopes[key] = scope
        return scope

    def endpoints(self, hostname: str, namespace: str) -> tuple[Endpoint, ...]:
        return self.endpoint_view.endpoints(hostname, namespace)

    def service_targets(self, ip: str) -> list[tuple[Service, ServicePort, Endpoint]]:
        return self.endpoint_view.service_targets(ip)
