"""The sidecar's ``virtualInbound`` listener, as istiod builds it (listener_inbound.go,
filterchain_options.go, httproute.go buildSidecarInboundHTTPRouteConfig).

Owns: one set of filter chains per workload (target) port of the proxy's own service targets —
HTTP ports terminate in an HCM with an inline route to ``inbound|PORT||``, TCP ports in a
tcp_proxy — in the shape the workload's PeerAuthentication mode for the port asks for (PERMISSIVE,
the default: an Istio-mTLS chain and a plaintext chain split by the TLS and HTTP inspectors;
STRICT: mTLS only; DISABLE: plaintext only), the blackhole chain for the capture port itself,
and the passthrough chains to ``InboundPassthroughCluster`` for ports no service declares.

A Sidecar with ``ingress`` entries replaces the service ports with its entries (istiod
buildInboundChainConfigs); an entry that binds to its port (captureMode NONE, or DEFAULT on a
proxy that does not capture) is a listener of its own, ``BIND_PORT``, instead of chains of
``virtualInbound`` — which a proxy that does not capture never gets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from envoy.config.core.v3 import base_pb2, protocol_pb2
from envoy.config.listener.v3 import listener_components_pb2 as lc
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.listener.original_src.v3 import original_src_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.config.objects import ConfigObject
from app.model.authn import MtlsMode, PeerAuthentications
from app.model.authz import WorkloadPolicies
from app.model.proxy import Proxy
from app.model.service import Protocol, ServicePort
from app.model.sidecar_ingress import SidecarIngress, after_tls_termination, global_unicast_ip
from app.translate.address import build_address
from app.translate.cluster.builder import (
    BLACKHOLE_CLUSTER,
    INBOUND_PASSTHROUGH_CLUSTER,
    ServiceTarget,
    inbound_cluster_name,
)
from app.translate.listener.access_log import Logs, access_logs, listener_access_logs
from app.translate.listener.authz import rbac_http_filters, rbac_network_filters
from app.translate.listener.builder import PROMETHEUS_PORT, STATUS_PORT, capture_ports
from app.translate.listener.ext_authz import NO_CUSTOM, CustomAuthz, custom_http_filters, custom_network_filters
from app.translate.listener.filters import (
    ALL_ISTIO_MTLS_ALPNS,
    MAX_ACCEPT_PER_EVENT,
    MTLS_HTTP_ALPNS,
    MTLS_TCP_ALPNS,
    PLAINTEXT_HTTP_ALPNS,
    RAW_BUFFER_TRANSPORT,
    SERVER_NAME,
    TLS_TRANSPORT,
    ChainOpts,
    HttpOptions,
    build_filter_chain,
    delimited_stat_prefix,
    http_inspector_filter,
    original_dst_filter,
    pack,
    ports_predicate,
    tcp_filter_stack,
    tcp_proxy_filter,
    tls_inspector_filter,
    zero_duration,
)
from app.translate.listener.jwt import jwt_authn_filters
from app.translate.listener.tcp import OutboundContext
from app.translate.listener.tls import gateway_tls_context, inbound_mtls_context
from app.translate.listener.tracing import LEGACY, TraceChoice
from app.translate.metadata import config_metadata

VIRTUAL_INBOUND = "virtualInbound"
VIRTUAL_INBOUND_BLACKHOLE = "virtualInbound-blackhole"
VIRTUAL_INBOUND_CATCH_ALL_HTTP = "virtualInbound-catchall-http"
ORIGINAL_SRC = "envoy.filters.listener.original_src"


@dataclass(frozen=True, slots=True)
class _Match:
    """istiod FilterChainMatchOptions."""

    alpns: tuple[str, ...]
    transport: str
    http: bool
    tls: bool


# istiod filterchain_options.go, by the port's protocol and the workload's mTLS mode.
# PERMISSIVE: Istio mTLS (told apart by its ALPNs) next to plaintext
_PERMISSIVE_HTTP = (
    _Match(ALL_ISTIO_MTLS_ALPNS, TLS_TRANSPORT, True, True),
    _Match((), RAW_BUFFER_TRANSPORT, True, False),
)
_PERMISSIVE_TCP = (
    _Match(ALL_ISTIO_MTLS_ALPNS, TLS_TRANSPORT, False, True),
    _Match((), TLS_TRANSPORT, False, False),  # the app's own TLS, proxied as is
    _Match((), RAW_BUFFER_TRANSPORT, False, False),
)
_PERMISSIVE_AUTO = (
    _Match(MTLS_HTTP_ALPNS, TLS_TRANSPORT, True, True),
    _Match(PLAINTEXT_HTTP_ALPNS, RAW_BUFFER_TRANSPORT, True, False),
    _Match(MTLS_TCP_ALPNS, TLS_TRANSPORT, False, True),
    _Match((), RAW_BUFFER_TRANSPORT, False, False),
    _Match((), TLS_TRANSPORT, False, False),
)
# STRICT: mTLS only
_STRICT_HTTP = (_Match((), TLS_TRANSPORT, True, True),)
_STRICT_TCP = (_Match((), TLS_TRANSPORT, False, True),)
_STRICT_AUTO = (
    _Match(MTLS_HTTP_ALPNS, TLS_TRANSPORT, True, True),
    _Match((), TLS_TRANSPORT, False, True),
)
# DISABLE: plaintext only
_PLAIN_HTTP = (_Match((), RAW_BUFFER_TRANSPORT, True, False),)
_PLAIN_TCP = (_Match((), RAW_BUFFER_TRANSPORT, False, False),)
_PLAIN_AUTO = (
    _Match(PLAINTEXT_HTTP_ALPNS, RAW_BUFFER_TRANSPORT, True, False),
    _Match((), RAW_BUFFER_TRANSPORT, False, False),
)
_OPTIONS = {
    MtlsMode.STRICT: (_STRICT_HTTP, _STRICT_AUTO, _STRICT_TCP),
    MtlsMode.PERMISSIVE: (_PERMISSIVE_HTTP, _PERMISSIVE_AUTO, _PERMISSIVE_TCP),
    MtlsMode.DISABLE: (_PLAIN_HTTP, _PLAIN_AUTO, _PLAIN_TCP),
}


@dataclass(frozen=True, slots=True)
class _ChainConfig:
    """istiod inboundChainConfig: one workload port (or the passthrough)."""

    cluster: str
    service_port: ServicePort
    target_port: int
    hostname: str
    bind: str
    mode: MtlsMode  # the mTLS the workload accepts on the port (PeerAuthentication)
    passthrough: bool = False
    bind_to_port: bool = False  # a listener of its own, not chains of virtualInbound
    tls: net.ServerTLSSettings | None = None  # a Sidecar ingress entry's own TLS
    sidecar: tuple[str, str] | None = None  # (namespace, name) of the Sidecar it comes from

    def name(self, http: bool) -> str:
        if self.passthrough:
            return VIRTUAL_INBOUND_CATCH_ALL_HTTP if http else VIRTUAL_INBOUND
        return f"{self.bind}_{self.target_port}"

    def stat_prefix(self) -> str:
        return delimited_stat_prefix(self.cluster if self.passthrough else "inbound_" + self.name(True))


def _options(cc: _ChainConfig) -> tuple[_Match, ...]:
    """istiod getFilterChainMatchOptions; a port with its own TLS, which only a DISABLE mode
    leaves room for, gets one TLS chain (getTLSFilterChainMatchOptions)."""
    protocol = cc.service_port.protocol
    if cc.tls is not None and cc.mode is MtlsMode.DISABLE:
        return (_Match((), TLS_TRANSPORT, protocol.is_http, True),)
    http, auto, tcp = _OPTIONS.get(cc.mode, _OPTIONS[MtlsMode.PERMISSIVE])
    if protocol.is_http:
        return http
    if protocol is Protocol.UNSUPPORTED:
        return auto
    return tcp


def _reserved(ctx: OutboundContext, bind: str, port: int, protocol: Protocol, virtual: bool) -> bool:
    """istiod conflictWithReservedListener: a wildcard (or unset, for HTTP) bind may not take
    Envoy's static ports, nor, when ``virtual``, the capture ports."""
    if bind and bind != ctx.wildcard:
        return False
    if not bind and not protocol.is_http:
        return False
    return port in (STATUS_PORT, PROMETHEUS_PORT) or (virtual and port in capture_ports(ctx.mesh))


def _service_chain_configs(
    ctx: OutboundContext, targets: Sequence[ServiceTarget], authn: PeerAuthentications, skip: frozenset[int]
) -> dict[int, _ChainConfig]:
    """One per target port not in ``skip``; the first service on a port wins (istiod: the
    oldest), as in CDS."""
    proxy = ctx.proxy
    by_port: dict[int, _ChainConfig] = {}
    for service, service_port, endpoint in targets:
        port = endpoint.port
        if port in by_port or port in skip or _reserved(ctx, ctx.wildcard, port, service_port.protocol, True):
            continue
        by_port[port] = _ChainConfig(
            cluster=inbound_cluster_name(port),
            service_port=service_port,
            target_port=port,
            hostname=service.hostname,
            bind=ctx.wildcard,
            mode=authn.workload_mode(proxy.namespace, proxy.labels, port),
            bind_to_port=proxy.interception_mode == "NONE",
        )
    return by_port


def _chain_configs(
    ctx: OutboundContext,
    targets: Sequence[ServiceTarget],
    authn: PeerAuthentications,
    ingress: SidecarIngress | None,
) -> list[_ChainConfig]:
    """istiod buildInboundChainConfigs, ordered by port: the service ports, or a Sidecar's
    ingress entries (with the service ports they leave free under the merge flag)."""
    proxy = ctx.proxy
    if ingress is None:
        if proxy.interception_mode == "NONE":
            return []  # the app itself listens on its ports: binding them would break it
        by_port = _service_chain_configs(ctx, targets, authn, frozenset())
    else:
        by_port = {}
        if ingress.features.sidecar_service_inbound_listener_merge:
            named = frozenset(i.port.port for i in ingress.ports)
            by_port = _service_chain_configs(ctx, targets, authn, named)
        bind = global_unicast_ip(proxy.ip_addresses) or ctx.wildcard
        for entry in ingress.ports:
            port = entry.port
            # istiod checks ingress binds against the static listeners only
            if port.port in by_port or _reserved(ctx, entry.bind, port.port, port.protocol, False):
                continue
            tls = entry.tls if ingress.features.tls_on_sidecar_ingress else None
            if tls is not None:
                port = ServicePort(port.name, port.port, after_tls_termination(port.protocol))
            by_port[port.port] = _ChainConfig(
                cluster=inbound_cluster_name(port.port),
                service_port=port,
                target_port=port.port,
                hostname=f"{ingress.name}.{ingress.namespace}",
                bind=entry.bind or bind,
                mode=authn.workload_mode(proxy.namespace, proxy.labels, port.port),
                bind_to_port=entry.bind_to_port,
                tls=tls,
                sidecar=(ingress.namespace, ingress.name),
            )
    return [by_port[p] for p in sorted(by_port)]


@dataclass(frozen=True, slots=True)
class InboundListenerInputs:
    """What a sidecar's inbound listeners are built from, as a value: the builder reads nothing
    else, so equal inputs build equal listeners and a stream reuses its proxy's last ones while
    they hold (a Sidecar that only narrows egress leaves them equal). Compared, never hashed:
    the snapshot's objects compare by identity first, the Sidecar's entries by value.

    ``authn``: the PeerAuthentications that decide each port's mTLS mode; ``authz``: the
    workload's AuthorizationPolicies, as RBAC filters on every chain but the blackhole, after
    ``jwt``'s (its RequestAuthentications) jwt_authn filter on HTTP chains; ``logs``: the access
    logs its Telemetry selects for inbound listeners; ``custom``: its
    CUSTOM policies with their providers resolved, whose filters come first."""

    proxy: Proxy
    mesh: MeshConfig
    targets: tuple[ServiceTarget, ...]
    authn: PeerAuthentications
    authz: WorkloadPolicies
    jwt: tuple[ConfigObject, ...]
    ingress: SidecarIngress | None
    logs: Logs  # what its inbound listeners log (the SERVER mode's selection)
    custom: CustomAuthz = NO_CUSTOM
    tracing: TraceChoice = LEGACY  # what its inbound listeners trace with (the SERVER mode's)


def build_inbound_listeners(inputs: InboundListenerInputs) -> list[listener_pb2.Listener]:
    """``virtualInbound`` (for a proxy that captures) and the inbound listeners that bind their
    own port."""
    # no outbound service read
    ctx = OutboundContext(inputs.proxy, inputs.mesh, {}, {}, inputs.logs, tracing=inputs.tracing)
    targets, authn, authz, jwt, ingress = inputs.targets, inputs.authn, inputs.authz, inputs.jwt, inputs.ingress
    rbac = _Rbac(
        (*custom_http_filters(inputs.custom), *jwt_authn_filters(jwt), *rbac_http_filters(authz)),
        (*custom_network_filters(inputs.custom), *rbac_network_filters(authz)),
    )
    virtual: list[lc.FilterChain] = []
    bound: list[listener_pb2.Listener] = []
    for cc in _chain_configs(ctx, targets, authn, ingress):
        chains = _chains(ctx, cc, rbac)
        if cc.bind_to_port:
            bound.append(_listener(ctx, cc.name(False), cc.bind, cc.target_port, chains, virtual=False))
        else:
            virtual.extend(chains)
    if ctx.proxy.interception_mode == "NONE":
        return bound
    declared = {e.port.port for e in ingress.ports} if ingress is not None else {ep.port for _, _, ep in targets}
    passthrough = [
        *_chains(ctx, _passthrough_config(ctx, authn, 0), rbac),
        *(
            chain
            for port in authn.port_level_ports(ctx.proxy.namespace, ctx.proxy.labels)
            if port not in declared
            for chain in _chains(ctx, _passthrough_config(ctx, authn, port), rbac)
        ),
    ]
    _, capture = capture_ports(ctx.mesh)
    chains = [_blackhole_chain(capture), *passthrough, *virtual]
    return [_listener(ctx, VIRTUAL_INBOUND, ctx.wildcard, capture, chains, virtual=True), *bound]


def _passthrough_config(ctx: OutboundContext, authn: PeerAuthentications, port: int) -> _ChainConfig:
    """istiod buildInboundPassthroughChains (authn ForPassthrough): port 0 for every port no
    chain claims, with the workload's mode; and one per port-level mode of a port that no
    service (or Sidecar ingress entry) declares, with that port's mode."""
    return _ChainConfig(
        cluster=INBOUND_PASSTHROUGH_CLUSTER,
        service_port=ServicePort(VIRTUAL_INBOUND, 0, Protocol.UNSUPPORTED),
        target_port=port,
        hostname="",
        bind=ctx.wildcard,
        mode=authn.workload_mode(ctx.proxy.namespace, ctx.proxy.labels, port),
        passthrough=True,
    )


def _listener(
    ctx: OutboundContext, name: str, bind: str, port: int, chains: Sequence[lc.FilterChain], *, virtual: bool
) -> listener_pb2.Listener:
    """istiod buildInboundListener: ``virtual`` listeners take redirected traffic (original
    destination, and the original source too under TPROXY); the others bind their port."""
    out = listener_pb2.Listener(
        name=name,
        traffic_direction=base_pb2.INBOUND,
        continue_on_listener_filters_timeout=True,
        access_log=listener_access_logs(ctx.mesh, ctx.logs),
    )
    out.address.CopyFrom(build_address(bind, port))
    out.max_connections_to_accept_per_socket_event.value = MAX_ACCEPT_PER_EVENT
    tproxy = virtual and ctx.proxy.interception_mode == "TPROXY"
    if tproxy:
        out.transparent.value = True
    out.filter_chains.extend(chains)
    if virtual:
        out.listener_filters.append(original_dst_filter())
    if tproxy:
        src = original_src_pb2.OriginalSrc(mark=1337)
        out.listener_filters.append(lc.ListenerFilter(name=ORIGINAL_SRC, typed_config=pack(src)))
    out.listener_filters.extend(_inspectors(chains))
    out.listener_filters_timeout.CopyFrom(ctx.mesh.protocol_detection_timeout)
    return out


def _blackhole_chain(port: int) -> lc.FilterChain:
    # traffic addressed to the capture port itself would loop back here forever
    chain = lc.FilterChain(name=VIRTUAL_INBOUND_BLACKHOLE)
    chain.filter_chain_match.destination_port.value = port
    chain.filters.append(tcp_proxy_filter(BLACKHOLE_CLUSTER, BLACKHOLE_CLUSTER))
    return chain


@dataclass(frozen=True, slots=True)
class _Rbac:
    """The workload's authorization filters, built once for all its chains."""

    http: tuple[hcm_pb2.HttpFilter, ...]
    network: tuple[lc.Filter, ...]


def _chains(ctx: OutboundContext, cc: _ChainConfig, rbac: _Rbac) -> list[lc.FilterChain]:
    options = _options(cc)
    # built once per port: the mTLS and plaintext chains of a port share them
    http = _http_options(ctx, cc, rbac.http) if any(m.http for m in options) else None
    tcp = () if all(m.http for m in options) else (*rbac.network, *_tcp_filters(ctx, cc))
    stat_prefix = cc.stat_prefix()
    out = []
    for m in options:
        if not m.tls:
            tls_context = None
        elif cc.tls is not None and cc.mode is MtlsMode.DISABLE:
            tls_context = gateway_tls_context(cc.tls, False, ctx.mesh)
        else:
            tls_context = inbound_mtls_context(ctx.mesh, tcp=not m.http)
        opts = ChainOpts(
            tls_context=tls_context,
            http=http if m.http else None,
            network_filters=() if m.http else tcp,
            name=cc.name(m.http),
        )
        chain = build_filter_chain(opts, stat_prefix, ctx.mesh, ctx.proxy, ctx.logs, ctx.tracing)
        match = chain.filter_chain_match
        match.transport_protocol = m.transport
        match.application_protocols.extend(m.alpns)
        if cc.target_port:
            match.destination_port.value = cc.target_port
        if cc.sidecar is not None:
            chain.metadata.CopyFrom(config_metadata("sidecar", *cc.sidecar))
        out.append(chain)
    return out


def _tcp_filters(ctx: OutboundContext, cc: _ChainConfig) -> list[lc.Filter]:
    proxy = tcp_proxy_filter(cc.cluster, cc.cluster, access_log=access_logs(ctx.mesh, ctx.logs))
    return tcp_filter_stack(cc.service_port.protocol, proxy, cc.cluster)


def _http_options(ctx: OutboundContext, cc: _ChainConfig, authz: tuple[hcm_pb2.HttpFilter, ...]) -> HttpOptions:
    base = hcm_pb2.HttpConnectionManager(
        forward_client_cert_details=hcm_pb2.HttpConnectionManager.APPEND_FORWARD,
        server_name=SERVER_NAME,
    )
    details = base.set_current_client_cert_details
    details.subject.value = True
    details.uri = True
    details.dns = True
    if cc.service_port.protocol.is_http2:
        base.http2_protocol_options.CopyFrom(protocol_pb2.Http2ProtocolOptions())
    return HttpOptions(
        route_config=_route_config(ctx, cc),
        use_remote_address=False,
        protocol=cc.service_port.protocol,
        base=base,
        stat_prefix=cc.stat_prefix(),
        authz=authz,
    )


def _route_config(ctx: OutboundContext, cc: _ChainConfig) -> route_pb2.RouteConfiguration:
    """One ``*`` virtual host sending everything to the inbound cluster, without timeouts."""
    route = rc.Route(name="default")
    route.match.prefix = "/"
    route.decorator.operation = f"{cc.hostname}:{cc.service_port.port}/*"
    action = route.route
    action.cluster = cc.cluster
    action.timeout.CopyFrom(zero_duration())
    action.max_stream_duration.max_stream_duration.CopyFrom(zero_duration())
    action.max_stream_duration.grpc_timeout_header_max.CopyFrom(zero_duration())
    if cc.service_port.protocol not in (Protocol.GRPC, Protocol.GRPC_WEB):
        # istiod BuildDefaultHTTPInboundRoute: retry requests reset before they reached the app,
        # never on gRPC ports (streams do not survive "reset-before-request")
        action.retry_policy.retry_on = "reset-before-request"
        action.retry_policy.num_retries.value = 2
    out = route_pb2.RouteConfiguration(name=cc.cluster)
    out.virtual_hosts.add(name=f"inbound|http|{cc.service_port.port}", domains=["*"], routes=[route])
    out.validate_clusters.value = False
    return out


def _inspectors(chains: Sequence[lc.FilterChain]) -> list[lc.ListenerFilter]:
    """istiod populateListenerFilters: TLS / HTTP inspectors only on the ports whose chains
    match on transport or HTTP ALPN (port 0 stands for the passthrough chains)."""
    tls: dict[int, bool] = {}
    http: dict[int, bool] = {}
    for chain in chains:
        m = chain.filter_chain_match
        port = m.destination_port.value
        tls[port] = tls.get(port, False) or m.transport_protocol == TLS_TRANSPORT
        http[port] = http.get(port, False) or any(a in PLAINTEXT_HTTP_ALPNS for a in m.application_protocols)
    out = []
    if any(tls.values()):
        if tls.get(0, False):
            off = sorted(p for p, on in tls.items() if p and not on)
            out.append(tls_inspector_filter(ports_predicate(off) if off else None))
        else:
            on = sorted(p for p, v in tls.items() if p and v)
            negated = lc.ListenerFilterChainMatchPredicate()
            negated.not_match.CopyFrom(ports_predicate(on))
            out.append(tls_inspector_filter(negated))
    # after the TLS inspector: once it says "tls" the HTTP inspector leaves the connection alone
    if any(http.values()):
        off = sorted(p for p, on in http.items() if not on)
        out.append(http_inspector_filter(ports_predicate(off) if off else None))
    return out
