"""Envoy endpoints as istiod's EndpointBuilder builds them, for EDS and for CDS's inline load
assignments (DNS clusters) alike (pilot/pkg/xds/endpoints/endpoint_builder.go, mtls_checker.go).

Owns which registry endpoints are sent (filterIstioEndpoint: an address, unhealthy ones unless
outlier detection sets minHealthPercent, draining only to persistent-session services), one
``LbEndpoint`` per endpoint (address, health, weight, the ``istio`` workload metadata and the
``envoy.transport_socket_match`` tlsMode that the auto mTLS transport socket match keys on),
grouping by locality (sorted by locality, weights summed) and locality load balancing relative
to the calling proxy (pilot/pkg/networking/core/loadbalancer ApplyLocalityLoadBalancer:
``distribute`` weights, region/zone/subzone failover priorities and ``failoverPriority`` label
priorities). Pure: values in, new protos out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from envoy.config.core.v3 import health_check_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.endpoint.v3.endpoint_components_pb2 import LbEndpoint, LocalityLbEndpoints

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.config.labels import (
    CLUSTER_LABEL,
    HOSTNAME_LABEL,
    NETWORK_LABEL,
    REGION_LABEL,
    SUBZONE_LABEL,
    ZONE_LABEL,
    selector_matches,
)
from app.model.proxy import Proxy
from app.model.service import Endpoint, HealthStatus, Service, ServicePort, TrafficDistribution
from app.translate.address import build_address
from app.translate.cluster.tls import TLS_MODE_ISTIO
from app.translate.metadata import ISTIO_METADATA_KEY

TRANSPORT_SOCKET_MATCH_KEY = "envoy.transport_socket_match"
DRAINING_LABEL = "istio.io/draining"  # PILOT_DRAINING_LABEL default
# PILOT_PERSISTENT_SESSION_LABEL / _HEADER_LABEL defaults: such services still get draining endpoints
MAX_UINT32 = 2**32 - 1
_TLS = net.ClientTLSSettings
_HEALTH = {
    HealthStatus.UNKNOWN: health_check_pb2.UNKNOWN,
    HealthStatus.HEALTHY: health_check_pb2.HEALTHY,
    HealthStatus.UNHEALTHY: health_check_pb2.UNHEALTHY,
    HealthStatus.DRAINING: health_check_pb2.DRAINING,
}
_CANONICAL_NAME_LABELS = ("service.istio.io/canonical-name", "app.kubernetes.io/name", "app")
_CANONICAL_REVISION_LABELS = ("service.istio.io/canonical-revision", "app.kubernetes.io/version", "version")


@dataclass(slots=True)
class LocalityEndpoints:
    """One locality's group and the registry endpoints it was built from, in the same order
    (istiod keeps them side by side so failoverPriority can read the endpoints' labels)."""

    group: LocalityLbEndpoints
    sources: list[Endpoint] = field(default_factory=list)


def split_locality(locality: str) -> tuple[str, str, str]:
    """``region/zone/subzone`` -> its three parts, missing ones empty."""
    parts = [*locality.split("/"), "", "", ""][:3] if locality else ["", "", ""]
    return parts[0], parts[1], parts[2]


# --- which endpoints, and how each is sent ---------------------------------------------------


def tls_mode_for_port(tp: net.TrafficPolicy | None, port: int) -> int | None:
    """The TLS mode a policy sets for a port (istiod trafficPolicyTLSModeForPort), or None."""
    if tp is None:
        return None
    mode = int(tp.tls.mode) if tp.HasField("tls") else None
    for pls in tp.port_level_settings:
        if pls.port.number == port and pls.HasField("tls"):
            return int(pls.tls.mode)
    return mode


def endpoint_mtls(ep: Endpoint, rule_tls_mode: int | None) -> bool:
    """istiod mtlsChecker: a rule's TLS mode for the port decides; else whether the workload has a
    sidecar (its tlsMode label). PeerAuthentication is not modelled, so it never disables it."""
    if rule_tls_mode is not None:
        return rule_tls_mode == _TLS.ISTIO_MUTUAL
    return ep.tls_mode == TLS_MODE_ISTIO


def is_draining(ep: Endpoint) -> bool:
    return ep.health is HealthStatus.DRAINING or bool(ep.labels.get(DRAINING_LABEL))


def is_sent(ep: Endpoint, service: Service, send_unhealthy: bool) -> bool:
    """istiod filterIstioEndpoint for a single-network, single-cluster mesh; ``send_unhealthy``
    is istiod supportsUnhealthyEndpoints for the cluster (see :func:`sends_unhealthy`)."""
    if not ep.address:
        return False  # would need a network gateway to stand in for it
    if ep.health is HealthStatus.UNHEALTHY and not send_unhealthy:
        return False
    if ep.health is HealthStatus.TERMINATING:  # not even to count as unhealthy
        return False
    if is_draining(ep):
        return service.supports_draining_endpoints
    return True


def sends_unhealthy(policy: net.TrafficPolicy | None, service: Service) -> bool:
    """istiod supportsUnhealthyEndpoints with PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS on (its
    default): unready endpoints go out as UNHEALTHY (outbound clusters have a 0 % panic
    threshold), unless the cluster's outlier detection sets minHealthPercent, whose panic mode
    would then route to them; always for a service with a traffic distribution, whose spill
    from one locality to the next needs them (ForcesSupportUnhealthyEndpoints)."""
    if service.traffic_distribution is not TrafficDistribution.ANY:
        return True
    return not (
        policy is not None and policy.HasField("outlier_detection") and policy.outlier_detection.min_health_percent > 0
    )


def build_lb_endpoint(ep: Endpoint, mtls: bool, service: Service, cluster_id: str) -> LbEndpoint:
    """istiod buildEnvoyLbEndpoint (no HBONE tunnel): address, health, weight (0 means 1) and
    metadata; ``cluster_id`` is the endpoint's cluster in the workload telemetry string."""
    out = LbEndpoint(health_status=_HEALTH[HealthStatus.DRAINING if is_draining(ep) else ep.health])
    out.load_balancing_weight.value = ep.weight if ep.weight > 0 else 1
    out.endpoint.address.CopyFrom(build_address(ep.address, ep.port))
    md = out.metadata
    md.SetInParent()
    if mtls and ep.tls_mode == TLS_MODE_ISTIO:
        md.filter_metadata[TRANSPORT_SOCKET_MATCH_KEY].fields["tlsMode"].string_value = TLS_MODE_ISTIO
    name, revision = _canonical_service(ep.labels, ep.workload_name)
    namespace = ep.namespace or service.namespace
    revision = "" if revision == "latest" else revision
    workload = f"{ep.workload_name};{namespace};{name};{revision};{cluster_id}"
    md.filter_metadata[ISTIO_METADATA_KEY].fields["workload"].string_value = workload
    return out


def _canonical_service(labels: Mapping[str, str], workload_name: str) -> tuple[str, str]:
    name = next((labels[k] for k in _CANONICAL_NAME_LABELS if k in labels), workload_name)
    revision = next((labels[k] for k in _CANONICAL_REVISION_LABELS if k in labels), "latest")
    return name, revision


def build_locality_endpoints(
    service: Service, endpoints: Iterable[Endpoint], rule_tls_mode: int | None, send_unhealthy: bool
) -> list[LocalityEndpoints]:
    """istiod EndpointBuilder.generate: the sendable endpoints grouped by locality, groups sorted
    by locality, endpoints in registry order, each group weighted by the sum of its endpoints."""
    by_locality: dict[str, LocalityEndpoints] = {}
    for ep in endpoints:
        if not is_sent(ep, service, send_unhealthy):
            continue
        lb = build_lb_endpoint(ep, endpoint_mtls(ep, rule_tls_mode), service, ep.cluster_id)
        found = by_locality.get(ep.locality)
        if found is None:
            found = by_locality[ep.locality] = LocalityEndpoints(LocalityLbEndpoints())
        found.group.lb_endpoints.append(lb)
        found.sources.append(ep)
    out = []
    for locality in sorted(by_locality):
        le = by_locality[locality]
        loc = le.group.locality
        loc.SetInParent()
        loc.region, loc.zone, loc.sub_zone = split_locality(locality)
        le.group.load_balancing_weight.value = _sum_weights(le.group)
        out.append(le)
    return out


def _sum_weights(group: LocalityLbEndpoints) -> int:
    total: int = sum(e.load_balancing_weight.value for e in group.lb_endpoints)
    return min(total, MAX_UINT32)


def port_subset_endpoints(
    endpoints: Iterable[Endpoint], port: ServicePort, subset_labels: Mapping[str, str]
) -> Iterator[Endpoint]:
    """The endpoints of ``port`` whose labels match the subset's (all of them for no labels)."""
    return (e for e in endpoints if e.service_port_name == port.name and selector_matches(subset_labels, e.labels))


def dns_locality_endpoints(
    service: Service,
    port: ServicePort,
    endpoints: Iterable[Endpoint],
    subset_labels: Mapping[str, str],
    rule_tls_mode: int | None,
    policy: net.TrafficPolicy | None,
) -> list[LocalityLbEndpoints]:
    """A DNS cluster's inline endpoints (istiod EndpointBuilder.FromServiceEndpoints): this port's
    endpoints matching the subset labels; addresses may be hostnames here. ``policy`` is the
    cluster's merged traffic policy (whether unhealthy endpoints are sent)."""
    selected = port_subset_endpoints(endpoints, port, subset_labels)
    send = sends_unhealthy(policy, service)
    return [le.group for le in build_locality_endpoints(service, selected, rule_tls_mode, send)]


def _has_istio_tls_mode(lb: LbEndpoint) -> bool:
    md = lb.metadata.filter_metadata
    if TRANSPORT_SOCKET_MATCH_KEY not in md:  # look before indexing: indexing a map inserts
        return False
    return bool(md[TRANSPORT_SOCKET_MATCH_KEY].fields["tlsMode"].string_value == TLS_MODE_ISTIO)


def keep_mtls_endpoints(localities: Sequence[LocalityEndpoints]) -> None:
    """istiod EndpointsWithMTLSFilter (SNI-DNAT clusters): drop the endpoints auto mTLS would not
    reach with ISTIO_MUTUAL; a group left empty stays, without a weight."""
    for le in localities:
        kept = [i for i, lb in enumerate(le.group.lb_endpoints) if _has_istio_tls_mode(lb)]
        group = LocalityLbEndpoints(priority=le.group.priority)
        group.locality.CopyFrom(le.group.locality)
        group.lb_endpoints.extend(le.group.lb_endpoints[i] for i in kept)
        if kept:
            group.load_balancing_weight.value = _sum_weights(group)
        le.group = group
        le.sources = [le.sources[i] for i in kept]


# --- locality load balancing (relative to the calling proxy) ---------------------------------


# the failoverPriority a service's traffic distribution stands for (istiod GetEffectiveLbSetting)
_PREFER_SAME_ZONE = (NETWORK_LABEL, REGION_LABEL, ZONE_LABEL)
_DISTRIBUTION_PRIORITIES = {
    TrafficDistribution.PREFER_SAME_ZONE: _PREFER_SAME_ZONE,
    TrafficDistribution.PREFER_SAME_NODE: (*_PREFER_SAME_ZONE, SUBZONE_LABEL, HOSTNAME_LABEL),
}


@dataclass(frozen=True, slots=True)
class LocalityLb:
    """The locality load balancing in force for a cluster: the setting, and whether it fails
    over without outlier detection (``force``: a service's traffic distribution, which relies
    on endpoint health instead)."""

    setting: net.LocalityLoadBalancerSetting
    force: bool = False


def locality_lb_setting(
    mesh: MeshConfig, lb: net.LoadBalancerSettings | None, service: Service | None
) -> LocalityLb | None:
    """istiod GetEffectiveLbSetting without zone-aware routing: the rule's setting if it has one
    (``enabled: false`` turns it off), else the service's traffic distribution, else the mesh's
    (istiod's default mesh config enables it)."""
    if lb is not None and lb.HasField("locality_lb_setting"):
        setting = lb.locality_lb_setting
    elif service is not None and service.traffic_distribution is not TrafficDistribution.ANY:
        priorities = _DISTRIBUTION_PRIORITIES[service.traffic_distribution]
        forced = net.LocalityLoadBalancerSetting(failover_priority=priorities)
        forced.enabled.value = True
        return LocalityLb(forced, force=True)
    elif mesh.HasField("locality_lb_setting"):
        setting = mesh.locality_lb_setting
    else:
        return None
    if setting.HasField("enabled") and not setting.enabled.value:
        return None
    return LocalityLb(setting)


def topology_labels(
    labels: Mapping[str, str], locality: str, cluster_id: str, network: str, node: str = ""
) -> dict[str, str]:
    """istiod AugmentLabels: the topology labels proxies and registry endpoints carry, which
    ``failoverPriority`` may name."""
    out = dict(labels)
    region, zone, subzone = split_locality(locality)
    topology = (
        (REGION_LABEL, region), (ZONE_LABEL, zone), (SUBZONE_LABEL, subzone), (CLUSTER_LABEL, cluster_id),
        (HOSTNAME_LABEL, node),
    )  # fmt: skip
    for key, value in topology:
        if value:
            out[key] = value
    if network and not out.get(NETWORK_LABEL):
        out[NETWORK_LABEL] = network  # a label set on the workload wins
    return out


def apply_locality_load_balancer(
    la: endpoint_pb2.ClusterLoadAssignment,
    sources: Sequence[Sequence[Endpoint]],
    proxy: Proxy,
    setting: net.LocalityLoadBalancerSetting,
    enable_failover: bool,
) -> None:
    """istiod ApplyLocalityLoadBalancer on an EDS assignment; ``sources[i]`` are the endpoints
    behind ``la.endpoints[i]``. ``distribute`` wins; failover needs outlier detection
    (``enable_failover``), or Envoy would never see a priority go unhealthy."""
    if len(setting.distribute) > 0:
        _apply_locality_weights(proxy.locality, la, setting.distribute)
    elif enable_failover:
        if len(setting.failover_priority) > 0:
            proxy_labels = topology_labels(proxy.labels, proxy.locality, proxy.cluster_id, proxy.network)
            _apply_failover_priorities(la, sources, proxy_labels, setting.failover_priority, proxy.cluster_id)
            if len(setting.failover) > 0:
                _apply_locality_failover(proxy.locality, la, setting.failover)
        else:
            _apply_locality_failover(proxy.locality, la, setting.failover)


def _locality_matches(locality: tuple[str, str, str], rule: str) -> bool:
    """istiod LocalityMatch: ``*`` matches anything, an omitted zone or subzone too."""
    region, zone, subzone = locality
    r_region, r_zone, r_subzone = split_locality(rule)
    return (
        (r_region == "*" or region == r_region)
        and (r_zone in ("*", "") or zone == r_zone)
        and (r_subzone in ("*", "") or subzone == r_subzone)
    )


def _group_locality(group: LocalityLbEndpoints) -> tuple[str, str, str]:
    return group.locality.region, group.locality.zone, group.locality.sub_zone


def _apply_locality_weights(
    proxy_locality: str,
    la: endpoint_pb2.ClusterLoadAssignment,
    distribute: Iterable[net.LocalityLoadBalancerSetting.Distribute],
) -> None:
    """The first rule whose ``from`` matches the proxy: each ``to`` locality gets its share of the
    weight (split across the groups it matches by their own weights, rounded up); groups no
    ``to`` names are emptied."""
    for setting in distribute:
        if not _locality_matches(split_locality(proxy_locality), getattr(setting, "from")):
            continue
        unmatched = set(range(len(la.endpoints)))
        for dest in sorted(setting.to):  # istiod walks a Go map; sorted keeps the output stable
            weight = setting.to[dest]
            originals: dict[int, int] = {}
            for i, group in enumerate(la.endpoints):
                if i in unmatched and _locality_matches(_group_locality(group), dest):
                    unmatched.discard(i)
                    has_weight = group.HasField("load_balancing_weight")
                    originals[i] = group.load_balancing_weight.value if has_weight else 1
            total = sum(originals.values())
            for i, original in originals.items():
                share = -(-original * weight // total) if total else 0  # ceil
                if share > 0:
                    la.endpoints[i].load_balancing_weight.value = min(share, MAX_UINT32)
        for i in unmatched:
            del la.endpoints[i].lb_endpoints[:]
        return


def _lb_priority(proxy_locality: str, group: LocalityLbEndpoints) -> int:
    """istiod LbPriority: 0 same subzone, 1 same zone, 2 same region, 3 elsewhere."""
    region, zone, subzone = split_locality(proxy_locality)
    loc = group.locality
    if region != loc.region:
        return 3
    if zone != loc.zone:
        return 2
    return 0 if subzone == loc.sub_zone else 1


def _renumber(priorities: Sequence[int]) -> list[int]:
    """Envoy wants priorities 0..N without gaps: keep the order, close the gaps."""
    rank = {p: i for i, p in enumerate(sorted(set(priorities)))}
    return [rank[p] for p in priorities]


def _apply_locality_failover(
    proxy_locality: str,
    la: endpoint_pb2.ClusterLoadAssignment,
    failover: Iterable[net.LocalityLoadBalancerSetting.Failover],
) -> None:
    """Priorities by closeness to the proxy; another region is 3, or 4 when an explicit
    ``failover`` from the proxy's region names a different one. Any priority already set
    (failoverPriority) stays the major key."""
    region = split_locality(proxy_locality)[0]
    combined = []
    for group in la.endpoints:
        priority = _lb_priority(proxy_locality, group)
        if priority == 3:
            for f in failover:
                if getattr(f, "from") == region:
                    if group.locality.region != f.to:
                        priority = 4
                    break
        combined.append(group.priority * 5 + priority)
    for group, priority in zip(la.endpoints, _renumber(combined), strict=True):
        group.priority = priority


def _apply_failover_priorities(
    la: endpoint_pb2.ClusterLoadAssignment,
    sources: Sequence[Sequence[Endpoint]],
    proxy_labels: Mapping[str, str],
    failover_priority: Iterable[str],
    cluster_id: str,
) -> None:
    """istiod applyFailoverPriorities: split each locality by how many leading ``failoverPriority``
    labels an endpoint shares with the proxy (``label=value`` fixes the value to compare with);
    more shared labels, higher priority."""
    if not proxy_labels or not sources:
        return
    names: list[str] = []
    wanted: list[str] = []
    for entry in failover_priority:
        parts = entry.split("=")
        names.append(parts[0])
        wanted.append(parts[1] if len(parts) == 2 else proxy_labels.get(parts[0], ""))
    lowest = len(names)
    split: list[LocalityLbEndpoints] = []
    for group, endpoints in zip(la.endpoints, sources, strict=True):
        by_priority: dict[int, list[int]] = {}
        for i, ep in enumerate(endpoints):
            labels = topology_labels(ep.labels, ep.locality, cluster_id, ep.network, ep.node_name)
            mismatch = next((j for j, name in enumerate(names) if labels.get(name, "") != wanted[j]), None)
            by_priority.setdefault(0 if mismatch is None else lowest - mismatch, []).append(i)
        for priority in sorted(by_priority):
            part = LocalityLbEndpoints()
            part.CopyFrom(group)
            del part.lb_endpoints[:]
            part.lb_endpoints.extend(group.lb_endpoints[i] for i in by_priority[priority])
            part.priority = priority
            part.load_balancing_weight.value = _sum_weights(part)
            split.append(part)
    for part, priority in zip(split, _renumber([p.priority for p in split]), strict=True):
        part.priority = priority
    del la.endpoints[:]
    la.endpoints.extend(split)
