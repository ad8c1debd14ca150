"""One ClusterLoadAssignment per cluster name a proxy subscribes to, as istiod's
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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.config.host import is_ip_address
from app.model.proxy import Proxy
from app.model.service import Endpoint, Resolution, Service, ServicePort
from app.model.traffic_policy import merge_traffic_policy
from app.translate.address import UNIX_ADDRESS_PREFIX
from app.translate.cluster.builder import AppliedDestinationRule, parse_cluster_name
from app.translate.endpoint.builder import (
    apply_locality_load_balancer,
    build_locality_endpoints,
    keep_mtls_endpoints,
    locality_lb_setting,
    port_subset_endpoints,
    sends_unhealthy,
    tls_mode_for_port,
)
from app.translate.view import SidecarScopeView

ClusterLoadAssignment = endpoint_pb2.ClusterLoadAssignment
_DNS_RESOLUTIONS = (Resolution.DNS_LB, Resolution.DNS_ROUND_ROBIN_LB)


def eds_cluster_names(clusters: Iterable[cluster_pb2.Cluster]) -> list[str]:
    """What Envoy subscribes to over EDS for these clusters: each EDS cluster's service name
    (its own name when unset), sorted."""
    names = {c.eds_cluster_config.service_name or c.name for c in clusters if c.type == cluster_pb2.Cluster.EDS}
    return sorted(names)


@dataclass(frozen=True, slots=True)
class AssignmentTarget:
    """What a cluster name resolves to for one proxy: the service (as the proxy's scope has it),
    its port and the DestinationRule the proxy applies to it."""

    service: Service
    port: ServicePort
    rule: AppliedDestinationRule | None


def resolve_assignment(name: str, proxy: Proxy, scope: SidecarScopeView) -> AssignmentTarget | None:
    """The service a name's endpoints come from, or None for a name that gets an empty
    assignment (unknown, DNS, or a port the service lacks)."""
    key = parse_cluster_name(name)
    # istiod ignores the direction: any name whose host and port resolve gets endpoints
    service = scope.services_by_host.get(key.hostname) if key.hostname else None
    if service is None or service.resolution in _DNS_RESOLUTIONS:
        return None
    port = service.port_by_number(key.port)
    if port is None:
        return None
    return AssignmentTarget(service, port, scope.destination_rule(proxy, service))


def build_assignment(
    name: str,
    proxy: Proxy,
    mesh: MeshConfig,
    target: AssignmentTarget | None,
    endpoints: Sequence[Endpoint],
) -> endpoint_pb2.ClusterLoadAssignment:
    """The assignment of one cluster name from the target's endpoints; ``proxy`` is read only for
    locality load balancing (its locality, and labels, cluster and network for failoverPriority)."""
    empty = ClusterLoadAssignment(cluster_name=name)
    if target is None:
        return empty
    key = parse_cluster_name(name)
    service, port = target.service, target.port
    dr = target.rule.rule if target.rule is not None else None
    subset = target.rule.subset(key.subset) if target.rule is not None and key.subset else None
    rule_tp, subset_tp = _traffic_policy(dr), _traffic_policy(subset)
    # istiod getSubSetLabels: a subset the rule does not define selects every endpoint
    subset_labels = subset.labels if subset is not None else {}
    selected = port_subset_endpoints(endpoints, port, subset_labels)
    # istiod tlsModeForDestinationRule: the rule's mode for the default cluster; for a subset its
    # own mode for the port, else the rule's; none for a subset the rule lacks
    tls_mode = tls_mode_for_port(rule_tp, port.port)
    if key.subset:
        own = tls_mode_for_port(subset_tp, port.port)
        tls_mode = None if subset is None else (own if own is not None else tls_mode)
    # istiod getSubsetTrafficPolicy: the rule's policy merged with the subset's, for the port
    policy = merge_traffic_policy(rule_tp, subset_tp, port.port)
    usable = filter(_usable_in_eds, selected)
    localities = build_locality_endpoints(service, usable, tls_mode, sends_unhealthy(policy, service))
    if key.sni_dnat:
        keep_mtls_endpoints(localities)
    if not localities:
        return empty
    la = ClusterLoadAssignment(cluster_name=name)
    la.endpoints.extend(le.group for le in localities)
    lb = policy.load_balancer if policy is not None and policy.HasField("load_balancer") else None
    found = locality_lb_setting(mesh, lb, service)
    if found is not None:
        enable_failover = found.force or (policy is not None and policy.HasField("outlier_detection"))
        apply_locality_load_balancer(la, [le.sources for le in localities], proxy, found.setting, enable_failover)
    return la


def _traffic_policy(owner: net.DestinationRule | net.Subset | None) -> net.TrafficPolicy | None:
    return owner.traffic_policy if owner is not None and owner.HasField("traffic_policy") else None


def _usable_in_eds(ep: Endpoint) -> bool:
    """EDS takes IPs only (a ServiceEntry endpoint may name a host); a unix socket or an endpoint
    without an address passes here and is judged later, as in istiod."""
    if not ep.address or ep.port == 0 or ep.address.startswith(UNIX_ADDRESS_PREFIX):
        return True
    return is_ip_address(ep.address)
