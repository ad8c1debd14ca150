"""A DestinationRule traffic policy applied to one cluster under construction.

Owns istiod's ``applyTrafficPolicy`` (pilot/pkg/networking/core/cluster_traffic_policy.go) in
its order: h2 upgrade, connection pool (circuit breakers, timeouts, keepalive, HTTP protocol
options), outlier detection, load balancer (simple, consistent hash, warmup; locality weights and
priorities through endpoint.py, the code EDS uses), upstream TLS (cluster_tls.py), upstream PROXY
protocol, and ``CLUSTER_PROVIDED`` for ORIGINAL_DST. Inbound clusters get only the connection pool.
Also owns ``ClusterDraft``: a cluster plus the ``HttpProtocolOptions`` istiod keeps aside and packs
into typed_extension_protocol_options last.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from envoy.config.cluster.v3 import circuit_breaker_pb2, cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.extensions.transport_sockets.proxy_protocol.v3 import upstream_proxy_protocol_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.model.authn import MtlsMode
from app.model.proxy import Proxy, ProxyType
from app.model.service import Service, ServicePort, TrafficDistribution
from app.translate.cluster import tls as cluster_tls
from app.translate.cluster.tls import raw_buffer_socket
from app.translate.endpoint.builder import MAX_UINT32, LocalityLb, apply_locality_load_balancer, locality_lb_setting

Cluster = cluster_pb2.Cluster
HTTP_PROTOCOL_OPTIONS_KEY = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
PROXY_PROTOCOL_SOCKET = "envoy.transport_sockets.upstream_proxy_protocol"
_LB = net.LoadBalancerSettings
_H2 = net.ConnectionPoolSettings.HTTPSettings


class Direction(enum.Enum):
    OUTBOUND = "outbound"
    INBOUND = "inbound"


@dataclass(slots=True)
class ClusterDraft:
    """A cluster being built, with its HTTP protocol options kept unpacked until ``finish``."""

    cluster: cluster_pb2.Cluster
    http_options: http_protocol_options_pb2.HttpProtocolOptions | None = None

    def http(self) -> http_protocol_options_pb2.HttpProtocolOptions:
        if self.http_options is None:
            self.http_options = http_protocol_options_pb2.HttpProtocolOptions()
        return self.http_options

    @property
    def is_http2(self) -> bool:
        o = self.http_options
        return (
            o is not None
            and o.HasField("explicit_http_config")
            and o.explicit_http_config.HasField("http2_protocol_options")
        )

    def finish(self) -> cluster_pb2.Cluster:
        """Pack the HTTP options (defaulting to explicit HTTP/1.1, which Envoy requires)."""
        if self.http_options is not None:
            opts = self.http_options
            if opts.WhichOneof("upstream_protocol_options") is None:
                opts.explicit_http_config.http_protocol_options.SetInParent()
            self.cluster.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS_KEY].Pack(opts)
        return self.cluster


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What applyTrafficPolicy reads besides the policy: istiod's buildClusterOpts."""

    mesh: MeshConfig
    port: ServicePort
    proxy: Proxy  # the proxy the cluster is for: locality LB is relative to it
    direction: Direction = Direction.OUTBOUND
    service: Service | None = None
    service_accounts: tuple[str, ...] = ()
    istio_mtls_sni: str = ""  # outbound_.PORT_.SUBSET_.HOST
    mtls_mode: MtlsMode = MtlsMode.UNKNOWN
    dr_with_selector: bool = False

    @property
    def sidecar(self) -> bool:
        return self.proxy.type is ProxyType.SIDECAR

    @property
    def mesh_external(self) -> bool:
        return self.service is not None and self.service.mesh_external


def apply_traffic_policy(draft: ClusterDraft, policy: net.TrafficPolicy | None, ctx: PolicyContext) -> None:
    pool = policy.connection_pool if policy is not None and policy.HasField("connection_pool") else None
    pool = pool or net.ConnectionPoolSettings()
    outbound = ctx.direction is Direction.OUTBOUND
    if outbound and _should_h2_upgrade(ctx.port, ctx.mesh, pool):
        set_h2(draft)
    budget = policy.retry_budget if policy is not None and policy.HasField("retry_budget") else None
    apply_connection_pool(draft, ctx.mesh, pool, budget)
    if outbound:
        c = draft.cluster
        has = policy.HasField if policy is not None else (lambda _name: False)
        apply_outlier_detection(
            c, policy.outlier_detection if policy is not None and has("outlier_detection") else None, ctx.service
        )
        apply_load_balancer(c, policy.load_balancer if policy is not None and has("load_balancer") else None, ctx)
        tls, auto = cluster_tls.upstream_tls_settings(policy.tls if policy is not None and has("tls") else None, ctx)
        cluster_tls.apply_upstream_tls(draft, tls, auto, ctx)
        if policy is not None and policy.HasField("proxy_protocol"):
            apply_upstream_proxy_protocol(c, policy.proxy_protocol)
    if draft.cluster.type == Cluster.ORIGINAL_DST:
        draft.cluster.lb_policy = Cluster.CLUSTER_PROVIDED


# --- HTTP protocol selection --------------------------------------------------------------


def set_h2(draft: ClusterDraft) -> None:
    """Explicit HTTP/2 upstream (istiod setH2Options)."""
    opts = draft.http()
    if not opts.HasField("upstream_http_protocol_options"):
        opts.ClearField("upstream_protocol_options")
        opts.explicit_http_config.http2_protocol_options.SetInParent()


def set_use_downstream_protocol(draft: ClusterDraft) -> None:
    opts = draft.http()
    opts.ClearField("upstream_protocol_options")
    opts.use_downstream_protocol_config.http_protocol_options.SetInParent()
    opts.use_downstream_protocol_config.http2_protocol_options.SetInParent()


def _should_h2_upgrade(port: ServicePort, mesh: MeshConfig, pool: net.ConnectionPoolSettings) -> bool:
    if pool.HasField("http"):
        if pool.http.use_client_protocol:
            return False
        if pool.http.h2_upgrade_policy == _H2.UPGRADE:
            return True  # the user says it is HTTP, even on a sniffed port
        if pool.http.h2_upgrade_policy == _H2.DO_NOT_UPGRADE:
            return False
    if not port.protocol.is_http:
        return False
    return bool(mesh.h2_upgrade_policy == MeshConfig.UPGRADE)


# --- connection pool ----------------------------------------------------------------------


def default_thresholds() -> circuit_breaker_pb2.CircuitBreakers.Thresholds:
    """istiod getDefaultCircuitBreakerThresholds: everything unlimited. track_remaining is
    !DISABLE_TRACK_REMAINING_CB_METRICS, whose default (true) leaves it unset."""
    t = circuit_breaker_pb2.CircuitBreakers.Thresholds()
    t.max_retries.value = MAX_UINT32
    t.max_requests.value = MAX_UINT32
    t.max_connections.value = MAX_UINT32
    t.max_pending_requests.value = MAX_UINT32
    return t


def apply_connection_pool(
    draft: ClusterDraft,
    mesh: MeshConfig,
    settings: net.ConnectionPoolSettings,
    retry_budget: net.TrafficPolicy.RetryBudget | None = None,
) -> None:
    c = draft.cluster
    t = default_thresholds()
    if retry_budget is not None:
        t.retry_budget.budget_percent.value = retry_budget.percent.value if retry_budget.HasField("percent") else 20.0
        t.retry_budget.min_retry_concurrency.value = retry_budget.min_retry_concurrency or 3
    idle_timeout = None
    max_requests_per_connection = 0
    max_concurrent_streams = 0
    max_connection_duration = None
    keepalive = None
    if settings.HasField("http"):
        h = settings.http
        # zero means "unset" here: istiod cannot tell an explicit 0 from a default
        if h.http2_max_requests > 0:
            t.max_requests.value = h.http2_max_requests
        if h.http1_max_pending_requests > 0:
            t.max_pending_requests.value = h.http1_max_pending_requests
        if h.max_retries > 0:
            t.max_retries.value = h.max_retries
        if h.HasField("idle_timeout"):
            idle_timeout = h.idle_timeout
        max_requests_per_connection = max(h.max_requests_per_connection, 0)
        max_concurrent_streams = max(h.max_concurrent_streams, 0)
        if h.HasField("http2_keep_alive"):
            keepalive = h.http2_keep_alive
    c.connect_timeout.CopyFrom(mesh.connect_timeout)
    if settings.HasField("tcp"):
        tcp = settings.tcp
        if tcp.HasField("connect_timeout"):
            c.connect_timeout.CopyFrom(tcp.connect_timeout)
        if tcp.max_connections > 0:
            t.max_connections.value = tcp.max_connections
        if tcp.HasField("max_connection_duration"):
            max_connection_duration = tcp.max_connection_duration
        if idle_timeout is None and tcp.HasField("idle_timeout"):
            idle_timeout = tcp.idle_timeout
    _apply_tcp_keepalive(c, mesh, settings)
    c.ClearField("circuit_breakers")
    c.circuit_breakers.thresholds.append(t)
    if (
        max_connection_duration is not None
        or idle_timeout is not None
        or max_requests_per_connection
        or max_concurrent_streams
        or keepalive is not None
    ):
        common = draft.http().common_http_protocol_options
        common.SetInParent()
        if idle_timeout is not None:
            common.idle_timeout.CopyFrom(idle_timeout)
        if max_requests_per_connection:
            common.max_requests_per_connection.value = max_requests_per_connection
        if max_connection_duration is not None:
            common.max_connection_duration.CopyFrom(max_connection_duration)
        if draft.is_http2 and max_concurrent_streams:
            h2 = draft.http().explicit_http_config.http2_protocol_options
            h2.max_concurrent_streams.value = max_concurrent_streams
        if draft.is_http2 and keepalive is not None:
            # HTTP/2 PINGs on the upstream connection (istiod: interval and timeout as written)
            ping = draft.http().explicit_http_config.http2_protocol_options.connection_keepalive
            ping.SetInParent()
            if keepalive.HasField("interval"):
                ping.interval.CopyFrom(keepalive.interval)
            if keepalive.HasField("timeout"):
                ping.timeout.CopyFrom(keepalive.timeout)
    if settings.HasField("http") and settings.http.use_client_protocol:
        set_use_downstream_protocol(draft)


def _apply_tcp_keepalive(c: cluster_pb2.Cluster, mesh: MeshConfig, s: net.ConnectionPoolSettings) -> None:
    """Mesh-wide keepalive first, then the rule's fields over it (istiod applyTCPKeepalive)."""
    sources = []
    if mesh.HasField("tcp_keepalive"):
        sources.append(mesh.tcp_keepalive)
    if s.HasField("tcp") and s.tcp.HasField("tcp_keepalive"):
        sources.append(s.tcp.tcp_keepalive)
    for ka in sources:
        out = c.upstream_connection_options.tcp_keepalive
        out.SetInParent()
        if ka.probes > 0:
            out.keepalive_probes.value = ka.probes
        if ka.HasField("time"):
            out.keepalive_time.value = ka.time.seconds
        if ka.HasField("interval"):
            out.keepalive_interval.value = ka.interval.seconds


# --- outlier detection --------------------------------------------------------------------


def apply_outlier_detection(
    c: cluster_pb2.Cluster, outlier: net.OutlierDetection | None, service: Service | None = None
) -> None:
    """istiod applyOutlierDetection. The deprecated ``consecutiveErrors`` is ignored, as istiod
    has since it stopped translating it; success-rate ejection is always disabled."""
    if outlier is None:
        return
    out = c.outlier_detection
    out.enforcing_success_rate.value = 0
    if outlier.HasField("consecutive_5xx_errors"):
        v = outlier.consecutive_5xx_errors.value
        out.consecutive_5xx.value = v
        out.enforcing_consecutive_5xx.value = 100 if v > 0 else 0
    if outlier.HasField("consecutive_gateway_errors"):
        v = outlier.consecutive_gateway_errors.value
        out.consecutive_gateway_failure.value = v
        out.enforcing_consecutive_gateway_failure.value = 100 if v > 0 else 0
    if outlier.HasField("interval"):
        out.interval.CopyFrom(outlier.interval)
    if outlier.HasField("base_ejection_time"):
        out.base_ejection_time.CopyFrom(outlier.base_ejection_time)
    if outlier.max_ejection_percent > 0:
        out.max_ejection_percent.value = outlier.max_ejection_percent
    if outlier.split_external_local_origin_errors:
        out.split_external_local_origin_errors = True
        if outlier.consecutive_local_origin_failures.value > 0:
            out.consecutive_local_origin_failure.value = outlier.consecutive_local_origin_failures.value
            out.enforcing_consecutive_local_origin_failure.value = 100
        out.enforcing_local_origin_success_rate.value = 0
    # the panic threshold is always set once outlier detection is on: minHealthPercent, default 0;
    # 0 for a service with a traffic distribution, whose unready endpoints are always sent
    if outlier.min_health_percent >= 0:
        forced = service is not None and service.traffic_distribution is not TrafficDistribution.ANY
        c.common_lb_config.healthy_panic_threshold.value = 0.0 if forced else float(outlier.min_health_percent)


# --- load balancer ------------------------------------------------------------------------


def apply_load_balancer(c: cluster_pb2.Cluster, lb: net.LoadBalancerSettings | None, ctx: PolicyContext) -> None:
    # istiod applyLoadBalancer: PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS (default true) makes every
    # service SupportsUnhealthyEndpoints(), and then panic mode is off unless outlier detection
    # set a threshold, so Envoy never balances over unready hosts
    if not c.common_lb_config.HasField("healthy_panic_threshold"):
        c.common_lb_config.healthy_panic_threshold.SetInParent()
    _apply_locality_lb(c, locality_lb_setting(ctx.mesh, lb, ctx.service), ctx.proxy)
    if c.type == Cluster.ORIGINAL_DST:
        c.lb_policy = Cluster.CLUSTER_PROVIDED
        return
    simple = lb.simple if lb is not None else _LB.UNSPECIFIED
    if simple in (_LB.LEAST_CONN, _LB.LEAST_REQUEST):
        _least_request(c, lb)
    elif simple == _LB.RANDOM:
        c.lb_policy = Cluster.RANDOM
    elif simple == _LB.ROUND_ROBIN:
        _round_robin(c, lb)
    elif simple == _LB.PASSTHROUGH:
        c.lb_policy = Cluster.CLUSTER_PROVIDED
        c.type = Cluster.ORIGINAL_DST
        c.ClearField("load_assignment")  # a DNS/STATIC service with a PASSTHROUGH policy
    else:
        _least_request(c, lb)  # istiod's default LB algorithm
    if lb is not None and lb.HasField("consistent_hash"):
        _apply_consistent_hash(c, lb.consistent_hash)


def _least_request(c: cluster_pb2.Cluster, lb: net.LoadBalancerSettings | None) -> None:
    c.lb_policy = Cluster.LEAST_REQUEST
    slow_start = _slow_start(lb)
    if slow_start is not None:
        c.least_request_lb_config.slow_start_config.CopyFrom(slow_start)


def _round_robin(c: cluster_pb2.Cluster, lb: net.LoadBalancerSettings | None) -> None:
    c.lb_policy = Cluster.ROUND_ROBIN
    slow_start = _slow_start(lb)
    if slow_start is not None:
        c.round_robin_lb_config.slow_start_config.CopyFrom(slow_start)


def _slow_start(lb: net.LoadBalancerSettings | None) -> cluster_pb2.Cluster.SlowStartConfig | None:
    if lb is None:
        return None
    if lb.HasField("warmup"):
        w = lb.warmup
        cfg = cluster_pb2.Cluster.SlowStartConfig()
        if w.HasField("duration"):
            cfg.slow_start_window.CopyFrom(w.duration)
        # istiod fixes the runtime key to "(" and defaults aggression 1.0, min weight 10%
        cfg.aggression.default_value = w.aggression.value if w.HasField("aggression") else 1.0
        cfg.aggression.runtime_key = "("
        cfg.min_weight_percent.value = w.minimum_percent.value if w.HasField("minimum_percent") else 10.0
        return cfg
    if lb.HasField("warmup_duration_secs"):
        cfg = cluster_pb2.Cluster.SlowStartConfig()
        cfg.slow_start_window.CopyFrom(lb.warmup_duration_secs)
        return cfg
    return None


def _apply_consistent_hash(c: cluster_pb2.Cluster, ch: net.LoadBalancerSettings.ConsistentHashLB) -> None:
    """istiod ApplyRingHashLoadBalancer: maglev, ring hash, or the deprecated minimumRingSize.
    Without a table / ring size istiod leaves any lb_config (e.g. warmup's) in place."""
    if ch.HasField("maglev"):
        c.lb_policy = Cluster.MAGLEV
        if ch.maglev.table_size:
            c.maglev_lb_config.table_size.value = ch.maglev.table_size
    elif ch.HasField("ring_hash"):
        c.lb_policy = Cluster.RING_HASH
        if ch.ring_hash.minimum_ring_size:
            c.ring_hash_lb_config.minimum_ring_size.value = ch.ring_hash.minimum_ring_size
    else:
        c.lb_policy = Cluster.RING_HASH
        c.ring_hash_lb_config.minimum_ring_size.value = ch.minimum_ring_size or 1024


# --- locality load balancing --------------------------------------------------------------


def _apply_locality_lb(c: cluster_pb2.Cluster, found: LocalityLb | None, proxy: Proxy) -> None:
    """istiod applyLocalityLoadBalancer: weighted locality LB on the cluster; priorities and
    weights on its inline endpoints (DNS clusters; EDS clusters get theirs in EDS)."""
    if found is None:
        return
    setting = found.setting
    # failover needs outlier detection, or Envoy never sees a priority go unhealthy (a traffic
    # distribution relies on endpoint health instead)
    failover = found.force or c.HasField("outlier_detection")
    explicit_failover = len(setting.failover) > 0 or len(setting.failover_priority) > 0
    if len(setting.distribute) > 0 or (failover and explicit_failover):
        c.common_lb_config.locality_weighted_lb_config.SetInParent()
    if c.HasField("load_assignment"):
        # no registry endpoints go along (istiod passes none here either), so failoverPriority
        # labels cannot split localities in CDS; region failover still applies
        apply_locality_load_balancer(c.load_assignment, (), proxy, setting, failover)


# --- upstream PROXY protocol --------------------------------------------------------------


def _wrap_proxy_protocol(inner: base_pb2.TransportSocket, version: int) -> base_pb2.TransportSocket:
    cfg = upstream_proxy_protocol_pb2.ProxyProtocolUpstreamTransport()
    cfg.config.version = version  # Istio's V1/V2 and Envoy's share numbering
    cfg.transport_socket.CopyFrom(inner)
    ts = base_pb2.TransportSocket(name=PROXY_PROTOCOL_SOCKET)
    ts.typed_config.Pack(cfg)
    return ts


def apply_upstream_proxy_protocol(c: cluster_pb2.Cluster, pp: net.TrafficPolicy.ProxyProtocol) -> None:
    """Wrap whatever transport the cluster has (raw buffer if none) in the PROXY protocol socket."""
    version = int(pp.version)
    if not c.HasField("transport_socket") and len(c.transport_socket_matches) == 0:
        c.transport_socket.CopyFrom(_wrap_proxy_protocol(raw_buffer_socket(), version))
        return
    if c.HasField("transport_socket"):
        c.transport_socket.CopyFrom(_wrap_proxy_protocol(c.transport_socket, version))
    for m in c.transport_socket_matches:
        m.transport_socket.CopyFrom(_wrap_proxy_protocol(m.transport_socket, version))


__all__ = [
    "HTTP_PROTOCOL_OPTIONS_KEY",
    "ClusterDraft",
    "Direction",
    "MtlsMode",
    "PolicyContext",
    "apply_connection_pool",
    "apply_traffic_policy",
    "default_thresholds",
    "raw_buffer_socket",
    "set_h2",
    "set_use_downstream_protocol",
]
