"""EDS generator: one ClusterLoadAssignment per cluster name a proxy subscribes to, as istiod's
EdsGenerator builds them (pilot/pkg/xds/eds.go, endpoints.NewEndpointBuilder and
BuildClusterLoadAssignment).

A name is ``outbound|PORT|SUBSET|HOST`` (or the SNI-DNAT form ``outbound_.PORT_.SUBSET_.HOST``,
which keeps only mTLS endpoints). The service is the one the proxy's SidecarScope has for HOST,
the one CDS built the cluster from; its endpoints are those of the named port matching the
subset's labels from the DestinationRule that applies to the proxy. Like istiod, every name gets
an assignment: one for a service, port or name it cannot resolve, for a DNS service (its cluster
carries its own endpoints) or for a service without endpoints is empty but for ``cluster_name``,
which is what lets Envoy finish warming the cluster. Synchronous and pure (DESIGN.md §7).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2

from app.api import networking_pb2 as net
from app.model.proxy import Proxy
from app.model.service import Endpoint, Resolution, Service
from app.model.traffic_policy import merge_traffic_policy
from app.xds.envoy.endpoint import (
    UNIX_ADDRESS_PREFIX,
    apply_locality_load_balancer,
    build_locality_endpoints,
    keep_mtls_endpoints,
    locality_lb_setting,
    subset_matches,
    tls_mode_for_port,
)
from app.xds.generators.view import PushContextView, SidecarScopeView

ClusterLoadAssignment = endpoint_pb2.ClusterLoadAssignment
_DNS_RESOLUTIONS = (Resolution.DNS_LB, Resolution.DNS_ROUND_ROBIN_LB)
_SNI_DNAT_PREFIXES = ("outbound_.", "inbound_.")


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
    port = int(parts[1]) if count >= 2 and parts[1].isdigit() else 0
    subset = parts[2] if count >= 3 else ""
    hostname = parts[3] if count == 3 else ""  # a fifth part voids the hostname
    return ClusterKey(direction, port, subset, hostname, sni_dnat)


def generate_endpoints(
    proxy: Proxy, push: PushContextView, cluster_names: Iterable[str]
) -> list[endpoint_pb2.ClusterLoadAssignment]:
    """One assignment per distinct name, sorted by cluster name."""
    scope = push.sidecar_scope(proxy)
    by_hostname: dict[str, Service] = {}
    for service in scope.services:
        by_hostname.setdefault(service.hostname, service)
    return [_load_assignment(name, proxy, push, scope, by_hostname) for name in sorted(set(cluster_names))]


def eds_cluster_names(clusters: Iterable[cluster_pb2.Cluster]) -> list[str]:
    """What Envoy subscribes to over EDS for these clusters: each EDS cluster's service name
    (its own name when unset), sorted."""
    names = {
        c.eds_cluster_config.service_name or c.name for c in clusters if c.type == cluster_pb2.Cluster.EDS
    }
    return sorted(names)


def _load_assignment(
    name: str, proxy: Proxy, push: PushContextView, scope: SidecarScopeView, by_hostname: dict[str, Service]
) -> endpoint_pb2.ClusterLoadAssignment:
    empty = ClusterLoadAssignment(cluster_name=name)
    key = parse_cluster_name(name)
    # istiod ignores the direction: any name whose host and port resolve gets endpoints
    service = by_hostname.get(key.hostname) if key.hostname else None
    if service is None or service.resolution in _DNS_RESOLUTIONS:
        return empty
    port = service.port_by_number(key.port)
    if port is None:
        return empty
    applied = scope.destination_rule(proxy, service)
    dr = applied.rule if applied is not None else None
    subset = _find_subset(dr, key.subset)
    # istiod getSubSetLabels: a subset the rule does not define selects every endpoint
    subset_labels = subset.labels if subset is not None else {}
    endpoints = [
        ep
        for ep in push.endpoints(service.hostname, service.namespace)
        if ep.service_port_name == port.name and _usable_in_eds(ep) and subset_matches(ep, subset_labels)
    ]
    localities = build_locality_endpoints(proxy, service, endpoints, _rule_tls_mode(dr, key.subset, subset, port.port))
    if key.sni_dnat:
        keep_mtls_endpoints(localities)
    if not localities:
        return empty
    la = ClusterLoadAssignment(cluster_name=name)
    la.endpoints.extend(le.group for le in localities)
    policy = _subset_policy(dr, subset, port.port)
    lb = policy.load_balancer if policy is not None and policy.HasField("load_balancer") else None
    setting = locality_lb_setting(push.mesh, lb)
    if setting is not None:
        enable_failover = policy is not None and policy.HasField("outlier_detection")
        apply_locality_load_balancer(la, [le.sources for le in localities], proxy, setting, enable_failover)
    return la


def _find_subset(dr: net.DestinationRule | None, name: str) -> net.Subset | None:
    if dr is None or not name:
        return None
    return next((s for s in dr.subsets if s.name == name), None)


def _rule_tls_mode(
    dr: net.DestinationRule | None, subset_name: str, subset: net.Subset | None, port: int
) -> int | None:
    """istiod tlsModeForDestinationRule: the rule's mode for the default cluster, the subset's own
    mode (not the rule's) for a subset, none for a subset the rule lacks."""
    if dr is None:
        return None
    if not subset_name:
        return tls_mode_for_port(dr.traffic_policy if dr.HasField("traffic_policy") else None, port)
    if subset is None or not subset.HasField("traffic_policy"):
        return None
    return tls_mode_for_port(subset.traffic_policy, port)


def _subset_policy(dr: net.DestinationRule | None, subset: net.Subset | None, port: int) -> net.TrafficPolicy | None:
    """istiod getSubsetTrafficPolicy: the rule's policy merged with the subset's, for the port."""
    if dr is None:
        return None
    rule_tp = dr.traffic_policy if dr.HasField("traffic_policy") else None
    subset_tp = subset.traffic_policy if subset is not None and subset.HasField("traffic_policy") else None
    return merge_traffic_policy(rule_tp, subset_tp, port)


def _usable_in_eds(ep: Endpoint) -> bool:
    """EDS takes IPs only (a ServiceEntry endpoint may name a host); a unix socket or an endpoint
    without an address passes here and is judged later, as in istiod."""
    if not ep.address or ep.port == 0 or ep.address.startswith(UNIX_ADDRESS_PREFIX):
        return True
    try:
        ipaddress.ip_address(ep.address)
    except ValueError:
        return False
    return True
