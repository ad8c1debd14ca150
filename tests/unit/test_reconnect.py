"""A proxy reconnecting to a restarted pilotfish after its config changed (issue 24, item 1), from
request/response transcripts: the new stream's first requests carry what the proxy holds (Delta
``initial_resource_versions``; SotW the old stream's version and nonce), and every cluster the new
stream re-sends must be followed by its assignment, whichever of CDS and EDS is asked first.

Envoy keeps a modified EDS cluster warming until an assignment for it arrives after the cluster
(tests/e2e/test_incremental_push.py, last test); with ``initial_fetch_timeout: 0s`` for ever. As
istiod (pilot/pkg/xds/delta.go): the versions of an EDS first request are not trusted (istiod reads
``InitialResourceVersions`` for no type but WDS), and a CDS answer is followed by EDS (delta.go
``forceEDSPush``; SotW: model/context.go ``NewWatchedResource`` / ``WarmingDependencies``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envoy.service.discovery.v3 import discovery_pb2

from app.model.proxy import build_proxy
from app.xds.connection import Connection
from app.xds.delta import DeltaSession
from app.xds.sotw import SotwSession
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER
from app.xds.watch import RequestKind, counter_nonces
from tests.support.bookinfo import EXTRA_DR, NODE, RATINGS, REVIEWS
from tests.support.bookinfo_mesh import Mesh
from tests.support.xds import cla

Delta = discovery_pb2.DeltaDiscoveryRequest
Sotw = discovery_pb2.DiscoveryRequest


def names(resp: Any) -> list[str]:
    return [r.name for r in resp.resources]


def delta_connection(mesh: Mesh, conn_id: str = "c2") -> Connection[Any, Any, Any, Any]:
    return Connection(conn_id, build_proxy(NODE), DeltaSession(counter_nonces("n"), None), mesh.source)


def sotw_connection(mesh: Mesh, conn_id: str = "c2") -> Connection[Any, Any, Any, Any]:
    return Connection(conn_id, build_proxy(NODE), SotwSession(counter_nonces("n"), None), mesh.source)


def held_before_restart(mesh: Mesh) -> tuple[dict[str, dict[str, str]], list[str]]:
    """What an Envoy holds after a first stream (CDS, EDS for its clusters, LDS; all ACKed): per
    type, name -> version, as it sends them in ``initial_resource_versions``; and its EDS names."""
    conn, eds_names = mesh.connect()
    for resp in conn.on_request(Delta(type_url=LISTENER)):
        conn.on_request(Delta(type_url=LISTENER, response_nonce=resp.nonce))
    held = {t: dict(w.client_versions) for t, w in conn.session.watches.items()}
    assert held[ENDPOINT].keys() == set(eds_names) and RATINGS in held[CLUSTER]
    return held, eds_names


def eds_clusters(resp: Any, eds_names: Sequence[str]) -> set[str]:
    return {name for name in names(resp) if name in eds_names}


# --- the Delta session --------------------------------------------------------------------------


def test_delta_eds_initial_versions_are_names_only_so_everything_watched_is_sent_again() -> None:
    s = DeltaSession(counter_nonces("d"), None)
    a, b = cla("a", "b")
    req = Delta(type_url=ENDPOINT, resource_names_subscribe=["a", "b", "gone"])
    req.initial_resource_versions.update({"a": a.version, "b": b.version, "gone": "v1"})
    assert s.on_request(req).kind is RequestKind.INITIAL
    resp = s.answer(ENDPOINT, [a, b])
    # unchanged, and sent again: a cluster the client (re)warms needs its assignment after it
    assert resp is not None and names(resp) == ["a", "b"]
    assert list(resp.removed_resources) == ["gone"]  # what the client held that is gone still goes
    s.on_request(Delta(type_url=ENDPOINT, response_nonce=resp.nonce))
    assert s.response(ENDPOINT, [a, b]) is None  # from then on, only what changes


# --- Delta: a DestinationRule changed while pilotfish was down -----------------------------------


def test_delta_restart_cds_then_eds_sends_the_changed_cluster_then_its_assignment() -> None:
    mesh = Mesh()
    held, eds_names = held_before_restart(mesh)
    mesh.apply(EXTRA_DR)  # while down: the ratings cluster changes, its endpoints do not
    conn = delta_connection(mesh)
    [cds] = conn.on_request(Delta(type_url=CLUSTER, initial_resource_versions=held[CLUSTER]))
    assert cds.type_url == CLUSTER and RATINGS in names(cds)
    assert REVIEWS not in names(cds)  # CDS versions are content hashes: an unchanged cluster stays
    eds_request = Delta(type_url=ENDPOINT, resource_names_subscribe=eds_names)
    eds_request.initial_resource_versions.update(held[ENDPOINT])
    [eds] = conn.on_request(eds_request)
    assert eds.type_url == ENDPOINT
    assert eds_clusters(cds, eds_names) <= set(names(eds)), "a re-sent cluster's assignment is missing"


def test_delta_restart_eds_then_cds_forces_the_changed_clusters_assignment_after_it() -> None:
    mesh = Mesh()
    held, eds_names = held_before_restart(mesh)
    mesh.apply(EXTRA_DR)
    conn = delta_connection(mesh)
    eds_request = Delta(type_url=ENDPOINT, resource_names_subscribe=eds_names)
    eds_request.initial_resource_versions.update(held[ENDPOINT])
    [eds] = conn.on_request(eds_request)
    assert sorted(names(eds)) == sorted(eds_names)  # the versions held are not trusted
    conn.on_request(Delta(type_url=ENDPOINT, response_nonce=eds.nonce))
    out = conn.on_request(Delta(type_url=CLUSTER, initial_resource_versions=held[CLUSTER]))
    # an assignment sent before the cluster does not warm it: the CDS answer brings EDS after it
    assert [r.type_url for r in out] == [CLUSTER, ENDPOINT]
    cds, forced = out
    assert RATINGS in names(cds)
    assert set(names(forced)) == eds_clusters(cds, eds_names), "exactly the re-sent clusters' assignments"


def test_delta_cds_answer_without_an_eds_watch_is_cds_alone() -> None:
    mesh = Mesh()
    conn = delta_connection(mesh)
    out = conn.on_request(Delta(type_url=CLUSTER))
    assert [r.type_url for r in out] == [CLUSTER]


def test_delta_cds_ack_sends_no_endpoints() -> None:
    mesh = Mesh()
    conn, _ = mesh.connect()
    assert conn.on_request(Delta(type_url=CLUSTER, response_nonce="1")) == []


# --- SotW: the same restart --------------------------------------------------------------------


def test_sotw_restart_cds_then_eds_sends_everything() -> None:
    mesh = Mesh()
    _, eds_names = held_before_restart(mesh)
    mesh.apply(EXTRA_DR)
    conn = sotw_connection(mesh)
    # the reconnect's requests carry the old stream's version and nonce: new to this server
    [cds] = conn.on_request(Sotw(type_url=CLUSTER, version_info="old", response_nonce="17"))
    assert RATINGS in names(cds) and REVIEWS in names(cds)
    [eds] = conn.on_request(Sotw(type_url=ENDPOINT, resource_names=eds_names, version_info="old", response_nonce="18"))
    assert sorted(names(eds)) == sorted(eds_names)


def test_sotw_restart_eds_then_cds_sends_endpoints_after_the_clusters() -> None:
    mesh = Mesh()
    _, eds_names = held_before_restart(mesh)
    mesh.apply(EXTRA_DR)
    conn = sotw_connection(mesh)
    [eds] = conn.on_request(Sotw(type_url=ENDPOINT, resource_names=eds_names, version_info="old", response_nonce="18"))
    conn.on_request(
        Sotw(type_url=ENDPOINT, resource_names=eds_names, version_info=eds.version_info, response_nonce=eds.nonce)
    )
    out = conn.on_request(Sotw(type_url=CLUSTER, version_info="old", response_nonce="17"))
    assert [r.type_url for r in out] == [CLUSTER, ENDPOINT]
    assert sorted(names(out[1])) == sorted(eds_names)
    # Envoy's request for the warming clusters' endpoints answers the forced response: an ACK
    [_, forced] = out
    again = Sotw(type_url=ENDPOINT, resource_names=eds_names, version_info=forced.version_info)
    again.response_nonce = forced.nonce
    assert conn.on_request(again) == []
