"""The clusters one proxy gets, as istiod's ConfigGenerator.BuildClusters, in the two parts the
generator (``app.xds.generators.clusters``) shares differently.

Sidecars: for each service in the proxy's SidecarScope (except ALIAS services) and each non-UDP
port, the default cluster and one per DestinationRule subset; BlackHoleCluster,
PassthroughCluster, one ``inbound|PORT||`` per workload port of the proxy's own service targets,
and InboundPassthroughCluster. Gateways (router): the outbound clusters and BlackHoleCluster
only (they have no original-destination listeners). A name built twice keeps the first
(istiod normalizeClusters). Synchronous and pure: everything read
comes from ``proxy`` and ``push`` (DESIGN.md §7).
"""

from __future__ import annotations

from collections.abc import Sequence

from envoy.config.cluster.v3 import cluster_pb2

from app.api.mesh import MeshConfig
from app.model.authn import MtlsMode
from app.model.proxy import Proxy, ProxyType
from app.model.service import Endpoint, Registry, Resolution, Service
from app.model.service import Protocol as PortProtocol
from app.model.sidecar_ingress import (
    SidecarIngress,
    default_endpoint_address,
    inbound_connection_pool,
    sidecar_ingress,
)
from app.translate.cluster.builder import (
    AppliedDestinationRule,
    ServiceTarget,
    build_blackhole_cluster,
    build_inbound_cluster,
    build_inbound_passthrough_cluster,
    build_outbound_clusters,
    build_passthrough_cluster,
    service_identities,
)
from app.translate.view import PushContextView, SidecarScopeView, proxy_service_targets


def service_clusters(
    proxy: Proxy,
    mesh: MeshConfig,
    service: Service,
    rule: AppliedDestinationRule | None,
    endpoints: Sequence[Endpoint],
    namespace_mode: MtlsMode = MtlsMode.UNKNOWN,
) -> list[cluster_pb2.Cluster]:
    """The outbound clusters of one service in a proxy's scope: per non-UDP port, the default
    cluster and its subsets; none for an ALIAS service. ``endpoints`` are read for the SANs (and
    by DNS clusters, which embed them); ``namespace_mode`` is the PeerAuthentication mode of the
    service's namespace (what auto mTLS follows)."""
    if service.resolution is Resolution.ALIAS:
        return []
    identities = service_identities(service, endpoints, mesh.trust_domain_aliases)
    out: list[cluster_pb2.Cluster] = []
    for port in service.ports:
        if port.protocol is not PortProtocol.UDP:
            out.extend(build_outbound_clusters(proxy, mesh, service, port, endpoints, rule, identities, namespace_mode))
    return out


def proxy_clusters(proxy: Proxy, push: PushContextView, scope: SidecarScopeView) -> list[cluster_pb2.Cluster]:
    """The clusters that are not a scope service's: BlackHoleCluster; for sidecars also
    PassthroughCluster, the inbound clusters of the proxy's own workload and
    InboundPassthroughCluster."""
    clusters = [build_blackhole_cluster(push.mesh)]
    if proxy.type is ProxyType.SIDECAR:
        clusters.append(build_passthrough_cluster(push.mesh))
        clusters.extend(_inbound_clusters(proxy, push, scope))
        clusters.append(build_inbound_passthrough_cluster(proxy, push.mesh))
    return clusters


def _inbound_clusters(proxy: Proxy, push: PushContextView, scope: SidecarScopeView) -> list[cluster_pb2.Cluster]:
    """istiod buildInboundClusters: one cluster per workload (target) port, the first service
    on a port primary; or, with a Sidecar's ingress entries, one per entry (and the service
    ports they leave free under the merge flag)."""
    ingress = sidecar_ingress(scope.name, scope.namespace, scope.sidecar, proxy, push.features)
    if ingress is None and proxy.interception_mode == "NONE":
        return []  # no inbound listeners without capture, so no clusters for them
    targets = proxy_service_targets(proxy, push)
    out = []
    if ingress is None or ingress.features.sidecar_service_inbound_listener_merge:
        named = frozenset(i.port.port for i in ingress.ports) if ingress is not None else frozenset()
        out.extend(_service_inbound_clusters(proxy, push, scope, targets, named))
    if ingress is not None:
        out.extend(_ingress_inbound_clusters(proxy, push, scope, targets, ingress))
    return out


def _service_inbound_clusters(
    proxy: Proxy,
    push: PushContextView,
    scope: SidecarScopeView,
    targets: Sequence[ServiceTarget],
    skip: frozenset[int],
) -> list[cluster_pb2.Cluster]:
    by_port: dict[int, list[ServiceTarget]] = {}
    seen: set[tuple[str, str, int, int]] = set()
    for target in targets:
        service, service_port, endpoint = target
        key = (service.hostname, service.namespace, service_port.port, endpoint.port)
        if key in seen or endpoint.port in skip:
            continue
        seen.add(key)
        by_port.setdefault(endpoint.port, []).append(target)
    out = []
    for port, port_targets in by_port.items():
        rule = scope.inbound_destination_rule(port_targets[0][0])
        pool = inbound_connection_pool(scope.sidecar, port)
        out.append(build_inbound_cluster(proxy, push.mesh, port_targets, rule, connection_pool=pool))
    return out


def ingress_stand_in(ingress: SidecarIngress) -> Service:
    """The service an ingress entry's cluster is built on behalf of when no service targets its
    port (istiod buildInboundClustersFromSidecar: host SIDECAR.NAMESPACE); its rule is the one
    a host of that name has in the scope."""
    return Service(
        hostname=f"{ingress.name}.{ingress.namespace}",
        namespace=ingress.namespace,
        ports=(),
        registry=Registry.KUBERNETES,
        name=ingress.name,
        mesh_external=True,
    )


def _ingress_inbound_clusters(
    proxy: Proxy,
    push: PushContextView,
    scope: SidecarScopeView,
    targets: Sequence[ServiceTarget],
    ingress: SidecarIngress,
) -> list[cluster_pb2.Cluster]:
    """istiod buildInboundClustersFromSidecar: each entry's cluster sends to its
    defaultEndpoint (the original destination without one), on behalf of the service whose
    target port it is, else of a stand-in named after the Sidecar."""
    out = []
    for entry in ingress.ports:
        port = entry.port
        resolved = default_endpoint_address(entry.default_endpoint, proxy.ip_addresses)
        if resolved is None:
            continue
        address, endpoint_port = resolved
        service = next((s for s, _, ep in targets if ep.port == port.port), None) or ingress_stand_in(ingress)
        target = (service, port, Endpoint(address, endpoint_port, port.name))
        rule = scope.inbound_destination_rule(service)
        pool = inbound_connection_pool(scope.sidecar, port.port)
        out.append(
            build_inbound_cluster(
                proxy, push.mesh, [target], rule, port=port.port, endpoint_address=address, connection_pool=pool
            )
        )
    return out
