"""Sidecar outbound listeners, as istiod builds them (pilot/pkg/networking/core/listener.go,
listener_builder.go buildVirtualOutboundListener), each from its inputs value alone
(``inputs.py``; ``plan.py`` decides which service ports reach which listener).

Owns: assembling one listener from the service ports offered to it — HTTP ports share
``0.0.0.0_PORT`` with RDS route ``PORT``; sniffed ports get an HTTP chain picked by the HTTP
inspector next to the TCP one — istiod's protocol-conflict merging, the PassthroughFilterChain
fallback, and ``virtualOutbound`` on 15001.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from envoy.config.core.v3 import base_pb2
from envoy.config.listener.v3 import listener_components_pb2 as lc
from envoy.config.listener.v3 import listener_pb2

from app.api.mesh import MeshConfig
from app.model.proxy import Proxy
from app.model.service import Protocol as PortProtocol
from app.model.service import ServicePort
from app.model.sidecar_scope import ALLOW_ANY
from app.translate.address import build_address
from app.translate.cluster.builder import BLACKHOLE_CLUSTER, PASSTHROUGH_CLUSTER
from app.translate.listener.access_log import Logs, access_logs, listener_access_logs
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
from app.translate.listener.inputs import (
    ListenerContext,
    ListenerKind,
    PortAdd,
    ScopeListenerInputs,
    VirtualOutboundInputs,
)
from app.translate.listener.tcp import TCP_PROTOCOLS, OutboundContext, sidecar_tcp_chain_opts

VIRTUAL_OUTBOUND = "virtualOutbound"
VIRTUAL_OUTBOUND_BLACKHOLE = "virtualOutbound-blackhole"
VIRTUAL_OUTBOUND_CATCH_ALL = "virtualOutbound-catchall-tcp"
DEFAULT_OUTBOUND_PORT = 15001  # meshConfig.proxyListenPort
DEFAULT_INBOUND_PORT = 15006  # meshConfig.proxyInboundListenPort
STATUS_PORT = 15021  # the agent's health/status listener
PROMETHEUS_PORT = 15090  # Envoy's stats listener
_OUTBOUND = base_pb2.OUTBOUND


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


def build_scope_listener(inputs: ScopeListenerInputs) -> listener_pb2.Listener:
    """A scope-wide listener from its inputs value and nothing else."""
    if isinstance(inputs, VirtualOutboundInputs):
        return build_virtual_outbound_listener(inputs)
    return _Builder(inputs.context, inputs.context.proxy()).build(inputs.adds)


@dataclass(frozen=True, slots=True)
class _Builder:
    context: ListenerContext
    proxy: Proxy

    def _ctx(self, add: PortAdd) -> OutboundContext:
        """What a chain of this add reads: the proxy, the mesh, and the hosts the add names."""
        services = {h: s.obj for h, s, _ in add.reads if s.obj is not None}
        rules = {h: r.obj for h, _, r in add.reads if r.obj is not None}
        context = self.context
        return OutboundContext(
            self.proxy, context.mesh.obj, services, rules, context.logs, context.allocated, context.tracing
        )

    def build(self, adds: Sequence[PortAdd | str]) -> listener_pb2.Listener:
        entry: _Entry | None = None
        for add in adds:
            if isinstance(add, str):
                if entry is not None:
                    entry.locked = True
            else:
                entry = self._apply(entry, add)
        assert entry is not None  # the first add always makes the entry
        return self._finish(entry)

    def _apply(self, current: _Entry | None, add: PortAdd) -> _Entry | None:
        """istiod buildSidecarOutboundListener: one service port into the listener, merging on
        conflicts; returns the entry after it."""
        if current is not None and current.locked:
            return current
        port, bind, kind = add.port, add.bind, add.kind
        protocol = port.protocol
        merge_upgrades = False  # the merged listener becomes a sniffing one
        if kind is ListenerKind.HTTP:
            if current is not None and current.protocol not in TCP_PROTOCOLS:
                return current  # HTTP / sniffed listener already there: routes come from RDS
            merge_upgrades = current is not None
            http = self._http_opts(add)
            if bind == self._wildcard:
                # a TCP fallthrough next to HTTP on the wildcard: sniff HTTP (istiod)
                http = http.with_alpn(PLAINTEXT_HTTP_ALPNS, RAW_BUFFER_TRANSPORT)
                protocol = PortProtocol.UNSUPPORTED
            opts = [http]
        elif kind is ListenerKind.TCP:
            opts = self._tcp_opts(add)
            merge_upgrades = current is not None and current.protocol.is_http
        else:
            if current is not None and current.protocol is PortProtocol.UNSUPPORTED:
                return current
            tcp = self._tcp_opts(add)
            http = self._http_opts(add).with_alpn(PLAINTEXT_HTTP_ALPNS, RAW_BUFFER_TRANSPORT)
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

    @property
    def _wildcard(self) -> str:
        return OutboundContext(self.proxy, self.context.mesh.obj, {}, {}, ()).wildcard

    def _http_opts(self, add: PortAdd) -> ChainOpts:
        sniffed = add.kind is ListenerKind.AUTO
        rds = sidecar_route_name(add.hostname, add.port.port, sniffed, add.bind, self._wildcard)
        return ChainOpts(http=HttpOptions(rds=rds, use_remote_address=False, protocol=add.port.protocol))

    def _tcp_opts(self, add: PortAdd) -> list[ChainOpts]:
        assert add.service is not None  # TCP and sniffed adds carry their service
        vss = [vs.obj for vs in add.virtual_services]
        return sidecar_tcp_chain_opts(self._ctx(add), add.service.obj, add.port, add.cidr, add.bind, vss)

    def _finish(self, entry: _Entry) -> listener_pb2.Listener:
        """istiod buildListenerFromEntry."""
        mesh = self.context.mesh.obj
        name = f"{entry.bind}_{entry.port.port}"
        # no listener-level access log here: istiod's buildListenerFromEntry sets none
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
            chain = build_filter_chain(opts, stat_prefix, mesh, self.proxy, self.context.logs, self.context.tracing)
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
            filters = catch_all_filters(self.context.outbound_policy, mesh, self.context.logs, self.context.egress)
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


def catch_all_filters(
    outbound_policy: str, mesh: MeshConfig, logs: Logs, egress: str = PASSTHROUGH_CLUSTER
) -> list[lc.Filter]:
    """Where traffic to an unknown destination goes (istiod buildOutboundCatchAllNetworkFiltersOnly):
    ``egress`` (PassthroughCluster or the Sidecar's egressProxy) for ALLOW_ANY, BlackHoleCluster
    for REGISTRY_ONLY."""
    cluster = egress if outbound_policy == ALLOW_ANY else BLACKHOLE_CLUSTER
    return [tcp_proxy_filter(cluster, cluster, access_log=access_logs(mesh, logs))]


def build_virtual_outbound_listener(inputs: VirtualOutboundInputs) -> listener_pb2.Listener:
    """``virtualOutbound``: iptables sends all outbound traffic here; use_original_dst hands each
    connection to the listener for its original destination, else the catch-all chain."""
    context = inputs.context
    proxy = context.proxy()
    port, _ = capture_ports(context.mesh.obj)
    out = listener_pb2.Listener(
        name=VIRTUAL_OUTBOUND,
        traffic_direction=_OUTBOUND,
        access_log=listener_access_logs(context.mesh.obj, context.logs),
    )
    out.address.CopyFrom(build_address(OutboundContext(proxy, context.mesh.obj, {}, {}, ()).wildcard, port))
    out.use_original_dst.value = True
    out.max_connections_to_accept_per_socket_event.value = MAX_ACCEPT_PER_EVENT  # it binds (istiod, as for inbound)
    if proxy.interception_mode == "TPROXY":
        out.transparent.value = True
    # never pass through to the capture port itself: that would loop
    blackhole = out.filter_chains.add(name=VIRTUAL_OUTBOUND_BLACKHOLE)
    blackhole.filter_chain_match.destination_port.value = port
    blackhole.filters.append(tcp_proxy_filter(BLACKHOLE_CLUSTER, BLACKHOLE_CLUSTER))
    filters = catch_all_filters(context.outbound_policy, context.mesh.obj, context.logs, context.egress)
    out.filter_chains.add(name=VIRTUAL_OUTBOUND_CATCH_ALL, filters=filters)
    return out
