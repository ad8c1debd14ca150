"""A real pilotfish runtime in this process for the robustness tests: xDS and debug HTTP on free
127.0.0.1 ports, a config dir that the tests write to, and small clients for both."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import struct_pb2
from grpclib.client import Channel
from grpclib.const import Cardinality
from grpclib.exceptions import GRPCError, StreamTerminatedError

from app.runtime import Runtime
from app.settings import Settings
from tests.support.runtime import running

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/"
SOTW = ADS + "StreamAggregatedResources"
DELTA = ADS + "DeltaAggregatedResources"


@contextlib.asynccontextmanager
async def serving(config_dir: Path) -> AsyncIterator[Runtime]:
    """Run a Runtime on ``config_dir`` until the block ends; quick debounces, no heap freezing."""
    settings = Settings(
        config_dir=config_dir,
        xds_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        debounce_after=0.01,
        file_debounce_ms=10,
        xds_send_timeout=5.0,
        cache_assert=True,
        gc_freeze=False,
        shutdown_grace=1.0,
    )
    async with running(settings) as rt:
        yield rt


async def get_json(rt: Runtime, path: str) -> Any:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{rt.http.port}{path}") as resp:
        assert resp.status == 200, (path, resp.status)
        return await resp.json()


async def ready(rt: Runtime) -> bool:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{rt.http.port}/ready") as resp:
        return resp.status == 200


def with_node(req: Any, node_id: str, labels: dict[str, str] | None = None) -> Any:
    req.node.id = node_id
    if labels:
        struct = struct_pb2.Struct()
        struct.update(labels)
        req.node.metadata.fields["LABELS"].struct_value.CopyFrom(struct)
    return req


class Client:
    """One client stream: send requests, read responses with a timeout (a read that times out stays
    pending: cancelling it would cancel the whole call)."""

    def __init__(self, channel: grpc.aio.Channel, delta: bool) -> None:
        req_type = discovery_pb2.DeltaDiscoveryRequest if delta else discovery_pb2.DiscoveryRequest
        resp_type = discovery_pb2.DeltaDiscoveryResponse if delta else discovery_pb2.DiscoveryResponse
        self.call = channel.stream_stream(
            DELTA if delta else SOTW,
            request_serializer=req_type.SerializeToString,
            response_deserializer=resp_type.FromString,
        )()
        self._read: asyncio.Future[Any] | None = None

    async def send(self, req: Any) -> None:
        await self.call.write(req)

    async def recv(self, timeout: float = 10) -> Any:
        self._read = self._read or asyncio.ensure_future(self.call.read())
        done, _ = await asyncio.wait({self._read}, timeout=timeout)
        assert done, f"no response within {timeout}s"
        read, self._read = self._read, None
        return read.result()

    async def recv_resources(self, count: int, timeout: float = 120) -> list[Any]:
        """The responses that together bring ``count`` resources: an answer for more names
        than ``limits.ANSWER_PART`` comes in parts."""
        responses, received = [], 0
        while received < count:
            responses.append(await self.recv(timeout))
            received += len(responses[-1].resources)
        assert received == count, f"{received} resources where {count} were asked"
        return responses

    async def status(self, timeout: float = 10) -> grpc.aio.AioRpcError:
        """Read until the server ends the stream; the error it ended it with."""
        while True:
            try:
                await self.recv(timeout)
            except grpc.aio.AioRpcError as e:
                return e

    def close(self) -> None:
        self.call.cancel()


async def ended_by_server(port: int, delta: bool, setup: list[tuple[Any, bool]], flood: list[Any]) -> GRPCError:
    """Send ``setup`` (each request, and whether to wait for its response), then ``flood`` while
    draining responses, until the server ends the stream; the status it ended it with.

    grpclib, not grpc.aio: a grpc.aio write that loses the race with the server's status turns
    the call's status into a client-side INTERNAL, while grpclib reports what the server sent."""
    method = DELTA if delta else SOTW
    req_type = discovery_pb2.DeltaDiscoveryRequest if delta else discovery_pb2.DiscoveryRequest
    resp_type = discovery_pb2.DeltaDiscoveryResponse if delta else discovery_pb2.DiscoveryResponse
    channel = Channel("127.0.0.1", port)
    try:
        async with channel.request(method, Cardinality.STREAM_STREAM, req_type, resp_type) as stream:
            for req, answered in setup:
                await stream.send_message(req)
                if answered:
                    assert await asyncio.wait_for(stream.recv_message(), 10) is not None

            async def drain() -> None:
                while await stream.recv_message() is not None:
                    pass

            reader = asyncio.ensure_future(drain())
            with contextlib.suppress(StreamTerminatedError):
                for req in flood:
                    await stream.send_message(req)
                await stream.end()
            await asyncio.wait_for(asyncio.wait([reader]), 20)
            ended = None if reader.cancelled() else reader.exception()
            if isinstance(ended, GRPCError):
                return ended  # a trailers-only status: no response came before it
            # otherwise the reset that ended it, or the end of the stream: the status follows on leaving
    except GRPCError as e:
        return e
    finally:
        channel.close()
    raise AssertionError("the server did not end the stream")
