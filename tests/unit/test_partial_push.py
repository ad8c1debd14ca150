"""Pushes that cost what changed: a Delta push carries only the clusters and assignments a change
touched (and removes what it took away), computed without diffing every resource; DestinationRule
updates narrow the xDS types they affect; class sets patched across snapshots equal fresh builds
(assertion mode compares every hit and every partial answer with a full generation)."""

from __future__ import annotations

from typing import Any

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.service.discovery.v3 import discovery_pb2

from app.config.loader import load_documents
from app.config.objects import ConfigKey, Kind
from app.model.proxy import Proxy, build_proxy
from app.xds.connection import Connection
from app.xds.generators.endpoints import EndpointGenerator
from app.xds.needs_push import update_types
from app.xds.push_request import PushRequest
from app.xds.sotw import SotwSession
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, ROUTE
from app.xds.watch import SubscribedNames, counter_nonces
from tests.support.bookinfo import NODE
from tests.support.bookinfo_mesh import DeltaConnection, Mesh
from tests.support.mesh import mesh_config_map

Req = discovery_pb2.DeltaDiscoveryRequest

REVIEWS_HOST = "reviews.bookinfo.svc.cluster.local"
REVIEWS_DR = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: reviews, namespace: bookinfo, creationTimestamp: "2026-01-02T00:00:00Z"}}
spec:
  host: reviews
  trafficPolicy:
    loadBalancer: {{simple: ROUND_ROBIN}}
    outlierDetection: {{consecutive5xxErrors: {errors}, interval: 10s, baseEjectionTime: 30s}}
  subsets:
{subsets}"""
SUBSETS = """  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
  - name: v3
    labels: {version: v3}
    trafficPolicy:
      loadBalancer:
        consistentHash: {httpHeaderName: x-user}
"""
REVIEWS_SLICE = """apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-abc12
  namespace: bookinfo
  labels: {kubernetes.io/service-name: reviews}
addressType: IPv4
ports: [{name: http, port: 9080, protocol: TCP}]
endpoints:
- {addresses: [10.1.0.30], conditions: {ready: true}, targetRef: {kind: Pod, name: reviews-v1-0, namespace: bookinfo}}
- {addresses: [10.1.0.31], conditions: {ready: true}, targetRef: {kind: Pod, name: reviews-v2-0, namespace: bookinfo}}
"""


def _sent(out: list[discovery_pb2.DeltaDiscoveryResponse], type_url: str) -> tuple[list[str], list[str]]:
    found = [r for r in out if r.type_url == type_url]
    if not found:
        return [], []
    [resp] = found
    return [r.name for r in resp.resources], list(resp.removed_resources)


def _rule(errors: int = 5, subsets: str = SUBSETS) -> str:
    return REVIEWS_DR.format(errors=errors, subsets=subsets)


def test_dr_update_sends_only_its_hosts_clusters_and_their_endpoints() -> None:
    mesh = Mesh()
    conn, _ = mesh.connect()
    out = conn.on_push(mesh.apply(_rule(errors=7)))
    clusters, removed = _sent(out, CLUSTER)
    assert clusters and all(name.endswith(REVIEWS_HOST) for name in clusters)
    assert removed == []
    endpoints, _ = _sent(out, ENDPOINT)
    assert sorted(endpoints) == sorted(c for c in clusters if c.startswith("outbound|"))
    # outlier detection is read by clusters only: no listener or route push at all
    assert {r.type_url for r in out} == {CLUSTER, ENDPOINT}


def test_removed_subset_is_removed_by_name_and_nothing_else_is_sent() -> None:
    mesh = Mesh()
    conn, _ = mesh.connect()
    without_v2 = SUBSETS.replace("  - {name: v2, labels: {version: v2}}\n", "")
    out = conn.on_push(mesh.apply(_rule(subsets=without_v2)))
    clusters, removed = _sent(out, CLUSTER)
    assert removed == [f"outbound|9080|v2|{REVIEWS_HOST}"]
    assert f"outbound|9080|v1|{REVIEWS_HOST}" not in clusters  # unchanged: not resent


def test_endpoint_change_sends_only_that_services_assignments() -> None:
    mesh = Mesh()
    conn, eds_names = mesh.connect()
    request = mesh.apply(REVIEWS_SLICE)
    assert not request.full
    out = conn.on_push(request)
    assert [r.type_url for r in out] == [ENDPOINT]
    endpoints, _ = _sent(out, ENDPOINT)
    reviews = [n for n in eds_names if n.endswith(REVIEWS_HOST)]
    # the subsets' assignments whose members changed (v3 lost its pod; the default lost one)
    assert endpoints and set(endpoints) <= set(reviews)
    assert f"outbound|9080|v1|{REVIEWS_HOST}" not in endpoints  # v1's member is unchanged


def test_a_second_proxy_of_the_class_gets_the_same_partial_answer() -> None:
    mesh = Mesh()
    first, _ = mesh.connect()
    second, _ = mesh.connect(NODE.replace("productpage-v1-0", "productpage-v1-1"))
    request = mesh.apply(_rule(errors=9))
    a, b = first.on_push(request), second.on_push(request)
    assert [(r.type_url, [x.name for x in r.resources]) for r in a] == [
        (r.type_url, [x.name for x in r.resources]) for r in b
    ]


def test_an_endpoint_change_is_worked_out_once_per_class(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    changes = EndpointGenerator._changes

    def counting(self: EndpointGenerator, state: Any, proxy: Proxy, *rest: Any) -> Any:
        calls.append(proxy.id)
        return changes(self, state, proxy, *rest)

    monkeypatch.setattr(EndpointGenerator, "_changes", counting)
    mesh = Mesh()
    first, _ = mesh.connect()
    second, _ = mesh.connect(NODE.replace("productpage-v1-0", "productpage-v1-1"))
    request = mesh.apply(REVIEWS_SLICE)
    a, b = first.on_push(request), second.on_push(request)
    assert calls == ["productpage-v1-0.bookinfo"]
    assert [[x.name for x in r.resources] for r in a] == [[x.name for x in r.resources] for r in b] != [[]]
    # the next push works it out again
    assert first.on_push(mesh.apply(REVIEWS_SLICE.replace("10.1.0.31", "10.1.0.32"))) and len(calls) == 2


def test_class_sets_patched_over_several_snapshots_equal_fresh_builds() -> None:
    # assertion mode: the second proxy's generation compares every shared set with its own build
    mesh = Mesh()
    conns = [mesh.connect()[0], mesh.connect(NODE.replace("productpage-v1-0", "productpage-v1-1"))[0]]
    for change in (_rule(errors=8), REVIEWS_SLICE, _rule(errors=8, subsets=SUBSETS.replace("v2", "v9"))):
        request = mesh.apply(change)
        for conn in conns:
            conn.on_push(request)
    for conn in conns:
        full = mesh.source.generate(CLUSTER, conn.client, conn.session.watches[CLUSTER]) or []
        held = conn.session.watches[CLUSTER].client_versions
        assert held == {r.name: r.version for r in full}


def test_dr_update_narrowing() -> None:
    def types(before: str, after: str) -> frozenset[str] | None:
        [old] = load_documents(before, "a.yaml").objects
        [new] = load_documents(after, "a.yaml").objects
        return update_types(old, new)

    base = _rule()
    assert types(base, _rule(errors=6)) == {CLUSTER, ENDPOINT}
    hashing = _rule(subsets=SUBSETS.replace("x-user", "x-session"))
    assert types(base, hashing) == {CLUSTER, ENDPOINT, LISTENER, ROUTE}
    balancer = "loadBalancer: {simple: ROUND_ROBIN}"
    idle = base.replace(balancer, "connectionPool: {tcp: {idleTimeout: 5s}}\n    " + balancer)
    assert types(base, idle) == {CLUSTER, ENDPOINT, LISTENER}
    assert types(base, base.replace("host: reviews", "host: ratings")) is None
    assert types(base, base.replace("2026-01-02", "2026-01-03")) is None  # merge order may change
    # from the API server, every update has a new resourceVersion and a spec change a new
    # generation: bookkeeping that must not widen the push to every type
    versioned = base.replace("creationTimestamp:", "resourceVersion: '41', generation: 3, creationTimestamp:")
    updated = _rule(errors=6).replace("creationTimestamp:", "resourceVersion: '52', generation: 4, creationTimestamp:")
    assert types(versioned, updated) == {CLUSTER, ENDPOINT}
    assert types(versioned, updated.replace("name: reviews,", "name: reviews, labels: {a: b},")) is None


def test_narrowed_keys_merge_only_when_every_request_narrowed_them() -> None:
    key = ConfigKey(Kind.DESTINATION_RULE, "bookinfo", "reviews")
    other = ConfigKey(Kind.DESTINATION_RULE, "bookinfo", "ratings")
    narrow = PushRequest(full=True, configs_updated=frozenset({key}), key_types={key: frozenset({CLUSTER})})
    wide = PushRequest(full=True, configs_updated=frozenset({key}))
    also = PushRequest(full=True, configs_updated=frozenset({key, other}), key_types={key: frozenset({ENDPOINT})})
    assert dict(narrow.merge(also).key_types) == {key: frozenset({CLUSTER, ENDPOINT})}
    assert dict(narrow.merge(wide).key_types) == {}


def test_dr_and_endpoint_pushes_never_generate_a_whole_type() -> None:
    mesh = Mesh()
    mesh.source.generator.cache.verify = False  # assertion mode compares with full generations itself
    conn, _ = mesh.connect()

    def whole_type(*args: object) -> None:
        raise AssertionError("a partial push generated a whole type")

    mesh.source.generator.generate = whole_type  # type: ignore[method-assign,assignment]
    assert conn.on_push(mesh.apply(_rule(errors=7)))
    assert conn.on_push(mesh.apply(REVIEWS_SLICE))


PRODUCTPAGE_DR = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: productpage, namespace: bookinfo}
spec:
  host: productpage
  trafficPolicy:
    connectionPool: {tcp: {maxConnections: 7}}
"""


def test_a_proxys_own_clusters_are_kept_across_pushes_that_do_not_touch_its_workload() -> None:
    mesh = Mesh()
    conn, _ = mesh.connect()
    watch = conn.session.watches[CLUSTER]
    before = watch.synced.built  # type: ignore[attr-defined]
    conn.on_push(mesh.apply(_rule(errors=7)))
    assert watch.synced.built is before  # type: ignore[attr-defined]


def test_a_rule_for_the_proxys_own_service_rebuilds_and_sends_its_inbound_cluster() -> None:
    mesh = Mesh()
    conn, _ = mesh.connect()
    out = conn.on_push(mesh.apply(PRODUCTPAGE_DR))
    clusters, _ = _sent(out, CLUSTER)
    assert "inbound|9080||" in clusters
    assert not any(name.endswith(REVIEWS_HOST) for name in clusters)


SotwConnection = Connection[Proxy, PushRequest, discovery_pb2.DiscoveryRequest, discovery_pb2.DiscoveryResponse]


def _connect_sotw(mesh: Mesh) -> SotwConnection:
    """A SotW ADS stream subscribed as Envoy does (CDS wildcard, EDS for the EDS clusters)."""
    SotwReq = discovery_pb2.DiscoveryRequest
    conn: SotwConnection = Connection("s", build_proxy(NODE), SotwSession(counter_nonces(), None), mesh.source)
    first = SotwReq(type_url=CLUSTER)
    first.node.id = NODE
    [cds] = conn.on_request(first)
    conn.on_request(SotwReq(type_url=CLUSTER, version_info=cds.version_info, response_nonce=cds.nonce))
    names = sorted(r.name for r in cds.resources if r.name.startswith("outbound|"))
    [eds] = conn.on_request(SotwReq(type_url=ENDPOINT, resource_names=names))
    conn.on_request(
        SotwReq(type_url=ENDPOINT, resource_names=names, version_info=eds.version_info, response_nonce=eds.nonce)
    )
    return conn


def test_sotw_sends_every_cluster_but_only_the_changed_assignments() -> None:
    mesh = Mesh()
    conn = _connect_sotw(mesh)
    watched = len(conn.session.watches[ENDPOINT].names)
    out = conn.on_push(mesh.apply(_rule(errors=7)))
    [cds] = [r for r in out if r.type_url == CLUSTER]
    [eds] = [r for r in out if r.type_url == ENDPOINT]
    assert len(cds.resources) > watched  # SotW CDS: the whole set, by protocol
    names = [r.name for r in eds.resources]
    assert names and all(n.endswith(REVIEWS_HOST) for n in names) and len(names) < watched
    out = conn.on_push(mesh.apply(REVIEWS_SLICE))
    [eds] = out
    assert eds.type_url == ENDPOINT
    assert {r.name for r in eds.resources} <= {n for n in names}


BOOKINFO_DISABLE = """apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: plaintext, namespace: bookinfo}
spec: {mtls: {mode: DISABLE}}
"""


def test_a_peer_authentication_change_resends_the_clusters_whose_auto_mtls_it_turns_off() -> None:
    # eds.go canSendPartialFullPushes: a PeerAuthentication rebuilds clusters, their endpoints follow
    mesh = Mesh()
    mesh.apply(mesh_config_map("rootNamespace: istio-system\nenableAutoMtls: true"))
    conn, _ = mesh.connect()
    before = {c.name: c for c in _clusters(conn)}
    assert before[f"outbound|9080||{REVIEWS_HOST}"].transport_socket_matches
    out = conn.on_push(mesh.apply(BOOKINFO_DISABLE))
    [cds] = [r for r in out if r.type_url == CLUSTER]
    resent = {r.name: cluster_pb2.Cluster.FromString(r.body.value) for r in cds.resources}
    reviews = resent[f"outbound|9080||{REVIEWS_HOST}"]
    assert not reviews.transport_socket_matches and not reviews.HasField("transport_socket")
    assert all("bookinfo" in name for name in resent if name.startswith("outbound|"))
    # and back: deleting the policy turns it on again (assertion mode checks every cached hit)
    out = conn.on_push(mesh.delete(BOOKINFO_DISABLE))
    [cds] = [r for r in out if r.type_url == CLUSTER]
    again = {r.name: cluster_pb2.Cluster.FromString(r.body.value) for r in cds.resources}
    assert again[f"outbound|9080||{REVIEWS_HOST}"].transport_socket_matches


def _clusters(conn: DeltaConnection) -> list[cluster_pb2.Cluster]:
    watch = conn.session.watches[CLUSTER]
    found = conn.source.generate(CLUSTER, conn.client, watch) or []
    return [cluster_pb2.Cluster.FromString(r.body.value) for r in found]


@pytest.mark.parametrize("resubscribed", [False, True])
def test_a_sidecar_narrowing_the_scope_sends_no_assignment_for_the_clusters_it_removed(resubscribed: bool) -> None:
    # istiod skips EDS on a Sidecar change (skippedEdsConfigs); Envoy drops a removed cluster's
    # assignment and unsubscribes it: an empty assignment per cluster that left would be waste
    mesh = Mesh()
    conn, eds_names = mesh.connect()
    if resubscribed:  # a subscription changed since the first (as for a cluster added later)
        conn.on_request(Req(type_url=ENDPOINT, resource_names_unsubscribe=[eds_names[0]]))
        conn.on_request(Req(type_url=ENDPOINT, resource_names_subscribe=[eds_names[0]]))
        assert isinstance(conn.session.watches[ENDPOINT].names, SubscribedNames)
    out = conn.on_push(
        mesh.apply(
            """apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: bookinfo}
spec:
  egress:
  - hosts: [./reviews.bookinfo.svc.cluster.local]
"""
        )
    )
    _, removed = _sent(out, CLUSTER)
    gone = [n for n in eds_names if n in removed]
    assert gone and all(REVIEWS_HOST not in n for n in gone)
    endpoints, unsubscribed = _sent(out, ENDPOINT)
    assert not set(endpoints) & set(gone)
    assert unsubscribed == []


def test_a_push_queues_only_the_streams_it_can_change_and_the_others_notes_move_on() -> None:
    # a proxy of another namespace whose Sidecar sees only its own namespace does not depend on
    # a bookinfo DestinationRule: the push is done for it at once, nothing queued (istiod's
    # ProxyNeedsPush, checked before the queue rather than by a worker)
    mesh = Mesh(queued=True)
    mesh.apply(
        """apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: other}
spec:
  egress:
  - hosts: [./*]
"""
    )
    productpage, _ = mesh.connect()
    other, _ = mesh.connect(NODE.replace("productpage-v1-0.bookinfo", "sleep-0.other"))
    skipped = other.skipped
    mesh.apply(_rule(errors=6))
    assert mesh.pushed is not None and mesh.pushed.streams == 1
    assert mesh.discovery.queue.queued(productpage) and not mesh.discovery.queue.queued(other)
    assert other.skipped == skipped + 1
    assert other.on_push(mesh.pushed.request) == []  # the filter, asked again, agrees
    assert productpage.on_push(mesh.pushed.request)


def test_a_proxys_traits_are_made_once_across_the_snapshots_that_push_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a proxy's class is keyed by (its traits) is made of the proxy alone: a push to every
    proxy finds it again instead of remaking it for each proxy on each snapshot."""
    import app.xds.generators.state as state

    made: list[str] = []
    make = state.traits

    def counting(proxy: Proxy, read_labels: bool, own_ip_read: bool, keys: frozenset[str], by_provider: bool) -> object:
        made.append(proxy.id)
        return make(proxy, read_labels, own_ip_read, keys, by_provider)

    monkeypatch.setattr(state, "traits", counting)
    mesh = Mesh()
    conn, _ = mesh.connect()
    assert made == [conn.client.id]
    for errors in (6, 7):
        assert conn.on_push(mesh.apply(_rule(errors=errors)))
    assert conn.on_push(mesh.apply(REVIEWS_SLICE))
    assert made == [conn.client.id]
