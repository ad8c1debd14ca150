"""Gateway listeners, as istiod builds them (pilot/pkg/networking/core/gateway.go
buildGatewayListeners) from the proxy's MergedGateway (app.model.merged_gateway, which RDS reads
too, so the route names the listeners ask for are the ones RDS serves).

Owns the listener per (bind, port): plain HTTP servers share one HCM with RDS ``http.PORT``; TLS
servers on a port are told apart by SNI, each terminating HTTPS server with its own RDS
``https.PORT.PORTNAME.GATEWAY.NAMESPACE``. TCP servers and TLS servers that terminate forward with
a VirtualService ``tcp`` route; PASSTHROUGH servers forward by SNI with ``tls`` routes.
AUTO_PASSTHROUGH and HTTP/3 are not built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol as TypingProtocol

from envoy.config.core.v3 import base_pb2
from envoy.config.listener.v3 import listener_components_pb2 as lc
from envoy.config.listener.v3 import listener_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from app.api import networking as net
from app.config.host import intersection, names_for_namespace
from app.config.objects import ConfigObject
from app.model.authz import NO_POLICIES, WorkloadPolicies
from app.model.merged_gateway import GatewayServer, MergedServers, ServerPort, merge_gateways
from app.model.service import Protocol, ServicePort, parse_protocol
from app.model.virtual_service import ResolvedVirtualService
from app.translate.address import build_address
from app.translate.cluster.builder import ServiceTarget
from app.translate.listener.access_log import listener_access_logs
from app.translate.listener.authz import rbac_http_filters, rbac_network_filters
from app.translate.listener.ext_authz import NO_CUSTOM, CustomAuthz, custom_http_filters, custom_network_filters
from app.translate.listener.filters import (
    MAX_ACCEPT_PER_EVENT,
    SERVER_NAME,
    ChainOpts,
    HttpOptions,
    build_filter_chain,
    delimited_stat_prefix,
    http1_options,
    tls_inspector_filter,
    transport_socket_connect_timeout,
)
from app.translate.listener.jwt import jwt_authn_filters
from app.translate.listener.tcp import OutboundContext, route_filters
from app.translate.listener.tls import gateway_tls_context, has_server_certificate

_TLS = net.ServerTLSSettings


class GatewayVirtualServices(TypingProtocol):
    """The VirtualService index, as far as gateways read it."""

    def for_gateway(self, namespace: str, gateway: str) -> list[ResolvedVirtualService]: ...


def _gateway_http_options(rds: str, protocol: Protocol, stat_prefix: str = "") -> HttpOptions:
    """istiod buildGatewayConnectionManager: the client's address is the remote address; XFCC
    sanitized and set from the client certificate."""
    base = hcm_pb2.HttpConnectionManager(
        forward_client_cert_details=hcm_pb2.HttpConnectionManager.SANITIZE_SET, server_name=SERVER_NAME
    )
    details = base.set_current_client_cert_details
    details.subject.value = True
    details.cert = True
    details.dns = True
    details.uri = True
    base.http_protocol_options.CopyFrom(http1_options())
    return HttpOptions(rds=rds, use_remote_address=True, protocol=protocol, base=base, stat_prefix=stat_prefix)


@dataclass(slots=True)
class _GatewayBuilder:
    ctx: OutboundContext
    virtual_services: GatewayVirtualServices
    tls_hosts_by_port: dict[int, dict[str, str]] = field(default_factory=dict)

    def chains(self, key: ServerPort, merged: MergedServers) -> list[ChainOpts]:
        protocol = parse_protocol(key.protocol)
        if protocol.is_http:
            return [ChainOpts(http=_gateway_http_options(merged.route_name, protocol))]
        out: list[ChainOpts] = []
        for server in merged.servers:
            if server.protocol is Protocol.HTTPS and server.has_tls and not server.passthrough:
                if not has_server_certificate(server.server.tls):
                    continue
                tls = gateway_tls_context(server.server.tls, False, self.ctx.mesh)
                http = _gateway_http_options(server.route_name, server.protocol, server.server.name)
                out.append(ChainOpts(sni_hosts=server.sni_hosts, tls_context=tls, http=http))
            else:
                out.extend(self._tcp_chains(server, key.number))
        return out

    def _vs_for(self, server: GatewayServer) -> list[ResolvedVirtualService]:
        found = self.virtual_services.for_gateway(self.ctx.proxy.namespace, server.gateway_name)
        # istiod pickMatchingGatewayHosts: ``ns/host`` server hosts only match that namespace's
        # VirtualServices (merging already turned ``*/host`` into ``host``)
        return [
            vs for vs in found if intersection(names_for_namespace(server.hosts, vs.obj.meta.namespace), vs.spec.hosts)
        ]

    def _tcp_chains(self, server: GatewayServer, listener_port: int) -> list[ChainOpts]:
        """istiod createGatewayTCPFilterChainOpts."""
        spec = server.server
        port = ServicePort(spec.port.name, spec.port.number, server.protocol)
        if server.passthrough:
            if spec.tls.mode == _TLS.AUTO_PASSTHROUGH:
                return []  # SNI-DNAT needs the outbound_.PORT_._.HOST clusters CDS does not build
            return self._passthrough_chains(server, port, listener_port)
        filters = self._tcp_route_filters(server, port)
        if not filters:
            return []
        if not server.has_tls:
            return [ChainOpts(network_filters=tuple(filters))]
        if not has_server_certificate(spec.tls):
            return []
        tls = gateway_tls_context(spec.tls, True, self.ctx.mesh)
        return [ChainOpts(sni_hosts=server.sni_hosts, tls_context=tls, network_filters=tuple(filters))]

    def _tcp_route_filters(self, server: GatewayServer, port: ServicePort) -> list[lc.Filter]:
        for vs in self._vs_for(server):
            for tcp in vs.spec.tcp:
                if _l4_multi_match(tcp.match, server) and len(tcp.route) > 0:
                    return route_filters(self.ctx, tcp.route, port, vs)
        return []

    def _passthrough_chains(self, server: GatewayServer, port: ServicePort, listener_port: int) -> list[ChainOpts]:
        out: list[ChainOpts] = []
        known = self.tls_hosts_by_port.setdefault(listener_port, {})
        bind = server.server.bind
        for vs in self._vs_for(server):
            for tls in vs.spec.tls:
                if len(tls.route) == 0:
                    continue
                for m in tls.match:
                    if not _l4_single_match(m.port, m.gateways, server):
                        continue
                    if any(known.get(h) == bind for h in m.sni_hosts if h in known):
                        continue  # another route already owns these SNI names
                    known.update({h: bind for h in m.sni_hosts})
                    filters = route_filters(self.ctx, tls.route, port, vs)
                    out.append(ChainOpts(sni_hosts=tuple(m.sni_hosts), network_filters=tuple(filters)))
        return out


def _l4_single_match(port: int, gateways: Sequence[str], server: GatewayServer) -> bool:
    port_ok = port == 0 or port == server.server.port.number
    return port_ok and (len(gateways) == 0 or server.gateway_name in gateways)


def _l4_multi_match(predicates: Sequence[net.L4MatchAttributes], server: GatewayServer) -> bool:
    if len(predicates) == 0:
        return True
    return any(_l4_single_match(m.port, m.gateways, server) for m in predicates)


def build_gateway_listeners(
    ctx: OutboundContext,
    gateways: Sequence[ConfigObject],
    targets: Sequence[ServiceTarget],
    virtual_services: GatewayVirtualServices,
    authz: WorkloadPolicies = NO_POLICIES,
    jwt: Sequence[ConfigObject] = (),
    custom: CustomAuthz = NO_CUSTOM,
) -> list[listener_pb2.Listener]:
    """Listeners for the Gateways that select this router, one per (bind, port); every chain
    carries the gateway workload's authorization filters (``authz``), after the CUSTOM ones
    (``custom``) and, on HTTP chains, the jwt_authn filter of its RequestAuthentications (``jwt``)."""
    merged = merge_gateways(ctx.proxy, gateways, targets)
    builder = _GatewayBuilder(ctx, virtual_services)
    rbac_http = (*custom_http_filters(custom), *jwt_authn_filters(jwt), *rbac_http_filters(authz))
    rbac_network = (*custom_network_filters(custom), *rbac_network_filters(authz))
    by_name: dict[str, tuple[str, int, list[ChainOpts]]] = {}
    for key in merged.server_ports:
        bind = key.bind or ctx.wildcard
        name = f"{bind}_{key.number}"
        chains = [_with_authz(c, rbac_http, rbac_network) for c in builder.chains(key, merged.merged_servers[key])]
        by_name.setdefault(name, (bind, key.number, []))[2].extend(chains)
    return [_listener(name, bind, port, chains, ctx) for name, (bind, port, chains) in by_name.items() if chains]


def _with_authz(
    chain: ChainOpts, http: tuple[hcm_pb2.HttpFilter, ...], network: tuple[lc.Filter, ...]
) -> ChainOpts:
    if chain.http is not None:
        return replace(chain, http=replace(chain.http, authz=http)) if http else chain
    return replace(chain, network_filters=(*network, *chain.network_filters)) if network else chain


def _listener(
    name: str, bind: str, port: int, chains: Sequence[ChainOpts], ctx: OutboundContext
) -> listener_pb2.Listener:
    """istiod buildGatewayListener: bound to the port; no ``listener_filters_timeout`` set, so
    Envoy's default (15 s) bounds the wait for a TLS hello (istiod sets one on sidecar
    listeners only)."""
    out = listener_pb2.Listener(
        name=name, traffic_direction=base_pb2.OUTBOUND, access_log=listener_access_logs(ctx.mesh, ctx.logs)
    )
    out.address.CopyFrom(build_address(bind, port))
    out.max_connections_to_accept_per_socket_event.value = MAX_ACCEPT_PER_EVENT
    if any(c.needs_tls_inspector() for c in chains):
        out.listener_filters.append(tls_inspector_filter())
    stat_prefix = delimited_stat_prefix(f"outbound_{name}")
    for opts in chains:
        chain = build_filter_chain(opts, stat_prefix, ctx.mesh, ctx.proxy, ctx.logs, ctx.tracing)
        chain.transport_socket_connect_timeout.CopyFrom(transport_socket_connect_timeout())
        match = opts.filter_chain_match()
        if match is not None:
            chain.filter_chain_match.CopyFrom(match)
        out.filter_chains.append(chain)
    return out
