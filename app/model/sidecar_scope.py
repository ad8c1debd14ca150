"""SidecarScope: what one proxy's namespace (or workload) can see, precomputed.

Built from a Sidecar resource, the root namespace's selector-less Sidecar, or the default
(every service visible to the namespace). Egress ``hosts`` are ``ns/host`` with ``.`` (the
scope's namespace), ``*`` (any namespace) and ``~`` (none). Services a selected VirtualService
routes to are added even when ``hosts`` did not name them, as istiod does
(pilot/pkg/model/sidecar.go collectImportedServices), except through HTTP routes meant only
for other source namespaces.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.api import networking as net
from app.config.host import matches, subset_of
from app.config.objects import ConfigKey, ConfigObject, Kind
from app.model.destination_rule import ConsolidatedDestinationRule, DestinationRuleIndex, select_for_proxy
from app.model.proxy import Proxy
from app.model.service import Registry, Resolution, Service, TrafficDistribution
from app.model.service_index import ServiceIndex
from app.model.virtual_service import (
    MESH_GATEWAY,
    ResolvedVirtualService,
    VirtualServiceIndex,
    VirtualServicesByHost,
    destination_hosts,
)

ANY_NAMESPACE = "*"
logger = logging.getLogger(__name__)
ALLOW_ANY = "ALLOW_ANY"
REGISTRY_ONLY = "REGISTRY_ONLY"


@dataclass(frozen=True, slots=True)
class EgressListener:
    port: net.SidecarPort | None
    bind: str
    capture_mode: str  # DEFAULT, IPTABLES, NONE
    hosts: Mapping[str, tuple[str, ...]]  # namespace (or "*") -> hosts
    services: tuple[Service, ...]
    virtual_services: tuple[ResolvedVirtualService, ...]
    virtual_services_by_host: VirtualServicesByHost  # the same, for per-service lookups
    # its services without an address that pass traffic through (headless): outbound listeners
    # may bind each of their endpoints' addresses, except the proxy's own (what makes a proxy's
    # first IP part of what its scope gives it; ``translate.listener.plan`` decides)
    headless_services: tuple[Service, ...] = ()


@dataclass(frozen=True, slots=True)
class SidecarScope:
    name: str | None  # "ns/name" of the Sidecar used; None for the default scope
    namespace: str  # the namespace the scope was computed for
    sidecar: net.Sidecar | None
    egress_listeners: tuple[EgressListener, ...]
    services: tuple[Service, ...]  # one per hostname
    services_by_host: Mapping[str, Service]  # the same services by hostname
    virtual_services: tuple[ResolvedVirtualService, ...]
    destination_rules: Mapping[str, tuple[ConsolidatedDestinationRule, ...]]  # by service hostname
    outbound_traffic_policy: str  # ALLOW_ANY or REGISTRY_ONLY
    # the config keys this scope was computed from (istiod SidecarScope.configDependencies):
    # its Sidecar, its services as (Service, namespace, hostname), its VirtualServices and the
    # DestinationRules merged into its rules
    dependencies: frozenset[ConfigKey] = frozenset()
    # whether its config reads the proxy's labels: a workloadSelector DestinationRule, a rule
    # with locality failoverPriority, a VirtualService match on sourceLabels (computed once per
    # scope, which later snapshots carry over while its inputs are unchanged)
    reads_labels: bool = False
    # the mesh's root namespace: its config of the kinds that apply across namespaces reaches
    # every scope (istiod clusterScopedKnownConfigTypes)
    root_namespace: str = ""

    def depends_on(self, key: ConfigKey) -> bool:
        """Whether a change of ``key`` can change what this scope gives a proxy (istiod
        DependsOnConfig); kinds a scope does not track always can. A DNS name change is its
        service's."""
        if key.kind is Kind.DNS_NAME:
            key = ConfigKey(Kind.SERVICE, key.namespace, key.name)
        if key.kind in _TRACKED_KINDS:
            return key in self.dependencies
        if key.kind in _NAMESPACE_OR_ROOT_KINDS:
            return key.namespace in (self.namespace, self.root_namespace)
        return True

    def with_rules(self, rules: Mapping[str, tuple[ConsolidatedDestinationRule, ...]]) -> SidecarScope:
        """This scope with other DestinationRules (and the dependencies that follow)."""
        deps = {k for k in self.dependencies if k.kind is not Kind.DESTINATION_RULE}
        deps.update(_rule_keys(rules))
        return dataclasses.replace(
            self,
            destination_rules=rules,
            dependencies=frozenset(deps),
            reads_labels=_reads_labels(rules, self.virtual_services, self.services),
        )

    def destination_rule(self, proxy: Proxy, service: Service) -> ConsolidatedDestinationRule | None:
        """The outbound rule for ``service`` as this proxy sees it (workloadSelector rules first)."""
        return select_for_proxy(self.destination_rules.get(service.hostname, ()), self.namespace, proxy.labels)

    def inbound_destination_rule(self, service: Service) -> ConsolidatedDestinationRule | None:
        """The rule the proxy's inbound cluster for ``service`` takes its connection pool from:
        the last one without a workloadSelector (istiod SidecarScope.DestinationRule with
        TrafficDirectionInbound honours no selector: a Sidecar is the per-workload setting)."""
        catch_all = None
        for cdr in self.destination_rules.get(service.hostname, ()):
            if cdr.selector is None:
                catch_all = cdr
        return catch_all


_TRACKED_KINDS = frozenset({Kind.SERVICE, Kind.VIRTUAL_SERVICE, Kind.DESTINATION_RULE, Kind.SIDECAR})
# what a scope depends on when in its own namespace or the root namespace (istiod
# clusterScopedKnownConfigTypes; pilotfish keeps the others of that list always depended on)
_NAMESPACE_OR_ROOT_KINDS = frozenset({Kind.TELEMETRY, Kind.ENVOY_FILTER})


def _rule_keys(rules: Mapping[str, tuple[ConsolidatedDestinationRule, ...]]) -> set[ConfigKey]:
    return {obj.key for found in rules.values() for cdr in found for obj in cdr.objects}


@dataclass(frozen=True, slots=True)
class EgressHosts:
    """An egress listener's ``hosts``, by namespace (or ``*``): what it imports, and what a
    ``~``-prefixed entry excludes from that namespace."""

    imported: Mapping[str, tuple[str, ...]]
    excluded: Mapping[str, tuple[str, ...]]

    def excludes(self, namespace: str, hostname: str) -> bool:
        """istiod hostClassification.Excluded: the host is a subset of an excluded one, in its
        own namespace's entries or the ``*`` ones."""
        return any(
            hostname == ex or subset_of(hostname, ex)
            for ns in (namespace, ANY_NAMESPACE)
            for ex in self.excluded.get(ns, ())
        )


def parse_egress_hosts(hosts: Sequence[str], config_namespace: str, where: str = "") -> EgressHosts:
    """Egress hosts as istiod reads them (sidecar.go, IstioEgressListenerWrapper): ``ns/dnsName``
    with exactly one ``/``, an entry that is not is skipped and logged (the rest of the Sidecar
    stays in force); ``.`` is the Sidecar's namespace; a ``~`` before the namespace excludes the
    host instead (``~/host``: from every namespace)."""
    imported: dict[str, list[str]] = {}
    excluded: dict[str, list[str]] = {}
    for i, text in enumerate(hosts):
        if text.count("/") != 1:
            logger.warning(
                "Sidecar %s: egress host %s (%r) skipped: it must be of the form namespace/dnsName", where, i, text
            )
            continue
        ns, _, host = text.partition("/")
        target = imported
        if ns.startswith("~"):
            ns, target = ns[1:] or ANY_NAMESPACE, excluded
        if ns == ".":
            ns = config_namespace
        target.setdefault(ns, []).append(host)
    return EgressHosts(
        {k: tuple(v) for k, v in imported.items()}, {k: tuple(v) for k, v in excluded.items()}
    )


def _only_port(svc: Service, port: int) -> Service | None:
    p = svc.port_by_number(port)
    return None if p is None else dataclasses.replace(svc, ports=(p,))


def _matching_service(hosts: tuple[str, ...], svc: Service, listener_port: int) -> Service | None:
    for h in hosts:
        if svc.hostname == h or subset_of(svc.hostname, h):
            return _only_port(svc, listener_port) if listener_port else svc
    return None


def _select_services(
    candidates: Sequence[Service], egress: EgressHosts, config_namespace: str, listener_port: int
) -> list[Service]:
    hosts = egress.imported
    imported: list[Service] = []
    for svc in candidates:
        if egress.excludes(svc.namespace, svc.hostname):
            continue
        found = None
        if svc.namespace in hosts:
            found = _matching_service(hosts[svc.namespace], svc, listener_port)
        if found is None and ANY_NAMESPACE in hosts:
            found = _matching_service(hosts[ANY_NAMESPACE], svc, listener_port)
        if found is not None:
            imported.append(found)
    # one service per hostname: the scope's own namespace first, then a Kubernetes Service
    # over a ServiceEntry, then the first seen
    chosen: dict[str, Service] = {}
    for svc in imported:
        best = chosen.get(svc.hostname)
        if best is None or _preferred(svc, best, config_namespace):
            chosen[svc.hostname] = svc
    return [s for s in imported if chosen[s.hostname] is s]


def _preferred(svc: Service, current: Service, config_namespace: str) -> bool:
    if current.namespace == config_namespace:
        return False
    if svc.namespace == config_namespace:
        return True
    return svc.registry is Registry.KUBERNETES and current.registry is not Registry.KUBERNETES


def _vs_matches_hosts(vs: ResolvedVirtualService, hosts: tuple[str, ...], egress: EgressHosts) -> bool:
    # either side may be a wildcard: a VirtualService for *.ns.svc.cluster.local is selected by
    # an egress host naming one service in it, and the other way round (istiod VSMatches); a
    # host of it that is excluded does not select it, another may (SelectVirtualServices)
    namespace = vs.obj.meta.namespace
    return any(
        matches(vh, h) and not egress.excludes(namespace, vh) for vh in vs.spec.hosts for h in hosts
    )


def _select_virtual_services(
    candidates: Sequence[ResolvedVirtualService], egress: EgressHosts
) -> list[ResolvedVirtualService]:
    hosts = egress.imported
    out: list[ResolvedVirtualService] = []
    for vs in candidates:
        ns_hosts = hosts.get(vs.obj.meta.namespace, ())
        any_hosts = hosts.get(ANY_NAMESPACE, ())
        if _vs_matches_hosts(vs, ns_hosts, egress) or _vs_matches_hosts(vs, any_hosts, egress):
            out.append(vs)
    return out


def build_sidecar_scope(
    sidecar: ConfigObject | None,
    namespace: str,
    services: ServiceIndex,
    virtual_services: VirtualServiceIndex,
    destination_rules: DestinationRuleIndex,
    mesh_outbound_policy: str,
) -> SidecarScope:
    """The scope of ``sidecar`` (or the default scope) computed for ``namespace``."""
    spec: net.Sidecar | None = sidecar.spec if sidecar is not None else None
    visible = services.exported_to(namespace)
    mesh_vs = virtual_services.for_gateway(namespace, MESH_GATEWAY)
    raw_listeners: list[net.IstioEgressListener] = list(spec.egress) if spec is not None else []
    if not raw_listeners:
        raw_listeners = [net.IstioEgressListener(hosts=["*/*"])]

    listeners: list[EgressListener] = []
    by_host: dict[str, Service] = {}  # in the order first imported

    def add_service(svc: Service | None) -> None:
        if svc is None:
            return
        found = by_host.get(svc.hostname)
        if found is None:
            by_host[svc.hostname] = svc
        elif found.namespace == svc.namespace:
            # listeners may each import part of a service's ports: keep the union
            by_host[svc.hostname] = found.with_ports_of(svc)

    scope_vs: list[ResolvedVirtualService] = []
    in_scope: set[int] = set()  # a list's membership test compared every VirtualService with each
    where = sidecar.namespaced_name if sidecar is not None else "(default)"
    for index, raw in enumerate(raw_listeners):
        egress = parse_egress_hosts(list(raw.hosts), namespace, f"{where} egress[{index}].hosts")
        port = raw.port.number if raw.HasField("port") else 0
        selected = _select_services(visible, egress, namespace, port)
        vss = _select_virtual_services(mesh_vs, egress)
        listeners.append(
            EgressListener(
                port=raw.port if raw.HasField("port") else None,
                bind=raw.bind,
                capture_mode=net.CaptureMode.Name(raw.capture_mode),
                hosts=egress.imported,
                services=tuple(selected),
                virtual_services=tuple(vss),
                virtual_services_by_host=VirtualServicesByHost.build(vss),
                headless_services=tuple(
                    s for s in selected if s.resolution is Resolution.PASSTHROUGH and not s.addresses
                ),
            )
        )
        for svc in selected:
            add_service(svc)
        for vs in vss:
            if id(vs) not in in_scope:  # listeners select from the same objects
                in_scope.add(id(vs))
                scope_vs.append(vs)
            for host, ports in destination_hosts(vs, namespace).items():
                add_service(_vs_destination_service(host, ports, namespace, services, port))

    drs: dict[str, tuple[ConsolidatedDestinationRule, ...]] = {}
    for svc in by_host.values():
        found = destination_rules.rules_for(namespace, svc.hostname, svc.namespace)
        if found:
            drs[svc.hostname] = tuple(found)

    policy = mesh_outbound_policy
    if spec is not None and spec.HasField("outbound_traffic_policy"):
        policy = net.OutboundTrafficPolicy.Mode.Name(spec.outbound_traffic_policy.mode)
    deps = {ConfigKey(Kind.SERVICE, svc.namespace, svc.hostname) for svc in by_host.values()}
    deps.update(vs.obj.key for vs in scope_vs)
    deps.update(ConfigKey(Kind.VIRTUAL_SERVICE, ns, name) for vs in scope_vs for ns, name in vs.delegates)
    deps.update(_rule_keys(drs))
    if sidecar is not None:
        deps.add(sidecar.key)
    return SidecarScope(
        name=sidecar.namespaced_name if sidecar is not None else None,
        namespace=namespace,
        sidecar=spec,
        egress_listeners=tuple(listeners),
        services=tuple(by_host.values()),
        services_by_host=by_host,
        virtual_services=tuple(scope_vs),
        destination_rules=drs,
        outbound_traffic_policy=policy,
        dependencies=frozenset(deps),
        reads_labels=_reads_labels(drs, scope_vs, tuple(by_host.values())),
        root_namespace=destination_rules.root_namespace,
    )


def _vs_destination_service(
    host: str, ports: set[int], namespace: str, services: ServiceIndex, listener_port: int
) -> Service | None:
    """The service a VirtualService destination names: the one in the scope's namespace, else
    the alphabetically first namespace where it is visible."""
    by_ns = services.by_hostname.get(host, {})
    svc = by_ns.get(namespace)
    if svc is None:
        visible = sorted(ns for ns, s in by_ns.items() if services.is_visible(s, namespace))
        if not visible:
            return None
        svc = by_ns[visible[0]]
    if listener_port:
        return _only_port(svc, listener_port)
    if 0 in ports:
        return svc
    kept = tuple(p for p in svc.ports if p.port in ports)
    return dataclasses.replace(svc, ports=kept) if kept else None


def _reads_labels(
    rules: Mapping[str, tuple[ConsolidatedDestinationRule, ...]],
    virtual_services: Sequence[ResolvedVirtualService],
    services: Sequence[Service],
) -> bool:
    # a traffic distribution splits endpoints by the proxy's topology labels (its node's too)
    if any(svc.traffic_distribution is not TrafficDistribution.ANY for svc in services):
        return True
    for found in rules.values():
        if any(cdr.selector is not None or _has_failover_priority(cdr.rule) for cdr in found):
            return True
    for vs in virtual_services:
        spec = vs.spec
        if any(len(m.source_labels) for http in spec.http for m in http.match):
            return True
        if any(len(m.source_labels) for route in spec.tcp for m in route.match):
            return True
        if any(len(m.source_labels) for route in spec.tls for m in route.match):
            return True
    return False


def _has_failover_priority(rule: net.DestinationRule) -> bool:
    policies = [rule.traffic_policy, *(s.traffic_policy for s in rule.subsets)]
    balancers = [tp.load_balancer for tp in policies]
    balancers.extend(p.load_balancer for tp in policies for p in tp.port_level_settings)
    return any(len(lb.locality_lb_setting.failover_priority) for lb in balancers)
