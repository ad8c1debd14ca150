"""Per-stream xDS limits over real gRPC (DESIGN §5: a hostile stream ends, never the server).

What a stream may make the server hold or do is bounded by memory and by what a request names,
never by the size of a legitimate mesh (app/xds/limits.py): istiod serves a request for more than
100,000 names, ignores stale and garbage nonces, and answers every subscription change, and so
does pilotfish now. What ends a stream: a stream watching too many types or a huge type URL
(INVALID_ARGUMENT), subscriptions past the stream's bytes of names, and a loop of requests that
make the server generate a whole type for nothing (RESOURCE_EXHAUSTED); each time the other
streams keep being served and nothing logs a traceback. The rules are checked without I/O too:
memory per name, the cost of a subscription change, and that an Envoy-like client never trips
anything."""

from __future__ import annotations

import asyncio
import gc
import logging
import shutil
import time
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import pytest_asyncio
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import any_pb2
from grpclib.const import Status

from app.model.proxy import Proxy, build_proxy
from app.runtime import Runtime
from app.xds import limits
from app.xds.connection import Connection
from app.xds.delta import DeltaSession
from app.xds.errors import QuotaExceeded
from app.xds.limits import ANSWER_PART, IDLE_BURST, IDLE_PER_SECOND, MAX_WATCHED_TYPES, IdleAnswers
from app.xds.resource import Resource
from app.xds.sotw import SotwSession
from app.xds.type_urls import CLUSTER, ENDPOINT, ROUTE
from app.xds.watch import SubscribedNames, WatchedResource, counter_nonces
from tests.robustness.serving import Client, ended_by_server, serving, with_node
from tests.support.bookinfo import BOOKINFO, NODE, RATINGS, REVIEWS

# the async tests share one module-scoped runtime and its loop
asyncio_module = pytest.mark.asyncio(loop_scope="module")
LABELS = {"app": "productpage", "version": "v1"}
MADE_UP = "type.example.com/made.up.Thing"  # watched over ADS, never answered: no generator
BIG = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]  # a response naming 100,000 resources


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def runtime(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Runtime]:
    config = tmp_path_factory.mktemp("limits") / "config"
    shutil.copytree(BOOKINFO, config)
    async with serving(config) as rt:
        yield rt


@pytest_asyncio.fixture(loop_scope="module")
async def channel(runtime: Runtime) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}", options=BIG) as ch:
        yield ch


def sotw(type_url: str, names: list[str] | None = None, nonce: str = "", node: bool = False) -> Any:
    req = discovery_pb2.DiscoveryRequest(type_url=type_url, resource_names=names or [], response_nonce=nonce)
    return with_node(req, NODE, LABELS) if node else req


def delta(
    type_url: str,
    subscribe: list[str] | None = None,
    unsubscribe: list[str] | None = None,
    node: bool = False,
    nonce: str = "",
) -> Any:
    req = discovery_pb2.DeltaDiscoveryRequest(
        type_url=type_url,
        resource_names_subscribe=subscribe or [],
        resource_names_unsubscribe=unsubscribe or [],
        response_nonce=nonce,
    )
    return with_node(req, NODE, LABELS) if node else req


def many(count: int, prefix: str = "") -> list[str]:
    """``count`` distinct EDS names of services that do not exist (short: 100,000 fit in a
    request under gRPC's 4 MiB, as istiod's default bound)."""
    return [f"outbound|80||{prefix}s{i}.n" for i in range(count)]


async def still_serving(channel: grpc.aio.Channel, delta_stream: bool = False) -> None:
    """A fresh, well-behaved stream on the same server gets its clusters."""
    good = Client(channel, delta=delta_stream)
    if delta_stream:
        await good.send(delta(CLUSTER, node=True))
        assert REVIEWS in {r.name for r in (await good.recv()).resources}
    else:
        await good.send(sotw(CLUSTER, node=True))
        assert len((await good.recv()).resources) > 0
    good.close()


async def ended_with(
    runtime: Runtime,
    caplog: pytest.LogCaptureFixture,
    status: Status,
    flood: list[Any],
    setup: tuple[tuple[Any, bool], ...] = (),
) -> str:
    """The stream sending ``setup`` then ``flood`` ends with ``status``, a short message, one
    warning line and no traceback; returns the message."""
    delta_stream = isinstance((setup[0][0] if setup else flood[0]), discovery_pb2.DeltaDiscoveryRequest)
    with caplog.at_level(logging.INFO):
        error = await ended_by_server(runtime.xds.port, delta_stream, list(setup), flood)
    details = error.message or ""
    assert error.status is status, (error.status, details[:300])
    assert len(details) <= 300
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    ended = [r.getMessage() for r in caplog.records if "ended:" in r.getMessage()]
    assert len(ended) == 1 and ended[0].endswith(details), ended
    return details


async def stream_of(runtime: Runtime, before: set[str]) -> Any:
    """The server's stream that connected after ``before`` were there."""
    for _ in range(200):
        new = set(runtime.xds.streams) - before
        if new:
            return runtime.xds.streams[new.pop()]
        await asyncio.sleep(0.05)
    raise AssertionError("the stream never connected")


# --- size: legitimate meshes are served ------------------------------------------------------


# was: INVALID_ARGUMENT "names 100,001 resources, more than 100,000" (a count per request)
@asyncio_module
async def test_a_sotw_request_for_more_than_100_000_names_is_served(channel: grpc.aio.Channel) -> None:
    client = Client(channel, delta=False)
    await client.send(sotw(ENDPOINT, [*many(100_001), REVIEWS], node=True))
    answers = await client.recv_resources(100_002)
    assert len(answers) == -(-100_002 // ANSWER_PART)  # in parts, each written before the next is built
    client.close()


# was: INVALID_ARGUMENT "the subscriptions for ... names 100,002 resources" (a count per watch)
@asyncio_module
async def test_a_delta_stream_subscribing_more_than_100_000_names_is_served(
    runtime: Runtime, channel: grpc.aio.Channel
) -> None:
    client = Client(channel, delta=True)
    before = set(runtime.xds.streams)
    await client.send(delta(ENDPOINT, many(50_001, "a"), node=True))
    first = await client.recv_resources(50_001)
    await client.send(delta(ENDPOINT, [*many(50_001, "b"), REVIEWS], nonce=first[-1].nonce))
    # the second answer carries what the second request added, not the first's again
    second = await client.recv_resources(50_002)
    assert {r.name for answer in second for r in answer.resources} == {*many(50_001, "b"), REVIEWS}
    stream = await stream_of(runtime, before)
    assert len(stream.connection.session.watches[ENDPOINT].names) == 100_003
    client.close()


@asyncio_module
async def test_a_stream_past_its_bytes_of_names_ends_with_resource_exhausted(
    runtime: Runtime, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the bound is on what the names cost to hold (2 MiB here, 256 MiB served), however they come
    monkeypatch.setattr(limits, "MAX_NAME_BYTES", 2 * 1024 * 1024)
    batches = [delta(MADE_UP, many(5_000, f"batch{i}-"), node=i == 0) for i in range(3)]
    details = await ended_with(runtime, caplog, Status.RESOURCE_EXHAUSTED, batches)
    assert "would take the stream's names past 2 MiB" in details
    await still_serving(channel, delta_stream=True)


def test_memory_per_name_stays_bounded() -> None:
    # what a session keeps per subscribed name (the shared set, the interned strings, the
    # client's versions) is within what its quota charges, and does not grow with the count
    per_name = []
    for count in (10_000, 100_000):
        # names of their own: ones an earlier test interned would not be counted here
        names = many(count, f"memory-{count}-")
        gc.collect()
        tracemalloc.start()
        try:
            session = DeltaSession(counter_nonces(), None)
            for start in range(0, count, 25_000):
                session.on_request(delta(ENDPOINT, names[start : start + 25_000], node=start == 0))
            empty = any_pb2.Any()
            session.response(ENDPOINT, [Resource(n, "0123456789abcdef", empty, b"", memoryview(b"")) for n in names])
            gc.collect()
            held, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert held <= session.quota.held, (count, held, session.quota.held)
        per_name.append(held / count)
        del session
    # hash tables double as they fill, so bytes per entry vary by up to twice with the count
    assert per_name[1] <= 2 * per_name[0], per_name


# --- bounds that remain -------------------------------------------------------------------


@asyncio_module
async def test_a_stream_watching_too_many_types_ends(
    runtime: Runtime, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    flood = [delta(f"type.example.com/made.up.T{i}", node=i == 0) for i in range(MAX_WATCHED_TYPES + 1)]
    details = await ended_with(runtime, caplog, Status.INVALID_ARGUMENT, flood)
    assert f"at most {MAX_WATCHED_TYPES} types" in details
    await still_serving(channel, delta_stream=True)


@asyncio_module
async def test_a_huge_type_url_ends_its_stream(
    runtime: Runtime, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    details = await ended_with(runtime, caplog, Status.INVALID_ARGUMENT, [sotw("t" * 100_000, node=True)])
    assert "longer than 512 characters" in details
    await still_serving(channel)


# was: proxy_from_node's json_format.MessageToDict raised ValueError for a metadata Struct holding a
# non-finite number (Infinity, NaN: valid protobuf); grpc logged the servicer's ExceptionGroup with
# a traceback and the stream ended UNKNOWN
@asyncio_module
async def test_a_node_with_non_finite_metadata_ends_its_stream_with_invalid_argument(
    runtime: Runtime, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    req = sotw(CLUSTER)
    req.node.id = NODE
    req.node.metadata.fields["NAMESPACE"].number_value = float("inf")
    try:
        details = await ended_with(runtime, caplog, Status.INVALID_ARGUMENT, [req])
        assert "unreadable metadata" in details and "Infinity" in details, details
    finally:
        await still_serving(channel)  # the server itself survives either way


# --- floods: ignored or served, as istiod ----------------------------------------------------


def expired(runtime: Runtime) -> float:
    return sum(runtime.metrics.expired_nonces.values.values())


# was: RESOURCE_EXHAUSTED "more than 100 requests answering no response" after 100 of them
@asyncio_module
@pytest.mark.parametrize("delta_stream", [False, True], ids=["sotw", "delta"])
async def test_stale_and_garbage_nonces_are_ignored_as_istiod_ignores_them(
    runtime: Runtime, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture, delta_stream: bool
) -> None:
    client = Client(channel, delta=delta_stream)
    make: Any = delta if delta_stream else sotw
    await client.send(make(CLUSTER, node=True))
    cds = await client.recv()
    await client.send(make(CLUSTER, nonce=cds.nonce))  # its ACK
    counted = expired(runtime)
    with caplog.at_level(logging.DEBUG, logger="app.xds"):
        for i in range(1_000):
            nonce = ("stale-", "\u2603" * 50, "1" * 1000, cds.nonce)[i % 4] + str(i % 3)
            await client.send(make(CLUSTER, nonce=nonce if i % 4 != 3 else cds.nonce))  # and repeated ACKs
        # no answer to any of them: the next response is the one to this new request
        await client.send(make(ENDPOINT, [REVIEWS]))
        eds = await client.recv(timeout=20)
    assert eds.type_url == ENDPOINT
    assert expired(runtime) - counted == 750  # pilot_xds_expired_nonce, as istiod counts them
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    client.close()


# was (grpc.aio client, as Envoy's own would see it): the server ended the stream with
# RESOURCE_EXHAUSTED for "subscription churn" while the client was still writing, and grpc.aio
# reported the client's failed write as the call's status: INTERNAL "Internal error from Core"
@asyncio_module
async def test_ten_thousand_subscribe_unsubscribe_requests_are_served(
    runtime: Runtime, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    client = Client(channel, delta=True)
    await client.send(delta(CLUSTER, node=True))
    await client.recv()
    answers: list[Any] = []

    async def drain() -> None:
        while len(answers) < 5_001:
            answers.append(await client.call.read())

    reader = asyncio.ensure_future(drain())
    began = time.monotonic()
    with caplog.at_level(logging.WARNING):
        for i in range(10_000):
            if i % 2 == 0:
                await client.call.write(delta(ENDPOINT, [REVIEWS]))
            else:
                await client.call.write(delta(ENDPOINT, unsubscribe=[REVIEWS]))
        await client.call.write(delta(ENDPOINT, [RATINGS]))
        await asyncio.wait_for(reader, 60)
    # each subscribe answered with the one assignment it asked for, the stream still up
    assert {tuple(r.name for r in a.resources) for a in answers[:-1]} == {(REVIEWS,)}
    assert [r.name for r in answers[-1].resources] == [RATINGS]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert time.monotonic() - began < 60
    client.close()


# what remains rationed: requests that make the server generate a type's whole set and find
# nothing to send (here: a Delta CDS watch by name, a cluster that does not exist, subscribed
# and unsubscribed in a loop); an Envoy's CDS watch is wildcard and never does this
@asyncio_module
async def test_whole_type_answers_for_nothing_end_with_resource_exhausted(
    runtime: Runtime, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    loop = [delta(CLUSTER, ["nowhere"]) if i % 2 else delta(CLUSTER, unsubscribe=["nowhere"]) for i in range(1000)]
    setup = ((delta(CLUSTER, [REVIEWS], node=True), True),)
    details = await ended_with(runtime, caplog, Status.RESOURCE_EXHAUSTED, loop, setup)
    assert "generate a whole type and send nothing" in details
    await still_serving(channel, delta_stream=True)


# --- the rules, without I/O ---------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_idle_answers_allow_a_burst_then_their_rate() -> None:
    clock = Clock()
    idle = IdleAnswers(clock)
    for _ in range(IDLE_BURST):
        idle.spend()
    with pytest.raises(QuotaExceeded):
        idle.spend()
    clock.now += 1 / IDLE_PER_SECOND
    idle.spend()  # refilled by the rate
    with pytest.raises(QuotaExceeded):
        idle.spend()


class Recording:
    """A ResourceSource that serves an assignment for every name asked and records how many
    names each generate call was asked for."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.body = any_pb2.Any()

    def generate(self, type_url: str, proxy: Proxy, w: WatchedResource) -> list[Resource]:
        self.asked.append(len(w.names))
        return [Resource(n, "v", self.body, b"", memoryview(b"")) for n in sorted(w.names)]

    def note(self, proxy: Proxy) -> object:
        return None


# was: every subscription change copied the stream's whole name set ((names | subscribe) -
# unsubscribe) and generated and diffed every watched name: with 90,000 held, each one-name
# request cost passes over 90,000
def test_a_subscription_change_costs_what_it_names_not_what_the_stream_holds() -> None:
    source = Recording()
    conn = Connection("c", build_proxy(NODE), DeltaSession(counter_nonces(), None), source)  # type: ignore[arg-type]
    held = many(90_000)
    conn.on_request(delta(ENDPOINT, held, node=True))
    began = time.perf_counter()
    for _ in range(200):
        [answer] = conn.on_request(delta(ENDPOINT, [REVIEWS]))
        assert [r.name for r in answer.resources] == [REVIEWS]
        assert conn.on_request(delta(ENDPOINT, unsubscribe=[REVIEWS])) == []
    took = time.perf_counter() - began
    # the first answer in parts; the others built for the one name
    assert source.asked == [ANSWER_PART] * (90_000 // ANSWER_PART) + [90_000 % ANSWER_PART] + [1] * 200
    names = conn.session.watches[ENDPOINT].names
    assert isinstance(names, SubscribedNames) and len(names) == 90_000 and REVIEWS not in names
    assert took < 1.0, took  # a few ms; with a pass over the 100,000 names per request, seconds


def test_an_answer_past_answer_part_names_comes_in_parts_each_built_as_it_is_taken() -> None:
    """Each part is built only when the server takes it (after writing the one before), holds
    its own names, and together they send what one answer would: in Delta what the client
    lacks (a reconnect's names held at their version are not sent again), in SotW every name."""
    names = many(2 * ANSWER_PART + 10)
    source = Recording()
    conn = Connection("c", build_proxy(NODE), SotwSession(counter_nonces(), None), source)  # type: ignore[arg-type]
    parts = conn.answers(sotw(ENDPOINT, names, node=True))
    first = next(parts)
    assert source.asked == [ANSWER_PART]  # the next part not built yet
    rest = list(parts)
    assert source.asked == [ANSWER_PART, ANSWER_PART, 10]
    sent = [r.name for answer in (first, *rest) for r in answer.resources]
    assert sent == sorted(names)
    # routes: a reconnect gets its endpoints again whatever it holds (Envoy warms clusters on them)
    held = {name: "v" for name in names[:ANSWER_PART]}  # what Recording serves: version "v"
    conn = Connection("d", build_proxy(NODE), DeltaSession(counter_nonces(), None), Recording())  # type: ignore[arg-type]
    request = delta(ROUTE, names, node=True)
    request.initial_resource_versions.update(held)
    answers = conn.on_request(request)
    assert sorted(r.name for answer in answers for r in answer.resources) == sorted(set(names) - set(held))


def test_subscribed_names_fold_their_changes_into_a_shared_set() -> None:
    session = DeltaSession(counter_nonces(), None)
    session.on_request(delta(ENDPOINT, many(1_000), node=True))
    w = session.watches[ENDPOINT]
    session.on_request(delta(ENDPOINT, many(300, "x"), many(10)))
    assert len(w.names) == 1_290 and "outbound|80||xs0.n" in w.names and many(1)[0] not in w.names
    other = DeltaSession(counter_nonces(), None, session._name_sets)
    other.on_request(delta(ENDPOINT, sorted(w.names), node=True))
    # past a quarter of the shared set, the changes became a new shared set: the other stream
    # subscribed to the same names holds that very set
    assert other.watches[ENDPOINT].names is w.names._base  # type: ignore[attr-defined]


def test_what_a_stream_is_charged_for_a_name_is_refunded_whatever_comes_with_it() -> None:
    session = DeltaSession(counter_nonces(), None)
    session.on_request(delta(ENDPOINT, ["\u00e9t\u00e9"], node=True))
    session.on_request(delta(ENDPOINT, many(1_000)))
    charged = session.quota.held
    session.on_request(delta(ENDPOINT, unsubscribe=[*many(1_000), "\u00e9t\u00e9"]))
    assert session.quota.held == 0 and charged > 0
    session.on_request(delta(ENDPOINT, many(10)))
    session.on_request(delta(ENDPOINT, unsubscribe=many(10)))
    session.on_request(delta(ENDPOINT, unsubscribe=many(10)))  # not held: nothing refunded
    assert session.quota.held == 0


def test_an_envoy_like_delta_client_pushed_a_thousand_times_never_runs_out() -> None:
    # each push: a CDS response, which Envoy ACKs and follows with one EDS subscription change,
    # and an EDS response it ACKs; all at the debouncer's fastest, 100 ms apart
    clock = Clock()
    source = Recording()
    session = DeltaSession(counter_nonces(), None)
    conn = Connection("c", build_proxy(NODE), session, source, idle=IdleAnswers(clock))  # type: ignore[arg-type]
    conn.on_request(delta(CLUSTER, node=True))
    conn.on_request(delta(ENDPOINT, ["c0"]))
    for version in range(1000):
        clock.now += 0.1
        cds = session.response(CLUSTER, [Resource(f"c{version}", str(version), source.body, b"", memoryview(b""))])
        assert cds is not None
        conn.on_request(discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER, response_nonce=cds.nonce))
        conn.on_request(delta(ENDPOINT, [f"c{version % 2 + 1}"], [f"c{(version + 1) % 2 + 1}"]))
        eds = session.response(ENDPOINT, [], force=True)
        nonce = eds.nonce if eds is not None else ""
        conn.on_request(discovery_pb2.DeltaDiscoveryRequest(type_url=ENDPOINT, response_nonce=nonce))
        conn.on_request(discovery_pb2.DeltaDiscoveryRequest(type_url=ENDPOINT, response_nonce="stale"))


def test_sotw_sessions_take_a_request_of_any_size_and_charge_it() -> None:
    session = SotwSession(counter_nonces(), None)
    session.on_request(sotw(ENDPOINT, many(200_000), node=True))
    assert len(session.watches[ENDPOINT].names) == 200_000
    first = session.quota.held
    resp = session.answer(ENDPOINT, [])
    assert resp is not None
    session.on_request(sotw(ENDPOINT, many(10), nonce=resp.nonce))
    assert 0 < session.quota.held < first / 10_000
