"""A gateway's RouteConfigurations, as istiod's buildGatewayHTTPRouteConfig (gateway.go,
model/gateway.go mergeGateways): the Gateways selecting the proxy are merged; ``http.PORT[.BIND]``
and ``https.PORT.PORTNAME.GATEWAY.NAMESPACE[.BIND]`` hold a virtual host per VirtualService host
bound to the server's gateway and allowed by its hosts, or ``blackhole:PORT`` when none is.
Built per proxy (they follow from the Gateways its labels select and its own targets).

Synchronous and pure; the result is one RouteConfiguration per distinct name, sorted by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.config.route.v3 import route_pb2

from app.api import networking as net
from app.config.host import intersection, names_for_namespace
from app.model.merged_gateway import GatewayServer, merge_gateways
from app.model.proxy import Proxy
from app.model.service import Service
from app.model.virtual_service import ResolvedVirtualService
from app.translate.route.builder import RouteContext, build_vs_routes
from app.translate.route.config import empty_route_config, include_attempt_count, route_config
from app.translate.route.virtual_host import (
    GatewayVirtualHost,
    collapse_gateway_virtual_hosts,
    domain_name,
    gateway_blackhole_virtual_host,
)
from app.translate.view import ProxyDestinationRules, PushContextView, SidecarScopeView, proxy_service_targets


def gateway_routes(
    proxy: Proxy, push: PushContextView, route_names: Iterable[str]
) -> list[route_pb2.RouteConfiguration]:
    """One RouteConfiguration per distinct requested name, sorted by name."""
    names = sorted(set(route_names))
    scope = push.sidecar_scope(proxy)
    rules = ProxyDestinationRules(proxy, scope)
    attempt_count = include_attempt_count(push.mesh)
    targets = proxy_service_targets(proxy, push)
    servers = merge_gateways(proxy, push.gateways, targets).servers_by_route_name
    return [_gateway_route_config(proxy, push, scope, rules, servers.get(n, ()), n, attempt_count) for n in names]


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
        return empty_route_config(name)
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
    return route_config(name, vhosts)


def gateway_port_map(proxy: Proxy, push: PushContextView) -> dict[int, frozenset[int]]:
    """istiod GatewayPortMap (getTargetPortMap): a route configuration's port (from its RDS
    name) -> the port numbers of the servers it serves, what an EnvoyFilter's port match tests."""
    servers = merge_gateways(proxy, push.gateways, proxy_service_targets(proxy, push)).servers_by_route_name
    out: dict[int, set[int]] = {}
    for name, found in servers.items():
        number = gateway_route_port(name)
        out.setdefault(number, set()).update(s.server.port.number for s in found if s.server.HasField("port"))
    return {number: frozenset(ports) for number, ports in out.items()}


def gateway_route_port(name: str) -> int:
    """The port a gateway's RDS name carries (istiod ParseGatewayRDSRouteName): ``http.PORT``
    or ``https.PORT.PORT_NAME.GATEWAY.NAMESPACE``; 0 for any other name."""
    if name.startswith("http."):
        port = name[len("http.") :]
    elif name.startswith("https.") and name.count(".") == 4:
        port = name.split(".")[1]
    else:
        return 0
    return int(port) if port.isdigit() else 0
