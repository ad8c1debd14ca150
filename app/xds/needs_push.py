"""Which config kinds can change which xDS types, per proxy type: the declarative push filter.

istiod spreads this over pilot/pkg/xds/proxy_dependencies.go (``UnAffectedConfigKinds``) and
each generator's needs-push check (cds.go ``skippedCdsConfigs``, eds.go ``skippedEdsConfigs``,
lds.go ``skippedLdsConfigs``, rds.go ``skippedRdsConfigs``). Here it is two tables and one
function, ``types_to_push``, which the push path asks before generating anything.

Registry kinds (Service, ServiceEntry, WorkloadEntry, Pod, Namespace, EndpointSlice) only
appear in ``PushRequest.config_kinds`` when a Service object changed; endpoint-only changes
travel in ``endpoint_services``. istiod reports such changes as ServiceEntry keys, which no
generator skips.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from app.config.model import Kind
from app.model.proxy import Proxy, ProxyType
from app.xds.push import PushRequest
from app.xds.resources import ADS_ORDER, CLUSTER, ENDPOINT, LISTENER, ROUTE

_ALL = frozenset(ADS_ORDER)

AFFECTS: Mapping[Kind, frozenset[str]] = MappingProxyType(
    {
        # in no istiod skip list: clusters (subsets, traffic policy), endpoints (subset
        # membership), listeners (TCP hash policy, auto-passthrough chains), routes (hash policy)
        Kind.DESTINATION_RULE: _ALL,
        # skippedEdsConfigs only: routes, listeners (TCP/TLS routes), clusters (the SidecarScope
        # adds services a VirtualService routes to)
        Kind.VIRTUAL_SERVICE: frozenset({CLUSTER, LISTENER, ROUTE}),
        # the Service itself changed (istiod: a ServiceEntry config key): nothing skips it
        Kind.SERVICE_ENTRY: _ALL,
        Kind.SERVICE: _ALL,
        Kind.WORKLOAD_ENTRY: _ALL,
        Kind.POD: _ALL,
        Kind.NAMESPACE: _ALL,
        Kind.ENDPOINT_SLICE: _ALL,
        # skippedEdsConfigs lists Sidecar: it picks clusters, and Envoy asks for their endpoints
        Kind.SIDECAR: frozenset({CLUSTER, LISTENER, ROUTE}),
        # skipped by CDS and EDS; istiod's one CDS exception is a change in a gateway's
        # AUTO_PASSTHROUGH servers (cds.go checkGateway), which pilotfish does not build
        Kind.GATEWAY: frozenset({LISTENER, ROUTE}),
        # mesh config (and the ConfigMap that carries it): istiod sends a Forced push
        Kind.MESH_CONFIG: _ALL,
        Kind.CONFIG_MAP: _ALL,
    }
)

# istiod UnAffectedConfigKinds: kinds that never change a proxy of this type
UNAFFECTED_KINDS: Mapping[ProxyType, frozenset[Kind]] = MappingProxyType(
    {
        ProxyType.ROUTER: frozenset({Kind.SIDECAR}),
        ProxyType.SIDECAR: frozenset({Kind.GATEWAY}),
    }
)

# a pushed parent type brings its children: Envoy needs endpoints for a cluster it (re)warms and
# routes for the RDS names new listeners refer to (xDS "eventual consistency considerations")
FOLLOWS: Mapping[str, str] = MappingProxyType({CLUSTER: ENDPOINT, LISTENER: ROUTE})


def types_to_push(proxy: Proxy, req: PushRequest, watched: Iterable[str]) -> list[str]:
    """The watched type URLs this request needs pushed to this proxy, in ADS order.

    Forced, or full without named kinds: every watched type (types outside ADS_ORDER after
    the ordered ones, by name). Not full: endpoints only. Otherwise the union of what each
    changed kind affects for this proxy type, plus endpoints when endpoints changed, plus the
    FOLLOWS children of every type pushed."""
    watching = set(watched)
    if req.forced or req.all_kinds:
        return [t for t in ADS_ORDER if t in watching] + sorted(watching - _ALL)
    types: set[str] = set()
    if req.full:
        unaffected = UNAFFECTED_KINDS.get(proxy.type, frozenset())
        for kind in req.config_kinds:
            if kind not in unaffected:
                types |= AFFECTS[kind]
    if not req.full or req.endpoint_services:
        types.add(ENDPOINT)
    for parent, child in FOLLOWS.items():
        if parent in types:
            types.add(child)
    return [t for t in ADS_ORDER if t in types and t in watching]
