"""The push filter tables (istiod proxy_dependencies.go and the per-generator skipped*Configs sets)."""

from __future__ import annotations

import pytest

from app.config.objects import ConfigKey, Kind
from app.model.proxy import Proxy, ProxyType
from app.xds.needs_push import AFFECTS, FOLLOWS, UNAFFECTED_KINDS, types_to_push
from app.xds.push_request import PushRequest
from app.xds.type_urls import ADS_ORDER, CLUSTER, ENDPOINT, LISTENER, NAME_TABLE, ROUTE, SECRET

NDS = "type.googleapis.com/istio.networking.nds.v1.NameTable"
ENVOY = [CLUSTER, ENDPOINT, LISTENER, ROUTE]
ALL = [*ENVOY, NDS]


def proxy(kind: ProxyType) -> Proxy:
    return Proxy(type=kind, id="p.ns", ip_addresses=("10.0.0.1",), namespace="ns", dns_domain="ns.svc.cluster.local")


SIDECAR = proxy(ProxyType.SIDECAR)
ROUTER = proxy(ProxyType.ROUTER)


def changed(*kinds: Kind) -> PushRequest:
    return PushRequest(full=True, configs_updated=frozenset(ConfigKey(k, "ns", k.lower()) for k in kinds))


def test_every_kind_is_in_the_table_and_names_only_ads_types() -> None:
    assert set(AFFECTS) == set(Kind)
    for kind, types in AFFECTS.items():
        assert types or kind is Kind.PROXY_CONFIG, kind  # read at injection only
        assert types <= set(ADS_ORDER), kind


# what each kind pushes, after the follow rules, to (sidecar, router); istiod citations in needs_push.py
EXPECTED: dict[Kind, tuple[list[str], list[str]]] = {
    # nds.go skippedNdsConfigs: DestinationRule, VirtualService, Gateway, WorkloadEntry, ...
    Kind.DESTINATION_RULE: (ENVOY, ENVOY),
    # VirtualService is in skippedEdsConfigs, but CDS is pushed and endpoints follow clusters
    Kind.VIRTUAL_SERVICE: (ENVOY, ENVOY),
    # a router never gets a name table
    Kind.SERVICE_ENTRY: (ALL, ENVOY),
    Kind.SERVICE: (ALL, ENVOY),
    Kind.WORKLOAD_ENTRY: (ENVOY, ENVOY),
    Kind.POD: (ALL, ENVOY),
    Kind.NAMESPACE: (ALL, ENVOY),
    Kind.NODE: ([ENDPOINT], [ENDPOINT]),
    Kind.ENDPOINT_SLICE: (ALL, ENVOY),
    Kind.SIDECAR: (ALL, []),  # UnAffectedConfigKinds[Router] = {Sidecar}
    Kind.GATEWAY: ([], [LISTENER, ROUTE]),  # UnAffectedConfigKinds[SidecarProxy] = {Gateway}
    # in rds.go's and nds.go's skip lists, not in cds.go's or lds.go's; EDS and RDS follow
    Kind.PEER_AUTHENTICATION: (ENVOY, ENVOY),
    # skipped by every generator but LDS (RDS follows listeners)
    Kind.AUTHORIZATION_POLICY: ([LISTENER, ROUTE], [LISTENER, ROUTE]),
    Kind.REQUEST_AUTHENTICATION: ([LISTENER, ROUTE], [LISTENER, ROUTE]),
    # in every type's skip list: injection reads it, no proxy's xDS does
    Kind.PROXY_CONFIG: ([], []),
    Kind.TELEMETRY: ([LISTENER, ROUTE], [LISTENER, ROUTE]),
    # in nds.go's skip list only: its patches change clusters (endpoints follow), listeners, routes
    Kind.ENVOY_FILTER: (ENVOY, ENVOY),
    # istiod pushes a mesh config change Forced: every type, secrets too
    Kind.MESH_CONFIG: ([*ENVOY, SECRET, NDS], [*ENVOY, SECRET]),
    Kind.CONFIG_MAP: ([*ENVOY, SECRET, NDS], [*ENVOY, SECRET]),
    # sds.go sdsNeedsPush: a Secret change pushes secrets and nothing else
    Kind.SECRET: ([SECRET], [SECRET]),
    # endpointslice.go: an HTTP-only headless service's endpoints change only its DNS names
    Kind.DNS_NAME: ([NDS], []),
}


def test_expectations_cover_every_kind() -> None:
    assert set(EXPECTED) == set(Kind)


@pytest.mark.parametrize("kind", list(Kind))
def test_each_kind_for_each_proxy_type(kind: Kind) -> None:
    want_sidecar, want_router = EXPECTED[kind]
    assert types_to_push(SIDECAR, changed(kind), ADS_ORDER) == want_sidecar
    assert types_to_push(ROUTER, changed(kind), ADS_ORDER) == want_router


def test_raw_table_matches_istiod_skip_lists() -> None:
    # eds.go skippedEdsConfigs: VirtualService, Sidecar, Gateway
    assert ENDPOINT not in AFFECTS[Kind.VIRTUAL_SERVICE]
    assert ENDPOINT not in AFFECTS[Kind.SIDECAR]
    assert ENDPOINT not in AFFECTS[Kind.GATEWAY]
    # cds.go skippedCdsConfigs: Gateway
    assert CLUSTER not in AFFECTS[Kind.GATEWAY]
    # a DestinationRule is in no skip list
    assert AFFECTS[Kind.DESTINATION_RULE] == set(ENVOY)
    # nds.go skippedNdsConfigs
    for kind in (Kind.GATEWAY, Kind.VIRTUAL_SERVICE, Kind.DESTINATION_RULE, Kind.WORKLOAD_ENTRY):
        assert NAME_TABLE not in AFFECTS[kind], kind
    for kind in (Kind.SERVICE, Kind.SERVICE_ENTRY, Kind.SIDECAR, Kind.DNS_NAME):
        assert NAME_TABLE in AFFECTS[kind], kind
    assert UNAFFECTED_KINDS[ProxyType.ROUTER] == {Kind.SIDECAR, Kind.DNS_NAME}
    assert UNAFFECTED_KINDS[ProxyType.SIDECAR] == {Kind.GATEWAY}


def test_follow_rules() -> None:
    assert FOLLOWS == {CLUSTER: ENDPOINT, LISTENER: ROUTE}
    # Sidecar alone does not name ENDPOINT, CLUSTER brings it
    assert ENDPOINT in types_to_push(SIDECAR, changed(Kind.SIDECAR), ADS_ORDER)
    # Gateway names LISTENER and ROUTE but not CLUSTER: no ENDPOINT either
    assert types_to_push(ROUTER, changed(Kind.GATEWAY), ADS_ORDER) == [LISTENER, ROUTE]


def test_forced_pushes_everything_watched_in_ads_order_then_other_types() -> None:
    req = PushRequest(full=True, configs_updated=frozenset({ConfigKey(Kind.GATEWAY, "ns", "gw")}), forced=True)
    watched = [NDS, ROUTE, ENDPOINT, LISTENER, CLUSTER]
    assert types_to_push(SIDECAR, req, watched) == [CLUSTER, ENDPOINT, LISTENER, ROUTE, NDS]
    assert types_to_push(SIDECAR, PushRequest(full=False, forced=True), [ROUTE, CLUSTER]) == [CLUSTER, ROUTE]


def test_full_without_kinds_pushes_everything_watched() -> None:
    assert types_to_push(SIDECAR, PushRequest(full=True), [LISTENER, NDS, CLUSTER]) == [CLUSTER, LISTENER, NDS]
    assert types_to_push(ROUTER, PushRequest(full=True), [LISTENER, NDS, CLUSTER]) == [CLUSTER, LISTENER]


def test_endpoint_only_pushes_only_endpoints() -> None:
    req = PushRequest(full=False, endpoint_services=frozenset({("a.ns.svc.cluster.local", "ns")}))
    for p in (SIDECAR, ROUTER):
        assert types_to_push(p, req, ADS_ORDER) == [ENDPOINT]
        assert types_to_push(p, req, [CLUSTER, LISTENER, ROUTE]) == []


def test_a_full_push_merged_with_endpoint_changes_also_pushes_endpoints() -> None:
    req = changed(Kind.GATEWAY).merge(PushRequest(full=False, endpoint_services=frozenset({("a", "ns")})))
    assert types_to_push(ROUTER, req, ADS_ORDER) == [ENDPOINT, LISTENER, ROUTE]
    # a sidecar ignores the Gateway but still needs the endpoints
    assert types_to_push(SIDECAR, req, ADS_ORDER) == [ENDPOINT]


def test_unaffected_kinds_are_ignored_but_others_in_the_same_request_count() -> None:
    assert types_to_push(SIDECAR, changed(Kind.GATEWAY, Kind.VIRTUAL_SERVICE), ADS_ORDER) == ENVOY
    assert types_to_push(ROUTER, changed(Kind.SIDECAR, Kind.GATEWAY), ADS_ORDER) == [LISTENER, ROUTE]


def test_only_watched_types_and_always_in_ads_order() -> None:
    watched = {ROUTE, CLUSTER}  # order of the argument does not matter
    assert types_to_push(SIDECAR, changed(Kind.DESTINATION_RULE), watched) == [CLUSTER, ROUTE]
    assert types_to_push(SIDECAR, changed(Kind.DESTINATION_RULE), []) == []
    # a type outside the table is pushed only when forced / all kinds
    sds = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
    assert types_to_push(SIDECAR, changed(Kind.SERVICE_ENTRY), [sds]) == []
    assert types_to_push(SIDECAR, PushRequest(full=True), [sds]) == [sds]
