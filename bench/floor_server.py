"""The transport floor: a trivial ADS server (Delta and SotW) that sends the bytes pilotfish sent,
pre-serialized, with no generation at all. Run by bench/xds_load.py as its own process:
    python -m bench.floor_server --recording FILE --address 127.0.0.1:PORT

Each stream is answered from its namespace's recording (bench/recording.py): the first request
of each type gets that namespace's recorded first response of the type, byte for byte (nonces
included); ACKs and subscription changes get nothing. ``/bench.Floor/Push`` (unary, the request is
the scenario name as UTF-8) queues, on every open stream, the responses its namespace received
in that push, and returns once they are queued; the load generator calls it where it would
rewrite a config file. Prints "serving" on stdout once it listens; SIGTERM stops it.

gRPC options are pilotfish's, plus a pending-call limit above the number of sidecars: grpc
core's default (``grpc.server.max_pending_requests`` 1,000) cancels calls that arrive in a burst
before the server has taken them up, which the floor is not meant to measure.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import uvloop
from envoy.service.discovery.v3 import discovery_pb2

from bench.recording import Recording

_SERVICE = "envoy.service.discovery.v3.AggregatedDiscoveryService"
CONTROL_SERVICE = "bench.Floor"
CONTROL_METHOD = f"/{CONTROL_SERVICE}/Push"
OPTIONS = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 15_000),
    ("grpc.max_receive_message_length", 4 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.server.max_pending_requests", 100_000),
    ("grpc.server.max_pending_requests_hard_limit", 100_000),
]


@dataclass(eq=False)
class _Stream:
    namespace: str = ""
    outbox: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)


class FloorServer:
    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.streams: set[_Stream] = set()

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        ads = grpc.method_handlers_generic_handler(
            _SERVICE,
            {
                "DeltaAggregatedResources": grpc.stream_stream_rpc_method_handler(
                    self._serve, request_deserializer=discovery_pb2.DeltaDiscoveryRequest.FromString
                ),
                "StreamAggregatedResources": grpc.stream_stream_rpc_method_handler(
                    self._serve, request_deserializer=discovery_pb2.DiscoveryRequest.FromString
                ),
            },
        )
        control = grpc.method_handlers_generic_handler(
            CONTROL_SERVICE, {"Push": grpc.unary_unary_rpc_method_handler(self._push)}
        )
        return [ads, control]

    async def _serve(self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, bytes]) -> None:
        stream = _Stream()
        self.streams.add(stream)
        reader = asyncio.create_task(self._read(requests, stream))
        try:
            while (body := await stream.outbox.get()) is not None:
                await context.write(body)
        finally:
            self.streams.discard(stream)
            reader.cancel()

    async def _read(self, requests: AsyncIterator[Any], stream: _Stream) -> None:
        answered: set[str] = set()
        try:
            async for req in requests:
                if not stream.namespace:
                    stream.namespace = _namespace(req.node.id)
                if req.type_url in answered:
                    continue  # an ACK or a subscription change
                answered.add(req.type_url)
                body = self.recording.initial_for(stream.namespace).get(req.type_url)
                if body is not None:
                    stream.outbox.put_nowait(body)
        finally:
            stream.outbox.put_nowait(None)

    async def _push(self, request: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        scenario = request.decode()
        for stream in self.streams:
            for body in self.recording.push_for(scenario, stream.namespace):
                stream.outbox.put_nowait(body)
        return b""


def _namespace(node_id: str) -> str:
    """NAMESPACE from ``sidecar~IP~POD.NAMESPACE~DOMAIN``."""
    return node_id.split("~")[2].rsplit(".", 1)[-1]


async def serve(recording: Recording, address: str, ready: Callable[[], None]) -> None:
    server = grpc.aio.server(options=OPTIONS)
    server.add_generic_rpc_handlers(FloorServer(recording).handlers())
    if server.add_insecure_port(address) == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    ready()
    await stop.wait()
    await server.stop(1.0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recording", type=Path, required=True)
    parser.add_argument("--address", required=True)
    args = parser.parse_args()
    recording = Recording.load(args.recording)
    uvloop.run(serve(recording, args.address, lambda: print("serving", file=sys.stdout, flush=True)))


if __name__ == "__main__":
    main()
