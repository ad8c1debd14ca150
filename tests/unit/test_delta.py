"""The Delta session from request/response transcripts (xDS protocol doc, "Incremental xDS")."""

from __future__ import annotations

import weakref

import pytest
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.service.discovery.v3 import discovery_pb2

from app.xds.delta import DeltaSession
from app.xds.errors import ProtocolError
from app.xds.resource import Resource, encode
from app.xds.response import DeltaResponse
from app.xds.type_urls import ADS_ORDER, CLUSTER, ENDPOINT, ROUTE
from app.xds.watch import HeldVersions, NameSets, RequestKind, counter_nonces
from tests.support.xds import cla, clusters


def session() -> DeltaSession:
    return DeltaSession(counter_nonces("d"), frozenset(ADS_ORDER))


def req(
    type_url: str,
    sub: tuple[str, ...] = (),
    unsub: tuple[str, ...] = (),
    nonce: str = "",
    error: str = "",
    initial: dict[str, str] | None = None,
):
    r = discovery_pb2.DeltaDiscoveryRequest(
        type_url=type_url, resource_names_subscribe=sub, resource_names_unsubscribe=unsub, response_nonce=nonce
    )
    r.initial_resource_versions.update(initial or {})
    if error:
        r.error_detail.code = 3
        r.error_detail.message = error
    return r


def names(resp: DeltaResponse | None) -> list[str]:
    assert resp is not None
    return [r.name for r in resp.resources]


def test_wildcard_first_request_gets_everything_then_only_changes() -> None:
    s = session()
    out = s.on_request(req(CLUSTER))  # legacy empty first request = wildcard
    assert (out.kind, out.respond) == (RequestKind.INITIAL, True)
    r1 = s.answer(CLUSTER, clusters("a", "b"))
    assert names(r1) == ["a", "b"] and r1 is not None and r1.nonce == "d1"
    assert s.on_request(req(CLUSTER, nonce="d1")).kind is RequestKind.ACK
    # nothing changed: nothing to send
    assert s.response(CLUSTER, clusters("a", "b")) is None
    # b changed, c added, a removed
    new = clusters("b", timeout=5) + clusters("c")
    r2 = s.response(CLUSTER, new)
    assert names(r2) == ["b", "c"]
    assert r2 is not None and list(r2.removed_resources) == ["a"]


def test_star_subscription_is_wildcard_and_can_be_dropped() -> None:
    s = session()
    s.on_request(req(CLUSTER, sub=("*",)))
    assert s.watches[CLUSTER].wildcard
    s.answer(CLUSTER, clusters("a"))
    s.on_request(req(CLUSTER, unsub=("*",), sub=("a",)))
    w = s.watches[CLUSTER]
    assert not w.wildcard and w.names == {"a"}


def test_empty_wildcard_first_response_is_still_sent() -> None:
    # Envoy's CDS/LDS initialisation waits for the first response, even an empty one
    s = session()
    s.on_request(req(CLUSTER))
    resp = s.answer(CLUSTER, [])
    assert resp is not None and list(resp.resources) == [] and list(resp.removed_resources) == []


def test_explicit_subscribe_and_unsubscribe() -> None:
    s = session()
    s.on_request(req(ENDPOINT, sub=("a",)))
    assert names(s.answer(ENDPOINT, cla("a", "b"))) == ["a"]
    s.on_request(req(ENDPOINT, nonce="d1"))
    more = s.on_request(req(ENDPOINT, sub=("b",)))
    assert (more.kind, more.respond) == (RequestKind.SUBSCRIPTION, True)
    assert names(s.answer(ENDPOINT, cla("a", "b"))) == ["b"]  # a is up to date
    less = s.on_request(req(ENDPOINT, unsub=("a",)))
    assert (less.kind, less.respond) == (RequestKind.SUBSCRIPTION, False)
    assert s.watches[ENDPOINT].client_versions.keys() == {"b"}
    # subscribing again later sends it again: the client dropped it
    s.on_request(req(ENDPOINT, sub=("a",)))
    assert names(s.answer(ENDPOINT, cla("a", "b"))) == ["a"]


def test_resource_that_does_not_exist_is_not_sent_until_it_appears() -> None:
    s = session()
    s.on_request(req(ROUTE, sub=("80", "9080")))
    r1 = s.answer(ROUTE, [encode("80", endpoint_pb2.ClusterLoadAssignment(cluster_name="x"))])
    assert names(r1) == ["80"] and r1 is not None and list(r1.removed_resources) == []
    assert s.response(ROUTE, [encode("80", endpoint_pb2.ClusterLoadAssignment(cluster_name="x"))]) is None
    appeared = [encode(n, endpoint_pb2.ClusterLoadAssignment(cluster_name="x")) for n in ("80", "9080")]
    assert names(s.response(ROUTE, appeared)) == ["9080"]


def test_explicit_subscription_to_nothing_that_exists_sends_nothing() -> None:
    s = session()
    s.on_request(req(ENDPOINT, sub=("missing",)))
    assert s.answer(ENDPOINT, cla("other")) is None


def test_initial_resource_versions_send_only_what_differs_and_remove_what_is_gone() -> None:
    s = session()
    a, b = clusters("a", "b")
    out = s.on_request(req(CLUSTER, initial={"a": a.version, "b": "stale", "gone": "v1"}))
    assert out.kind is RequestKind.INITIAL
    resp = s.answer(CLUSTER, [a, b])
    assert names(resp) == ["b"]
    assert resp is not None and list(resp.removed_resources) == ["gone"]


def test_reconnected_streams_share_the_names_and_versions_they_present() -> None:
    """Each request carries its own copies of the strings; streams that reconnect holding the same
    resources keep one (bench/reconnect_soak.py: 50 MB per 100 reconnects at 500 services)."""

    def held(type_url: str) -> list[tuple[str, str]]:
        name, version = "".join(["outbound|80||", "svc-1.ns-1.svc.cluster.local"]), "".join(["ab", "cd"])
        s = session()
        s.on_request(req(type_url, sub=(name,) if type_url == ENDPOINT else (), initial={name: version}))
        return list(s.watches[type_url].client_versions.items())

    for type_url in (CLUSTER, ENDPOINT):
        [(name_1, version_1)], [(name_2, version_2)] = held(type_url), held(type_url)
        assert name_1 == name_2 and name_1 is name_2
        assert version_1 is version_2


def test_streams_brought_to_the_same_set_share_what_they_hold_until_one_changes_alone() -> None:
    """A class's streams hold one mapping (130 KB per proxy each at mesh-1k otherwise): after
    their first answers, after the same push, and streams reconnecting with the same set too;
    a wildcard stream unsubscribing a name leaves what it holds as it was."""
    sets = NameSets()
    streams = [DeltaSession(counter_nonces("d"), frozenset(ADS_ORDER), sets) for _ in range(2)]
    for s in streams:
        s.on_request(req(CLUSTER))
        s.answer(CLUSTER, clusters("a", "b"))
    first, second = (s.watches[CLUSTER].client_versions for s in streams)
    assert first is second and dict(first) == {r.name: r.version for r in clusters("a", "b")}
    pushed = clusters("a", timeout=5) + clusters("c")
    for s in streams:
        s.response(CLUSTER, pushed)
    first, second = (s.watches[CLUSTER].client_versions for s in streams)
    assert first is second and dict(first) == {r.name: r.version for r in pushed}
    back = [DeltaSession(counter_nonces("d"), frozenset(ADS_ORDER), sets) for _ in range(2)]
    for s in back:
        s.on_request(req(CLUSTER, initial=dict(first)))
        assert names(s.response(CLUSTER, pushed)) == []  # holds all of it: nothing to send
    one, two = (s.watches[CLUSTER].client_versions for s in back)
    assert one is two and one == first
    streams[1].on_request(req(CLUSTER, sub=("*",), unsub=("c",)))
    assert "c" in first and streams[0].watches[CLUSTER].client_versions is first


def test_streams_of_a_class_forgetting_the_same_names_go_on_sharing_one_mapping() -> None:
    """Envoy drops a removed cluster's EDS name; every stream of the class does so after the same
    push, each naming them in its own order: they move to one shared mapping without them (not a
    private copy each for the rest of the stream), and the mapping they left is unchanged."""
    sets = NameSets()
    streams = [DeltaSession(counter_nonces("d"), frozenset(ADS_ORDER), sets) for _ in range(3)]
    for s in streams:
        s.on_request(req(ENDPOINT, sub=("a", "b", "c")))
        s.answer(ENDPOINT, cla("a", "b", "c"))
    before = streams[0].watches[ENDPOINT].client_versions
    assert all(s.watches[ENDPOINT].client_versions is before for s in streams)
    streams[0].on_request(req(ENDPOINT, nonce="d1", unsub=("c", "b")))
    streams[1].on_request(req(ENDPOINT, nonce="d1", unsub=("b", "c")))
    after = streams[0].watches[ENDPOINT].client_versions
    assert after is streams[1].watches[ENDPOINT].client_versions and after is not before
    assert after.keys() == {"a"} and before.keys() == {"a", "b", "c"}
    assert streams[2].watches[ENDPOINT].client_versions is before
    # forgotten means sent again on a later subscribe
    streams[0].on_request(req(ENDPOINT, sub=("b",)))
    assert names(streams[0].answer(ENDPOINT, cla("a", "b", "c"))) == ["b"]
    # the one stream holding a mapping changes a copy of its own, in place from then on (a
    # shared successor per change would copy all it holds for every one-name change)
    del before  # a reference the test holds counts as a holder
    streams[2].on_request(req(ENDPOINT, nonce="d1", unsub=("c",)))
    alone = streams[2].watches[ENDPOINT].client_versions
    assert not isinstance(alone, HeldVersions) and alone.keys() == {"a", "b"}
    streams[2].on_request(req(ENDPOINT, unsub=("b",)))
    assert streams[2].watches[ENDPOINT].client_versions is alone and alone.keys() == {"a"}


def _class_streams(sets: NameSets, count: int, held: list[Resource]) -> list[DeltaSession]:
    """``count`` wildcard CDS streams brought to ``held``, sharing what they hold."""
    streams = [DeltaSession(counter_nonces("d"), frozenset(ADS_ORDER), sets) for _ in range(count)]
    for s in streams:
        s.on_request(req(CLUSTER))
        s.answer(CLUSTER, held)
    return streams


def test_streams_holding_one_mapping_take_the_response_the_first_worked_out() -> None:
    """A Sidecar narrowing every proxy's scope removes the same hundreds of names from each
    stream of a class: the removed names are found, sorted and encoded once, and each stream's
    response differs from the others' by its nonce alone."""
    sets = NameSets()
    streams = _class_streams(sets, 3, clusters(*"abcde"))
    held_before = weakref.ref(streams[0].watches[CLUSTER].client_versions)
    pushed = clusters("a", timeout=5) + clusters("b")
    considered = frozenset("abcde")
    responses = [s.response(CLUSTER, pushed, considered=considered) for s in streams]
    assert held_before() is None  # every stream moved on: the mapping went, and the answer with it
    first = responses[0]
    assert first is not None and names(first) == ["a"] and list(first.removed_resources) == ["c", "d", "e"]
    for resp in responses[1:]:
        assert resp is not None and resp.nonce == first.nonce  # each stream counts its own nonces
        assert resp.resources is first.resources and resp.encoded_removed is first.encoded_removed
        assert resp.payload() == first.payload()
    assert first.message().removed_resources == ["c", "d", "e"]
    assert len({id(s.watches[CLUSTER].client_versions) for s in streams}) == 1


def test_a_stream_given_other_resources_or_names_to_consider_gets_its_own_response() -> None:
    sets = NameSets()
    a, b, c = _class_streams(sets, 3, clusters(*"abc"))
    assert names(a.response(CLUSTER, clusters("a", timeout=5), considered=frozenset("ab"))) == ["a"]
    b_resp = b.response(CLUSTER, clusters("a", timeout=5), considered=frozenset("abc"))  # c considered: gone
    assert b_resp is not None and names(b_resp) == ["a"] and list(b_resp.removed_resources) == ["b", "c"]
    c_resp = c.response(CLUSTER, clusters("a", timeout=6), considered=frozenset("ab"))
    assert c_resp is not None and [r.version for r in c_resp.resources] == [clusters("a", timeout=6)[0].version]
    assert {k: dict(s.watches[CLUSTER].client_versions) for k, s in zip("abc", (a, b, c), strict=True)} == {
        "a": {r.name: r.version for r in clusters("a", timeout=5) + clusters("c")},
        "b": {r.name: r.version for r in clusters("a", timeout=5)},
        "c": {r.name: r.version for r in clusters("a", timeout=6) + clusters("c")},
    }


def test_a_response_is_worked_out_again_once_no_stream_holds_what_it_led_to() -> None:
    """What a class's first response led to is kept while a stream holds it: a stream that
    connects after the others moved on gets a response of its own, and the answers a mapping
    keeps stay bounded by the streams that can still take them."""
    sets = NameSets()
    for round_ in range(40):  # each round's stream ends before the next connects
        held = clusters("a", "b", timeout=round_ % 4)  # the same resources every fourth round
        [s] = _class_streams(sets, 1, held)
        assert dict(s.watches[CLUSTER].client_versions) == {r.name: r.version for r in held}
        resp = s.response(CLUSTER, clusters("a", timeout=round_ % 4), considered=frozenset("ab"))
        assert resp is not None and list(resp.removed_resources) == ["b"]
        assert dict(s.watches[CLUSTER].client_versions) == {"a": held[0].version}
        del s, resp
    nothing = sets.shared({})
    assert nothing is not None and len(nothing.answers) <= 16


def test_explicit_watch_forgets_initial_versions_of_names_it_does_not_subscribe() -> None:
    s = session()
    s.on_request(req(ENDPOINT, sub=("a",), initial={"a": "v1", "b": "v1"}))
    assert s.watches[ENDPOINT].client_versions.keys() == {"a"}  # held (its version not trusted: sent again)
    s.on_request(req(ROUTE, sub=("a",), initial={"a": "v1", "b": "v1"}))
    assert s.watches[ROUTE].client_versions == {"a": "v1"}


def test_ending_an_explicit_wildcard_forgets_what_the_names_do_not_hold() -> None:
    s = session()
    s.on_request(req(ENDPOINT, sub=("*",)))
    s.answer(ENDPOINT, cla("a", "b", "c"))
    # one request ends the wildcard and names a: the client keeps a, drops b and c
    s.on_request(req(ENDPOINT, sub=("a",), unsub=("*",)))
    assert s.watches[ENDPOINT].client_versions.keys() == {"a"}


def test_nack_keeps_the_stream_and_does_not_resend_the_same_content() -> None:
    s = session()
    s.on_request(req(CLUSTER))
    s.answer(CLUSTER, clusters("a"))
    s.on_request(req(CLUSTER, nonce="d1"))
    bad = s.response(CLUSTER, clusters("a", timeout=-1))
    assert bad is not None
    nack = s.on_request(req(CLUSTER, nonce=bad.nonce, error="invalid timeout"))
    assert (nack.kind, nack.respond, nack.error) == (RequestKind.NACK, False, "invalid timeout")
    w = s.watches[CLUSTER]
    assert (w.nacks, w.last_error) == (1, "invalid timeout")
    assert s.response(CLUSTER, clusters("a", timeout=-1)) is None
    fixed = s.response(CLUSTER, clusters("a", timeout=3))
    assert names(fixed) == ["a"]
    assert fixed is not None
    s.on_request(req(CLUSTER, nonce=fixed.nonce))
    assert w.last_error == "" and w.nonce_acked == fixed.nonce


def test_force_resends_unchanged_resources() -> None:
    s = session()
    s.on_request(req(ENDPOINT, sub=("a",)))
    s.answer(ENDPOINT, cla("a"))
    assert s.response(ENDPOINT, cla("a")) is None
    assert names(s.response(ENDPOINT, cla("a"), force=True)) == ["a"]


def test_stale_nonce_without_changes_is_ignored() -> None:
    s = session()
    s.on_request(req(CLUSTER))
    s.answer(CLUSTER, clusters("a"))
    s.response(CLUSTER, clusters("a", "b"))
    out = s.on_request(req(CLUSTER, nonce="d1"))
    assert (out.kind, out.respond) == (RequestKind.STALE, False)


def test_nonces_are_per_response_and_versions_per_resource() -> None:
    s = session()
    s.on_request(req(CLUSTER))
    s.on_request(req(ENDPOINT, sub=("a",)))
    rc = s.answer(CLUSTER, clusters("a"))
    re = s.answer(ENDPOINT, cla("a"))
    assert rc is not None and re is not None and rc.nonce != re.nonce
    assert rc.resources[0].version == clusters("a")[0].version


def test_type_not_served_is_a_protocol_error() -> None:
    s = DeltaSession(counter_nonces(), frozenset({ENDPOINT}))
    with pytest.raises(ProtocolError):
        s.on_request(req(CLUSTER))


def test_sessions_subscribed_to_the_same_names_share_one_set() -> None:
    pool = NameSets()
    a, b = (DeltaSession(counter_nonces("d"), None, pool) for _ in range(2))
    for s in (a, b):
        s.on_request(req(ENDPOINT, sub=("x", "y")))
    assert a.watches[ENDPOINT].names == {"x", "y"}
    assert a.watches[ENDPOINT].names is b.watches[ENDPOINT].names
    a.on_request(req(ENDPOINT, sub=("z",), unsub=("x",)))
    assert a.watches[ENDPOINT].names == {"y", "z"} and b.watches[ENDPOINT].names == {"x", "y"}


def test_the_name_set_pool_keeps_a_set_only_while_a_watch_holds_it() -> None:
    # was: the 1,024 most recently used sets, kept after their streams ended (with names bounded
    # by bytes, not count, that could be gigabytes no stream pays for)
    pool = NameSets()
    a = pool({"a"})
    assert pool(frozenset({"a"})) is a and pool.held() == 1
    del a
    assert pool.held() == 0
    s = DeltaSession(counter_nonces("d"), None, pool)
    s.on_request(req(ENDPOINT, sub=("x", "y")))
    assert pool.held() == 1 and pool({"x", "y"}) is s.watches[ENDPOINT].names
    del s
    assert pool.held() == 0
