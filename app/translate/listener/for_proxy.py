"""LDS generator: every listener one proxy gets, as istiod's ConfigGenerator.BuildListeners.

Sidecars: the outbound listeners of their SidecarScope's egress listeners, plus (unless the
proxy does not capture traffic, INTERCEPTION_MODE NONE) ``virtualOutbound`` on 15001 and
``virtualInbound`` on 15006 with chains for the proxy's own workload ports. Routers: one listener
per port of the Gateways that select them. The result is sorted by name; a name built twice
keeps the first. ``route_names`` lists the RDS routes the listeners ask for. Synchronous and
pure: everything read comes from ``proxy`` and ``push`` (DESIGN.md §7).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from envoy.config.listener.v3 import listener_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from app.model.proxy import Proxy, ProxyType
from app.model.sidecar_ingress import sidecar_ingress
from app.translate.allocated import consumes_allocated
from app.translate.cluster.builder import egress_proxy_cluster
from app.translate.listener.builder import (
    ListenerPlan,
    build_virtual_outbound_listener,
    plan_sidecar_outbound_listeners,
)
from app.translate.listener.filters import HCM
from app.translate.listener.gateway import build_gateway_listeners
from app.translate.listener.inbound import build_inbound_listeners
from app.translate.listener.tcp import OutboundContext
from app.translate.view import ProxyDestinationRules, PushContextView, SidecarScopeView, proxy_service_targets


def generate_listeners(proxy: Proxy, push: PushContextView) -> list[listener_pb2.Listener]:
    scope = push.sidecar_scope(proxy)
    return unique_by_name([*scope_listeners(proxy, push, scope), *workload_listeners(proxy, push, scope)])


def unique_by_name(listeners: Iterable[listener_pb2.Listener]) -> list[listener_pb2.Listener]:
    """Sorted by name; a name built twice keeps the first."""
    unique: dict[str, listener_pb2.Listener] = {}
    for listener in listeners:
        unique.setdefault(listener.name, listener)
    return [unique[name] for name in sorted(unique)]


def scope_listeners(proxy: Proxy, push: PushContextView, scope: SidecarScopeView) -> list[listener_pb2.Listener]:
    """A sidecar's listeners that follow from its scope alone: the outbound listeners of its
    egress listeners and ``virtualOutbound``; none for a router."""
    return [build() for _, build in scope_listener_plan(proxy, push, scope)]


def scope_listener_plan(proxy: Proxy, push: PushContextView, scope: SidecarScopeView) -> list[ListenerPlan]:
    """``scope_listeners`` not yet built, each with what it is built from (None: not told)."""
    if proxy.type is ProxyType.ROUTER:
        return []
    ctx = _context(proxy, push, scope)
    policy = scope.outbound_traffic_policy
    egress = egress_proxy_cluster(scope.sidecar)
    plan = plan_sidecar_outbound_listeners(
        ctx, scope.egress_listeners, policy, lambda s: push.endpoints(s.hostname, s.namespace), egress
    )
    if proxy.interception_mode != "NONE":
        # nothing is redirected to a proxy that does not capture traffic
        plan.append((None, partial(build_virtual_outbound_listener, ctx, policy, egress)))
    return plan


def workload_listeners(proxy: Proxy, push: PushContextView, scope: SidecarScopeView) -> list[listener_pb2.Listener]:
    """The listeners that follow from the proxy's own workload: a sidecar's inbound listeners
    (its service targets or its Sidecar's ingress entries), a router's gateway listeners (the
    Gateways its labels select)."""
    ctx = _context(proxy, push, scope)
    targets = proxy_service_targets(proxy, push)
    authz = push.authorization_policies.for_workload(proxy.namespace, proxy.labels)
    jwt = push.request_authentications.for_workload(proxy.namespace, proxy.labels)
    if proxy.type is ProxyType.ROUTER:
        return build_gateway_listeners(ctx, push.gateways, targets, push.virtual_service_index, authz, jwt)
    ingress = sidecar_ingress(scope.name, scope.namespace, scope.sidecar, proxy, push.features)
    return build_inbound_listeners(ctx, targets, push.peer_authentications, authz, jwt, ingress)


def route_names(listeners: Iterable[listener_pb2.Listener]) -> list[str]:
    """Every RDS route_config_name the listeners' HTTP connection managers ask for."""
    names: set[str] = set()
    for listener in listeners:
        chains = list(listener.filter_chains)
        if listener.HasField("default_filter_chain"):
            chains.append(listener.default_filter_chain)
        for chain in chains:
            for f in chain.filters:
                if f.name != HCM:
                    continue
                manager = hcm_pb2.HttpConnectionManager()
                f.typed_config.Unpack(manager)
                if manager.HasField("rds"):
                    names.add(manager.rds.route_config_name)
    return sorted(names)


def _context(proxy: Proxy, push: PushContextView, scope: SidecarScopeView) -> OutboundContext:
    # rules are looked up on demand: only TCP chains read them
    rules = ProxyDestinationRules(proxy, scope)
    allocated = consumes_allocated(proxy, push.features)
    return OutboundContext(proxy, push.mesh, scope.services_by_host, rules, allocated)
