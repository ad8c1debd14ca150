"""What listeners one proxy gets, as istiod's ConfigGenerator.BuildListeners, in two parts the
generator shares differently.

Sidecars: the outbound listeners of their SidecarScope's egress listeners, plus (unless the
proxy does not capture traffic, INTERCEPTION_MODE NONE) ``virtualOutbound`` on 15001: these
follow from the scope and a few proxy traits, as inputs values (``scope_listener_inputs``);
``virtualInbound`` on 15006 with chains for the proxy's own workload ports
(``workload_listeners``). Routers: one listener per port of the Gateways that select them.
``route_names`` lists the RDS routes listeners ask for. Synchronous and pure (DESIGN.md §7).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from envoy.config.listener.v3 import listener_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from app.config.objects import EMPTY_LABELS
from app.model.authz import WorkloadPolicies
from app.model.proxy import Proxy, ProxyType, family_ips
from app.model.service import Endpoint
from app.model.sidecar_ingress import sidecar_ingress
from app.model.telemetry import CLIENT, SERVER
from app.translate.allocated import consumes_allocated
from app.translate.cluster.builder import egress_proxy_cluster
from app.translate.listener.access_log import Logs, resolve_logs
from app.translate.listener.ext_authz import NO_CUSTOM, CustomAuthz, resolve_custom
from app.translate.listener.filters import HCM
from app.translate.listener.gateway import build_gateway_listeners
from app.translate.listener.inbound import InboundListenerInputs, build_inbound_listeners
from app.translate.listener.inputs import ListenerContext, ScopeListenerInputs, VirtualOutboundInputs
from app.translate.listener.plan import plan_outbound_listeners
from app.translate.listener.tcp import OutboundContext
from app.translate.listener.tracing import TraceChoice, resolve_tracing
from app.translate.view import ProxyDestinationRules, PushContextView, SidecarScopeView, proxy_service_targets


def scope_listener_inputs(proxy: Proxy, push: PushContextView, scope: SidecarScopeView) -> list[ScopeListenerInputs]:
    """A sidecar's listeners that follow from its scope alone, as what each is built from
    (``build_scope_listener``): the outbound listeners of its egress listeners and
    ``virtualOutbound``; none for a router."""
    if proxy.type is ProxyType.ROUTER:
        return []
    ctx = _context(proxy, push, scope)
    egress = egress_proxy_cluster(scope.sidecar)
    context = ListenerContext.of(
        proxy, push.mesh, scope.outbound_traffic_policy, egress, ctx.allocated, ctx.logs, ctx.tracing
    )
    endpoints = push.endpoints
    inputs: list[ScopeListenerInputs] = []
    inputs.extend(
        plan_outbound_listeners(ctx, context, scope.egress_listeners, lambda s: endpoints(s.hostname, s.namespace))
    )
    if proxy.interception_mode != "NONE":
        # nothing is redirected to a proxy that does not capture traffic
        inputs.append(VirtualOutboundInputs(context))
    return inputs


def workload_listeners(proxy: Proxy, push: PushContextView, scope: SidecarScopeView) -> list[listener_pb2.Listener]:
    """The listeners that follow from the proxy's own workload: a sidecar's inbound listeners
    (its service targets or its Sidecar's ingress entries), a router's gateway listeners (the
    Gateways its labels select)."""
    if proxy.type is ProxyType.ROUTER:
        ctx = _context(proxy, push, scope)
        targets = proxy_service_targets(proxy, push)
        authz = push.authorization_policies.for_workload(proxy.namespace, proxy.labels)
        jwt = push.request_authentications.for_workload(proxy.namespace, proxy.labels)
        vs = push.virtual_service_index
        return build_gateway_listeners(ctx, push.gateways, targets, vs, authz, jwt, _custom(push, authz))
    return build_inbound_listeners(inbound_listener_inputs(proxy, push, scope))


def inbound_listener_inputs(
    proxy: Proxy, push: PushContextView, scope: SidecarScopeView, *, whole: bool = False
) -> InboundListenerInputs:
    """What a sidecar's inbound listeners are built from (``build_inbound_listeners``): the
    proxy and its targets narrowed to what the builder reads of them, so the replicas of a
    workload have equal inputs and share one build; ``whole`` keeps them as they are (a
    reference build for assertion mode)."""
    authz = push.authorization_policies.for_workload(proxy.namespace, proxy.labels)
    ingress = sidecar_ingress(scope.name, scope.namespace, scope.sidecar, proxy, push.features)
    targets = tuple(proxy_service_targets(proxy, push))
    return InboundListenerInputs(
        proxy if whole else _inbound_proxy(proxy, ingress is not None),
        push.mesh,
        targets if whole else tuple((service, port, _target_port(endpoint)) for service, port, endpoint in targets),
        push.peer_authentications,
        authz,
        push.request_authentications.for_workload(proxy.namespace, proxy.labels),
        ingress,
        _logs(proxy, push, SERVER),
        _custom(push, authz),
        _tracing(proxy, push, SERVER),
    )


def _inbound_proxy(proxy: Proxy, ingress: bool) -> Proxy:
    """What the inbound builder reads of a sidecar: not its id, node, account or locality (where
    a workload's replicas differ), and of its addresses only the families, but where a Sidecar's
    ingress listeners bind its first address."""
    ips = proxy.ip_addresses if ingress else family_ips(proxy.ip_addresses)
    return dataclasses.replace(
        proxy,
        id="",
        ip_addresses=ips,
        locality="",
        service_account="",
        verified=False,
        secrets_denied="",
        metadata_labels=EMPTY_LABELS,
        static_labels=EMPTY_LABELS,
        node_locality="",
        node_name="",
        raw_metadata=EMPTY_LABELS,
    )


def _target_port(endpoint: Endpoint) -> Endpoint:
    """What the inbound builder reads of a target's endpoint: the workload port it serves."""
    return Endpoint("", endpoint.port, endpoint.service_port_name)


def _custom(push: PushContextView, authz: WorkloadPolicies) -> CustomAuthz:
    """The workload's CUSTOM policies with the providers they name resolved (none: nothing to
    resolve, and nothing that a service change could make differ)."""
    if not authz.custom:
        return NO_CUSTOM
    multiple = push.features.multiple_custom_authz_providers
    return resolve_custom(push.mesh, authz.custom, push.service_index.by_hostname, multiple)


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
    # outbound and gateway listeners log and trace as istiod's CLIENT mode (workloadMode)
    logs, tracing = _logs(proxy, push, CLIENT), _tracing(proxy, push, CLIENT)
    return OutboundContext(proxy, push.mesh, scope.services_by_host, rules, logs, allocated, tracing)


def _logs(proxy: Proxy, push: PushContextView, mode: int) -> Logs:
    """What the proxy's listeners of ``mode`` log to: its Telemetry selection, resolved."""
    selection = push.telemetries.access_logging(proxy.namespace, proxy.labels, mode)
    return resolve_logs(push.mesh, selection, push.service_index.by_hostname)


def _tracing(proxy: Proxy, push: PushContextView, mode: int) -> TraceChoice:
    """What the proxy's listeners of ``mode`` trace with: its Telemetry spec, resolved."""
    spec = push.telemetries.tracing(proxy.namespace, proxy.labels, mode)
    return resolve_tracing(push.mesh, spec, push.service_index.by_hostname, proxy)
