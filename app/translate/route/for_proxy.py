"""RDS generator: the RouteConfigurations one proxy asks for by name, as istiod's BuildHTTPRoutes.

Sidecars (pilot/pkg/networking/core/httproute.go): ``PORT`` holds a virtual host per HTTP
service on that port seen through the egress listener serving it (routes from the
VirtualServices naming the service, else a default route to ``outbound|PORT||HOST``), a virtual
host per VirtualService host that is no service, then the ``allow_any`` / ``block_all``
catch-all. ``HOST:PORT`` (a sniffed listener bound to one service) holds only that service's
virtual host, serving ``*``. Any other name gets an empty configuration.

Gateways (gateway.go buildGatewayHTTPRouteConfig, model/gateway.go mergeGateways): the Gateways
selecting the proxy are merged; ``http.PORT[.BIND]`` and
``https.PORT.PORTNAME.GATEWAY.NAMESPACE[.BIND]`` hold a virtual host per VirtualService host
bound to the server's gateway and allowed by its hosts, or ``blackhole:PORT`` when none is.

Synchronous and pure; the result is one RouteConfiguration per distinct name, sorted by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.config.route.v3 import route_pb2
from google.protobuf import wrappers_pb2

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.config.host import intersection, is_wildcard, matches, most_specific_match, names_for_namespace
from app.model.ident import Ident
from app.model.merged_gateway import GatewayServer, merge_gateways
from app.model.proxy import Proxy
from app.model.service import Protocol as PortProtocol
from app.model.service import Resolution, Service
from app.model.sidecar_scope import ALLOW_ANY
from app.model.virtual_service import MESH_GATEWAY, ResolvedVirtualService
from app.translate.allocated import allocated_addresses, consumes_allocated
from app.translate.cluster.builder import egress_proxy_cluster
from app.translate.listener.builder import EgressListenerView
from app.translate.route.builder import RouteContext, build_default_route, build_vs_routes
from app.translate.route.virtual_host import (
    GatewayVirtualHost,
    VirtualHostWrapper,
    build_catch_all_virtual_host,
    build_sidecar_virtual_hosts,
    collapse_gateway_virtual_hosts,
    domain_name,
    gateway_blackhole_virtual_host,
    virtual_hosts_for_sniffed_route,
)
from app.translate.view import (
    ProxyDestinationRules,
    PushContextView,
    SidecarScopeView,
    proxy_service_targets,
)

MAX_DIRECT_RESPONSE_BODY_BYTES = 1024 * 1024  # istiod DefaultMaxDirectResponseBodySizeBytes


def generate_routes(
    proxy: Proxy, push: PushContextView, route_names: Iterable[str]
) -> list[route_pb2.RouteConfiguration]:
    """One RouteConfiguration per distinct requested name, sorted by name."""
    names = sorted(set(route_names))
    scope = push.sidecar_scope(proxy)
    rules = ProxyDestinationRules(proxy, scope)
    attempt_count = _include_attempt_count(push.mesh)
    if proxy.is_gateway:
        targets = proxy_service_targets(proxy, push)
        servers = merge_gateways(proxy, push.gateways, targets).servers_by_route_name
        return [_gateway_route_config(proxy, push, scope, rules, servers.get(n, ()), n, attempt_count) for n in names]
    return [_sidecar_route_config(proxy, push, scope, rules, n, attempt_count) for n in names]


def _empty_route_config(name: str) -> route_pb2.RouteConfiguration:
    # what istiod answers for a name it cannot build (a gateway recently deleted, a bad name)
    return route_pb2.RouteConfiguration(name=name, validate_clusters=wrappers_pb2.BoolValue(value=False))


def _route_config(name: str, vhosts: Sequence[rc.VirtualHost]) -> route_pb2.RouteConfiguration:
    cfg = _empty_route_config(name)
    cfg.virtual_hosts.extend(vhosts)
    cfg.ignore_port_in_host_matching = True
    cfg.max_direct_response_body_size_bytes.value = MAX_DIRECT_RESPONSE_BODY_BYTES
    return cfg


def _include_attempt_count(mesh: MeshConfig) -> bool:
    """False when defaultConfig.proxyHeaders.attemptCount.disabled is set in mesh config."""
    return not mesh.default_config.proxy_headers.attempt_count.disabled.value


def _http_or_sniffed(protocol: PortProtocol) -> bool:
    return protocol.is_http or protocol is PortProtocol.UNSUPPORTED


# --- sidecars ----------------------------------------------------------------------------


def _parse_sidecar_route_name(name: str) -> tuple[int, bool] | None:
    """``PORT`` -> (port, False); ``HOST:PORT`` -> (port, True); anything else -> None."""
    host, colon, port_text = name.partition(":")
    if not colon:
        port_text = host
    if not (port_text.isascii() and port_text.isdigit()) or int(port_text) == 0:
        return None
    return int(port_text), bool(colon)


def _sidecar_route_config(
    proxy: Proxy,
    push: PushContextView,
    scope: SidecarScopeView,
    rules: Mapping[str, net.DestinationRule],
    name: str,
    include_attempt_count: bool,
) -> route_pb2.RouteConfiguration:
    parsed = _parse_sidecar_route_name(name)
    if parsed is None:
        return _empty_route_config(name)
    port, sniffed = parsed
    listener = _egress_listener_for_rds(scope, port)
    vhosts = []
    if listener is not None:
        vhosts = _sidecar_virtual_hosts(proxy, push, rules, listener, port, include_attempt_count)
    if sniffed:
        vhosts = virtual_hosts_for_sniffed_route(vhosts, name)
    vhosts.sort(key=lambda vh: vh.name)
    if not sniffed:
        allow_any = scope.outbound_traffic_policy == ALLOW_ANY
        egress = egress_proxy_cluster(scope.sidecar)
        vhosts.append(build_catch_all_virtual_host(allow_any, egress, include_attempt_count))
    return _route_config(name, vhosts)


def sidecar_route_key(
    proxy: Proxy,
    push: PushContextView,
    scope: SidecarScopeView,
    name: str,
    rule_view: Callable[[net.DestinationRule | None], Hashable],
) -> Hashable:
    """Everything a sidecar's route configuration ``name`` is built from besides the proxy's
    traits (which the caller keys its class by): the mesh config, the Sidecar, the egress
    listener's services on the port and its VirtualServices (by identity: they are replaced,
    never edited), and the load balancer settings of the DestinationRule the proxy applies to
    each host a route reads a hash policy of (``rule_view``: ``route_policy.load_balancer_view``,
    memoized by the caller).
    Equal keys build equal bytes, so a change that adds a service on another port, or changes
    a DestinationRule's pool, rebuilds no route configuration of this port."""
    parsed = _parse_sidecar_route_name(name)
    base = (name, Ident(push.mesh), Ident(scope.sidecar), scope.outbound_traffic_policy)
    listener = None if parsed is None else _egress_listener_for_rds(scope, parsed[0])
    if parsed is None or listener is None:
        return base
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
    return (
        *base,
        tuple(map(Ident, services)),
        tuple(map(Ident, listener.virtual_services)),
        tuple((h, rule_view(rules.get(h))) for h in sorted(hosts)),
    )


def _egress_listener_for_rds(scope: SidecarScopeView, port: int) -> EgressListenerView | None:
    """The listener declaring ``port``, else the first one without a port (istiod
    SidecarScope.GetEgressListenerForRDS: listeners are tried in order)."""
    for listener in scope.egress_listeners:
        if listener.port is None or listener.port.number == port:
            return listener
    return None


def _sidecar_virtual_hosts(
    proxy: Proxy,
    push: PushContextView,
    rules: Mapping[str, net.DestinationRule],
    listener: EgressListenerView,
    port: int,
    include_attempt_count: bool,
) -> list[rc.VirtualHost]:
    # each service narrowed to the listener port; VirtualService routes resolve ports against it
    services: dict[str, Service] = {}
    for svc in listener.services:
        found = svc.port_by_number(port)
        if found is not None:
            services[svc.hostname] = dataclasses.replace(svc, ports=(found,))
    ctx = RouteContext(
        listener_port=port,
        gateways=frozenset({MESH_GATEWAY}),
        proxy_labels=proxy.labels,
        proxy_namespace=proxy.namespace,
        services=services,
        mesh=push.mesh,
        destination_rules=rules,
    )
    virtual_services = list(listener.virtual_services)
    if port != 80:
        # istiod keeps VirtualServices naming no service only on port 80 (where their other
        # hosts, e.g. an external name without a ServiceEntry, get a virtual host)
        virtual_services = [vs for vs in virtual_services if _names_a_service(vs, services)]
    wildcard_owner = _wildcard_vs_owner(listener)
    wrappers: list[VirtualHostWrapper] = []
    routed: set[str] = set()
    for vs in virtual_services:
        routes = build_vs_routes(vs, ctx)
        if not routes:
            continue
        vs_hosts, matched = _split_vs_hosts(vs, services, wildcard_owner)
        http = tuple(s for s in matched if _http_or_sniffed(s.ports[0].protocol))
        if http or port == 80:
            wrappers.append(VirtualHostWrapper(port, http, tuple(vs_hosts), tuple(routes)))
            routed.update(s.hostname for s in http)
    for svc in services.values():
        if svc.hostname in routed or svc.resolution is Resolution.ALIAS:
            continue
        if _http_or_sniffed(svc.ports[0].protocol):
            route = build_default_route(svc.hostname, port, ctx)
            wrappers.append(VirtualHostWrapper(port, (svc,), (), (route,)))
    consumes = consumes_allocated(proxy, push.features)
    return build_sidecar_virtual_hosts(
        wrappers, proxy.dns_domain, include_attempt_count, lambda svc: allocated_addresses(svc, proxy, consumes)
    )


def _names_a_service(vs: ResolvedVirtualService, services: Mapping[str, Service]) -> bool:
    """istiod selectVirtualServices: an exact host by lookup, else a wildcard on either side."""
    for h in vs.spec.hosts:
        if h in services:
            return True
        if any(matches(h, s) for s in services if is_wildcard(h) or is_wildcard(s)):
            return True
    return False


def _wildcard_vs_owner(listener: EgressListenerView) -> dict[str, str]:
    """Service hostname -> the VirtualService whose host names it most specifically (an exact
    host first, then the longest wildcard; the oldest VirtualService wins a tie), so a service
    matched by several wildcard VirtualServices gets routes from one (istiod
    computeWildcardHostVirtualServiceIndex)."""
    exact: dict[str, str] = {}
    wildcard: dict[str, str] = {}
    for vs in listener.virtual_services:
        for h in vs.spec.hosts:
            (wildcard if is_wildcard(h) else exact).setdefault(h, vs.namespaced_name)
    owners: dict[str, str] = {}
    for svc in listener.services:
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


# --- gateways ----------------------------------------------------------------------------


def _gateway_services(
    proxy: Proxy, push: PushContextView, in_scope: Mapping[str, Service], vs: ResolvedVirtualService
) -> dict[str, Service]:
    """The services a gateway's VirtualService routes to: the one in the VirtualService's
    namespace when the proxy may see it, else the one the proxy's scope holds (istiod
    buildNameToServiceMapForHTTPRoutes)."""
    out: dict[str, Service] = {}
    for http in vs.spec.http:
        hosts = [d.destination.host for d in http.route] + [m.destination.host for m in http.mirrors]
        if http.HasField("mirror"):
            hosts.append(http.mirror.host)
        for h in hosts:
            if h in out:
                continue
            svc = push.service_index.by_hostname.get(h, {}).get(vs.obj.meta.namespace)
            if svc is None or not push.service_index.is_visible(svc, proxy.namespace):
                svc = in_scope.get(h)
            if svc is not None:
                out[h] = svc
    return out


def _gateway_route_config(
    proxy: Proxy,
    push: PushContextView,
    scope: SidecarScopeView,
    rules: Mapping[str, net.DestinationRule],
    servers: Sequence[GatewayServer],
    name: str,
    include_attempt_count: bool,
) -> route_pb2.RouteConfiguration:
    if not servers:
        return _empty_route_config(name)
    bound: dict[str, list[ResolvedVirtualService]] = {}
    built: dict[tuple[str, str], list[rc.Route]] = {}
    by_host: dict[str, GatewayVirtualHost] = {}

    def vhost(hostname: str, port: int) -> GatewayVirtualHost:
        if hostname not in by_host:
            by_host[hostname] = GatewayVirtualHost(domain_name(hostname, port), [hostname], include_attempt_count)
        return by_host[hostname]

    for gs in servers:
        port = gs.server.port.number
        redirect = gs.server.HasField("tls") and gs.server.tls.https_redirect
        gateway = gs.gateway_name
        if gateway not in bound:
            bound[gateway] = push.virtual_service_index.for_gateway(proxy.namespace, gateway)
        for vs in bound[gateway]:
            hosts = intersection(names_for_namespace(gs.hosts, vs.obj.meta.namespace), vs.spec.hosts)
            if not hosts:
                continue
            key = (gateway, vs.namespaced_name)
            if key not in built:
                ctx = RouteContext(
                    listener_port=port,
                    gateways=frozenset({gateway}),
                    proxy_labels=proxy.labels,
                    proxy_namespace=proxy.namespace,
                    services=_gateway_services(proxy, push, scope.services_by_host, vs),
                    mesh=push.mesh,
                    destination_rules=rules,
                    # istiod RouteOptions.IsTLS: any tls block, even an httpsRedirect one
                    tls=gs.server.HasField("tls"),
                )
                routes = build_vs_routes(vs, ctx)
                if not routes:
                    continue
                built[key] = routes
            for hostname in hosts:
                vh = vhost(hostname.lower(), port)
                vh.routes.extend(built[key])
                vh.require_tls = vh.require_tls or redirect
        if redirect:
            # as istiod, every server host gets a TLS-only virtual host, even one no VirtualService
            # serves; an ``ns/host`` entry is used as written, so it never matches a request
            for h in gs.hosts:
                vhost(h.lower(), port).require_tls = True
    if by_host:
        vhosts = [vh.build() for vh in collapse_gateway_virtual_hosts(by_host)]
    else:
        vhosts = [gateway_blackhole_virtual_host(servers[0].server.port.number)]
    vhosts.sort(key=lambda vh: vh.name)
    return _route_config(name, vhosts)
