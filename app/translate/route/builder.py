"""Envoy routes for VirtualService HTTP routes and for services without one (istiod
pilot/pkg/networking/core/route/route.go: BuildHTTPRoutesForVirtualService, translateRoute,
applyHTTPRouteDestination, GetDestinationCluster, BuildDefaultHTTPOutboundRoute).

Owns which HTTPRoutes and matches apply to a proxy on a port, the route's action (cluster,
weighted clusters, redirect, direct response), rewrites, timeouts, mirroring, per-route
filter configs (fault, CORS), names, decorators and the ``istio`` config metadata. Virtual
hosts and route configurations are built by the RDS generator from these routes. Pure.

Not rendered, as pilotfish has none of their inputs: Gateway API / Ingress semantics
(path_separated_prefix, %PREFIX()% redirects, cluster_not_found 500), proxyless-gRPC
max_stream_duration, the HTTP/3 alt-svc header, and persistent-session per-route configs
(istiod's PILOT_ENABLE_PERSISTENT_SESSION_FILTER is off by default). Delegate VirtualServices
must be merged into their parents before they get here; a route left with no destination is
dropped, as is a redirect with a code Envoy cannot send (istiod emits an action-less route
that Envoy would reject).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from envoy.config.route.v3 import route_components_pb2 as route_pb2
from google.protobuf import duration_pb2

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.model.service import Service
from app.model.virtual_service import ResolvedVirtualService
from app.translate.cluster.builder import destination_cluster as cluster_for_destination
from app.translate.cluster.builder import outbound_cluster_name, parse_cluster_name
from app.translate.metadata import add_config_metadata
from app.translate.route.match import is_catch_all_route, source_matches, translate_route_match
from app.translate.route.policy import (
    cors_policy,
    destination_consistent_hash,
    direct_response_action,
    fault_config,
    hash_policy,
    header_operations,
    mirror_fraction,
    mirror_policy_fraction,
    redirect_action,
    request_mirror_policy,
    retry_policy,
    service_consistent_hash,
)

DEFAULT_ROUTE_NAME = "default"
FAULT_FILTER = "envoy.filters.http.fault"
CORS_FILTER = "envoy.filters.http.cors"
_NO_RULES: Mapping[str, net.DestinationRule] = MappingProxyType({})

__all__ = [
    "CORS_FILTER",
    "DEFAULT_ROUTE_NAME",
    "FAULT_FILTER",
    "RouteContext",
    "build_default_route",
    "build_vs_routes",
    "destination_cluster",
    "is_catch_all_route",
]


@dataclass(frozen=True, slots=True)
class RouteContext:
    """What route translation needs to know about the proxy and the port it serves."""

    listener_port: int  # the virtual host's port: match.port, and a destination's port when it names none
    gateways: frozenset[str]  # {"mesh"} for sidecars, resolved "ns/name"s for gateway proxies
    proxy_labels: Mapping[str, str]  # for match.sourceLabels
    proxy_namespace: str  # for match.sourceNamespace
    services: Mapping[str, Service]  # hostname -> Service as this proxy sees it
    mesh: MeshConfig
    # hostname -> the (merged) DestinationRule this proxy applies to it; only consistent-hash
    # load balancing is read from it, to add hash policies
    destination_rules: Mapping[str, net.DestinationRule] = field(default_factory=lambda: _NO_RULES)
    tls: bool = False  # the server terminates TLS: a redirect with a port but no scheme means https


def destination_cluster(dest: net.Destination, ctx: RouteContext) -> str:
    """istiod GetDestinationCluster for a route destination, with the service this proxy sees."""
    return cluster_for_destination(dest, ctx.services.get(dest.host), ctx.listener_port)


def build_vs_routes(vs: ResolvedVirtualService, ctx: RouteContext) -> list[route_pb2.Route]:
    """istiod BuildHTTPRoutesForVirtualService: each applicable match of each HTTPRoute, in
    order, becomes one route; nothing after a catch-all route (or an HTTPRoute without matches,
    which catches all) could ever match, so stop there."""
    out: list[route_pb2.Route] = []
    for http in vs.spec.http:
        for match in http.match or (None,):
            r = _translate_route(vs, http, match, ctx)
            if r is not None:
                out.append(r)
                if is_catch_all_route(r):
                    return out
        if not http.match:
            break
    return out


def build_default_route(hostname: str, port: int, ctx: RouteContext) -> route_pb2.Route:
    """istiod BuildDefaultHTTPOutboundRoute (+ the hash policy buildSidecarVirtualHostForService
    adds): every path to ``outbound|PORT||HOST`` with no timeout and the mesh's default retry
    policy."""
    out = route_pb2.Route(name=DEFAULT_ROUTE_NAME, match=route_pb2.RouteMatch(prefix="/"))
    out.decorator.operation = f"{hostname}:{port}/*"
    action = out.route
    action.cluster = outbound_cluster_name(port, hostname)
    # istiod keeps previous_hosts here even when the service hashes consistently
    retries = retry_policy(_mesh_retry_policy(ctx.mesh), consistent_hash=False)
    if retries is not None:
        action.retry_policy.CopyFrom(retries)
    _set_timeout(action, None)
    hp = hash_policy(service_consistent_hash(ctx.destination_rules.get(hostname), port))
    if hp is not None:
        action.hash_policy.append(hp)
    return out


# --- one HTTPRoute x one match -------------------------------------------------------------


def _translate_route(
    vs: ResolvedVirtualService, http: net.HTTPRoute, match: net.HTTPMatchRequest | None, ctx: RouteContext
) -> route_pb2.Route | None:
    if match is not None and match.port and match.port != ctx.listener_port:
        return None
    if not source_matches(match, ctx.gateways, ctx.proxy_labels, ctx.proxy_namespace):
        return None

    out = route_pb2.Route(name=http.name, match=translate_route_match(match))
    if match is not None and match.name:
        out.name = f"{http.name}.{match.name}"
    meta = vs.obj.meta
    add_config_metadata(out.metadata, "virtual-service", meta.namespace, meta.name)
    if match is not None and match.stat_prefix:
        out.stat_prefix = match.stat_prefix

    authority = ""
    if http.HasField("headers"):
        authority = _apply_header_operations(out, http.headers)

    if http.HasField("redirect"):
        redirect = redirect_action(http.redirect, ctx.listener_port, ctx.tls)
        if redirect is None:
            return None
        out.redirect.CopyFrom(redirect)
    elif http.HasField("direct_response"):
        out.direct_response.CopyFrom(direct_response_action(http.direct_response))
    elif http.route:
        _apply_destinations(out, http, authority, ctx)
    else:
        return None  # nothing to send to (an unmerged delegate): Envoy requires an action

    out.decorator.operation = _route_operation(out, meta.name, ctx.listener_port)
    if http.HasField("fault"):
        out.typed_per_filter_config[FAULT_FILTER].Pack(fault_config(http.fault))
    if http.HasField("cors_policy"):
        out.typed_per_filter_config[CORS_FILTER].Pack(cors_policy(http.cors_policy))
    return out


def _apply_destinations(out: route_pb2.Route, http: net.HTTPRoute, authority: str, ctx: RouteContext) -> None:
    """istiod applyHTTPRouteDestination."""
    action = out.route
    _set_timeout(action, http.timeout if http.HasField("timeout") else None)

    if http.HasField("rewrite"):
        rw = http.rewrite
        if rw.HasField("uri_regex_rewrite"):
            action.regex_rewrite.pattern.regex = rw.uri_regex_rewrite.match
            action.regex_rewrite.substitution = rw.uri_regex_rewrite.rewrite
        elif rw.uri:
            action.prefix_rewrite = rw.uri
        if rw.authority:
            authority = rw.authority
    if authority:
        action.host_rewrite_literal = authority

    if http.HasField("mirror"):
        fraction = mirror_fraction(http)
        if fraction is not None:
            cluster = destination_cluster(http.mirror, ctx)
            action.request_mirror_policies.append(request_mirror_policy(cluster, fraction))
    for mirror in http.mirrors:
        fraction = mirror_policy_fraction(mirror)
        if fraction is not None and mirror.HasField("destination"):
            cluster = destination_cluster(mirror.destination, ctx)
            action.request_mirror_policies.append(request_mirror_policy(cluster, fraction))

    consistent_hash = False
    if len(http.route) == 1:
        consistent_hash = _single_destination(out, http.route[0], ctx)
    else:
        _weighted_destinations(action, http.route, ctx)
    policy = http.retries if http.HasField("retries") else _mesh_retry_policy(ctx.mesh)
    retries = retry_policy(policy, consistent_hash)
    if retries is not None:
        action.retry_policy.CopyFrom(retries)


def _single_destination(out: route_pb2.Route, dst: net.HTTPRouteDestination, ctx: RouteContext) -> bool:
    """One destination: a plain cluster, its headers merged into the route's. Returns whether
    it hashes consistently (which keeps retries on the same host)."""
    action = out.route
    action.cluster = destination_cluster(dst.destination, ctx)
    if dst.HasField("headers"):
        authority = _apply_header_operations(out, dst.headers)
        # the route-level rewrite wins, so one and several destinations behave alike
        if authority and action.WhichOneof("host_rewrite_specifier") is None:
            action.host_rewrite_literal = authority
    hp = _destination_hash_policy(dst.destination, ctx)
    if hp is not None:
        action.hash_policy.append(hp)
    return hp is not None


def _weighted_destinations(
    action: route_pb2.RouteAction, destinations: Iterable[net.HTTPRouteDestination], ctx: RouteContext
) -> None:
    weighted = action.weighted_clusters
    weighted.SetInParent()
    for dst in destinations:
        if dst.weight == 0:
            continue  # a zero weight among others means "no traffic": leave it out
        cw = weighted.clusters.add(name=destination_cluster(dst.destination, ctx))
        cw.weight.value = dst.weight
        if dst.HasField("headers"):
            authority = _apply_header_operations(cw, dst.headers)
            if authority:
                cw.host_rewrite_literal = authority
        hp = _destination_hash_policy(dst.destination, ctx)
        if hp is not None:
            action.hash_policy.append(hp)


# --- helpers -------------------------------------------------------------------------------


def _apply_header_operations(
    target: route_pb2.Route | route_pb2.WeightedCluster.ClusterWeight, headers: net.Headers
) -> str:
    """Add a ``Headers`` block's request and response edits to a route or a weighted cluster;
    returns the authority it sets, which callers turn into a host rewrite."""
    ops = header_operations(headers)
    target.request_headers_to_add.extend(ops.request_headers_to_add)
    target.response_headers_to_add.extend(ops.response_headers_to_add)
    target.request_headers_to_remove.extend(ops.request_headers_to_remove)
    target.response_headers_to_remove.extend(ops.response_headers_to_remove)
    return ops.authority


def _destination_hash_policy(dest: net.Destination, ctx: RouteContext) -> route_pb2.RouteAction.HashPolicy | None:
    return hash_policy(destination_consistent_hash(dest, ctx.destination_rules.get(dest.host)))


def _mesh_retry_policy(mesh: MeshConfig) -> net.HTTPRetry | None:
    return mesh.default_http_retry_policy if mesh.HasField("default_http_retry_policy") else None


def _set_timeout(action: route_pb2.RouteAction, timeout: duration_pb2.Duration | None) -> None:
    """istiod setTimeout: 0s (disabled) unless the VirtualService sets one; the same value caps
    the grpc-timeout header (max_grpc_timeout, deprecated in Envoy but what istiod still sends)."""
    action.timeout.SetInParent()
    if timeout is not None:
        action.timeout.CopyFrom(timeout)
    action.max_grpc_timeout.CopyFrom(action.timeout)


def _route_operation(out: route_pb2.Route, vs_name: str, listener_port: int) -> str:
    """istiod GetRouteOperation: ``host:port/path`` for one destination, else ``vs:port/path``."""
    m = out.match
    kind = m.WhichOneof("path_specifier")
    if kind == "prefix":
        path = m.prefix + "*"
    elif kind == "path":
        path = m.path
    elif kind == "safe_regex":
        path = m.safe_regex.regex
    else:
        path = "/*"
    if out.WhichOneof("action") == "route" and out.route.WhichOneof("cluster_specifier") == "cluster":
        key = parse_cluster_name(out.route.cluster)
        if key.hostname:  # an ``outbound|PORT|SUBSET|HOST`` name, not UnknownService
            return f"{key.hostname}:{key.port}{path}"
    return f"{vs_name}:{listener_port}{path}"
