"""EnvoyFilter patches to route configurations (istiod envoyfilter/rc_patch.go):
ROUTE_CONFIGURATION merges, VIRTUAL_HOST and HTTP_ROUTE operations on what their match selects."""

from __future__ import annotations

from collections.abc import Mapping

from envoy.config.route.v3.route_components_pb2 import Route, VirtualHost
from envoy.config.route.v3.route_pb2 import RouteConfiguration

from app.api.istio.networking.v1alpha3.envoy_filter_pb2 import EnvoyFilter
from app.model.envoy_filter import ApplyTo, ConfigPatch, MergedPatches, Operation, PatchContext
from app.translate.cluster.builder import parse_cluster_name
from app.translate.envoy_filter.common import (
    context_matches,
    copy_of,
    is_merge,
    list_operation,
    merge_value,
    replace_items,
)
from app.translate.route.gateway import gateway_route_port

RouteAction = EnvoyFilter.RouteConfigurationMatch.RouteMatch.Action
ROUTE_TYPES = (ApplyTo.ROUTE_CONFIGURATION, ApplyTo.VIRTUAL_HOST, ApplyTo.HTTP_ROUTE)
# a gateway route configuration's port -> the service ports it serves (istiod GatewayPortMap)
PortMap = Mapping[int, frozenset[int]]


def patches_routes(patches: MergedPatches | None) -> bool:
    return patches is not None and any(patches.of(t) for t in ROUTE_TYPES)


def patch_route_configuration(
    context: int, patches: MergedPatches, config: RouteConfiguration, ports: PortMap | None = None
) -> RouteConfiguration:
    """istiod ApplyRouteConfigurationPatches, on a copy."""
    out = RouteConfiguration()
    out.CopyFrom(config)
    ports = ports or {}
    for patch in patches.of(ApplyTo.ROUTE_CONFIGURATION):
        if (
            is_merge(patch.operation)
            and context_matches(context, patch)
            and _config_matches(context, out, patch, ports)
        ):
            merge_value(patch, out)
    _patch_virtual_hosts(context, patches, out, ports)
    return out


def _patch_virtual_hosts(context: int, patches: MergedPatches, config: RouteConfiguration, ports: PortMap) -> None:
    hosts = list(config.virtual_hosts)
    removed: set[str] = set()
    for i in range(len(hosts)):
        if _patch_virtual_host(context, patches, config, hosts, i, ports):
            removed.add(hosts[i].name)
    for patch in patches.of(ApplyTo.VIRTUAL_HOST):
        if (
            patch.operation == Operation.ADD
            and context_matches(context, patch)
            and _config_matches(context, config, patch, ports)
        ):
            hosts.append(copy_of(patch))
    replace_items(config.virtual_hosts, [h for h in hosts if h.name not in removed])


def _patch_virtual_host(
    context: int, patches: MergedPatches, config: RouteConfiguration, hosts: list[VirtualHost], i: int, ports: PortMap
) -> bool:
    """Patch ``hosts[i]``; True when a patch removes it."""
    for patch in patches.of(ApplyTo.VIRTUAL_HOST):
        if not (context_matches(context, patch) and _config_matches(context, config, patch, ports)):
            continue
        if not _virtual_host_matches(hosts[i], patch):
            continue
        if patch.operation == Operation.REMOVE:
            return True
        if is_merge(patch.operation):
            merge_value(patch, hosts[i])
        elif patch.operation == Operation.REPLACE:
            replacement = copy_of(patch)
            assert isinstance(replacement, VirtualHost)
            hosts[i] = replacement
    _patch_routes(context, patches, config, hosts[i], ports)
    return False


def _patch_routes(
    context: int, patches: MergedPatches, config: RouteConfiguration, host: VirtualHost, ports: PortMap
) -> None:
    routes: list[Route | None] = list(host.routes)
    for i in range(len(routes)):
        for patch in patches.of(ApplyTo.HTTP_ROUTE):
            route = routes[i]
            if route is None:
                break
            if not (context_matches(context, patch) and _config_matches(context, config, patch, ports)):
                continue
            if not (_virtual_host_matches(host, patch) and _route_matches(route, patch)):
                continue
            if patch.operation == Operation.REMOVE:
                routes[i] = None
                break
            if is_merge(patch.operation):
                merge_value(patch, route)
    found: list[Route] = [r for r in routes if r is not None]
    for patch in patches.of(ApplyTo.HTTP_ROUTE):
        if not (context_matches(context, patch) and _config_matches(context, config, patch, ports)):
            continue
        if not _virtual_host_matches(host, patch):
            continue
        has_match = _has_route_match(patch)

        def make(p: ConfigPatch = patch) -> Route:
            route = copy_of(p)
            assert isinstance(route, Route)
            return route

        def matches(r: Route, p: ConfigPatch = patch) -> bool:
            return _route_matches(r, p)

        if patch.operation == Operation.INSERT_FIRST:
            if not has_match or any(map(matches, found)):
                found.insert(0, make())  # istiod: first in the list, when any route matches (if it matches one)
        elif patch.operation in (Operation.ADD, Operation.INSERT_AFTER, Operation.INSERT_BEFORE):
            found = list_operation(found, patch.operation, has_match, matches, make)
    replace_items(host.routes, found)


def _config_matches(context: int, config: RouteConfiguration, patch: ConfigPatch, ports: PortMap) -> bool:
    """istiod routeConfigurationMatch: name and port (for a gateway, the gateway, its port name
    and a port the route configuration's port serves)."""
    if not patch.match.HasField("route_configuration"):
        return True
    wanted = patch.match.route_configuration
    if wanted.name and wanted.name != config.name:
        return False
    if context != PatchContext.GATEWAY:
        return not (wanted.port_number and wanted.port_number != _listener_port(config.name))
    number, port_name, gateway = gateway_route_name(config.name)
    if wanted.port_name and wanted.port_name != port_name:
        return False
    if wanted.gateway and wanted.gateway != gateway:
        return False
    if wanted.port_number:
        served = ports.get(number)
        return wanted.port_number in served if served is not None else wanted.port_number == number
    return True


def _listener_port(name: str) -> int:
    """getListenerPortFromName: an inbound name's port (``inbound|PORT||``), else the name as a
    number (0 when it is none)."""
    if name.startswith("inbound"):
        return parse_cluster_name(name).port
    return int(name) if name.isdigit() else 0


def gateway_route_name(name: str) -> tuple[int, str, str]:
    """istiod ParseGatewayRDSRouteName: (port, port name, "namespace/gateway") of a gateway's RDS
    name, ``http.PORT`` (the port only) or ``https.PORT.PORT_NAME.GATEWAY.NAMESPACE``."""
    if name.startswith("https.") and name.count(".") == 4:
        _, _, port_name, gateway, namespace = name.split(".")
        return gateway_route_port(name), port_name, f"{namespace}/{gateway}"
    return gateway_route_port(name), "", ""


def _virtual_host_matches(host: VirtualHost, patch: ConfigPatch) -> bool:
    match = patch.match
    if not match.HasField("route_configuration") or not match.route_configuration.HasField("vhost"):
        return True
    wanted = match.route_configuration.vhost
    return (not wanted.name or wanted.name == host.name) and (
        not wanted.domain_name or wanted.domain_name in host.domains
    )


def _has_route_match(patch: ConfigPatch) -> bool:
    match = patch.match
    return (
        match.HasField("route_configuration")
        and match.route_configuration.HasField("vhost")
        and match.route_configuration.vhost.HasField("route")
    )


def _route_matches(route: Route, patch: ConfigPatch) -> bool:
    if not _has_route_match(patch):
        return True
    wanted = patch.match.route_configuration.vhost.route
    if wanted.name and wanted.name != route.name:
        return False
    if wanted.action != RouteAction.ANY:
        action = route.WhichOneof("action")
        expected = {
            "route": RouteAction.ROUTE,
            "redirect": RouteAction.REDIRECT,
            "direct_response": RouteAction.DIRECT_RESPONSE,
        }
        if action in expected:
            return bool(expected[action] == wanted.action)
    return True
