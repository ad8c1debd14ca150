"""Sidecar outbound listeners, as istiod builds them (pilot/pkg/networking/core/listener.go,
listener_builder.go buildVirtualOutboundListener).

Owns: one listener per (bind, port) for the services of each Sidecar egress listener — HTTP ports
share ``0.0.0.0_PORT`` with RDS route ``PORT``; TCP ports listen on the service VIP
(``VIP_PORT``); sniffed ports get an HTTP chain picked by the HTTP inspector next to the TCP one;
headless TCP services get one listener per endpoint — istiod's protocol-conflict merging,
binding (``bind_to_port`` false unless the proxy or the egress listener does not capture), the
PassthroughFilterChain fallback, and ``virtualOutbound`` on 15001.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol as TypingProtocol

from envoy.config.core.v3 import base_pb2
from envoy.config.listener.v3 import listener_components_pb2 as lc
from envoy.config.listener.v3 import listener_pb2

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.config.host import is_ip_address
from app.model.ident import Ident
from app.model.service import Endpoint, Registry, Resolution, Service, ServicePort, parse_protocol
from app.model.service import Protocol as PortProtocol
from app.model.sidecar_scope import ALLOW_ANY
from app.model.virtual_service import ResolvedVirtualService, VirtualServicesByHost
from app.translate.address import build_address
from app.translate.cluster.builder import BLACKHOLE_CLUSTER, PASSTHROUGH_CLUSTER
from app.translate.listener.filters import (
    MAX_ACCEPT_PER_EVENT,
    PASSTHROUGH_FILTER_CHAIN,
    PLAINTEXT_HTTP_ALPNS,
    RAW_BUFFER_TRANSPORT,
    ChainOpts,
    HttpOptions,
    build_filter_chain,
    delimited_stat_prefix,
    http_inspector_filter,
    tcp_proxy_filter,
    tls_inspector_filter,
    transport_socket_connect_timeout,
    zero_duration,
)
from app.translate.listener.tcp import TCP_PROTOCOLS, OutboundContext, service_address, sidecar_tcp_chain_opts

VIRTUAL_OUTBOUND = "virtualOutbound"
VIRTUAL_OUTBOUND_BLACKHOLE = "virtualOutbound-blackhole"
VIRTUAL_OUTBOUND_CATCH_ALL = "virtualOutbound-catchall-tcp"
DEFAULT_OUTBOUND_PORT = 15001  # meshConfig.proxyListenPort
DEFAULT_INBOUND_PORT = 15006  # meshConfig.proxyInboundListenPort
STATUS_PORT = 15021  # the agent's health/status listener
PROMETHEUS_PORT = 15090  # Envoy's stats listener
_OUTBOUND = base_pb2.OUTBOUND


class EgressListenerView(TypingProtocol):
    """What listener building reads from a SidecarScope egress listener."""

    @property
    def port(self) -> net.SidecarPort | None: ...
    @property
    def bind(self) -> str: ...
    @property
    def capture_mode(self) -> str: ...
    @property
    def services(self) -> Sequence[Service]: ...
    @property
    def virtual_services(self) -> Sequence[ResolvedVirtualService]: ...
    @property
    def virtual_services_by_host(self) -> VirtualServicesByHost: ...


class _Kind(enum.Enum):
    """istiod ListenerProtocol: how a port's traffic is handled by a listener."""

    HTTP = "HTTP"
    TCP = "TCP"
    AUTO = "AUTO"


def listener_kind(protocol: PortProtocol) -> _Kind | None:
    if protocol.is_http:
        return _Kind.HTTP
    if protocol in TCP_PROTOCOLS:
        return _Kind.TCP
    if protocol is PortProtocol.UNSUPPORTED:
        return _Kind.AUTO
    return None  # UDP: no listener


def capture_ports(mesh: MeshConfig) -> tuple[int, int]:
    """(outbound, inbound) capture ports: meshConfig.proxyListenPort / proxyInboundListenPort."""
    return mesh.proxy_listen_port or DEFAULT_OUTBOUND_PORT, mesh.proxy_inbound_listen_port or DEFAULT_INBOUND_PORT


def sidecar_route_name(hostname: str, port: int, sniffed: bool, bind: str, wildcard: str) -> str:
    """The RDS route an outbound HTTP chain asks for (istiod buildSidecarOutboundHTTPListenerOpts):
    the port, shared by every service on it; a sniffed listener on an address of its own (a VIP
    or an explicit bind) gets a route of its own, ``HOST:PORT``."""
    return f"{hostname}:{port}" if sniffed and bind != wildcard else str(port)


@dataclass(slots=True)
class _Entry:
    """istiod outboundListenerEntry: a listener being assembled."""

    port: ServicePort
    bind: str
    bind_to_port: bool
    chains: list[ChainOpts]
    protocol: PortProtocol
    locked: bool = False


@dataclass(frozen=True, slots=True)
class _Add:
    """One service port offered to the listener at (bind, port), kept until the listener is
    assembled: a listener is a function of the adds that reached it, in order."""

    service: Service
    port: ServicePort
    bind: str
    bind_to_port: bool
    cidr: str
    kind: _Kind
    vss: VirtualServicesByHost


# the catch-all egress listener began: the listeners there so far take no more services
_LOCK = "lock"

# a listener to build: what it is made from (equal inputs, equal listener) and its builder
ListenerPlan = tuple[Hashable, Callable[[], listener_pb2.Listener]]


@dataclass(slots=True)
class _Builder:
    ctx: OutboundContext
    endpoints: Callable[[Service], Sequence[Endpoint]]
    outbound_policy: str
    egress: str
    adds: dict[tuple[str, int], list[_Add | str]] = field(default_factory=dict)

    def can_bind(self, bind: str, port: int, protocol: PortProtocol) -> bool:
        """istiod conflictWithReservedListener: a wildcard listener may not take the ports of
        Envoy's own static and virtual listeners."""
        if bind and bind != self.ctx.wildcard:
            return True
        if not bind and not protocol.is_http:
            return True
        return port not in {STATUS_PORT, PROMETHEUS_PORT, *capture_ports(self.ctx.mesh)}

    def add_egress_listener(self, egress: EgressListenerView) -> None:
        none_mode = self.ctx.proxy.interception_mode == "NONE"
        if egress.bind.startswith("unix://"):
            return  # Unix domain socket listeners are not supported
        bind_to_port = none_mode or egress.capture_mode == "NONE"
        bind = egress.bind or (self.ctx.localhost if bind_to_port else "")
        vss = egress.virtual_services_by_host
        if egress.port is not None:
            p = egress.port
            listen_port = ServicePort(p.name, p.number, parse_protocol(p.protocol))
            if not self.can_bind(bind, listen_port.port, listen_port.protocol):
                return
            for service in egress.services:
                self.add(service, listen_port, bind, bind_to_port, vss)
            return
        # the catch-all egress listener adds nothing to ports an explicit one already claimed
        for adds in self.adds.values():
            adds.append(_LOCK)
        for service in egress.services:
            for port in service.ports:
                if not self.can_bind(bind, port.port, port.protocol):
                    continue
                if self._per_endpoint(service, port, bind):
                    self._add_per_endpoint(service, port, bind_to_port, vss)
                else:
                    self.add(service, port, bind, bind_to_port, vss)

    def _per_endpoint(self, service: Service, port: ServicePort, bind: str) -> bool:
        # headless TCP: one listener per pod, as HTTP can share 0.0.0.0:PORT but TCP cannot
        tcp_like = port.protocol in TCP_PROTOCOLS or port.protocol is PortProtocol.UNSUPPORTED
        return not bind and service.resolution is Resolution.PASSTHROUGH and not service.addresses and tcp_like

    def _add_per_endpoint(
        self, service: Service, port: ServicePort, bind_to_port: bool, vss: VirtualServicesByHost
    ) -> None:
        instances = [e for e in self.endpoints(service) if e.service_port_name == port.name]
        if service.registry is not Registry.KUBERNETES and not instances and service.selector is None:
            # a plain ServiceEntry with resolution NONE: fall back to a wildcard listener
            self.add(service, port, "", bind_to_port, vss)
            return
        own_ip = self.ctx.proxy.ip_addresses[0] if self.ctx.proxy.ip_addresses else ""
        for ep in instances:
            if not is_ip_address(ep.address) or ep.address == own_ip:
                continue
            self.add(service, port, ep.address, bind_to_port, vss)

    def add(
        self,
        service: Service,
        port: ServicePort,
        bind: str,
        bind_to_port: bool,
        vss: VirtualServicesByHost,
    ) -> None:
        """Offer one service port to the listener its address and port select."""
        if service.resolution is Resolution.ALIAS:
            return
        kind = listener_kind(port.protocol)
        if kind is None:
            return
        cidr = ""
        if kind is _Kind.HTTP:
            bind = bind or self.ctx.wildcard
        elif not bind:
            address = service_address(self.ctx, service)
            if "/" in address:
                bind, cidr = self.ctx.wildcard, address  # a CIDR: wildcard listener + prefix match
            else:
                bind = address
        self.adds.setdefault((bind, port.port), []).append(_Add(service, port, bind, bind_to_port, cidr, kind, vss))

    def plan(self) -> list[ListenerPlan]:
        """Every listener, in the order its first service came, with what it is built from."""
        context = self._context()
        plans: list[ListenerPlan] = []
        for key, adds in self.adds.items():
            plans.append(((context, key, tuple(map(self._input, adds))), partial(self._build, adds)))
        return plans

    def _context(self) -> Hashable:
        """What every listener of this build reads besides its adds."""
        proxy = self.ctx.proxy
        labels = tuple(sorted(proxy.labels.items()))
        # namespace, labels, cluster and mesh: what the tracing tags of HTTP chains read too
        return (
            Ident(self.ctx.mesh),
            self.outbound_policy,
            self.egress,
            proxy.ip_addresses,
            proxy.namespace,
            labels,
            proxy.cluster_id,
            proxy.mesh_id,
        )

    def _input(self, add: _Add | str) -> Hashable:
        """What one add contributes: the service by identity, its port and address, and for TCP
        chains the VirtualServices matching it and the services and DestinationRules those
        chains read, by identity."""
        if isinstance(add, str):
            return add
        if add.kind is _Kind.HTTP:
            return (add.service.hostname, add.port, add.bind, add.bind_to_port, add.kind)
        matching = add.vss.matching(add.service.hostname)
        hosts = {add.service.hostname}
        for vs in matching:
            for tcp in vs.spec.tcp:
                hosts.update(r.destination.host for r in tcp.route)
            for tls in vs.spec.tls:
                hosts.update(r.destination.host for r in tls.route)
        services, rules = self.ctx.services, self.ctx.rules
        read = tuple((h, Ident(services.get(h)), Ident(rules.get(h))) for h in sorted(hosts))
        vss = tuple(map(Ident, matching))
        return (Ident(add.service), add.port, add.bind, add.bind_to_port, add.cidr, add.kind, vss, read)

    def _build(self, adds: Sequence[_Add | str]) -> listener_pb2.Listener:
        entry: _Entry | None = None
        for add in adds:
            if isinstance(add, str):
                if entry is not None:
                    entry.locked = True
            else:
                entry = self._apply(entry, add)
        assert entry is not None  # the first add always makes the entry
        return self._finish(entry)

    def _apply(self, current: _Entry | None, add: _Add) -> _Entry | None:
        """istiod buildSidecarOutboundListener: one service port into the listener, merging on
        conflicts; returns the entry after it."""
        if current is not None and current.locked:
            return current
        service, port, bind, kind = add.service, add.port, add.bind, add.kind
        protocol = port.protocol
        merge_upgrades = False  # the merged listener becomes a sniffing one
        if kind is _Kind.HTTP:
            if current is not None and current.protocol not in TCP_PROTOCOLS:
                return current  # HTTP / sniffed listener already there: routes come from RDS
            merge_upgrades = current is not None
            http = self._http_opts(service, port, bind, kind)
            if bind == self.ctx.wildcard:
                # a TCP fallthrough next to HTTP on the wildcard: sniff HTTP (istiod)
                http = http.with_alpn(PLAINTEXT_HTTP_ALPNS, RAW_BUFFER_TRANSPORT)
                protocol = PortProtocol.UNSUPPORTED
            opts = [http]
        elif kind is _Kind.TCP:
            opts = sidecar_tcp_chain_opts(self.ctx, service, port, add.cidr, bind, add.vss)
            merge_upgrades = current is not None and current.protocol.is_http
        else:
            if current is not None and current.protocol is PortProtocol.UNSUPPORTED:
                return current
            tcp = sidecar_tcp_chain_opts(self.ctx, service, port, add.cidr, bind, add.vss)
            http = self._http_opts(service, port, bind, kind).with_alpn(PLAINTEXT_HTTP_ALPNS, RAW_BUFFER_TRANSPORT)
            opts = [*tcp, http]
            if current is not None and current.protocol.is_http:
                current = None  # sniffing replaces a plain HTTP listener outright
            else:
                merge_upgrades = current is not None
        if current is not None and not _well_known_compatible(port.protocol, current.protocol):
            return current
        if current is None:
            return _Entry(port, bind, add.bind_to_port, opts, protocol)
        _merge_chains(current, opts)
        if merge_upgrades:
            current.protocol = PortProtocol.UNSUPPORTED
        return current

    def _http_opts(self, service: Service, port: ServicePort, bind: str, kind: _Kind) -> ChainOpts:
        rds = sidecar_route_name(service.hostname, port.port, kind is _Kind.AUTO, bind, self.ctx.wildcard)
        return ChainOpts(http=HttpOptions(rds=rds, use_remote_address=False, protocol=port.protocol))

    def _finish(self, entry: _Entry) -> listener_pb2.Listener:
        """istiod buildListenerFromEntry."""
        mesh = self.ctx.mesh
        name = f"{entry.bind}_{entry.port.port}"
        out = listener_pb2.Listener(name=name, traffic_direction=_OUTBOUND, continue_on_listener_filters_timeout=True)
        out.address.CopyFrom(build_address(entry.bind, entry.port.port))
        if entry.bind_to_port:
            out.max_connections_to_accept_per_socket_event.value = MAX_ACCEPT_PER_EVENT
        else:
            out.bind_to_port.value = False
        need_http = any(c.application_protocols for c in entry.chains)
        need_tls = any(c.needs_tls_inspector() for c in entry.chains)
        if need_tls:  # istiod needTLSInspector: SNI or ALPN to read, never for sniffing alone
            out.listener_filters.append(tls_inspector_filter())
        if need_http:
            out.listener_filters.append(http_inspector_filter())
            out.listener_filters_timeout.CopyFrom(mesh.protocol_detection_timeout)
        else:
            out.listener_filters_timeout.CopyFrom(zero_duration())
        stat_prefix = delimited_stat_prefix(f"outbound_{name}")
        default: lc.FilterChain | None = None
        for opts in entry.chains:
            chain = build_filter_chain(opts, stat_prefix, mesh, self.ctx.proxy)
            chain.transport_socket_connect_timeout.CopyFrom(transport_socket_connect_timeout())
            match = opts.filter_chain_match()
            if match is None:
                default = chain  # match-all: the fallback, so partial matches never drop traffic
            else:
                chain.filter_chain_match.CopyFrom(match)
                out.filter_chains.append(chain)
        if default is not None and not out.filter_chains:
            out.filter_chains.append(default)
        elif default is not None:
            out.default_filter_chain.CopyFrom(default)
        else:
            filters = catch_all_filters(self.outbound_policy, self.egress)
            fallback = lc.FilterChain(name=PASSTHROUGH_FILTER_CHAIN, filters=filters)
            fallback.filter_chain_match.SetInParent()
            out.default_filter_chain.CopyFrom(fallback)
        return out


def _merge_chains(current: _Entry, incoming: Sequence[ChainOpts]) -> None:
    """istiod mergeTCPFilterChains: keep a new chain only if no existing one matches alike."""
    merged = list(current.chains)
    for chain in incoming:
        if not any(existing.conflicts_with(chain) for existing in merged):
            merged.append(chain)
    current.chains = merged


def _well_known_compatible(incoming: PortProtocol, existing: PortProtocol) -> bool:
    # server-first Mongo and MySQL cannot share a port with anything sniffed
    special = (PortProtocol.MONGO, PortProtocol.MYSQL)
    return not ((incoming in special or existing in special) and incoming != existing)


def catch_all_filters(outbound_policy: str, egress: str = PASSTHROUGH_CLUSTER) -> list[lc.Filter]:
    """Where traffic to an unknown destination goes (istiod buildOutboundCatchAllNetworkFiltersOnly):
    ``egress`` (PassthroughCluster or the Sidecar's egressProxy) for ALLOW_ANY, BlackHoleCluster
    for REGISTRY_ONLY."""
    cluster = egress if outbound_policy == ALLOW_ANY else BLACKHOLE_CLUSTER
    return [tcp_proxy_filter(cluster, cluster)]


def plan_sidecar_outbound_listeners(
    ctx: OutboundContext,
    egress_listeners: Sequence[EgressListenerView],
    outbound_policy: str,
    endpoints: Callable[[Service], Sequence[Endpoint]],
    egress: str = PASSTHROUGH_CLUSTER,
) -> list[ListenerPlan]:
    """The listeners for every egress listener of the proxy's SidecarScope, in its order, each
    with what it is built from, not yet built: a caller holding the listener built from equal
    inputs reuses it. ``egress`` is where their catch-all chains send ALLOW_ANY traffic."""
    builder = _Builder(ctx, endpoints, outbound_policy, egress)
    for listener in egress_listeners:
        builder.add_egress_listener(listener)
    return builder.plan()


def build_virtual_outbound_listener(
    ctx: OutboundContext, outbound_policy: str, egress: str = PASSTHROUGH_CLUSTER
) -> listener_pb2.Listener:
    """``virtualOutbound``: iptables sends all outbound traffic here; use_original_dst hands each
    connection to the listener for its original destination, else the catch-all chain."""
    port, _ = capture_ports(ctx.mesh)
    out = listener_pb2.Listener(name=VIRTUAL_OUTBOUND, traffic_direction=_OUTBOUND)
    out.address.CopyFrom(build_address(ctx.wildcard, port))
    out.use_original_dst.value = True
    out.max_connections_to_accept_per_socket_event.value = MAX_ACCEPT_PER_EVENT  # it binds (istiod, as for inbound)
    if ctx.proxy.interception_mode == "TPROXY":
        out.transparent.value = True
    # never pass through to the capture port itself: that would loop
    blackhole = out.filter_chains.add(name=VIRTUAL_OUTBOUND_BLACKHOLE)
    blackhole.filter_chain_match.destination_port.value = port
    blackhole.filters.append(tcp_proxy_filter(BLACKHOLE_CLUSTER, BLACKHOLE_CLUSTER))
    out.filter_chains.add(name=VIRTUAL_OUTBOUND_CATCH_ALL, filters=catch_all_filters(outbound_policy, egress))
    return out
