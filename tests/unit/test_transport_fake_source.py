"""The xDS transport against a fake ResourceSource (as go-control-plane tests its server against a
mock ConfigWatcher): made-up clients, push requests and resources, nothing of the mesh model.
Connection with SotwSession and DeltaSession, then the grpc XdsServer over real gRPC streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import wrappers_pb2

from app.security.authn import Caller, SpiffeId
from app.xds.cause import Cause
from app.xds.connection import Connection
from app.xds.delta import DeltaSession
from app.xds.errors import InvalidNode, Status, Unauthorized
from app.xds.resource import Resource, encode
from app.xds.response import DeltaResponse, SotwResponse
from app.xds.server import XdsServer, grpc_status
from app.xds.sotw import SotwSession
from app.xds.source import PushAnswer, TypePush
from app.xds.type_urls import CLUSTER, ENDPOINT
from app.xds.watch import Outcome, RequestKind, WatchedResource, counter_nonces

FRUIT = "type.example.com/fruit.v1.Fruit"  # a made-up type: no generator anywhere knows it
ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/"


@dataclass(frozen=True)
class Client:
    id: str
    istio_version: str = ""


@dataclass(frozen=True)
class Push:
    """A made-up push request: the types it touches in order, the names it changed (a partial
    answer when the protocol can carry it), forced or skipped."""

    types: tuple[str, ...] = ()
    changed: frozenset[str] | None = None
    forced: bool = False
    skip: bool = False
    traces: tuple[Hashable, ...] = ()
    fail: bool = False  # the source raises on it (a defect in answering)


@dataclass(frozen=True)
class Note:
    """The stream's opaque note: how many times the source wrote it."""

    count: int


def made(name: str, value: str) -> Resource:
    return encode(name, wrappers_pb2.StringValue(value=f"{name}={value}"))


@dataclass
class Plan:
    source: FakeSource
    client: Client
    request: Push
    note: Note
    types: tuple[TypePush, ...] | None

    def answer(
        self, step: TypePush, watch: WatchedResource, force_names: Collection[str], partial: bool
    ) -> PushAnswer | None:
        self.source.asked.append((step.type_url, frozenset(force_names), partial))
        changed = self.request.changed
        if changed is not None and partial:
            current = self.source.resources.get(step.type_url, {})
            considered = changed | frozenset(force_names)
            found = [current[n] for n in sorted(considered) if n in current and watch.wants(n)]
            return PushAnswer(found, considered, found)
        whole = self.source.generate(step.type_url, self.client, watch)
        return None if whole is None else PushAnswer(whole, None, None)


@dataclass
class FakeSource:
    """A ServedSource of made-up resources per type URL; records what the transport asks."""

    resources: dict[str, dict[str, Resource]] = field(default_factory=dict)
    generated: list[tuple[str, frozenset[str] | None]] = field(default_factory=list)
    notes_in: list[object] = field(default_factory=list)  # the note each push was handed
    asked: list[tuple[str, frozenset[str], bool]] = field(default_factory=list)

    def put(self, type_url: str, *pairs: tuple[str, str]) -> None:
        held = self.resources.setdefault(type_url, {})
        for name, value in pairs:
            held[name] = made(name, value)

    def client(self, node: base_pb2.Node) -> Client:
        if node.id.startswith("bad"):
            raise InvalidNode(f"node {node.id!r}: not a fruit stand")
        return Client(node.id, node.metadata.fields["ISTIO_VERSION"].string_value)

    def authorize(self, client: Client, caller: Caller) -> tuple[Client, SpiffeId]:
        raise Unauthorized("no caller is authorized here", client.id)

    def secret_access(self, client: Client, denied: str) -> Client:
        return client

    def note(self, client: Client) -> object:
        return Note(0)

    def generate(self, type_url: str, client: Client, watch: WatchedResource) -> list[Resource] | None:
        held = self.resources.get(type_url)
        if held is None:
            return None
        self.generated.append((type_url, None if watch.wildcard else frozenset(watch.names)))
        # the source's own per-watch note, kept by the transport with the watch
        watch.synced = (watch.synced if isinstance(watch.synced, int) else 0) + 1
        return [r for name, r in sorted(held.items()) if watch.wants(name)]

    def rejected(self, client: Client, type_url: str, error: str, watch: WatchedResource) -> list[Cause]:
        """The fruit a NACK's message names, as the objects they were made from."""
        return [Cause("Stand", client.id, name) for name in sorted(self.resources.get(type_url, {})) if name in error]

    def push(self, client: Client, note: object, request: Push, watched: Collection[str]) -> Plan:
        self.notes_in.append(note)
        if request.fail:
            raise RuntimeError(f"no plan for {client.id}")
        count = note.count if isinstance(note, Note) else 0
        types = None
        if not request.skip:
            types = tuple(
                TypePush(t, request.forced, CLUSTER if t == ENDPOINT else None) for t in request.types if t in watched
            )
        return Plan(self, client, request, Note(count + 1), types)


AnyConnection = Connection[Any, Any, Any, Any]


def sotw_conn(source: FakeSource, outcomes: list[tuple[Outcome, Client]] | None = None) -> AnyConnection:
    on_outcome = None if outcomes is None else (lambda o, c: outcomes.append((o, c)))
    return Connection("s1", Client("stand-1"), SotwSession(counter_nonces(), None), source, on_outcome)


def delta_conn(source: FakeSource) -> AnyConnection:
    return Connection("d1", Client("stand-1"), DeltaSession(counter_nonces(), None), source)


def sotw(type_url: str, names: Sequence[str] = (), nonce: str = "", version: str = "") -> Any:
    return discovery_pb2.DiscoveryRequest(
        type_url=type_url, resource_names=list(names), response_nonce=nonce, version_info=version
    )


def delta(type_url: str, subscribe: Sequence[str] = (), nonce: str = "") -> Any:
    return discovery_pb2.DeltaDiscoveryRequest(
        type_url=type_url, resource_names_subscribe=list(subscribe), response_nonce=nonce
    )


def named(resp: SotwResponse | DeltaResponse) -> list[str]:
    return [r.name for r in resp.resources]


def test_a_sotw_request_is_answered_acked_and_nacked_through_the_source() -> None:
    source = FakeSource()
    source.put(FRUIT, ("apple", "red"), ("pear", "green"))
    outcomes: list[tuple[Outcome, Client]] = []
    conn = sotw_conn(source, outcomes)
    [first] = conn.on_request(sotw(FRUIT))
    assert first.type_url == FRUIT and named(first) == ["apple", "pear"]
    assert conn.on_request(sotw(FRUIT, nonce=first.nonce, version=first.version_info)) == []  # the ACK
    nack = sotw(FRUIT, nonce=first.nonce)
    nack.error_detail.code, nack.error_detail.message = 3, "apples are not pears"
    assert conn.on_request(nack) == []
    kinds = [(o.kind, o.type_url, c.id) for o, c in outcomes]
    assert kinds == [
        (RequestKind.INITIAL, FRUIT, "stand-1"),
        (RequestKind.ACK, FRUIT, "stand-1"),
        (RequestKind.NACK, FRUIT, "stand-1"),
    ]
    assert conn.session.watches[FRUIT].last_error == "apples are not pears"
    # the source named what the rejected resources were made from; the outcome carries it
    assert outcomes[-1][0].causes == (Cause("Stand", "stand-1", "apple"), Cause("Stand", "stand-1", "pear"))
    # the rejected set is never resent as such; different content goes out
    assert conn.on_push(Push(types=(FRUIT,))) == []
    source.put(FRUIT, ("apple", "yellow"))
    [pushed] = conn.on_push(Push(types=(FRUIT,)))
    assert named(pushed) == ["apple", "pear"] and pushed.version_info != first.version_info


def test_a_cluster_answer_brings_the_endpoints_envoy_needs_to_warm_it() -> None:
    source = FakeSource()
    source.put(CLUSTER, ("a", "cluster"), ("b", "cluster"))
    source.put(ENDPOINT, ("a", "eps"), ("b", "eps"))
    conn = sotw_conn(source)
    [eds] = conn.on_request(sotw(ENDPOINT, ["a", "b"]))  # a reconnect's EDS request first
    conn.on_request(sotw(ENDPOINT, ["a", "b"], eds.nonce, eds.version_info))
    cds, again = conn.on_request(sotw(CLUSTER))
    assert (cds.type_url, again.type_url) == (CLUSTER, ENDPOINT)
    assert named(again) == ["a", "b"] and again.version_info == eds.version_info  # unchanged, forced


def test_a_push_resends_the_follower_by_the_names_its_leader_resent() -> None:
    source = FakeSource()
    source.put(CLUSTER, ("a", "cluster"), ("b", "cluster"))
    source.put(ENDPOINT, ("a", "eps"), ("b", "eps"))
    conn = delta_conn(source)
    conn.on_request(delta(CLUSTER))
    conn.on_request(delta(ENDPOINT, ["a", "b"]))
    source.put(CLUSTER, ("a", "changed"))
    cds, eds = conn.on_push(Push(types=(CLUSTER, ENDPOINT)))
    assert named(cds) == ["a"]  # Delta: what changed
    assert named(eds) == ["a"]  # unchanged, but its cluster was re-sent
    assert source.asked == [(CLUSTER, frozenset(), True), (ENDPOINT, frozenset({"a"}), True)]
    assert conn.pushes == 1 and set(conn.build_seconds) == {CLUSTER, ENDPOINT}


def test_a_partial_answer_carries_what_changed_and_removes_what_is_gone() -> None:
    source = FakeSource()
    source.put(FRUIT, ("apple", "red"), ("pear", "green"), ("plum", "blue"))
    conn = delta_conn(source)
    [first] = conn.on_request(delta(FRUIT))
    assert named(first) == ["apple", "pear", "plum"]
    source.put(FRUIT, ("apple", "yellow"))
    del source.resources[FRUIT]["plum"]
    generated = len(source.generated)
    [resp] = conn.on_push(Push(types=(FRUIT,), changed=frozenset({"apple", "plum"})))
    assert named(resp) == ["apple"] and list(resp.removed_resources) == ["plum"]
    assert len(source.generated) == generated  # the whole type was not generated
    # SotW cannot carry a partial answer of a type it holds whole: the source is told so
    sotw_stream = sotw_conn(source)
    sotw_stream.on_request(sotw(FRUIT))
    source.put(FRUIT, ("pear", "ripe"))
    [whole] = sotw_stream.on_push(Push(types=(FRUIT,), changed=frozenset({"pear"})))
    assert named(whole) == ["apple", "pear"] and source.asked[-1] == (FRUIT, frozenset(), False)


def test_a_delta_subscription_change_is_answered_for_the_names_it_adds() -> None:
    source = FakeSource()
    source.put(ENDPOINT, ("a", "eps"), ("b", "eps"), ("c", "eps"))
    conn = delta_conn(source)
    [first] = conn.on_request(delta(ENDPOINT, ["a"]))
    assert named(first) == ["a"]
    [added] = conn.on_request(delta(ENDPOINT, ["b"], nonce=first.nonce))
    assert named(added) == ["b"]
    assert source.generated == [(ENDPOINT, frozenset({"a"})), (ENDPOINT, frozenset({"b"}))]
    assert set(conn.session.watches[ENDPOINT].names) == {"a", "b"}


def test_the_sources_notes_round_trip_through_the_transport() -> None:
    source = FakeSource()
    source.put(FRUIT, ("apple", "red"))
    early = delta_conn(source)
    assert early.on_push(Push(types=(FRUIT,))) == []  # nothing watched yet
    assert source.notes_in == [None] and early.note == Note(1)  # never answered: no note to hand
    source.notes_in.clear()
    conn = delta_conn(source)
    conn.on_request(delta(FRUIT))
    assert conn.session.watches[FRUIT].synced == 1  # the per-watch note the source wrote
    conn.on_push(Push(types=(FRUIT,), skip=True))
    conn.on_push(Push(types=(FRUIT,), forced=True))
    # the stream note: the note(client) of the first answer, then each push's own
    assert source.notes_in == [Note(0), Note(1)]
    assert conn.note == Note(2)
    assert conn.skipped == 1 and conn.pushes == 1
    assert conn.session.watches[FRUIT].synced == 2  # the forced push generated it again


class Metrics:
    """An XdsMetrics that keeps what it is told."""

    def __init__(self) -> None:
        self.clients: dict[str, int] = {}
        self.sent_types: list[str] = []
        self.nacks: list[tuple[str, str, int, tuple[Cause, ...]]] = []

    def connected(self, node: str, istio_version: str, delta: int) -> None:
        self.clients[istio_version] = self.clients.get(istio_version, 0) + delta

    def sent(self, type_url: str, seconds: float, size: int) -> None:
        self.sent_types.append(type_url)

    def pushed_type(self, type_url: str, seconds: float) -> None:
        pass

    def write_timeout(self) -> None:
        pass

    def auth_failure(self, code: str) -> None:
        pass

    def rejected(self, type_url: str, node: str, code: int, error: str, causes: Sequence[Cause]) -> None:
        self.nacks.append((type_url, node, code, tuple(causes)))

    def expired_nonce(self, type_url: str) -> None:
        pass


class Observer:
    """A StreamObserver of made-up push requests."""

    def __init__(self) -> None:
        self.pushed: list[tuple[str, Push, list[str]]] = []
        self.answers: list[tuple[str, str | None, tuple[Cause, ...]]] = []

    def proxy_pushed(
        self,
        stream_id: str,
        proxy_id: str,
        request: Push,
        dequeued: float,
        responses: Sequence[DeltaResponse | SotwResponse],
    ) -> None:
        self.pushed.append((proxy_id, request, [r.type_url for r in responses]))

    def answered(
        self, stream_id: str, type_url: str, nonce: str, error: str | None, causes: Sequence[Cause] = ()
    ) -> None:
        self.answers.append((type_url, error, tuple(causes)))

    def disconnected(self, stream_id: str) -> None:
        pass


@dataclass
class Served:
    server: XdsServer[Client, Push]
    source: FakeSource
    metrics: Metrics
    observer: Observer
    channel: grpc.aio.Channel


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    source, metrics, observer = FakeSource(), Metrics(), Observer()
    source.put(FRUIT, ("apple", "red"), ("pear", "green"))
    server: XdsServer[Client, Push] = XdsServer(source, lambda _: None, metrics=metrics, observer=observer)
    await server.start("127.0.0.1:0")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield Served(server, source, metrics, observer, channel)
    await server.stop(0)


def open_stream(channel: grpc.aio.Channel) -> Any:
    return channel.stream_stream(
        ADS + "StreamAggregatedResources",
        request_serializer=discovery_pb2.DiscoveryRequest.SerializeToString,
        response_deserializer=discovery_pb2.DiscoveryResponse.FromString,
    )()


async def test_the_grpc_server_serves_a_fake_sources_clients(served: Served) -> None:
    call = open_stream(served.channel)
    first = sotw(FRUIT)
    first.node.id = "stand-7"
    first.node.metadata.fields["ISTIO_VERSION"].string_value = "1.99"
    await call.write(first)
    resp = await asyncio.wait_for(call.read(), 10)
    assert resp.type_url == FRUIT and len(resp.resources) == 2
    assert wrappers_pb2.StringValue.FromString(resp.resources[0].value).value == "apple=red"
    await call.write(sotw(FRUIT, nonce=resp.nonce, version=resp.version_info))
    [stream] = served.server.streams.values()
    assert stream.connection.client == Client("stand-7", "1.99") and served.metrics.clients == {"1.99": 1}
    # a push goes through the source's plan; the observer hears it with the request as given
    served.source.put(FRUIT, ("apple", "green"))
    request = Push(types=(FRUIT,), traces=("trace-1",))
    written = await asyncio.wait_for(stream.push(request), 10)
    assert [r.type_url for r in written] == [FRUIT]
    pushed = await asyncio.wait_for(call.read(), 10)
    assert wrappers_pb2.StringValue.FromString(pushed.resources[0].value).value == "apple=green"
    nack = sotw(FRUIT, nonce=pushed.nonce)
    nack.error_detail.code, nack.error_detail.message = 3, "green apples"
    await call.write(nack)
    await call.done_writing()
    assert await call.code() == grpc.StatusCode.OK
    assert served.observer.pushed == [("stand-7", request, [FRUIT])]
    apple = (Cause("Stand", "stand-7", "apple"),)
    assert served.observer.answers[-1] == (FRUIT, "green apples", apple)
    assert served.metrics.nacks == [(FRUIT, "stand-7", 3, apple)] and served.metrics.sent_types == [FRUIT, FRUIT]
    assert served.metrics.clients == {"1.99": 0}


async def test_a_push_the_source_fails_ends_that_stream_alone_with_internal(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    calls = []
    for stand in ("stand-1", "stand-2"):
        call = open_stream(served.channel)
        first = sotw(FRUIT)
        first.node.id = stand
        await call.write(first)
        resp = await asyncio.wait_for(call.read(), 10)
        await call.write(sotw(FRUIT, nonce=resp.nonce, version=resp.version_info))
        calls.append(call)
    await asyncio.sleep(0.1)  # both ACKs handled
    failing, healthy = (next(s for s in served.server.streams.values() if s.connection.client.id == stand)
                        for stand in ("stand-1", "stand-2"))  # fmt: skip
    await asyncio.wait_for(failing.push(Push(types=(FRUIT,), fail=True)), 10)  # released, not stuck
    assert await asyncio.wait_for(calls[0].code(), 10) == grpc.StatusCode.INTERNAL
    assert await calls[0].details() == "internal error"  # nothing of the server's internals
    assert any("stand-1" in r.getMessage() and r.exc_info for r in caplog.records if r.levelname == "ERROR")
    served.source.put(FRUIT, ("apple", "green"))
    assert [r.type_url for r in await asyncio.wait_for(healthy.push(Push(types=(FRUIT,))), 10)] == [FRUIT]
    assert len((await asyncio.wait_for(calls[1].read(), 10)).resources) == 2
    assert [s.connection.client.id for s in served.server.streams.values()] == ["stand-2"]
    calls[1].cancel()


async def test_a_node_the_source_cannot_read_ends_its_stream_with_invalid_argument(served: Served) -> None:
    call = open_stream(served.channel)
    first = sotw(FRUIT)
    first.node.id = "bad-stand"
    await call.write(first)
    assert await asyncio.wait_for(call.code(), 10) == grpc.StatusCode.INVALID_ARGUMENT
    assert await call.details() == "node 'bad-stand': not a fruit stand"
    assert served.server.streams == {}


def test_every_stream_error_status_is_a_grpc_status_code() -> None:
    assert [grpc_status(s).name for s in Status] == [s.value for s in Status]
    assert grpc_status(InvalidNode.status) is grpc.StatusCode.INVALID_ARGUMENT
    assert grpc_status(Unauthorized.status) is grpc.StatusCode.PERMISSION_DENIED
