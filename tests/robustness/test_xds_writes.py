"""One write in flight per call, never two (issue 24 item 12): a slow consumer is given up
after the send timeout without gRPC core seeing a second operation on its call.

gRPC core takes one send-message batch per call at a time (a second fails with
GRPC_CALL_ERROR_TOO_MANY_OPERATIONS), and grpc.aio cannot take a write back: cancelling the
coroutine that awaits it leaves the batch in core. The server used to cancel a write that passed
the send timeout and then send the status, which carries the initial metadata again when the
stuck write was the stream's first: a traceback per slow consumer. Over real gRPC here (a client
that never reads), and with a context that fails as core does (no I/O)."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator

import grpc
import pytest
import pytest_asyncio
from envoy.service.discovery.v3 import discovery_pb2

from app.model.proxy import build_proxy
from app.runtime import Runtime
from app.settings import Settings
from app.telemetry.pilot import PilotMetrics
from app.xds.errors import SendTimeout
from app.xds.push_request import PushRequest
from app.xds.response import DeltaResponse
from app.xds.server import LARGE_RESPONSE, CallWriter, XdsServer, _end
from app.xds.type_urls import CLUSTER, ENDPOINT
from app.xds.watch import WatchedResource
from tests.robustness.serving import Client, with_node
from tests.support.bookinfo import BOOKINFO, NODE
from tests.support.runtime import running

asyncio_module = pytest.mark.asyncio(loop_scope="module")
SEND_TIMEOUT = 1.0
LABELS = {"app": "productpage", "version": "v1"}
# a client whose receive window stays at gRPC's 64 KiB (no BDP growth)
SMALL_WINDOW = [("grpc.http2.bdp_probe", 0)]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def runtime(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Runtime]:
    config = tmp_path_factory.mktemp("writes") / "config"
    shutil.copytree(BOOKINFO, config)
    settings = Settings(
        config_dir=config,
        xds_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        debounce_after=0.01,
        file_debounce_ms=10,
        xds_send_timeout=SEND_TIMEOUT,
        gc_freeze=False,
        shutdown_grace=1.0,
    )
    async with running(settings) as rt:
        yield rt


def grpc_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What gRPC's servicer wrapper logged as errors (ExecuteBatchError, TOO_MANY_OPERATIONS)."""
    return [
        f"{r.getMessage()} {r.exc_text or ''}"
        for r in caplog.records
        if r.levelno >= logging.ERROR or r.exc_info or "TOO_MANY_OPERATIONS" in r.getMessage()
    ]


async def given_up(runtime: Runtime, node_id: str, within: float) -> None:
    proxy_id = build_proxy(node_id).id
    for _ in range(int(within / 0.05)):
        if not any(s.connection.client.id == proxy_id for s in runtime.xds.streams.values()):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the stream of {node_id} was not given up within {within}s")


# was: the write timed out by cancelling it, then context.abort sent the status with the initial
# metadata the stuck first write still held in core: GRPC_CALL_ERROR_TOO_MANY_OPERATIONS, logged
# by grpc with a traceback ("ExecuteBatchError raised in core by servicer method")
@asyncio_module
async def test_a_client_that_never_reads_its_first_answer_is_given_up_with_no_second_operation(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    node = NODE.replace("productpage", "never-reads")
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}", options=SMALL_WINDOW)
    client = Client(channel, delta=False)
    # 4,000 assignments (one answer: under limits.ANSWER_PART): about 240 KB, far past the
    # client's 64 KiB window
    names = [f"outbound|80||s{i}.nowhere.svc.cluster.local" for i in range(4_000)]
    with caplog.at_level(logging.INFO):
        await client.send(with_node(discovery_pb2.DiscoveryRequest(type_url=ENDPOINT, resource_names=names), node))
        await asyncio.sleep(0.5)
        await given_up(runtime, node, SEND_TIMEOUT + 5)
        await asyncio.sleep(0.5)
        assert not grpc_errors(caplog), grpc_errors(caplog)
        ended = [r.getMessage() for r in caplog.records if "ended:" in r.getMessage()]
        assert len(ended) == 1 and ended[0].endswith("ended: timeout sending"), ended
        # once it reads, it gets the answer that was in flight, then istiod's status
        answer = await client.recv()
        assert len(answer.resources) == 4_000
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.recv()
        assert err.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED and err.value.details() == "timeout sending"
        await channel.close()
        await asyncio.sleep(0.3)
    assert not grpc_errors(caplog), grpc_errors(caplog)


# was: the cancelled write's batch stayed in core, the status queued behind it, and when the
# client went away the status batch failed: a traceback per slow consumer that disconnects
@asyncio_module
async def test_a_slow_consumer_that_leaves_after_being_given_up_logs_no_traceback(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    node = NODE.replace("productpage", "slow")
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}", options=SMALL_WINDOW)
    client = Client(channel, delta=True)
    proxy_id = build_proxy(node).id
    with caplog.at_level(logging.INFO):
        await client.send(with_node(discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER), node, LABELS))
        stream = None
        for _ in range(100):
            stream = next((s for s in runtime.xds.streams.values() if s.connection.client.id == proxy_id), None)
            if stream is not None:
                break
            await asyncio.sleep(0.05)
        assert stream is not None
        pushes = 0
        while not stream.closed:  # each forced push re-sends the whole CDS, the client reads none
            # several workers at once, as the push queue may have them: still one write at a time
            await asyncio.wait_for(
                asyncio.gather(*(stream.push(PushRequest(full=True, forced=True)) for _ in range(3))),
                SEND_TIMEOUT + 5,
            )
            pushes += 1
            assert pushes < 500, "the stream never blocked"
        await channel.close()  # it leaves without reading
        await asyncio.sleep(0.5)
    assert not grpc_errors(caplog), grpc_errors(caplog)
    ended = [r.getMessage() for r in caplog.records if "ended:" in r.getMessage()]
    assert len(ended) == 1 and ended[0].endswith("ended: timeout sending"), ended


class CoreLike:
    """A servicer context that fails as gRPC core does: a write or a status while a write is in
    flight is a second operation. Writes complete when ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.in_flight = 0
        self.log: list[str] = []

    async def write(self, resp: DeltaResponse) -> None:
        if self.in_flight:
            raise AssertionError("GRPC_CALL_ERROR_TOO_MANY_OPERATIONS")
        self.in_flight += 1
        try:
            await self.release.wait()
            self.log.append(f"wrote {resp.nonce}")
        finally:
            self.in_flight -= 1

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        if self.in_flight:
            raise AssertionError("GRPC_CALL_ERROR_TOO_MANY_OPERATIONS (status)")
        self.log.append(f"status {code.name}")


def responses(runtime: Runtime, count: int, size: int = 1) -> list[DeltaResponse]:
    [cluster] = runtime.generator.generate(CLUSTER, build_proxy(NODE), WatchedResource(CLUSTER, True))[:1]
    return [DeltaResponse(CLUSTER, f"n{i}", "", [cluster] * size) for i in range(count)]


@asyncio_module
async def test_writes_of_one_stream_never_overlap_and_a_timed_out_one_is_not_cancelled(runtime: Runtime) -> None:
    server = XdsServer(
        runtime.source, on_disconnect=lambda _: None, metrics=PilotMetrics(), send_timeout=0.2, max_large_writes=1
    )
    context = CoreLike()
    expired: list[str] = []
    writer = CallWriter(context, on_expire=lambda: expired.append("given up"))
    first, second = responses(runtime, 2)
    # two writers at once on one call, as two push workers or a push and a request could
    writes = [asyncio.create_task(server._write(writer, resp)) for resp in (first, second)]
    await asyncio.sleep(0.5)  # past the send timeout: the stream is given up, the write waits on
    assert expired == ["given up"] and context.in_flight == 1 and not any(w.done() for w in writes)
    context.release.set()
    results = await asyncio.gather(*writes, return_exceptions=True)
    # the stuck write returned, then raised: the second was never started on the call
    assert [type(r) for r in results] == [SendTimeout, SendTimeout]
    assert context.log == ["wrote n0"]
    await _end(writer, grpc.StatusCode.DEADLINE_EXCEEDED, "timeout sending")
    assert context.log == ["wrote n0", "status DEADLINE_EXCEEDED"]


@asyncio_module
async def test_a_write_past_the_send_timeout_gives_back_its_large_write_slot(runtime: Runtime) -> None:
    server = XdsServer(
        runtime.source, on_disconnect=lambda _: None, metrics=PilotMetrics(), send_timeout=0.2, max_large_writes=1
    )
    stuck, moving = CoreLike(), CoreLike()
    moving.release.set()
    [large_stuck] = responses(runtime, 1, LARGE_RESPONSE)
    [large_moving] = responses(runtime, 1, LARGE_RESPONSE)
    blocked = asyncio.create_task(server._write(CallWriter(stuck), large_stuck))
    await asyncio.sleep(0.05)
    # the one slot is held by the stuck write until the send timeout gives up on it
    other = asyncio.create_task(server._write(CallWriter(moving), large_moving))
    await asyncio.sleep(0.05)
    assert not other.done()
    await asyncio.wait_for(other, 2)
    assert moving.log == ["wrote n0"] and not blocked.done()
    stuck.release.set()
    with pytest.raises(SendTimeout):
        await blocked


@asyncio_module
async def test_a_write_whose_coroutine_was_cancelled_is_the_last_operation_on_the_call(runtime: Runtime) -> None:
    # the call is ending (the client left, the server stops): core may still hold the write, so
    # nothing more goes to the call, status included
    server = XdsServer(runtime.source, on_disconnect=lambda _: None, metrics=PilotMetrics())
    context = CoreLike()
    writer = CallWriter(context)
    [resp] = responses(runtime, 1)
    write = asyncio.create_task(server._write(writer, resp))
    await asyncio.sleep(0.05)
    write.cancel()
    with pytest.raises(asyncio.CancelledError):
        await write
    assert writer.in_flight
    with pytest.raises(SendTimeout):
        await server._write(writer, resp)
    with pytest.raises(asyncio.CancelledError):
        await _end(writer, grpc.StatusCode.INTERNAL, "x")
    assert context.log == []
