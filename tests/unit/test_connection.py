"""A Connection between session and generators, without gRPC: what a push sends and in which
order (clusters before endpoints, listeners before routes, dependents re-sent after their
leader), for ADS and for per-type streams."""

from __future__ import annotations

from envoy.service.discovery.v3 import discovery_pb2

from app.config.loader import load_documents
from app.config.model import ConfigEvent, EventType, Kind
from app.environment import Environment
from app.model.proxy import build_proxy
from app.sources.files import FileSource
from app.xds.connection import Connection
from app.xds.delta import DeltaSession
from app.xds.push import PushRequest
from app.xds.resources import ADS_ORDER, CLUSTER, ENDPOINT, LISTENER, ROUTE
from app.xds.sotw import SotwSession
from app.xds.watch import counter_nonces
from tests.support.bookinfo import BOOKINFO, EXTRA_DR, NODE, REVIEWS


def environment() -> Environment:
    env = Environment()
    env.apply(FileSource(BOOKINFO).load())
    return env


def add(env: Environment, text: str) -> None:
    objects = load_documents(text, "extra.yaml").objects
    env.apply([ConfigEvent(EventType.ADD, obj) for obj in objects])


def sotw(
    types: frozenset[str] | None = None,
) -> Connection[discovery_pb2.DiscoveryRequest, discovery_pb2.DiscoveryResponse]:
    return Connection("c1", build_proxy(NODE), SotwSession(counter_nonces(), types))


def test_dr_change_pushes_clusters_then_endpoints_even_when_endpoints_are_unchanged() -> None:
    env = environment()
    push = env.build_push_context(None)
    conn = sotw()
    [cds] = conn.on_request(discovery_pb2.DiscoveryRequest(type_url=CLUSTER), push)
    [eds] = conn.on_request(discovery_pb2.DiscoveryRequest(type_url=ENDPOINT, resource_names=[REVIEWS]), push)
    add(env, EXTRA_DR)
    push2 = env.build_push_context(push)
    out = conn.on_push(push2, PushRequest(full=True, config_kinds=frozenset({Kind.DESTINATION_RULE})))
    assert [r.type_url for r in out] == [CLUSTER, ENDPOINT]
    assert out[0].version_info != cds.version_info
    assert out[1].version_info == eds.version_info  # same endpoints, re-sent for the new clusters


def test_unchanged_push_sends_nothing_and_endpoint_push_sends_only_endpoints() -> None:
    env = environment()
    push = env.build_push_context(None)
    conn = sotw()
    conn.on_request(discovery_pb2.DiscoveryRequest(type_url=CLUSTER), push)
    conn.on_request(discovery_pb2.DiscoveryRequest(type_url=LISTENER), push)
    conn.on_request(discovery_pb2.DiscoveryRequest(type_url=ENDPOINT, resource_names=[REVIEWS]), push)
    assert conn.on_push(push, PushRequest(full=True, config_kinds=frozenset({Kind.DESTINATION_RULE}))) == []
    assert conn.on_push(push, PushRequest(full=False, endpoint_services=frozenset({("x", "y")}))) == []


def test_virtual_service_change_sends_listeners_before_routes() -> None:
    env = environment()
    push = env.build_push_context(None)
    conn = Connection("c1", build_proxy(NODE), DeltaSession(counter_nonces(), None))
    conn.on_request(discovery_pb2.DeltaDiscoveryRequest(type_url=LISTENER), push)
    conn.on_request(discovery_pb2.DeltaDiscoveryRequest(type_url=ROUTE, resource_names_subscribe=["9080"]), push)
    add(
        env,
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, namespace: bookinfo}\n"
        "spec:\n  hosts: [ratings]\n  http:\n  - route: [{destination: {host: ratings}}]\n    timeout: 3s\n",
    )
    push2 = env.build_push_context(push)
    out = conn.on_push(push2, PushRequest(full=True, config_kinds=frozenset({Kind.VIRTUAL_SERVICE})))
    types = [r.type_url for r in out]
    assert ROUTE in types
    assert types == [t for t in ADS_ORDER if t in types]  # LDS (if changed) before RDS


def test_per_type_eds_stream_resends_endpoints_when_clusters_may_have_been_resent() -> None:
    env = environment()
    push = env.build_push_context(None)
    eds_only = sotw(frozenset({ENDPOINT}))
    [first] = eds_only.on_request(discovery_pb2.DiscoveryRequest(type_url=ENDPOINT, resource_names=[REVIEWS]), push)
    add(env, EXTRA_DR)
    out = eds_only.on_push(
        env.build_push_context(push), PushRequest(full=True, config_kinds=frozenset({Kind.DESTINATION_RULE}))
    )
    assert [r.type_url for r in out] == [ENDPOINT]
    assert out[0].nonce != first.nonce


def test_ads_type_without_generator_is_not_answered() -> None:
    conn = sotw()
    secret = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
    out = conn.on_request(
        discovery_pb2.DiscoveryRequest(type_url=secret, resource_names=["default"]),
        environment().build_push_context(None),
    )
    assert out == [] and secret in conn.session.watches
