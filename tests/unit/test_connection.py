"""A Connection between session and generators, without gRPC: what a push sends and in which
order (clusters before endpoints, listeners before routes, dependents re-sent after their
leader), for ADS and for per-type streams."""

from __future__ import annotations

from typing import Any

from envoy.service.discovery.v3 import discovery_pb2

from app.config.objects import ConfigKey, Kind
from app.model.proxy import build_proxy
from app.xds.connection import Connection
from app.xds.delta import DeltaSession
from app.xds.push_request import PushRequest
from app.xds.sotw import SotwSession
from app.xds.type_urls import ADS_ORDER, CLUSTER, ENDPOINT, LISTENER, ROUTE
from app.xds.watch import counter_nonces
from tests.support.bookinfo import EXTRA_DR, NODE, RATINGS, REVIEWS
from tests.support.bookinfo_mesh import Mesh as SupportMesh


class Mesh(SupportMesh):
    """bookinfo (tests/support/mesh.py) with SotW streams."""

    def sotw(
        self, types: frozenset[str] | None = None
    ) -> Connection[Any, Any, discovery_pb2.DiscoveryRequest, discovery_pb2.DiscoveryResponse]:
        return Connection("c1", build_proxy(NODE), SotwSession(counter_nonces(), types), self.source)


def test_dr_change_pushes_clusters_then_endpoints_even_when_endpoints_are_unchanged() -> None:
    mesh = Mesh()
    conn = mesh.sotw()
    [cds] = conn.on_request(discovery_pb2.DiscoveryRequest(type_url=CLUSTER))
    conn.on_request(discovery_pb2.DiscoveryRequest(type_url=ENDPOINT, resource_names=[REVIEWS, RATINGS]))
    out = conn.on_push(mesh.apply(EXTRA_DR))  # a rule for ratings
    assert [r.type_url for r in out] == [CLUSTER, ENDPOINT]
    assert out[0].version_info != cds.version_info
    # the re-sent ratings cluster's (unchanged) assignment, for it to warm; reviews' stays as it is
    assert [r.name for r in out[1].resources] == [RATINGS]


def test_unchanged_push_sends_nothing_and_endpoint_push_sends_only_endpoints() -> None:
    mesh = Mesh()
    conn = mesh.sotw()
    conn.on_request(discovery_pb2.DiscoveryRequest(type_url=CLUSTER))
    conn.on_request(discovery_pb2.DiscoveryRequest(type_url=LISTENER))
    conn.on_request(discovery_pb2.DiscoveryRequest(type_url=ENDPOINT, resource_names=[REVIEWS]))
    reviews_rule = ConfigKey(Kind.DESTINATION_RULE, "bookinfo", "reviews")
    assert conn.on_push(PushRequest(full=True, configs_updated=frozenset({reviews_rule}))) == []
    assert conn.on_push(PushRequest(full=False, endpoint_services=frozenset({("x", "y")}))) == []
    assert conn.skipped == 1  # ("x", "y") is no service of its scope: filtered before generating


def test_virtual_service_change_sends_listeners_before_routes() -> None:
    mesh = Mesh()
    conn = Connection("c1", build_proxy(NODE), DeltaSession(counter_nonces(), None), mesh.source)
    conn.on_request(discovery_pb2.DeltaDiscoveryRequest(type_url=LISTENER))
    conn.on_request(discovery_pb2.DeltaDiscoveryRequest(type_url=ROUTE, resource_names_subscribe=["9080"]))
    request = mesh.apply(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, namespace: bookinfo}\n"
        "spec:\n  hosts: [ratings]\n  http:\n  - route: [{destination: {host: ratings}}]\n    timeout: 3s\n",
    )
    out = conn.on_push(request)
    types = [r.type_url for r in out]
    assert ROUTE in types
    assert types == [t for t in ADS_ORDER if t in types]  # LDS (if changed) before RDS


def test_per_type_eds_stream_resends_endpoints_when_clusters_may_have_been_resent() -> None:
    mesh = Mesh()
    eds_only = mesh.sotw(frozenset({ENDPOINT}))
    [first] = eds_only.on_request(discovery_pb2.DiscoveryRequest(type_url=ENDPOINT, resource_names=[REVIEWS]))
    out = eds_only.on_push(mesh.apply(EXTRA_DR))
    assert [r.type_url for r in out] == [ENDPOINT]
    assert out[0].nonce != first.nonce


def test_secrets_are_not_answered_on_the_plaintext_port_as_istiod_without_a_verified_identity() -> None:
    conn = Mesh().sotw()
    secret = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
    out = conn.on_request(discovery_pb2.DiscoveryRequest(type_url=secret, resource_names=["default"]))
    assert out == [] and secret in conn.session.watches
