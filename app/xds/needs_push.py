"""Which config kinds can change which xDS types, per proxy type: the declarative push filter.

istiod spreads this over pilot/pkg/xds/proxy_dependencies.go (``UnAffectedConfigKinds``) and
each generator's needs-push check (cds.go ``skippedCdsConfigs``, eds.go ``skippedEdsConfigs``,
lds.go ``skippedLdsConfigs``, rds.go ``skippedRdsConfigs``). Here it is two tables and one
function, ``types_to_push``, which the push path asks before generating anything.

A changed Service of any registry is named ``(Service, namespace, hostname)`` (istiod names it
a ServiceEntry key), which no generator skips; endpoint-only changes travel in
``endpoint_services``. ``proxy_needs_push`` is the per-proxy filter before any of this: istiod's
``ProxyNeedsPush`` / ``SidecarScope.DependsOnConfig``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType

from app.api import networking as net
from app.config.objects import ConfigKey, ConfigObject, Kind, ObjectMeta
from app.model.proxy import Proxy, ProxyType
from app.model.sidecar_scope import SidecarScope
from app.registry.proxy_labels import pod_key_by_proxy
from app.translate.route.policy import load_balancer_view
from app.xds.push_request import PushRequest
from app.xds.type_urls import ADS_ORDER, CLUSTER, ENDPOINT, ENVOY_TYPES, LISTENER, NAME_TABLE, ROUTE, SECRET

# secrets follow only Secret changes and forced pushes (istiod sds.go sdsNeedsPush)
_ALL = frozenset(ADS_ORDER) - {SECRET}
_ENVOY = ENVOY_TYPES

# NDS follows istiod's skippedNdsConfigs (pilot/pkg/xds/nds.go): the name table is made of
# services, their addresses and the scope, so the kinds that only route or configure traffic
# (Gateway, VirtualService, DestinationRule, WorkloadEntry: its change arrives as the selecting
# services' keys) never push it
AFFECTS: Mapping[Kind, frozenset[str]] = MappingProxyType(
    {
        # in no Envoy type's istiod skip list: clusters (subsets, traffic policy), endpoints
        # (subset membership), listeners (TCP hash policy, auto-passthrough chains), routes
        Kind.DESTINATION_RULE: _ENVOY,
        # skippedEdsConfigs only: routes, listeners (TCP/TLS routes), clusters (the SidecarScope
        # adds services a VirtualService routes to)
        Kind.VIRTUAL_SERVICE: frozenset({CLUSTER, LISTENER, ROUTE}),
        # the Service itself changed (istiod: a ServiceEntry config key): nothing skips it
        Kind.SERVICE_ENTRY: _ALL,
        Kind.SERVICE: _ALL,
        Kind.WORKLOAD_ENTRY: _ENVOY,
        Kind.POD: _ALL,
        Kind.NAMESPACE: _ALL,
        # a Node's labels are its pods' locality: the registry reports their endpoints changed,
        # never the Node as a config key (istiod: no config kind, an EDS update)
        Kind.NODE: frozenset({ENDPOINT}),
        Kind.ENDPOINT_SLICE: _ALL,
        # skippedEdsConfigs lists Sidecar: it picks clusters, and Envoy asks for their endpoints
        Kind.SIDECAR: frozenset({CLUSTER, LISTENER, ROUTE, NAME_TABLE}),
        # skipped by CDS and EDS; istiod's one CDS exception is a change in a gateway's
        # AUTO_PASSTHROUGH servers (cds.go checkGateway), which pilotfish does not build
        Kind.GATEWAY: frozenset({LISTENER, ROUTE}),
        # cds.go / lds.go skip lists have no PeerAuthentication: clients' auto mTLS follows the
        # destination namespace's mode, a workload's inbound chains its own (rds.go and nds.go
        # skip it); endpoints follow the re-sent clusters
        Kind.PEER_AUTHENTICATION: frozenset({CLUSTER, LISTENER}),
        # in cds.go's, eds.go's, rds.go's and nds.go's skip lists: only the workload's (and a
        # gateway's) listeners carry RBAC filters
        Kind.AUTHORIZATION_POLICY: frozenset({LISTENER}),
        # the same skip lists hold RequestAuthentication: the jwt_authn filter is the listeners'
        Kind.REQUEST_AUTHENTICATION: frozenset({LISTENER}),
        # read at injection only: in every type's skip list (cds.go, eds.go, lds.go, rds.go, nds.go)
        Kind.PROXY_CONFIG: frozenset(),
        # in cds.go's, eds.go's, rds.go's and nds.go's skip lists: access logs and tracing are
        # the listeners' (a scope depends on its own namespace's and the root namespace's)
        Kind.TELEMETRY: frozenset({LISTENER}),
        # in no Envoy type's skip list (nds.go's holds it): its patches change clusters, listeners
        # and routes; endpoints follow the clusters
        Kind.ENVOY_FILTER: frozenset({CLUSTER, LISTENER, ROUTE}),
        # mesh config (and the ConfigMap that carries it): istiod sends a Forced push
        Kind.MESH_CONFIG: _ALL | {SECRET},
        Kind.CONFIG_MAP: _ALL | {SECRET},
        # a credentialName's certificates: the secrets only
        Kind.SECRET: frozenset({SECRET}),
        # a headless service's endpoints changed and all its ports are HTTP: no listener binds
        # them, only the name table lists them (istiod kind.DNSName, issue 48207)
        Kind.DNS_NAME: frozenset({NAME_TABLE}),
    }
)

# istiod UnAffectedConfigKinds: kinds that never change a proxy of this type
UNAFFECTED_KINDS: Mapping[ProxyType, frozenset[Kind]] = MappingProxyType(
    {
        ProxyType.ROUTER: frozenset({Kind.SIDECAR, Kind.DNS_NAME}),
        ProxyType.SIDECAR: frozenset({Kind.GATEWAY}),
    }
)

# types a proxy type is never pushed: a router gets no name table (its agent does not capture DNS)
NOT_SERVED: Mapping[ProxyType, frozenset[str]] = MappingProxyType({ProxyType.ROUTER: frozenset({NAME_TABLE})})

# a pushed parent type brings its children: Envoy needs endpoints for a cluster it (re)warms and
# routes for the RDS names new listeners refer to (xDS "eventual consistency considerations")
FOLLOWS: Mapping[str, str] = MappingProxyType({CLUSTER: ENDPOINT, LISTENER: ROUTE})


def types_to_push(proxy: Proxy, req: PushRequest, watched: Iterable[str]) -> list[str]:
    """The watched type URLs this request needs pushed to this proxy, in ADS order.

    Forced, or full without named kinds: every watched type (types outside ADS_ORDER after
    the ordered ones, by name). Not full: endpoints only. Otherwise the union of what each
    changed kind affects for this proxy type, plus endpoints when endpoints changed, plus the
    FOLLOWS children of every type pushed."""
    watching = set(watched) - NOT_SERVED.get(proxy.type, frozenset())
    if req.forced or req.all_kinds:
        return [t for t in ADS_ORDER if t in watching] + sorted(watching - frozenset(ADS_ORDER))
    types: set[str] = set()
    if req.full:
        unaffected = UNAFFECTED_KINDS.get(proxy.type, frozenset())
        for key in req.configs_updated:
            if key.kind not in unaffected:
                types |= req.key_types.get(key, AFFECTS[key.kind])
    if not req.full or req.endpoint_services:
        types.add(ENDPOINT)
    if own_targets_changed(proxy, req):
        types |= {CLUSTER, LISTENER}  # its inbound clusters and virtualInbound chains
    for parent, child in FOLLOWS.items():
        if parent in types:
            types.add(child)
    return [t for t in ADS_ORDER if t in types and t in watching]


def own_targets_changed(proxy: Proxy, req: PushRequest) -> bool:
    """Whether the request changed the service targets of the proxy's own addresses."""
    return bool(req.proxy_ips) and not req.proxy_ips.isdisjoint(proxy.ip_addresses)


def proxy_needs_push(proxy: Proxy, req: PushRequest, previous: SidecarScope | None, scope: SidecarScope) -> bool:
    """Whether a push can change anything for this proxy (istiod ProxyNeedsPush): forced and
    everything-changed pushes always; a change of the proxy's own service targets; else some
    changed config key or endpoint shard its scope depends on, now or before the change (a
    change that takes something away shows only in the previous scope). A gateway, as istiod
    master's proxyDependentOnConfig (pilot/pkg/xds/proxy_dependencies.go) has it, depends on
    every change except Sidecars and the services (and so endpoints) it cannot see."""
    if req.forced or req.all_kinds or own_targets_changed(proxy, req):
        return True

    def depends(key: ConfigKey) -> bool:
        return scope.depends_on(key) or (previous is not None and previous.depends_on(key))

    unaffected = UNAFFECTED_KINDS.get(proxy.type, frozenset())
    keys = [key for key in req.configs_updated if key.kind not in unaffected]
    if proxy.is_gateway and any(key.kind is not Kind.SERVICE for key in keys):
        return True
    if any(depends(key) for key in keys):
        return True
    return any(depends(ConfigKey(Kind.SERVICE, ns, host)) for host, ns in req.endpoint_services)


def update_types(old: ConfigObject, new: ConfigObject) -> frozenset[str] | None:
    """The xDS types an in-place update of one object can affect, when narrower than its kind's
    (None: all its kind affects). A DestinationRule that keeps its host, exportTo, selector and
    metadata applies where it did, so it changes clusters and endpoints; listeners only when
    what TCP proxies read of it changed (tcp idle timeout, max connection duration, source-IP
    hashing), routes only when its consistent-hash settings changed. Mirrors the reads in
    app/translate/listener/tcp.py ``tcp_settings`` and app/translate/route/policy.py. The API
    server gives every update a new resourceVersion and every spec change a new generation, which
    no generator reads: they are no change of metadata (else no update from Kubernetes would
    ever be narrowed)."""
    if old.kind is not Kind.DESTINATION_RULE or new.kind is not Kind.DESTINATION_RULE:
        return None
    if _without_versions(old.meta) != _without_versions(new.meta):
        return None
    a: net.DestinationRule = old.spec
    b: net.DestinationRule = new.spec
    if (a.host, list(a.export_to), a.workload_selector) != (b.host, list(b.export_to), b.workload_selector):
        return None
    types = {CLUSTER, ENDPOINT}
    if load_balancer_view(a) != load_balancer_view(b):
        types |= {LISTENER, ROUTE}
    elif _tcp_timeouts(a) != _tcp_timeouts(b):
        types.add(LISTENER)
    return frozenset(types)


def _without_versions(meta: ObjectMeta) -> ObjectMeta:
    return replace(meta, resource_version="", generation=0)


def _tcp_timeouts(rule: net.DestinationRule) -> tuple[bytes, bytes]:
    tcp = rule.traffic_policy.connection_pool.tcp
    return (
        tcp.idle_timeout.SerializeToString() if tcp.HasField("idle_timeout") else b"-",
        tcp.max_connection_duration.SerializeToString() if tcp.HasField("max_connection_duration") else b"-",
    )


# a proxy with the labels and locality of its pod, as the registry knows it now
WorkloadLabels = Callable[[Proxy], Proxy]


def proxy_update(
    client: Proxy, request: PushRequest, workload_labels: WorkloadLabels
) -> tuple[Proxy, PushRequest] | None:
    """istiod ProxyUpdate: when ``request`` names the proxy's pod as relabelled, the proxy with
    its labels recomputed and the request forced for it (every watched type); else None."""
    relabeled = request.relabeled_pods
    if not relabeled or pod_key_by_proxy(client) not in relabeled:
        return None
    return workload_labels(client), replace(request, forced=True)
