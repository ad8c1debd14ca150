"""Outbound TCP and TLS filter chains, as istiod builds them (tls.go, networkfilter.go).

Owns: the tcp_proxy stack toward one destination or weighted destinations of a VirtualService
``tcp`` / ``tls`` route (with the DestinationRule's idle timeout, max connection duration and
source-IP hashing), the sidecar's TCP and TLS filter chain opts for one service port
(VirtualService routes first, else straight to ``outbound|PORT||HOST``), and the shared
``OutboundContext`` the listener builders read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envoy.config.core.v3 import base_pb2
from envoy.config.listener.v3 import listener_components_pb2 as lc

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.config.labels import selector_matches
from app.model.proxy import Proxy
from app.model.service import Protocol, Registry, Service, ServicePort
from app.model.virtual_service import MESH_GATEWAY, ResolvedVirtualService
from app.translate.allocated import allocated_addresses, allocation
from app.translate.cluster.builder import destination_cluster, outbound_cluster_name
from app.translate.listener.access_log import Logs, access_logs
from app.translate.listener.filters import (
    ChainOpts,
    TcpSettings,
    tcp_filter_stack,
    tcp_proxy_filter,
)
from app.translate.listener.tracing import LEGACY, TraceChoice
from app.translate.metadata import config_metadata

UNSPECIFIED_V4 = "0.0.0.0"
UNSPECIFIED_V6 = "::"
TLS_PROTOCOLS = (Protocol.HTTPS, Protocol.TLS)
TCP_PROTOCOLS = (Protocol.TCP, Protocol.HTTPS, Protocol.TLS, Protocol.MONGO, Protocol.REDIS, Protocol.MYSQL)


@dataclass(frozen=True, slots=True)
class OutboundContext:
    """What the outbound builders read about one proxy: its identity, the mesh, the services it
    sees by hostname and the DestinationRule that applies to each (from its SidecarScope), and
    the access logs and tracing of the listeners being built."""

    proxy: Proxy
    mesh: MeshConfig
    services: Mapping[str, Service]
    rules: Mapping[str, net.DestinationRule]
    logs: Logs  # what the listener's class logs (app/model/telemetry.py)
    allocated: bool = False  # the proxy uses auto-allocated addresses (app/translate/allocated.py)
    tracing: TraceChoice = LEGACY  # what the listener's class traces with

    @property
    def ipv6_only(self) -> bool:
        return bool(self.proxy.ip_addresses) and all(":" in ip for ip in self.proxy.ip_addresses)

    @property
    def wildcard(self) -> str:
        return UNSPECIFIED_V6 if self.ipv6_only else UNSPECIFIED_V4

    @property
    def localhost(self) -> str:
        return "::1" if self.ipv6_only else "127.0.0.1"


def service_address(ctx: OutboundContext, service: Service) -> str:
    """istiod GetAddressForProxy: the VIP, else the allocated address for a proxy that uses them,
    else the unspecified address (IPv6 for an IPv6-only proxy reaching a ServiceEntry)."""
    if service.addresses:
        return service.addresses[0]
    allocated = allocated_addresses(service, allocation(ctx.proxy, ctx.allocated))
    if allocated:
        return allocated[0]
    return UNSPECIFIED_V6 if service.registry is Registry.EXTERNAL and ctx.ipv6_only else UNSPECIFIED_V4


def tcp_settings(rule: net.DestinationRule | None, subset: str) -> TcpSettings:
    if rule is None:
        return TcpSettings()
    tcp = rule.traffic_policy.connection_pool.tcp
    lb = rule.traffic_policy.load_balancer
    source_ip = lb.consistent_hash.use_source_ip
    for s in rule.subsets:
        if s.name != subset:
            continue
        if s.HasField("traffic_policy") and s.traffic_policy.HasField("load_balancer"):
            sub_lb = s.traffic_policy.load_balancer
            source_ip = sub_lb.HasField("consistent_hash") and sub_lb.consistent_hash.use_source_ip
        break
    return TcpSettings(
        idle_timeout=tcp.idle_timeout if tcp.HasField("idle_timeout") else None,
        max_connection_duration=tcp.max_connection_duration if tcp.HasField("max_connection_duration") else None,
        hash_source_ip=source_ip,
    )


def single_destination_filters(
    ctx: OutboundContext, cluster: str, subset: str, port: ServicePort, rule: net.DestinationRule | None
) -> list[lc.Filter]:
    """The stack toward one cluster, which is also its stat prefix."""
    proxy = tcp_proxy_filter(
        cluster, cluster, settings=tcp_settings(rule, subset), access_log=access_logs(ctx.mesh, ctx.logs)
    )
    return tcp_filter_stack(port.protocol, proxy, cluster)


def route_filters(
    ctx: OutboundContext, routes: Sequence[net.RouteDestination], port: ServicePort, vs: ResolvedVirtualService
) -> list[lc.Filter]:
    """istiod buildOutboundNetworkFilters: one destination, or weighted clusters named after the
    VirtualService (``name.namespace``) when several."""
    first = routes[0].destination
    service = ctx.services.get(first.host)
    rule = ctx.rules.get(service.hostname) if service is not None else None
    if len(routes) == 1:
        cluster = destination_cluster(first, service, port.port)
        return single_destination_filters(ctx, cluster, first.subset, port, rule)
    stat_prefix = f"{vs.obj.meta.name}.{vs.obj.meta.namespace}"
    weighted = [
        (destination_cluster(r.destination, ctx.services.get(r.destination.host), port.port), r.weight)
        for r in routes
        if r.weight > 0
    ]
    settings = tcp_settings(rule, "")
    proxy = tcp_proxy_filter(
        stat_prefix, weighted=weighted, settings=settings, access_log=access_logs(ctx.mesh, ctx.logs)
    )
    return tcp_filter_stack(port.protocol, proxy, stat_prefix)


def vs_metadata(vs: ResolvedVirtualService) -> base_pb2.Metadata:
    return config_metadata("virtual-service", vs.obj.meta.namespace, vs.obj.meta.name)


def _static_match(m: net.L4MatchAttributes | net.TLSMatchAttributes, proxy: Proxy, port: int) -> bool:
    """istiod matchTCP / matchTLS: the predicates known when generating config for this proxy."""
    gateway_ok = len(m.gateways) == 0 or MESH_GATEWAY in m.gateways
    labels_ok = selector_matches(m.source_labels, proxy.labels)
    return gateway_ok and labels_ok and m.port in (0, port) and m.source_namespace in ("", proxy.namespace)


def sidecar_tcp_chain_opts(
    ctx: OutboundContext,
    service: Service,
    listen_port: ServicePort,
    cidr: str,
    bind: str,
    vss: Sequence[ResolvedVirtualService],
) -> list[ChainOpts]:
    """istiod buildSidecarOutboundTCPListenerOpts for one service: TLS chains for TLS / HTTPS
    ports, plain TCP chains otherwise; ``vss`` are the VirtualServices matching the service."""
    cidrs = (cidr,) if cidr else ()
    if listen_port.protocol in TLS_PROTOCOLS:
        return _tls_chain_opts(ctx, service, listen_port, cidrs, bind, vss)
    return _tcp_chain_opts(ctx, service, listen_port, cidrs, vss)


def _default_filters(ctx: OutboundContext, service: Service, listen_port: ServicePort) -> list[lc.Filter]:
    # a Sidecar egress port other than the service's own: use the service's port when it has one
    port = service.ports[0].port if len(service.ports) == 1 else listen_port.port
    cluster = outbound_cluster_name(port, service.hostname)
    return single_destination_filters(ctx, cluster, "", listen_port, ctx.rules.get(service.hostname))


def _tls_chain_opts(
    ctx: OutboundContext,
    service: Service,
    listen_port: ServicePort,
    cidrs: tuple[str, ...],
    bind: str,
    vss: Sequence[ResolvedVirtualService],
) -> list[ChainOpts]:
    out: list[ChainOpts] = []
    handled: set[str] = set()
    for vs in vss:
        for tls in vs.spec.tls:
            if not tls.route:
                continue
            for m in tls.match:
                if not _static_match(m, ctx.proxy, listen_port.port):
                    continue
                if len(m.destination_subnets) > 0 and listen_port.port > 0:
                    cidrs = tuple(m.destination_subnets)  # istiod keeps the override for later matches too
                key = ",".join(m.sni_hosts) + "|" + ",".join(m.destination_subnets)
                if key not in handled:
                    filters = route_filters(ctx, tls.route, listen_port, vs)
                    out.append(
                        ChainOpts(
                            metadata=vs_metadata(vs),
                            sni_hosts=tuple(m.sni_hosts),
                            destination_cidrs=cidrs,
                            network_filters=tuple(filters),
                        )
                    )
                handled.add(key)
    if out:
        return out
    # no TLS route: SNI is the only way to tell services apart on a wildcard listener
    address = service_address(ctx, service)
    if "/" in address:
        address = ""
    sni: tuple[str, ...] = ()
    if cidrs or not address or (address == ctx.wildcard and bind == ctx.wildcard):
        sni = (service.hostname,)
    filters = _default_filters(ctx, service, listen_port)
    return [ChainOpts(sni_hosts=sni, destination_cidrs=cidrs, network_filters=tuple(filters))]


def _tcp_chain_opts(
    ctx: OutboundContext,
    service: Service,
    listen_port: ServicePort,
    cidrs: tuple[str, ...],
    vss: Sequence[ResolvedVirtualService],
) -> list[ChainOpts]:
    out: list[ChainOpts] = []
    default_added = False
    for vs in vss:
        for tcp in vs.spec.tcp:
            if not tcp.route:
                continue
            if len(tcp.match) == 0:
                filters = route_filters(ctx, tcp.route, listen_port, vs)
                out.append(_vs_chain(vs, cidrs, filters))
                return out
            subnets: list[str] = []
            for m in tcp.match:
                if not _static_match(m, ctx.proxy, listen_port.port):
                    continue
                if len(m.destination_subnets) == 0 or listen_port.port == 0:
                    filters = route_filters(ctx, tcp.route, listen_port, vs)
                    out.append(_vs_chain(vs, cidrs, filters))
                    return out
                subnets.extend(m.destination_subnets)
            if subnets:
                filters = route_filters(ctx, tcp.route, listen_port, vs)
                out.append(ChainOpts(destination_cidrs=tuple(subnets), network_filters=tuple(filters)))
                # the same CIDRs as the service's own chain: Envoy would reject the duplicate
                if sorted(subnets) == sorted(cidrs):
                    default_added = True
    if not default_added:
        filters = _default_filters(ctx, service, listen_port)
        out.append(ChainOpts(destination_cidrs=cidrs, network_filters=tuple(filters)))
    return out


def _vs_chain(vs: ResolvedVirtualService, cidrs: tuple[str, ...], filters: list[lc.Filter]) -> ChainOpts:
    return ChainOpts(metadata=vs_metadata(vs), destination_cidrs=cidrs, network_filters=tuple(filters))
