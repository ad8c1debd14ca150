"""Per-stream xDS limits over real gRPC (DESIGN §5: a hostile stream ends, never the server): a
request naming too many resources, a stream watching too many names or types (INVALID_ARGUMENT),
and floods of requests that answer no response (RESOURCE_EXHAUSTED); each time the other streams
keep being served and nothing logs a traceback. The budget's rule is checked without I/O too,
including that an Envoy-like client never trips it."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import pytest_asyncio
from envoy.service.discovery.v3 import discovery_pb2
from grpclib.const import Status

from app.runtime import Runtime
from app.xds.delta import DeltaSession
from app.xds.resources import CLUSTER, ENDPOINT
from app.xds.sotw import SotwSession
from app.xds.watch import (
    MAX_RESOURCE_NAMES,
    MAX_WATCHED_TYPES,
    UNSOLICITED_BURST,
    UNSOLICITED_PER_SECOND,
    ProtocolError,
    RequestBudget,
    RequestFlood,
    Resource,
    counter_nonces,
    encode,
)
from tests.robustness.serving import Client, ended_by_server, serving, with_node
from tests.support.bookinfo import BOOKINFO, EXTRA_DR, NODE, REVIEWS

# the async tests share one module-scoped runtime and its loop
asyncio_module = pytest.mark.asyncio(loop_scope="module")
LABELS = {"app": "productpage", "version": "v1"}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def runtime(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Runtime]:
    config = tmp_path_factory.mktemp("limits") / "config"
    shutil.copytree(BOOKINFO, config)
    async with serving(config) as rt:
        yield rt


@pytest_asyncio.fixture(loop_scope="module")
async def channel(runtime: Runtime) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}") as ch:
        yield ch


def sotw(type_url: str, names: list[str] | None = None, nonce: str = "", node: bool = False) -> Any:
    req = discovery_pb2.DiscoveryRequest(type_url=type_url, resource_names=names or [], response_nonce=nonce)
    return with_node(req, NODE, LABELS) if node else req


def delta(
    type_url: str, subscribe: list[str] | None = None, unsubscribe: list[str] | None = None, node: bool = False
) -> Any:
    req = discovery_pb2.DeltaDiscoveryRequest(
        type_url=type_url, resource_names_subscribe=subscribe or [], resource_names_unsubscribe=unsubscribe or []
    )
    return with_node(req, NODE, LABELS) if node else req


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


# --- request size ------------------------------------------------------------------------


@asyncio_module
async def test_a_sotw_request_naming_too_many_resources_ends_its_stream(
    runtime: Runtime, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    flood = [sotw(ENDPOINT, ["x"] * (MAX_RESOURCE_NAMES + 1), node=True)]
    details = await ended_with(runtime, caplog, Status.INVALID_ARGUMENT, flood)
    assert "names 100,001 resources, more than 100,000" in details
    await still_serving(channel)


@asyncio_module
async def test_a_delta_watch_may_not_grow_past_the_bound(
    runtime: Runtime, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    # a type with no generator: watched, never answered, so no response is built for the names
    made_up = "type.example.com/made.up.Thing"
    half = MAX_RESOURCE_NAMES // 2 + 1
    setup = ((delta(made_up, [f"a{i}" for i in range(half)], node=True), False),)
    flood = [delta(made_up, [f"b{i}" for i in range(half)])]
    details = await ended_with(runtime, caplog, Status.INVALID_ARGUMENT, flood, setup)
    assert "the subscriptions for 'type.example.com/made.up.Thing' names 100,002 resources" in details
    await still_serving(channel, delta_stream=True)


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


# --- floods --------------------------------------------------------------------------------


@asyncio_module
async def test_a_stale_nonce_flood_ends_with_resource_exhausted(
    runtime: Runtime, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    good = Client(channel, delta=False)  # connected before, and served after the flood
    await good.send(sotw(CLUSTER, node=True))
    await good.recv()
    flood = [sotw(CLUSTER, nonce=f"stale-{i}") for i in range(5 * UNSOLICITED_BURST)]
    details = await ended_with(runtime, caplog, Status.RESOURCE_EXHAUSTED, flood, ((sotw(CLUSTER, node=True), True),))
    assert "more than 100 requests answering no response" in details
    await still_serving(channel)
    for _ in range(100):  # the flooder is gone, and the stream still_serving closed
        if len(runtime.xds.streams) == 1:
            break
        await asyncio.sleep(0.05)
    assert len(runtime.xds.streams) == 1
    (runtime.settings.config_dir / "extra-dr.yaml").write_text(EXTRA_DR)  # type: ignore[operator]
    pushed = await good.recv(timeout=20)  # and it is still pushed to
    assert pushed.type_url == CLUSTER
    good.close()


@asyncio_module
async def test_a_repeated_ack_flood_ends_with_resource_exhausted(
    runtime: Runtime, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    # the first ACK of the first response is free; the nonce "1" is the stream's first
    flood = [sotw(CLUSTER, nonce="1")] * (5 * UNSOLICITED_BURST)
    await ended_with(runtime, caplog, Status.RESOURCE_EXHAUSTED, flood, ((sotw(CLUSTER, node=True), True),))
    await still_serving(channel)


@asyncio_module
async def test_a_delta_subscribe_unsubscribe_churn_ends_with_resource_exhausted(
    runtime: Runtime, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    churn = [delta(ENDPOINT, [REVIEWS]) if i % 2 else delta(ENDPOINT, unsubscribe=[REVIEWS]) for i in range(1000)]
    setup = ((delta(CLUSTER, node=True), True),)
    details = await ended_with(runtime, caplog, Status.RESOURCE_EXHAUSTED, churn, setup)
    assert "subscription churn" in details
    await still_serving(channel, delta_stream=True)


# --- the budget's rule, without I/O ----------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_allows_a_burst_then_its_rate_and_one_per_response() -> None:
    clock = Clock()
    budget = RequestBudget(clock)
    for _ in range(UNSOLICITED_BURST):
        budget.spend()
    with pytest.raises(RequestFlood):
        budget.spend()
    budget = RequestBudget(clock, burst=2)
    budget.spend()
    budget.spend()
    clock.now += 1 / UNSOLICITED_PER_SECOND
    budget.spend()  # refilled by the rate
    budget.responded()
    budget.spend()  # earned by a response
    budget.responded(1000)  # never more than the burst at once
    budget.spend()
    budget.spend()
    with pytest.raises(RequestFlood):
        budget.spend()


def _resources(version: int, count: int = 3) -> list[Resource]:
    from envoy.config.cluster.v3 import cluster_pb2

    return [encode(f"c{i}", cluster_pb2.Cluster(name=f"c{i}", alt_stat_name=str(version))) for i in range(count)]


def test_an_envoy_like_sotw_client_costs_nothing_but_its_triggered_requests() -> None:
    # first request free, every first ACK of the latest response free; a stale answer and a
    # repeated ACK cost one each
    session = SotwSession(counter_nonces(), None)
    first = session.on_request(sotw(CLUSTER, node=True))
    assert not first.unsolicited
    resp = session.answer(CLUSTER, _resources(1))
    assert resp is not None
    ack = session.on_request(sotw(CLUSTER, nonce=resp.nonce))
    assert not ack.unsolicited
    assert session.on_request(sotw(CLUSTER, nonce=resp.nonce)).unsolicited  # the same ACK again
    assert session.on_request(sotw(CLUSTER, nonce="old")).unsolicited  # stale
    # EDS names changing after a CDS response: Envoy re-requests with EDS's answered nonce
    session.on_request(sotw(ENDPOINT, ["a"]))
    eds = session.answer(ENDPOINT, [])
    assert eds is not None
    assert not session.on_request(sotw(ENDPOINT, ["a"], nonce=eds.nonce)).unsolicited
    assert session.on_request(sotw(ENDPOINT, ["a", "b"], nonce=eds.nonce)).unsolicited


def test_an_envoy_like_delta_client_pushed_a_thousand_times_never_runs_out() -> None:
    # each push: a CDS response, which Envoy ACKs and follows with one EDS subscription change,
    # and an EDS response it ACKs. Pushes come at the debouncer's fastest, 100 ms apart
    clock = Clock()
    budget = RequestBudget(clock)
    session = DeltaSession(counter_nonces(), None)

    def request(req: Any) -> None:
        if session.on_request(req).unsolicited:
            budget.spend()

    request(delta(CLUSTER, node=True))
    request(delta(ENDPOINT, ["c0"]))
    for version in range(1000):
        clock.now += 0.1
        cds = session.response(CLUSTER, _resources(version, 3 + version % 2))
        assert cds is not None
        budget.responded()
        request(discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER, response_nonce=cds.nonce))
        request(delta(ENDPOINT, [f"c{version % 2 + 1}"], [f"c{(version + 1) % 2 + 1}"]))  # ackless
        eds = session.response(ENDPOINT, _resources(version, 3), force=True)
        assert eds is not None
        budget.responded()
        request(discovery_pb2.DeltaDiscoveryRequest(type_url=ENDPOINT, response_nonce=eds.nonce))


def test_session_bounds_raise_protocol_errors() -> None:
    session = DeltaSession(counter_nonces(), None)
    req = delta(ENDPOINT, node=True)
    req.initial_resource_versions.update({f"n{i}": "v" for i in range(MAX_RESOURCE_NAMES + 1)})
    with pytest.raises(ProtocolError, match="initial_resource_versions"):
        session.on_request(req)
    session = DeltaSession(counter_nonces(), None)
    with pytest.raises(ProtocolError, match="more than 100,000"):
        session.on_request(delta(ENDPOINT, ["a"] * 50_001, ["b"] * 50_000))
