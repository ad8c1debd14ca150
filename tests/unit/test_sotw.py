"""The SotW session from request/response transcripts (xDS protocol doc: ACK/NACK, nonces,
wildcard and explicit subscriptions)."""

from __future__ import annotations

import pytest
from envoy.service.discovery.v3 import discovery_pb2

from app.xds.errors import ProtocolError
from app.xds.sotw import SotwSession
from app.xds.type_urls import ADS_ORDER, CLUSTER, ENDPOINT, LISTENER
from app.xds.watch import RequestKind, counter_nonces
from tests.support.xds import cla, clusters


def session() -> SotwSession:
    return SotwSession(counter_nonces("n"), frozenset(ADS_ORDER))


def req(type_url: str, names: tuple[str, ...] = (), nonce: str = "", version: str = "", error: str = ""):
    r = discovery_pb2.DiscoveryRequest(type_url=type_url, resource_names=names, response_nonce=nonce)
    r.version_info = version
    if error:
        r.error_detail.code = 3
        r.error_detail.message = error
    return r


def test_first_request_is_answered_with_the_full_set_and_ack_is_not() -> None:
    s = session()
    out = s.on_request(req(CLUSTER))
    assert (out.kind, out.respond) == (RequestKind.INITIAL, True)
    resp = s.answer(CLUSTER, clusters("a", "b"))
    assert resp is not None and resp.nonce == "n1" and len(resp.resources) == 2
    ack = s.on_request(req(CLUSTER, nonce="n1", version=resp.version_info))
    assert (ack.kind, ack.respond) == (RequestKind.ACK, False)
    w = s.watches[CLUSTER]
    assert (w.nonce_acked, w.version_acked) == ("n1", resp.version_info)


def test_legacy_empty_and_star_requests_are_wildcard_for_cds_lds_only() -> None:
    s = session()
    s.on_request(req(CLUSTER))
    s.on_request(req(LISTENER, ("*",)))
    s.on_request(req(ENDPOINT))
    assert s.watches[CLUSTER].wildcard and s.watches[LISTENER].wildcard
    assert not s.watches[ENDPOINT].wildcard


def test_explicit_eds_subscription_only_carries_the_names_asked_for() -> None:
    s = session()
    s.on_request(req(ENDPOINT, ("a",)))
    resp = s.answer(ENDPOINT, cla("a", "b"))
    assert resp is not None
    assert [r.value for r in resp.message().resources] == [cla("a")[0].body.value]


def test_ack_with_new_names_is_answered_and_dropping_names_is_not() -> None:
    s = session()
    s.on_request(req(ENDPOINT, ("a",)))
    r1 = s.answer(ENDPOINT, cla("a", "b"))
    assert r1 is not None
    grow = s.on_request(req(ENDPOINT, ("a", "b"), nonce=r1.nonce, version=r1.version_info))
    assert (grow.kind, grow.respond) == (RequestKind.SUBSCRIPTION, True)
    r2 = s.answer(ENDPOINT, cla("a", "b"))
    assert r2 is not None and len(r2.resources) == 2
    shrink = s.on_request(req(ENDPOINT, ("b",), nonce=r2.nonce, version=r2.version_info))
    assert (shrink.kind, shrink.respond) == (RequestKind.SUBSCRIPTION, False)
    assert s.watches[ENDPOINT].names == {"b"}


def test_stale_nonce_is_ignored() -> None:
    s = session()
    s.on_request(req(CLUSTER))
    s.answer(CLUSTER, clusters("a"))
    r2 = s.response(CLUSTER, clusters("a", "b"))
    assert r2 is not None and r2.nonce == "n2"
    stale = s.on_request(req(CLUSTER, nonce="n1"))
    assert (stale.kind, stale.respond) == (RequestKind.STALE, False)
    assert s.watches[CLUSTER].nonce_acked == ""


def test_nack_is_recorded_and_the_rejected_version_is_not_resent() -> None:
    s = session()
    s.on_request(req(CLUSTER))
    good = s.answer(CLUSTER, clusters("a"))
    assert good is not None
    s.on_request(req(CLUSTER, nonce=good.nonce, version=good.version_info))
    bad = s.response(CLUSTER, clusters("a", timeout=-1))
    assert bad is not None
    nack = s.on_request(req(CLUSTER, nonce=bad.nonce, version=good.version_info, error="bad timeout"))
    assert (nack.kind, nack.respond, nack.error) == (RequestKind.NACK, False, "bad timeout")
    w = s.watches[CLUSTER]
    assert (w.nacks, w.last_error, w.version_acked) == (1, "bad timeout", good.version_info)
    # the same content again (another push, even a forced one) is not sent in a loop
    assert s.response(CLUSTER, clusters("a", timeout=-1)) is None
    assert s.response(CLUSTER, clusters("a", timeout=-1), force=True) is None
    # different content goes out, and its ACK clears the error
    fixed = s.response(CLUSTER, clusters("a", timeout=2))
    assert fixed is not None
    s.on_request(req(CLUSTER, nonce=fixed.nonce, version=fixed.version_info))
    assert w.last_error == "" and w.version_acked == fixed.version_info


def test_unchanged_set_is_not_resent_unless_forced() -> None:
    s = session()
    s.on_request(req(ENDPOINT, ("a",)))
    s.answer(ENDPOINT, cla("a"))
    assert s.response(ENDPOINT, cla("a")) is None
    forced = s.response(ENDPOINT, cla("a"), force=True)
    assert forced is not None and forced.nonce == "n2"


def test_versions_and_nonces_are_per_type() -> None:
    s = session()
    s.on_request(req(CLUSTER))
    s.on_request(req(ENDPOINT, ("a",)))
    rc = s.answer(CLUSTER, clusters("a"))
    re = s.answer(ENDPOINT, cla("a"))
    assert rc is not None and re is not None
    assert rc.nonce != re.nonce and rc.version_info != re.version_info
    # an ACK of the CDS nonce on the EDS type is stale there
    assert s.on_request(req(ENDPOINT, ("a",), nonce=rc.nonce)).kind is RequestKind.STALE
    assert s.on_request(req(CLUSTER, nonce=rc.nonce)).kind is RequestKind.ACK


def test_reconnect_with_an_old_nonce_is_a_first_request() -> None:
    s = session()
    out = s.on_request(req(CLUSTER, nonce="from-another-server", version="v9"))
    assert (out.kind, out.respond) == (RequestKind.INITIAL, True)


def test_unknown_or_missing_type_is_a_protocol_error() -> None:
    s = SotwSession(counter_nonces(), frozenset({CLUSTER}))
    with pytest.raises(ProtocolError):
        s.on_request(req(LISTENER))
    with pytest.raises(ProtocolError):
        s.on_request(req(""))
