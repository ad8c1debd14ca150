"""PushContext: an immutable snapshot of everything generators read, with istiod's indexes.

``PushContext.build(previous, inputs, changed)`` recomputes only the indexes the changed config
keys can affect and reuses the rest from ``previous`` by reference; inside a rebuilt index,
unchanged DestinationRules and VirtualServices keep their objects. SidecarScopes are memoised
per (namespace, Sidecar): a build carries over every scope the change cannot affect, patches the
DestinationRules of scopes a DestinationRule change touches, and rebuilds the rest eagerly.
The memo is written only on the event loop (lazily, for a scope no build knew); a build, which
may run in a worker thread, reads the copy ``scopes()`` took on the loop. Lookups need no
locks: the snapshot is published by swapping one reference. Endpoints come from an immutable
registry snapshot; ``with_endpoints`` is the EDS fast path (same indexes and scopes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from app.config.host import matches, resolve_short_name
from app.config.kube import SecretSpec
from app.config.labels import selector_matches
from app.config.mesh import MeshConfig
from app.config.objects import ConfigKey, ConfigObject, Kind
from app.model.authn import PeerAuthentications
from app.model.authz import AuthorizationPolicies, RequestAuthentications
from app.model.destination_rule import DestinationRuleIndex
from app.model.envoy_filter import EnvoyFilters
from app.model.features import Features
from app.model.jwks import HYBRID, with_fetched_keys
from app.model.proxy import Proxy
from app.model.service import Endpoint, Service, ServicePort
from app.model.service_index import ServiceIndex
from app.model.sidecar_scope import SidecarScope, build_sidecar_scope
from app.model.telemetry import Telemetries
from app.model.virtual_service import MESH_GATEWAY, ResolvedVirtualService, VirtualServiceIndex


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
    peer_authentications: tuple[ConfigObject, ...] = ()
    authorization_policies: tuple[ConfigObject, ...] = ()
    request_authentications: tuple[ConfigObject, ...] = ()
    telemetries: tuple[ConfigObject, ...] = ()
    envoy_filters: tuple[ConfigObject, ...] = ()
    secrets: tuple[ConfigObject, ...] = ()
    domain_suffix: str = "cluster.local"  # for short names in VirtualService / DestinationRule hosts
    features: Features = field(default_factory=Features)
    jwks: Mapping[str, str] = field(default_factory=dict)  # jwksUri -> the keys the control plane fetched


ScopeKey = tuple[str, str | None]  # (proxy namespace, "ns/name" of the Sidecar or None)


def _default_export(values: Iterable[str]) -> frozenset[str]:
    return frozenset(values) or frozenset({"*"})


def _build_service_index(inputs: PushInputs) -> ServiceIndex:
    return ServiceIndex.build(inputs.services, _default_export(inputs.mesh.default_service_export_to))


def _build_vs_index(inputs: PushInputs, previous: VirtualServiceIndex | None = None) -> VirtualServiceIndex:
    export_to = _default_export(inputs.mesh.default_virtual_service_export_to)
    return VirtualServiceIndex.build(inputs.virtual_services, export_to, inputs.domain_suffix, previous)


def _build_dr_index(inputs: PushInputs, previous: DestinationRuleIndex | None = None) -> DestinationRuleIndex:
    mesh = inputs.mesh
    export_to = _default_export(mesh.default_destination_rule_export_to)
    return DestinationRuleIndex.build(
        inputs.destination_rules, mesh.root_namespace, export_to, inputs.domain_suffix, previous
    )


def _build_authn(inputs: PushInputs) -> PeerAuthentications:
    return PeerAuthentications.build(inputs.peer_authentications, inputs.mesh.root_namespace)


def _build_authz(inputs: PushInputs) -> AuthorizationPolicies:
    return AuthorizationPolicies.build(inputs.authorization_policies, inputs.mesh.root_namespace)


def _build_jwt(inputs: PushInputs) -> RequestAuthentications:
    mode = inputs.features.jwks_fetch_mode
    hosts = {service.hostname for service in inputs.services} if mode == HYBRID else set()
    policies = with_fetched_keys(inputs.request_authentications, inputs.jwks, mode, hosts.__contains__)
    return RequestAuthentications.build(policies, inputs.mesh.root_namespace)


def _build_telemetries(inputs: PushInputs) -> Telemetries:
    return Telemetries.build(inputs.telemetries, inputs.mesh)


def _build_envoy_filters(inputs: PushInputs) -> EnvoyFilters:
    return EnvoyFilters.build(inputs.envoy_filters, inputs.mesh.root_namespace)


def _sidecars_by_namespace(sidecars: Iterable[ConfigObject]) -> dict[str, tuple[ConfigObject, ...]]:
    by_ns: dict[str, list[ConfigObject]] = {}
    for obj in sidecars:
        by_ns.setdefault(obj.meta.namespace, []).append(obj)
    return {ns: tuple(sorted(v, key=_sidecar_order)) for ns, v in by_ns.items()}


def _secrets(inputs: PushInputs) -> Mapping[tuple[str, str], SecretSpec]:
    return MappingProxyType({(obj.meta.namespace, obj.meta.name): obj.spec for obj in inputs.secrets})


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
    peer_authentications: PeerAuthentications
    authorization_policies: AuthorizationPolicies
    request_authentications: RequestAuthentications
    telemetries: Telemetries
    envoy_filters: EnvoyFilters
    secrets: Mapping[tuple[str, str], SecretSpec]  # by (namespace, name)
    inputs: PushInputs = field(compare=False, repr=False)
    _scopes: dict[ScopeKey, SidecarScope] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(
        cls,
        previous: PushContext | None,
        inputs: PushInputs,
        changed: frozenset[ConfigKey] | None = None,
        prior_scopes: Mapping[ScopeKey, SidecarScope] | None = None,
    ) -> PushContext:
        """A new snapshot; with ``previous`` and ``changed``, unaffected indexes and scopes are
        reused. ``prior_scopes`` is ``previous.scopes()`` taken on the event loop (read here
        instead of the live memo when the build runs in another thread)."""
        mesh = inputs.mesh
        if previous is None or changed is None or previous.mesh != mesh:
            return cls._build_all(inputs, 1 if previous is None else previous.version + 1)
        kinds = {key.kind for key in changed}
        if Kind.MESH_CONFIG in kinds:
            return cls._build_all(inputs, previous.version + 1)
        services = previous.service_index
        if inputs.services is not previous.inputs.services and inputs.services != previous.inputs.services:
            services = _build_service_index(inputs)
        vs = previous.virtual_service_index
        if Kind.VIRTUAL_SERVICE in kinds:
            vs = _build_vs_index(inputs, vs)
        dr = previous.destination_rule_index
        if Kind.DESTINATION_RULE in kinds:
            dr = _build_dr_index(inputs, dr)
        sidecars = previous.sidecars_by_namespace
        if Kind.SIDECAR in kinds:
            sidecars = _sidecars_by_namespace(inputs.sidecars)
        push = cls(
            mesh=mesh,
            version=previous.version + 1,
            service_index=services,
            virtual_service_index=vs,
            destination_rule_index=dr,
            sidecars_by_namespace=sidecars,
            gateways=inputs.gateways if Kind.GATEWAY in kinds else previous.gateways,
            endpoint_view=inputs.endpoints,
            peer_authentications=(
                _build_authn(inputs) if Kind.PEER_AUTHENTICATION in kinds else previous.peer_authentications
            ),
            authorization_policies=(
                _build_authz(inputs) if Kind.AUTHORIZATION_POLICY in kinds else previous.authorization_policies
            ),
            request_authentications=(
                _build_jwt(inputs) if Kind.REQUEST_AUTHENTICATION in kinds else previous.request_authentications
            ),
            telemetries=_build_telemetries(inputs) if Kind.TELEMETRY in kinds else previous.telemetries,
            envoy_filters=_build_envoy_filters(inputs) if Kind.ENVOY_FILTER in kinds else previous.envoy_filters,
            secrets=_secrets(inputs) if Kind.SECRET in kinds else previous.secrets,
            inputs=inputs,
        )
        scopes = previous._scopes if prior_scopes is None else prior_scopes
        push._scopes.update(_carry_scopes(previous, push, changed, scopes))
        return push

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
            peer_authentications=_build_authn(inputs),
            authorization_policies=_build_authz(inputs),
            request_authentications=_build_jwt(inputs),
            telemetries=_build_telemetries(inputs),
            envoy_filters=_build_envoy_filters(inputs),
            secrets=_secrets(inputs),
            inputs=inputs,
        )

    def with_endpoints(self, endpoints: EndpointView) -> PushContext:
        """The EDS fast path: a new version reading ``endpoints``, sharing every index and the
        scope memo (scopes do not depend on endpoints)."""
        inputs = dataclasses.replace(self.inputs, endpoints=endpoints)
        return dataclasses.replace(self, version=self.version + 1, endpoint_view=endpoints, inputs=inputs)

    @property
    def features(self) -> Features:
        return self.inputs.features

    def scopes(self) -> dict[ScopeKey, SidecarScope]:
        """A copy of the scope memo; take it on the event loop, where the memo is written."""
        return dict(self._scopes)

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
            scope = self._build_scope(sidecar, proxy.namespace)
            self._scopes[key] = scope
        return scope

    def _build_scope(self, sidecar: ConfigObject | None, namespace: str) -> SidecarScope:
        mode = MeshConfig.OutboundTrafficPolicy.Mode.Name(self.mesh.outbound_traffic_policy.mode)
        return build_sidecar_scope(
            sidecar, namespace, self.service_index, self.virtual_service_index, self.destination_rule_index, mode
        )

    def _sidecar_named(self, namespaced_name: str) -> ConfigObject | None:
        namespace = namespaced_name.split("/", 1)[0]
        found = self.sidecars_by_namespace.get(namespace, ())
        return next((o for o in found if o.namespaced_name == namespaced_name), None)

    def endpoints(self, hostname: str, namespace: str) -> tuple[Endpoint, ...]:
        return self.endpoint_view.endpoints(hostname, namespace)

    def service_targets(self, ip: str) -> list[tuple[Service, ServicePort, Endpoint]]:
        return self.endpoint_view.service_targets(ip)


# --- carrying SidecarScopes over a change ------------------------------------------------------


def _carry_scopes(
    previous: PushContext, push: PushContext, changed: frozenset[ConfigKey], scopes: Mapping[ScopeKey, SidecarScope]
) -> dict[ScopeKey, SidecarScope]:
    """The scopes of ``push``: each previous scope the change cannot affect as it was, patched
    when only its DestinationRules changed, rebuilt otherwise (istiod rebuilds all of them)."""
    impact = _Impact.of(previous, push, changed)
    out: dict[ScopeKey, SidecarScope] = {}
    for key, scope in scopes.items():
        if not impact.rebuilds(scope):
            out[key] = impact.patch_rules(scope, push.destination_rule_index)
            continue
        namespace, sidecar_name = key
        sidecar = None if sidecar_name is None else push._sidecar_named(sidecar_name)
        if sidecar_name is None or sidecar is not None:
            out[key] = push._build_scope(sidecar, namespace)
    return out


@dataclass(frozen=True, slots=True)
class _Impact:
    """What a set of changed keys can do to a SidecarScope."""

    sidecar_namespaces: frozenset[str]  # a Sidecar there changed: its scopes are rebuilt
    all_sidecars: bool  # a root-namespace Sidecar changed: the fallback of every namespace
    services: tuple[tuple[str, Service | None, Service | None], ...]  # (hostname, old, new)
    virtual_services: tuple[tuple[ResolvedVirtualService | None, ResolvedVirtualService | None], ...]
    rule_hosts: tuple[str, ...]  # hosts (FQDN, maybe wildcard) of changed DestinationRules, old and new

    @classmethod
    def of(cls, previous: PushContext, push: PushContext, changed: frozenset[ConfigKey]) -> _Impact:
        root = push.mesh.root_namespace
        sidecar_ns = frozenset(k.namespace for k in changed if k.kind is Kind.SIDECAR)
        services = []
        for k in changed:
            if k.kind is Kind.SERVICE:
                old = previous.service_index.service(k.name, k.namespace)
                new = push.service_index.service(k.name, k.namespace)
                if old is not new:  # the same object: only its endpoints' identities changed
                    services.append((k.name, old, new))
        vs_keys = {k for k in changed if k.kind is Kind.VIRTUAL_SERVICE}
        # a delegate's change is its roots' (they hold its routes merged)
        named = {(k.namespace, k.name) for k in vs_keys}
        vs_keys |= previous.virtual_service_index.roots_of(named) | push.virtual_service_index.roots_of(named)
        old_vs = _by_key(previous.virtual_service_index.all(), vs_keys)
        new_vs = _by_key(push.virtual_service_index.all(), vs_keys)
        pairs = tuple((old_vs.get(k), new_vs.get(k)) for k in vs_keys if old_vs.get(k) is not new_vs.get(k))
        dr_keys = {k for k in changed if k.kind is Kind.DESTINATION_RULE}
        suffix = push.inputs.domain_suffix
        rule_hosts = tuple(
            sorted(
                {
                    resolve_short_name(obj.spec.host, obj.meta.namespace, suffix)
                    for objs in (previous.inputs.destination_rules, push.inputs.destination_rules)
                    for obj in objs
                    if obj.key in dr_keys
                }
            )
        )
        return cls(sidecar_ns, root in sidecar_ns, tuple(services), pairs, rule_hosts)

    def rebuilds(self, scope: SidecarScope) -> bool:
        if self.all_sidecars or scope.namespace in self.sidecar_namespaces:
            return True
        for hostname, old, new in self.services:
            if hostname in scope.services_by_host or _may_import(scope, old) or _may_import(scope, new):
                return True
        for old_vs, new_vs in self.virtual_services:
            if old_vs is not None and any(vs is old_vs for vs in scope.virtual_services):
                return True
            if new_vs is not None and _may_select(scope, new_vs):
                return True
        return False

    def patch_rules(self, scope: SidecarScope, rules: DestinationRuleIndex) -> SidecarScope:
        """``scope`` with the DestinationRules of the hosts a changed rule names looked up again;
        ``scope`` itself when none of them changed."""
        if not self.rule_hosts:
            return scope
        patched = dict(scope.destination_rules)
        for hostname, svc in scope.services_by_host.items():
            if any(matches(hostname, h) for h in self.rule_hosts):
                found = tuple(rules.rules_for(scope.namespace, hostname, svc.namespace))
                if found:
                    patched[hostname] = found
                else:
                    patched.pop(hostname, None)
        if patched == scope.destination_rules:
            return scope
        return scope.with_rules(patched)


def _by_key(items: Iterable[ResolvedVirtualService], keys: set[ConfigKey]) -> dict[ConfigKey, ResolvedVirtualService]:
    return {vs.obj.key: vs for vs in items if vs.obj.key in keys}


def _may_import(scope: SidecarScope, svc: Service | None) -> bool:
    """Whether a scope could import ``svc`` (conservative: any egress listener host namespace
    that names its namespace or ``*``); the exact answer needs a rebuild."""
    if svc is None:
        return False
    return any(svc.namespace in listener.hosts or "*" in listener.hosts for listener in scope.egress_listeners)


def _may_select(scope: SidecarScope, vs: ResolvedVirtualService) -> bool:
    """Whether a scope could select a mesh VirtualService (conservative: a host match on any
    egress listener, ignoring exportTo)."""
    if MESH_GATEWAY not in vs.gateways:
        return False
    for listener in scope.egress_listeners:
        for ns in (vs.obj.meta.namespace, "*"):
            if any(matches(vh, h) for vh in vs.spec.hosts for h in listener.hosts.get(ns, ())):
                return True
    return False
