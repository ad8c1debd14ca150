"""A sidecar's RouteConfigurations, as istiod's BuildSidecarOutboundHTTPRouteConfig
(pilot/pkg/networking/core/httproute.go), each from its inputs value alone (DESIGN §7 rule 3).

``PORT`` holds a virtual host per HTTP service on that port seen through the egress listener
serving it (routes from the VirtualServices naming the service, else a default route to
``outbound|PORT||HOST``), a virtual host per VirtualService host that is no service, then the
``allow_any`` / ``block_all`` catch-all. ``HOST:PORT`` (a sniffed listener bound to one service)
holds only that service's virtual host, serving ``*``. Any other name gets an empty
configuration.

``sidecar_route_inputs`` reads the scope once into a ``SidecarRouteInputs``; equal values build
equal bytes, so a change that adds a service on another port, or changes a DestinationRule's
pool (routes read only its load balancer settings), rebuilds no configuration of this port.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.config.route.v3 import route_pb2

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.config.go_strconv import go_int
from app.config.host import is_wildcard, matches, most_specific_match
from app.model.ident import Ident
from app.model.proxy import Proxy
from app.model.service import Resolution, Service
from app.model.sidecar_scope import ALLOW_ANY
from app.model.virtual_service import MESH_GATEWAY, ResolvedVirtualService
from app.translate.allocated import allocated_addresses, allocation
from app.translate.cluster.builder import egress_proxy_cluster
from app.translate.listener.plan import EgressListenerView
from app.translate.route.builder import RouteContext, build_default_route, build_vs_routes
from app.translate.route.config import empty_route_config, http_or_sniffed, include_attempt_count, route_config
from app.translate.route.virtual_host import (
    VirtualHostWrapper,
    build_catch_all_virtual_host,
    build_sidecar_virtual_hosts,
    virtual_hosts_for_sniffed_route,
)
from app.translate.view import ProxyDestinationRules, SidecarScopeView


@dataclass(frozen=True, slots=True)
class RoutePortInputs:
    """What the egress listener serving the port gives a route configuration: its services on
    the port and its VirtualServices (in order, by identity), and the load balancer settings
    (``route.policy.load_balancer_view``) of the DestinationRule the proxy applies to every host
    a route may read a hash policy of."""

    services: tuple[Ident[Service], ...]
    virtual_services: tuple[Ident[ResolvedVirtualService], ...]
    rules: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class SidecarRouteInputs:
    """Everything a sidecar's route configuration ``name`` is built from."""

    name: str
    mesh: Ident[MeshConfig]
    allow_any: bool  # the scope's outbound traffic policy
    egress: str  # where ALLOW_ANY traffic goes (PassthroughCluster or the Sidecar's egressProxy)
    namespace: str  # the proxy's (VirtualService sourceNamespace, short host names)
    labels: tuple[tuple[str, str], ...]  # the proxy's (VirtualService sourceLabels)
    dns_domain: str  # the proxy's (the domains of a virtual host)
    allocation: tuple[bool, bool] | None  # whose auto-allocated addresses the proxy uses (allocated.py)
    port: RoutePortInputs | None  # None: a name that is no port, or no egress listener serves it


def sidecar_route_inputs(
    proxy: Proxy,
    mesh: MeshConfig,
    scope: SidecarScopeView,
    name: str,
    rule_view: Callable[[net.DestinationRule | None], bytes | None],
    allocates: bool,
) -> SidecarRouteInputs:
    """What ``build_sidecar_route_config`` reads for ``name``; ``rule_view`` is
    ``load_balancer_view`` (None for no rule), which a caller may memoize; ``allocates``: the
    proxy uses auto-allocated addresses (``consumes_allocated``)."""
    parsed = _parse_sidecar_route_name(name)
    listener = None if parsed is None else _egress_listener_for_rds(scope, parsed[0])
    port_inputs = None
    if parsed is not None and listener is not None:
        port = parsed[0]
        services = [s for s in listener.services if s.port_by_number(port) is not None]
        hosts = {s.hostname for s in services}
        for vs in listener.virtual_services:
            for http in vs.spec.http:
                hosts.update(d.destination.host for d in http.route)
                hosts.update(m.destination.host for m in http.mirrors)
                if http.HasField("mirror"):
                    hosts.add(http.mirror.host)
        rules = ProxyDestinationRules(proxy, scope)
        port_inputs = RoutePortInputs(
            tuple(map(Ident, services)),
            tuple(map(Ident, listener.virtual_services)),
            tuple((h, rule_view(rules.get(h))) for h in sorted(hosts)),
        )
    return SidecarRouteInputs(
        name,
        Ident(mesh),
        scope.outbound_traffic_policy == ALLOW_ANY,
        egress_proxy_cluster(scope.sidecar),
        proxy.namespace,
        tuple(sorted(proxy.labels.items())),
        proxy.dns_domain,
        allocation(proxy, allocates),
        port_inputs,
    )


def build_sidecar_route_config(inputs: SidecarRouteInputs) -> route_pb2.RouteConfiguration:
    name = inputs.name
    parsed = _parse_sidecar_route_name(name)
    if parsed is None:
        return empty_route_config(name)
    port, sniffed = parsed
    attempt_count = include_attempt_count(inputs.mesh.obj)
    vhosts = []
    if inputs.port is not None:
        vhosts = _sidecar_virtual_hosts(inputs, inputs.port, port, attempt_count)
    if sniffed:
        vhosts = virtual_hosts_for_sniffed_route(vhosts, name)
    vhosts.sort(key=lambda vh: vh.name)
    if not sniffed:
        vhosts.append(build_catch_all_virtual_host(inputs.allow_any, inputs.egress, attempt_count))
    return route_config(name, vhosts)


def _parse_sidecar_route_name(name: str) -> tuple[int, bool] | None:
    """``PORT`` -> (port, False); ``HOST:PORT`` -> (port, True); anything else -> None."""
    host, colon, port_text = name.partition(":")
    if not colon:
        port_text = host
    port = go_int(port_text, signed=False)
    if not port:
        return None
    return port, bool(colon)


def _egress_listener_for_rds(scope: SidecarScopeView, port: int) -> EgressListenerView | None:
    """The listener declaring ``port``, else the first one without a port (istiod
    SidecarScope.GetEgressListenerForRDS: listeners are tried in order)."""
    for listener in scope.egress_listeners:
        if listener.port is None or listener.port.number == port:
            return listener
    return None


def _sidecar_virtual_hosts(
    inputs: SidecarRouteInputs, read: RoutePortInputs, port: int, attempt_count: bool
) -> list[rc.VirtualHost]:
    # each service narrowed to the listener port; VirtualService routes resolve ports against it
    services: dict[str, Service] = {}
    for ident in read.services:
        svc = ident.obj
        found = svc.port_by_number(port)
        if found is not None:
            services[svc.hostname] = dataclasses.replace(svc, ports=(found,))
    rules = {h: net.DestinationRule.FromString(view) for h, view in read.rules if view is not None}
    ctx = RouteContext(
        listener_port=port,
        gateways=frozenset({MESH_GATEWAY}),
        proxy_labels=dict(inputs.labels),
        proxy_namespace=inputs.namespace,
        services=services,
        mesh=inputs.mesh.obj,
        destination_rules=rules,
    )
    all_virtual_services = [vs.obj for vs in read.virtual_services]
    virtual_services = all_virtual_services
    if port != 80:
        # istiod keeps VirtualServices naming no service only on port 80 (where their other
        # hosts, e.g. an external name without a ServiceEntry, get a virtual host)
        virtual_services = [vs for vs in virtual_services if _names_a_service(vs, services)]
    wildcard_owner = _wildcard_vs_owner(all_virtual_services, services.values())
    wrappers: list[VirtualHostWrapper] = []
    routed: set[str] = set()
    for vs in virtual_services:
        routes = build_vs_routes(vs, ctx)
        if not routes:
            continue
        vs_hosts, matched = _split_vs_hosts(vs, services, wildcard_owner)
        http = tuple(s for s in matched if http_or_sniffed(s.ports[0].protocol))
        if http or port == 80:
            wrappers.append(VirtualHostWrapper(port, http, tuple(vs_hosts), tuple(routes)))
            routed.update(s.hostname for s in http)
    for svc in services.values():
        if svc.hostname in routed or svc.resolution is Resolution.ALIAS:
            continue
        if http_or_sniffed(svc.ports[0].protocol):
            route = build_default_route(svc.hostname, port, ctx)
            wrappers.append(VirtualHostWrapper(port, (svc,), (), (route,)))
    families = inputs.allocation
    return build_sidecar_virtual_hosts(
        wrappers, inputs.dns_domain, attempt_count, lambda svc: allocated_addresses(svc, families)
    )


def _names_a_service(vs: ResolvedVirtualService, services: Mapping[str, Service]) -> bool:
    """istiod selectVirtualServices: an exact host by lookup, else a wildcard on either side."""
    for h in vs.spec.hosts:
        if h in services:
            return True
        if any(matches(h, s) for s in services if is_wildcard(h) or is_wildcard(s)):
            return True
    return False


def _wildcard_vs_owner(
    virtual_services: Sequence[ResolvedVirtualService], services: Iterable[Service]
) -> dict[str, str]:
    """Service hostname -> the VirtualService whose host names it most specifically (an exact
    host first, then the longest wildcard; the oldest VirtualService wins a tie), so a service
    matched by several wildcard VirtualServices gets routes from one (istiod
    computeWildcardHostVirtualServiceIndex)."""
    exact: dict[str, str] = {}
    wildcard: dict[str, str] = {}
    for vs in virtual_services:
        for h in vs.spec.hosts:
            (wildcard if is_wildcard(h) else exact).setdefault(h, vs.namespaced_name)
    owners: dict[str, str] = {}
    for svc in services:
        found = most_specific_match(svc.hostname, exact, wildcard)
        if found is not None:
            owners[svc.hostname] = found[1]
    return owners


def _split_vs_hosts(
    vs: ResolvedVirtualService, services: Mapping[str, Service], wildcard_owner: Mapping[str, str]
) -> tuple[list[str], list[Service]]:
    """The VirtualService's hosts that are no service, and the services its hosts name
    (istiod separateVSHostsAndServices)."""
    plain: list[str] = []
    matched: list[Service] = []
    wildcards: list[str] = []
    for h in vs.spec.hosts:
        if is_wildcard(h):
            wildcards.append(h)
        elif h in services:
            matched.append(services[h])
        else:
            plain.append(h)
    for h in wildcards:
        any_match = False
        for svc_host, svc in services.items():
            if not matches(svc_host, h):
                continue
            any_match = True
            if wildcard_owner.get(svc_host) == vs.namespaced_name:
                matched.append(svc)
        if not any_match:
            plain.append(h)
    return plain, matched
