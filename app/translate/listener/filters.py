"""Listener building blocks as istiod emits them (pilot/pkg/xds/filters/filters.go,
listener_builder.go buildHTTPConnectionManager, listener.go filterChainOpts / toFilterChainMatch).

Owns: well-known filter names and ALPN sets, the listener filters (original_dst, tls_inspector,
http_inspector), tcp_proxy, the HttpConnectionManager with istiod's settings and HTTP filter
order (grpc_web for gRPC-Web, grpc_stats, fault, cors, router), ``ChainOpts`` (istiod's
filterChainOpts) with its FilterChainMatch, and turning opts into a FilterChain.

Istio-proxy-only filters (istio.metadata_exchange, istio.stats, istio.alpn, istio_authn, wasm)
are left out on purpose: an unmodified Envoy rejects config that names them.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.core.v3 import address_pb2, base_pb2, config_source_pb2, protocol_pb2
from envoy.config.listener.v3 import listener_components_pb2 as lc
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.http.cors.v3 import cors_pb2
from envoy.extensions.filters.http.fault.v3 import fault_pb2
from envoy.extensions.filters.http.grpc_stats.v3 import config_pb2 as grpc_stats_pb2
from envoy.extensions.filters.http.grpc_web.v3 import grpc_web_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.listener.http_inspector.v3 import http_inspector_pb2
from envoy.extensions.filters.listener.original_dst.v3 import original_dst_pb2
from envoy.extensions.filters.listener.tls_inspector.v3 import tls_inspector_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.filters.network.mongo_proxy.v3 import mongo_proxy_pb2
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.request_id.uuid.v3 import uuid_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from envoy.type.v3 import hash_policy_pb2, range_pb2
from google.protobuf import any_pb2, duration_pb2, message, wrappers_pb2

from app.api.mesh import MeshConfig
from app.model.proxy import Proxy
from app.model.service import Protocol
from app.translate.cluster.tls import TLS_SOCKET
from app.translate.listener.access_log import Logs, access_logs
from app.translate.listener.tracing import TraceChoice, hcm_tracing, request_id_for_sampling
from app.translate.route.builder import CORS_FILTER as CORS
from app.translate.route.builder import FAULT_FILTER as FAULT

HCM = "envoy.filters.network.http_connection_manager"
TCP_PROXY = "envoy.filters.network.tcp_proxy"
MONGO_PROXY = "envoy.filters.network.mongo_proxy"
ORIGINAL_DST = "envoy.filters.listener.original_dst"
TLS_INSPECTOR = "envoy.filters.listener.tls_inspector"
HTTP_INSPECTOR = "envoy.filters.listener.http_inspector"
ROUTER = "envoy.filters.http.router"
GRPC_STATS = "envoy.filters.http.grpc_stats"
GRPC_WEB = "envoy.filters.http.grpc_web"

TLS_TRANSPORT = "tls"
RAW_BUFFER_TRANSPORT = "raw_buffer"
# what the HTTP inspector reports for plaintext HTTP (HTTP/1.0 only with PILOT_HTTP10)
PLAINTEXT_HTTP_ALPNS = ("http/1.1", "h2c")
# ALPNs an Istio client sends over mTLS (its istio.alpn filter rewrites them)
MTLS_HTTP_ALPNS = ("istio-http/1.0", "istio-http/1.1", "istio-h2")
ALL_ISTIO_MTLS_ALPNS = ("istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2")
MTLS_TCP_ALPNS = ("istio-peer-exchange", "istio")

PASSTHROUGH_FILTER_CHAIN = "PassthroughFilterChain"
SERVER_NAME = "istio-envoy"  # the HCM server_name of inbound and gateway listeners
STAT_PREFIX_DELIMITER = ";"  # istiod util.DelimitedStatsPrefix
# MAX_CONNECTIONS_PER_SOCKET_EVENT_LOOP's default: istiod sets it on every listener that binds
# (maxConnectionsToAcceptPerSocketEvent)
MAX_ACCEPT_PER_EVENT = 1


def pack(msg: message.Message) -> any_pb2.Any:
    out = any_pb2.Any()
    out.Pack(msg)
    return out


def zero_duration() -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=0)


def transport_socket_connect_timeout() -> duration_pb2.Duration:
    """istiod gatewayTransportSocketConnectTimeout: PILOT_GATEWAY_TRANSPORT_SOCKET_CONNECT_TIMEOUT's
    default, 15 s, set on the chains of outbound and gateway listeners against slow TLS handshakes."""
    return duration_pb2.Duration(seconds=15)


def delimited_stat_prefix(prefix: str) -> str:
    return prefix + STAT_PREFIX_DELIMITER


# --- listener filters ------------------------------------------------------------------------


def original_dst_filter() -> lc.ListenerFilter:
    return lc.ListenerFilter(name=ORIGINAL_DST, typed_config=pack(original_dst_pb2.OriginalDst()))


def tls_inspector_filter(disabled: lc.ListenerFilterChainMatchPredicate | None = None) -> lc.ListenerFilter:
    cfg = tls_inspector_pb2.TlsInspector()
    cfg.initial_read_buffer_size.value = 512  # istiod: Envoy's 64KiB default is wasteful
    out = lc.ListenerFilter(name=TLS_INSPECTOR, typed_config=pack(cfg))
    if disabled is not None:
        out.filter_disabled.CopyFrom(disabled)
    return out


def http_inspector_filter(disabled: lc.ListenerFilterChainMatchPredicate | None = None) -> lc.ListenerFilter:
    out = lc.ListenerFilter(name=HTTP_INSPECTOR, typed_config=pack(http_inspector_pb2.HttpInspector()))
    if disabled is not None:
        out.filter_disabled.CopyFrom(disabled)
    return out


def ports_predicate(ports: Sequence[int]) -> lc.ListenerFilterChainMatchPredicate:
    """Matches connections to any of ``ports`` (istiod listenerPredicateExcludePorts)."""
    rules = []
    for p in ports:
        rule = lc.ListenerFilterChainMatchPredicate()
        rule.destination_port_range.CopyFrom(range_pb2.Int32Range(start=p, end=p + 1))
        rules.append(rule)
    if len(rules) == 1:
        return rules[0]
    out = lc.ListenerFilterChainMatchPredicate()
    out.or_match.rules.extend(rules)
    return out


# --- network filters -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TcpSettings:
    """What a DestinationRule adds to a tcp_proxy (istiod buildOutboundNetworkFiltersWithSingleDestination)."""

    idle_timeout: duration_pb2.Duration | None = None
    max_connection_duration: duration_pb2.Duration | None = None
    hash_source_ip: bool = False


def tcp_proxy_filter(
    stat_prefix: str,
    cluster: str = "",
    weighted: Sequence[tuple[str, int]] = (),
    settings: TcpSettings | None = None,
    access_log: Sequence[accesslog_pb2.AccessLog] = (),
) -> lc.Filter:
    """``access_log``: the listener class's (access_log.access_logs), on every tcp_proxy istiod
    logs; not on the blackhole chains guarding the capture ports."""
    cfg = tcp_proxy_pb2.TcpProxy(stat_prefix=stat_prefix, access_log=access_log)
    if weighted:
        for name, weight in weighted:
            cfg.weighted_clusters.clusters.add(name=name, weight=weight)
    else:
        cfg.cluster = cluster
    if settings is not None:
        if settings.idle_timeout is not None:
            cfg.idle_timeout.CopyFrom(settings.idle_timeout)
        if settings.max_connection_duration is not None:
            cfg.max_downstream_connection_duration.CopyFrom(settings.max_connection_duration)
        if settings.hash_source_ip:
            cfg.hash_policy.append(hash_policy_pb2.HashPolicy(source_ip=hash_policy_pb2.HashPolicy.SourceIp()))
    return lc.Filter(name=TCP_PROXY, typed_config=pack(cfg))


def tcp_filter_stack(protocol: Protocol, tcp_filter: lc.Filter, stat_prefix: str) -> list[lc.Filter]:
    """istiod buildNetworkFiltersStack: Mongo gets mongo_proxy in front (PILOT_ENABLE_MONGO_FILTER
    defaults on); Redis and MySQL filters are off by default."""
    if protocol is Protocol.MONGO:
        mongo = lc.Filter(name=MONGO_PROXY, typed_config=pack(mongo_proxy_pb2.MongoProxy(stat_prefix=stat_prefix)))
        return [mongo, tcp_filter]
    return [tcp_filter]


# --- HTTP connection manager -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """istiod httpListenerOpts: what differs between sidecar outbound, inbound and gateway HCMs."""

    rds: str = ""
    route_config: route_pb2.RouteConfiguration | None = None
    use_remote_address: bool = False
    protocol: Protocol = Protocol.HTTP
    # settings of the listener class (server name, XFCC, codec options), merged into the HCM
    base: hcm_pb2.HttpConnectionManager = field(default_factory=hcm_pb2.HttpConnectionManager)
    stat_prefix: str = ""  # empty: derived from the listener's direction and name
    # the workload's authorization (RBAC) filters, first in the chain as istiod puts them
    authz: tuple[hcm_pb2.HttpFilter, ...] = ()


def build_http_connection_manager(
    opts: HttpOptions, stat_prefix: str, mesh: MeshConfig, proxy: Proxy, logs: Logs, tracing: TraceChoice
) -> hcm_pb2.HttpConnectionManager:
    """``logs``: what the listener's class logs (access_log.access_logs); ``tracing``: what it
    traces with (tracing.resolve_tracing)."""
    out = hcm_pb2.HttpConnectionManager()
    out.CopyFrom(opts.base)
    out.codec_type = hcm_pb2.HttpConnectionManager.AUTO
    out.stat_prefix = stat_prefix
    _apply_path_normalization(out, mesh)
    out.use_remote_address.value = opts.use_remote_address
    out.upgrade_configs.add(upgrade_type="websocket")
    out.stream_idle_timeout.CopyFrom(zero_duration())
    if opts.rds:
        src = out.rds.config_source
        src.ads.SetInParent()
        src.initial_fetch_timeout.CopyFrom(zero_duration())
        src.resource_api_version = config_source_pb2.V3
        out.rds.route_config_name = opts.rds
    elif opts.route_config is not None:
        out.route_config.CopyFrom(opts.route_config)
    out.access_log.extend(access_logs(mesh, logs))
    out.http_filters.extend(opts.authz)
    out.http_filters.extend(_http_filters(opts.protocol))
    uuid = uuid_pb2.UuidRequestIdConfig()
    uuid.use_request_id_for_trace_sampling.value = request_id_for_sampling(tracing)
    out.request_id_extension.typed_config.CopyFrom(pack(uuid))
    out.proxy_100_continue = True  # PILOT_ENABLE_100_CONTINUE_HEADERS default
    traced = hcm_tracing(mesh, proxy, tracing)
    if traced is not None:
        out.tracing.CopyFrom(traced)
    return out


def _apply_path_normalization(out: hcm_pb2.HttpConnectionManager, mesh: MeshConfig) -> None:
    kind = MeshConfig.ProxyPathNormalization
    H = hcm_pb2.HttpConnectionManager
    out.path_with_escaped_slashes_action = H.KEEP_UNCHANGED
    mode = mesh.path_normalization.normalization
    if mode == kind.NONE:
        out.normalize_path.value = False
        return
    out.normalize_path.value = True
    if mode in (kind.MERGE_SLASHES, kind.DECODE_AND_MERGE_SLASHES):
        out.merge_slashes = True
    if mode == kind.DECODE_AND_MERGE_SLASHES:
        out.path_with_escaped_slashes_action = H.UNESCAPE_AND_FORWARD


def _http_filters(protocol: Protocol) -> list[hcm_pb2.HttpFilter]:
    filters = []
    if protocol is Protocol.GRPC_WEB:
        filters.append(hcm_pb2.HttpFilter(name=GRPC_WEB, typed_config=pack(grpc_web_pb2.GrpcWeb())))
    stats = grpc_stats_pb2.FilterConfig(emit_filter_state=True)
    stats.stats_for_all_methods.value = False
    filters.append(hcm_pb2.HttpFilter(name=GRPC_STATS, typed_config=pack(stats)))
    # fault and cors before the router: routes carry their per-filter config
    filters.append(hcm_pb2.HttpFilter(name=FAULT, typed_config=pack(fault_pb2.HTTPFault())))
    filters.append(hcm_pb2.HttpFilter(name=CORS, typed_config=pack(cors_pb2.Cors())))
    filters.append(hcm_pb2.HttpFilter(name=ROUTER, typed_config=pack(router_pb2.Router())))
    return filters


def http1_options() -> protocol_pb2.Http1ProtocolOptions:
    """HTTP/1.1 options as istiod sets them (HTTP/1.0 only with PILOT_HTTP10, off by default)."""
    return protocol_pb2.Http1ProtocolOptions()


# --- filter chains ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChainOpts:
    """One filter chain before it is built (istiod filterChainOpts)."""

    sni_hosts: tuple[str, ...] = ()
    destination_cidrs: tuple[str, ...] = ()
    application_protocols: tuple[str, ...] = ()
    transport_protocol: str = ""
    metadata: base_pb2.Metadata | None = None
    tls_context: tls_pb2.DownstreamTlsContext | None = None
    http: HttpOptions | None = None
    network_filters: tuple[lc.Filter, ...] = ()
    name: str = ""

    def with_alpn(self, alpns: Sequence[str], transport: str) -> ChainOpts:
        return dataclasses.replace(
            self, application_protocols=self.application_protocols + tuple(alpns), transport_protocol=transport
        )

    def is_match_all(self) -> bool:
        return (
            (not self.sni_hosts or "*" in self.sni_hosts)
            and not self.application_protocols
            and not self.transport_protocol
            and not self.destination_cidrs
        )

    def conflicts_with(self, other: ChainOpts) -> bool:
        """Same match conditions: Envoy rejects two chains that match alike (istiod conflictsWith)."""
        return (
            self.transport_protocol == other.transport_protocol
            and self.application_protocols == other.application_protocols
            and {h for h in self.sni_hosts if h != "*"} == {h for h in other.sni_hosts if h != "*"}
            and _cidr_set(self.destination_cidrs) == _cidr_set(other.destination_cidrs)
        )

    def filter_chain_match(self) -> lc.FilterChainMatch | None:
        if self.is_match_all():
            return None
        out = lc.FilterChainMatch(
            application_protocols=list(self.application_protocols), transport_protocol=self.transport_protocol
        )
        if self.sni_hosts and "*" not in self.sni_hosts:
            out.server_names.extend(sorted(self.sni_hosts))
        for cidr in sorted(self.destination_cidrs):
            r = cidr_range(cidr)
            if r is not None and r.address_prefix != "0.0.0.0":
                out.prefix_ranges.append(r)
        return out

    def needs_tls_inspector(self) -> bool:
        alpn = self.tls_context is not None and len(self.tls_context.common_tls_context.alpn_protocols) > 0
        return bool(self.sni_hosts) or alpn


def _cidr_set(cidrs: Sequence[str]) -> set[str]:
    out = set()
    for c in cidrs:
        try:
            net = ipaddress.ip_network(c, strict=False)
        except ValueError:
            continue
        if str(net.network_address) == "0.0.0.0":
            continue
        out.add(str(net))
    return out


def cidr_range(text: str) -> address_pb2.CidrRange | None:
    """``10.0.0.0/8`` or a plain IP (a /32 or /128) as a CidrRange; None when unparsable."""
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None
    if "/" in text:
        prefix, length = text.split("/", 1)
        return address_pb2.CidrRange(address_prefix=prefix, prefix_len=wrappers_pb2.UInt32Value(value=int(length)))
    return address_pb2.CidrRange(address_prefix=text, prefix_len=wrappers_pb2.UInt32Value(value=net.max_prefixlen))


def build_filter_chain(
    opts: ChainOpts, default_stat_prefix: str, mesh: MeshConfig, proxy: Proxy, logs: Logs, tracing: TraceChoice
) -> lc.FilterChain:
    """The chain without its match: callers decide between filter_chains and default_filter_chain."""
    chain = lc.FilterChain(name=opts.name)
    if opts.metadata is not None:
        chain.metadata.CopyFrom(opts.metadata)
    if opts.tls_context is not None:
        chain.transport_socket.name = TLS_SOCKET
        chain.transport_socket.typed_config.CopyFrom(pack(opts.tls_context))
    chain.filters.extend(opts.network_filters)
    if opts.http is not None:
        stat_prefix = opts.http.stat_prefix or default_stat_prefix
        manager = build_http_connection_manager(opts.http, stat_prefix, mesh, proxy, logs, tracing)
        chain.filters.append(lc.Filter(name=HCM, typed_config=pack(manager)))
    return chain
