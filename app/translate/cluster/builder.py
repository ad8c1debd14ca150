"""Envoy clusters as istiod builds them (pilot/pkg/networking/core cluster.go, cluster_builder.go).

Owns the Istio names (``outbound|PORT|SUBSET|HOST``, ``inbound|PORT||``, the ISTIO_MUTUAL SNI
``outbound_.PORT_.SUBSET_.HOST``), the base cluster per discovery type (istiod buildCluster:
EDS over ADS, STRICT_DNS / LOGICAL_DNS with an inline load assignment, ORIGINAL_DST), the
default and subset clusters of one service port with its DestinationRule applied
(applyDestinationRule / buildSubsetCluster), the proxy's inbound clusters (buildInboundCluster),
cluster metadata under ``istio``, and the exact BlackHoleCluster / PassthroughCluster /
InboundPassthroughCluster shapes. Pure: no I/O, inputs are values, outputs are new protos.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import config_source_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.extensions.network.dns_resolver.cares.v3 import cares_dns_resolver_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from google.protobuf import duration_pb2, struct_pb2

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.config.go_strconv import go_int
from app.model.authn import MtlsMode
from app.model.proxy import Proxy, ProxyType
from app.model.service import Endpoint, Registry, Resolution, Service, ServicePort
from app.model.service import Protocol as PortProtocol
from app.model.traffic_policy import merge_traffic_policy
from app.translate.address import build_address
from app.translate.cluster.policy import (
    HTTP_PROTOCOL_OPTIONS_KEY,
    ClusterDraft,
    Direction,
    PolicyContext,
    apply_connection_pool,
    apply_traffic_policy,
    set_h2,
    set_use_downstream_protocol,
)
from app.translate.cluster.tls import infer_service_mtls_mode
from app.translate.endpoint.builder import dns_locality_endpoints, tls_mode_for_port
from app.translate.metadata import ISTIO_METADATA_KEY, add_config_metadata

Cluster = cluster_pb2.Cluster
BLACKHOLE_CLUSTER = "BlackHoleCluster"
PASSTHROUGH_CLUSTER = "PassthroughCluster"
INBOUND_PASSTHROUGH_CLUSTER = "InboundPassthroughCluster"
UNKNOWN_SERVICE = "UnknownService"  # istiod GetDestinationCluster for a destination without a host
CARES_RESOLVER = "envoy.network.dns_resolver.cares"
CARES_UDP_MAX_QUERIES = 100  # PILOT_DNS_CARES_UDP_MAX_QUERIES default
DNS_JITTER_NANOS = 100_000_000  # PILOT_DNS_JITTER_DURATION default, 100ms
# "never clean up" for inbound ORIGINAL_DST: the largest duration Go's time.Duration can hold
MAX_CLEANUP_SECONDS = (2**63 - 1 - 999_999_999) // 1_000_000_000
LOCALHOST_V4, LOCALHOST_V6 = "127.0.0.1", "::1"
INBOUND_PASSTHROUGH_BIND_V4, INBOUND_PASSTHROUGH_BIND_V6 = "127.0.0.6", "::6"
_DNS_TYPES = (Cluster.STRICT_DNS, Cluster.LOGICAL_DNS)
_SNI_DNAT_PREFIXES = ("outbound_.", "inbound_.")
_TLS = net.ClientTLSSettings


class AppliedDestinationRule(Protocol):
    """The DestinationRule that applies to a service (a ConsolidatedDestinationRule)."""

    @property
    def rule(self) -> net.DestinationRule: ...
    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    def subset(self, name: str) -> net.Subset | None: ...


ServiceTarget = tuple[Service, ServicePort, Endpoint]


# --- names ---------------------------------------------------------------------------------


def outbound_cluster_name(port: int, hostname: str, subset: str = "") -> str:
    return f"outbound|{port}|{subset}|{hostname}"


def destination_cluster(dest: net.Destination, service: Service | None, listener_port: int) -> str:
    """istiod GetDestinationCluster: ``UnknownService`` for a destination without a host; else
    the port the destination names, else the service's only port, else the listener port. An
    alias service routes to the service it names."""
    if not dest.host:
        return UNKNOWN_SERVICE
    host = dest.host
    if service is not None and service.resolution is Resolution.ALIAS and service.external_name:
        host = service.external_name
    if dest.HasField("port"):
        port = dest.port.number
    elif service is not None and len(service.ports) == 1:
        port = service.ports[0].port
    else:
        port = listener_port
    return outbound_cluster_name(port, host, dest.subset)


def egress_proxy_cluster(sidecar: net.Sidecar | None) -> str:
    """Where ALLOW_ANY sends traffic to unknown destinations: the cluster of the Sidecar's
    ``outboundTrafficPolicy.egressProxy`` (istiod resolves it with GetDestinationCluster and
    no service), else PassthroughCluster."""
    if sidecar is None or not sidecar.outbound_traffic_policy.HasField("egress_proxy"):
        return PASSTHROUGH_CLUSTER
    return destination_cluster(sidecar.outbound_traffic_policy.egress_proxy, None, 0)


def outbound_sni(port: int, hostname: str, subset: str = "") -> str:
    """istiod BuildDNSSrvSubsetKey: the SNI auto mTLS sends, and SNI-DNAT gateways route on."""
    return f"outbound_.{port}_.{subset}_.{hostname}"


def inbound_cluster_name(port: int) -> str:
    return f"inbound|{port}||"


@dataclass(frozen=True, slots=True)
class ClusterKey:
    """A cluster name taken apart (istiod model.ParseSubsetKey)."""

    direction: str
    port: int
    subset: str
    hostname: str
    sni_dnat: bool  # the outbound_.PORT_.SUBSET_.HOST form


def parse_cluster_name(name: str) -> ClusterKey:
    """``DIR|PORT|SUBSET|HOST`` or ``DIR_.PORT_.SUBSET_.HOST``. A part that is missing or does not
    parse comes back empty (port 0), as in istiod; so ``inbound|PORT||`` has no hostname."""
    sni_dnat = name.startswith(_SNI_DNAT_PREFIXES)
    sep = "_." if sni_dnat else "|"
    parts = [*name.split(sep, 3), "", "", ""]
    count = name.count(sep)
    direction = parts[0] if count >= 1 else ""
    port = (go_int(parts[1]) or 0) if count >= 2 else 0  # istiod: strconv.Atoi, its error ignored
    subset = parts[2] if count >= 3 else ""
    hostname = parts[3] if count == 3 else ""  # a fifth part voids the hostname
    return ClusterKey(direction, port, subset, hostname, sni_dnat)


# --- outbound ------------------------------------------------------------------------------


def discovery_type(proxy: Proxy, service: Service) -> int:
    """istiod convertResolution; gateways cannot use ORIGINAL_DST, so headless becomes EDS there."""
    r = service.resolution
    if r is Resolution.DNS_LB:
        return int(Cluster.STRICT_DNS)
    if r is Resolution.DNS_ROUND_ROBIN_LB:
        return int(Cluster.LOGICAL_DNS)
    if r is Resolution.PASSTHROUGH and proxy.type is not ProxyType.ROUTER:
        return int(Cluster.ORIGINAL_DST)
    return int(Cluster.EDS)


def service_identities(
    service: Service, endpoints: Iterable[Endpoint], trust_domain_aliases: Sequence[str] = ()
) -> tuple[str, ...]:
    """istiod PushContext.ServiceAccounts: endpoint identities plus the service's own
    (ServiceEntry subjectAltNames), expanded with trust domain aliases, sorted."""
    ids = {e.service_account for e in endpoints if e.service_account}
    ids.update(service.service_accounts)
    if trust_domain_aliases:
        for identity in list(ids):
            if identity.startswith("spiffe://") and "/" in identity[len("spiffe://") :]:
                path = identity[len("spiffe://") :].split("/", 1)[1]
                ids.update(f"spiffe://{td}/{path}" for td in trust_domain_aliases)
    return tuple(sorted(ids))


def build_outbound_clusters(
    proxy: Proxy,
    mesh: MeshConfig,
    service: Service,
    port: ServicePort,
    endpoints: Sequence[Endpoint],
    rule: AppliedDestinationRule | None,
    service_accounts: Sequence[str] = (),
    namespace_mode: MtlsMode = MtlsMode.UNKNOWN,
) -> list[cluster_pb2.Cluster]:
    """The default cluster of one service port, then one cluster per DestinationRule subset;
    ``namespace_mode`` is the PeerAuthentication mode of the service's namespace (auto mTLS).

    ``endpoints`` are the service's endpoints (any port); only DNS clusters embed them. A DNS
    cluster without endpoints is not built at all (nor its subsets), as in istiod.
    """
    name = outbound_cluster_name(port.port, service.hostname)
    kind = discovery_type(proxy, service)
    dr = rule.rule if rule is not None else None
    rule_tp = dr.traffic_policy if dr is not None and dr.HasField("traffic_policy") else None
    policy = merge_traffic_policy(None, rule_tp, port.port)  # the rule's own port-level settings
    tls_mode = tls_mode_for_port(rule_tp, port.port)
    lb_endpoints = dns_locality_endpoints(service, port, endpoints, {}, tls_mode, policy) if kind in _DNS_TYPES else []
    draft = _base_cluster(name, kind, lb_endpoints, proxy, mesh, port, service)
    if draft is None:
        return []
    ctx = PolicyContext(
        mesh=mesh,
        port=port,
        proxy=proxy,
        direction=Direction.OUTBOUND,
        service=service,
        service_accounts=tuple(service_accounts),
        istio_mtls_sni=outbound_sni(port.port, service.hostname),
        mtls_mode=infer_service_mtls_mode(rule_tp, service, port, endpoints, namespace_mode),
        dr_with_selector=dr is not None and dr.HasField("workload_selector"),
    )
    apply_traffic_policy(draft, policy, ctx)
    _maybe_apply_eds_config(draft.cluster)
    if service.mesh_external:
        istio_metadata(draft.cluster).fields["external"].bool_value = True
    if rule is not None:
        _add_config_metadata(draft.cluster, rule)
        _add_alpn_override(draft.cluster, policy)
    default = draft.finish()
    out = [default]
    if rule is None or dr is None:
        return out
    for subset in dr.subsets:
        built = _build_subset_cluster(
            proxy, mesh, service, port, endpoints, rule, default, subset, policy, ctx, namespace_mode
        )
        if built is not None:
            out.append(built)
    return out


def _build_subset_cluster(
    proxy: Proxy,
    mesh: MeshConfig,
    service: Service,
    port: ServicePort,
    endpoints: Sequence[Endpoint],
    rule: AppliedDestinationRule,
    default: cluster_pb2.Cluster,
    subset: net.Subset,
    default_policy: net.TrafficPolicy | None,
    default_ctx: PolicyContext,
    namespace_mode: MtlsMode,
) -> cluster_pb2.Cluster | None:
    dr = rule.rule
    subset_tp = subset.traffic_policy if subset.HasField("traffic_policy") else None
    name = outbound_cluster_name(port.port, service.hostname, subset.name)
    # the subset starts from the default cluster's type *after* its policy (a rule-level
    # PASSTHROUGH LB made it ORIGINAL_DST); only the subset's own top-level LB can add that
    passthrough = (
        subset_tp is not None
        and subset_tp.HasField("load_balancer")
        and subset_tp.load_balancer.simple == net.LoadBalancerSettings.PASSTHROUGH
    )
    kind = int(Cluster.ORIGINAL_DST) if passthrough else int(default.type)
    rule_tp = dr.traffic_policy if dr.HasField("traffic_policy") else None
    policy = merge_traffic_policy(rule_tp, subset_tp, port.port) if subset_tp is not None else default_policy
    lb_endpoints = []
    if kind in _DNS_TYPES:
        tls_mode = tls_mode_for_port(subset_tp, port.port)
        lb_endpoints = dns_locality_endpoints(service, port, endpoints, subset.labels, tls_mode, policy)
    draft = _base_cluster(name, kind, lb_endpoints, proxy, mesh, port, service)
    if draft is None:
        return None
    ctx = replace(
        default_ctx,
        istio_mtls_sni=outbound_sni(port.port, service.hostname, subset.name),
        # istiod infers the subset's mTLS mode from the subset's own policy only
        mtls_mode=infer_service_mtls_mode(subset_tp, service, port, endpoints, namespace_mode),
    )
    apply_traffic_policy(draft, policy, ctx)
    _maybe_apply_eds_config(draft.cluster)
    _add_config_metadata(draft.cluster, rule)
    istio_metadata(draft.cluster).fields["subset"].string_value = subset.name
    _add_alpn_override(draft.cluster, policy)
    return draft.finish()


def _base_cluster(
    name: str,
    kind: int,
    lb_endpoints: Sequence[endpoint_components_pb2.LocalityLbEndpoints],
    proxy: Proxy,
    mesh: MeshConfig,
    port: ServicePort,
    service: Service,
    *,
    inbound_targets: Sequence[ServiceTarget] = (),
) -> ClusterDraft | None:
    """istiod buildCluster: settings every cluster of a type gets before any policy."""
    c = Cluster(name=name, type=kind, alt_stat_name=name + ";")
    c.common_lb_config.SetInParent()
    if kind == Cluster.ORIGINAL_DST and not inbound_targets:
        override = dict(service.passthrough_target_ports).get(port.port)
        if override:  # istiod: a resolution-NONE ServiceEntry port's targetPort
            c.original_dst_lb_config.upstream_port_override.value = override
    if kind in _DNS_TYPES:
        c.dns_lookup_family = _dns_lookup_family(proxy.ip_addresses)
        cares = cares_dns_resolver_pb2.CaresDnsResolverConfig()
        cares.udp_max_queries.value = CARES_UDP_MAX_QUERIES
        c.typed_dns_resolver_config.name = CARES_RESOLVER
        c.typed_dns_resolver_config.typed_config.Pack(cares)
        c.dns_jitter.nanos = DNS_JITTER_NANOS
        if mesh.HasField("dns_refresh_rate"):
            c.dns_refresh_rate.CopyFrom(mesh.dns_refresh_rate)
        c.respect_dns_ttl = True
    if kind in (*_DNS_TYPES, Cluster.STATIC):
        if not lb_endpoints:
            return None
        c.load_assignment.cluster_name = name
        c.load_assignment.endpoints.extend(lb_endpoints)
        if kind == Cluster.LOGICAL_DNS:
            _keep_first_endpoint(c.load_assignment)
    draft = ClusterDraft(c)
    if port.protocol.is_http2:
        set_h2(draft)
    elif proxy.type is ProxyType.SIDECAR and port.protocol is PortProtocol.UNSUPPORTED:
        # sniffed port: speak whatever the downstream spoke (not on gateways: clients there
        # negotiate h2 via ALPN that the upstream may not support)
        set_use_downstream_protocol(draft)
    if inbound_targets:
        _add_inbound_telemetry_metadata(c, port, inbound_targets)
    else:
        istio_metadata(c).fields["services"].list_value.values.append(_service_metadata(service))
    return draft


def _keep_first_endpoint(la: endpoint_pb2.ClusterLoadAssignment) -> None:
    """Envoy rejects a LOGICAL_DNS cluster with more than one endpoint, and one rejected cluster
    NACKs the whole CDS response. istiod relies on validation (at most one endpoint for
    DNS_ROUND_ROBIN) and would push it anyway; pilotfish deliberately keeps the first one.
    The groups come from dns_locality_endpoints, so none is empty."""
    del la.endpoints[1:]
    first = la.endpoints[0]
    del first.lb_endpoints[1:]
    first.load_balancing_weight.value = first.lb_endpoints[0].load_balancing_weight.value


def _dns_lookup_family(ips: Sequence[str]) -> int:
    versions = {_ip_version(ip) for ip in ips}
    if versions == {6}:
        return int(Cluster.V6_ONLY)
    return int(Cluster.V4_ONLY)  # IPv4, and dual stack while istiod's dual-stack flag is off


def _ip_version(ip: str) -> int:
    try:
        return ipaddress.ip_address(ip).version
    except ValueError:
        return 0


def _maybe_apply_eds_config(c: cluster_pb2.Cluster) -> None:
    if c.type != Cluster.EDS:
        return
    c.eds_cluster_config.service_name = c.name
    src = c.eds_cluster_config.eds_config
    src.ads.SetInParent()
    src.initial_fetch_timeout.SetInParent()  # 0s: do not hold warming on EDS
    src.resource_api_version = config_source_pb2.V3


# --- metadata ------------------------------------------------------------------------------


def istio_metadata(c: cluster_pb2.Cluster) -> struct_pb2.Struct:
    md: struct_pb2.Struct = c.metadata.filter_metadata[ISTIO_METADATA_KEY]
    return md


def _service_metadata(service: Service) -> struct_pb2.Value:
    v = struct_pb2.Value()
    f = v.struct_value.fields
    f["host"].string_value = service.hostname
    # istiod names a ServiceEntry's service by its host, a Kubernetes Service by its name
    f["name"].string_value = service.hostname if service.registry is Registry.EXTERNAL else service.name
    f["namespace"].string_value = service.namespace
    return v


def _add_inbound_telemetry_metadata(
    c: cluster_pb2.Cluster, port: ServicePort, targets: Sequence[ServiceTarget]
) -> None:
    if targets[0][0].mesh_external:
        return
    values = istio_metadata(c).fields["services"].list_value
    values.SetInParent()
    seen: set[str] = set()
    for service, service_port, _ in targets:
        if service_port.port != port.port or service.hostname in seen:
            continue
        seen.add(service.hostname)
        values.values.append(_service_metadata(service))


def _add_config_metadata(c: cluster_pb2.Cluster, rule: AppliedDestinationRule) -> None:
    add_config_metadata(c.metadata, "destination-rule", rule.namespace, rule.name)


def _add_alpn_override(c: cluster_pb2.Cluster, policy: net.TrafficPolicy | None) -> None:
    """SIMPLE / MUTUAL TLS: tell the ALPN filter not to rewrite the application's ALPN."""
    if policy is not None and policy.HasField("tls") and policy.tls.mode in (_TLS.SIMPLE, _TLS.MUTUAL):
        istio_metadata(c).fields["alpn_override"].string_value = "false"


# --- inbound -------------------------------------------------------------------------------


def _supports(ips: Sequence[str], version: int) -> bool:
    return any(_ip_version(ip) == version for ip in ips)


def _local_host(ips: Sequence[str]) -> str:
    return LOCALHOST_V4 if _supports(ips, 4) or not _supports(ips, 6) else LOCALHOST_V6


def _passthrough_bind_ip(ips: Sequence[str]) -> str:
    return INBOUND_PASSTHROUGH_BIND_V4 if _supports(ips, 4) else INBOUND_PASSTHROUGH_BIND_V6


def build_inbound_cluster(
    proxy: Proxy,
    mesh: MeshConfig,
    targets: Sequence[ServiceTarget],
    rule: AppliedDestinationRule | None = None,
    *,
    port: int = 0,
    endpoint_address: str | None = None,
    connection_pool: net.ConnectionPoolSettings | None = None,
) -> cluster_pb2.Cluster:
    """``inbound|PORT||`` for one workload port (PORT is ``port``, by default the first target's
    endpoint port). The first target is primary; every target on the same service port is
    listed in the metadata.

    ``endpoint_address`` is where the cluster sends (to the first target's endpoint port): ""
    makes it ORIGINAL_DST, a ``unix://`` path a pipe; by default it follows
    meshConfig.inboundTrafficPolicy: PASSTHROUGH (the default) is ORIGINAL_DST bound to
    127.0.0.6 so iptables lets it through, LOCALHOST is 127.0.0.1. Only the connection pool
    applies inbound (istiod: circuit breakers on the server side too): the rule's, on the
    service port, replaced whole by a Sidecar's ``connection_pool`` when it has one.
    """
    if not targets:
        raise ValueError("an inbound cluster needs at least one service target")
    service, service_port, endpoint = targets[0]
    if endpoint_address is None:
        passthrough = mesh.inbound_traffic_policy.mode == MeshConfig.InboundTrafficPolicy.PASSTHROUGH
        endpoint_address = "" if passthrough else _local_host(proxy.ip_addresses)
    lb_endpoints = []
    if endpoint_address:
        group = endpoint_components_pb2.LocalityLbEndpoints()
        # istiod buildInboundLocalityLbEndpoints: a unix:// default endpoint is a pipe
        group.lb_endpoints.add().endpoint.address.CopyFrom(build_address(endpoint_address, endpoint.port))
        lb_endpoints.append(group)
    kind = int(Cluster.STATIC) if endpoint_address else int(Cluster.ORIGINAL_DST)
    name = inbound_cluster_name(port or endpoint.port)
    draft = _base_cluster(name, kind, lb_endpoints, proxy, mesh, service_port, service, inbound_targets=targets)
    if draft is None:  # cannot happen: STATIC always has its one endpoint
        raise AssertionError(name)
    c = draft.cluster
    if kind == Cluster.ORIGINAL_DST:
        c.cleanup_interval.seconds = MAX_CLEANUP_SECONDS
    policy = None
    dr = rule.rule if rule is not None else None
    if rule is not None and dr is not None and dr.HasField("traffic_policy"):
        policy = merge_traffic_policy(None, dr.traffic_policy, service_port.port)
        if c.HasField("metadata"):
            _add_config_metadata(c, rule)
    if connection_pool is not None:
        replaced = net.TrafficPolicy()
        if policy is not None:
            replaced.CopyFrom(policy)
        replaced.connection_pool.CopyFrom(connection_pool)
        policy = replaced
    ctx = PolicyContext(
        mesh=mesh,
        port=service_port,
        proxy=proxy,
        direction=Direction.INBOUND,
        service=service,
        dr_with_selector=dr is not None and dr.HasField("workload_selector"),
    )
    apply_traffic_policy(draft, policy, ctx)
    if endpoint_address not in (LOCALHOST_V4, LOCALHOST_V6):
        src = c.upstream_bind_config.source_address
        src.address, src.port_value = _passthrough_bind_ip(proxy.ip_addresses), 0
    return draft.finish()


# --- catch-all clusters --------------------------------------------------------------------


def build_blackhole_cluster(mesh: MeshConfig) -> cluster_pb2.Cluster:
    """STATIC with no endpoints: where routes to unknown destinations go to die."""
    c = Cluster(name=BLACKHOLE_CLUSTER, type=Cluster.STATIC, lb_policy=Cluster.ROUND_ROBIN)
    c.connect_timeout.CopyFrom(mesh.connect_timeout)
    c.alt_stat_name = BLACKHOLE_CLUSTER + ";"
    return c


def build_passthrough_cluster(mesh: MeshConfig) -> cluster_pb2.Cluster:
    """ORIGINAL_DST to wherever the connection was going (ALLOW_ANY egress)."""
    c = Cluster(name=PASSTHROUGH_CLUSTER, type=Cluster.ORIGINAL_DST, lb_policy=Cluster.CLUSTER_PROVIDED)
    c.connect_timeout.CopyFrom(mesh.connect_timeout)
    opts = http_protocol_options_pb2.HttpProtocolOptions()
    opts.common_http_protocol_options.idle_timeout.CopyFrom(duration_pb2.Duration(seconds=300))
    opts.use_downstream_protocol_config.http_protocol_options.SetInParent()
    opts.use_downstream_protocol_config.http2_protocol_options.SetInParent()
    c.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS_KEY].Pack(opts)
    c.alt_stat_name = PASSTHROUGH_CLUSTER + ";"
    apply_connection_pool(ClusterDraft(c), mesh, net.ConnectionPoolSettings())
    return c


def build_inbound_passthrough_cluster(proxy: Proxy, mesh: MeshConfig) -> cluster_pb2.Cluster:
    """The PassthroughCluster renamed (istiod keeps its alt_stat_name) and bound to 127.0.0.6
    (and ::6 when the proxy has both families) so iptables does not loop it back."""
    c = build_passthrough_cluster(mesh)
    c.name = INBOUND_PASSTHROUGH_CLUSTER
    c.ClearField("filters")
    ips = proxy.ip_addresses
    src = c.upstream_bind_config.source_address
    src.address = INBOUND_PASSTHROUGH_BIND_V4 if _supports(ips, 4) else INBOUND_PASSTHROUGH_BIND_V6
    src.port_value = 0
    if _supports(ips, 4) and _supports(ips, 6):
        extra = c.upstream_bind_config.extra_source_addresses.add().address
        extra.address, extra.port_value = INBOUND_PASSTHROUGH_BIND_V6, 0
    return c


__all__ = [
    "BLACKHOLE_CLUSTER",
    "INBOUND_PASSTHROUGH_CLUSTER",
    "PASSTHROUGH_CLUSTER",
    "AppliedDestinationRule",
    "ClusterKey",
    "ServiceTarget",
    "build_blackhole_cluster",
    "build_inbound_cluster",
    "build_inbound_passthrough_cluster",
    "build_outbound_clusters",
    "build_passthrough_cluster",
    "discovery_type",
    "egress_proxy_cluster",
    "inbound_cluster_name",
    "istio_metadata",
    "outbound_cluster_name",
    "outbound_sni",
    "parse_cluster_name",
    "service_identities",
]
