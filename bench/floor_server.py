"""The transport floor: a trivial ADS server (Delta and SotW) that sends the bytes pilotfish sent,
pre-serialized, with no generation at all. Run by bench/xds_load.py as its own process:
    python -m bench.floor_server --recording FILE --address 127.0.0.1:PORT

Each stream is answered from its namespace's recording (bench/recording.py): the first request
of each type gets that namespace's recorded first response of the type, byte for byte (nonces
included); ACKs and subscription changes get nothing. ``/bench.Floor/Push`` (unary, the request is
the scenario name as UTF-8) queues, on every open stream, the responses its namespace received
in that push, and returns once they are queued; the load generator calls it where it would
rewrite a config file. Prints "serving" on stdout once it listens; SIGTERM stops it.

``--processes N`` serves the address from N processes (grpc's SO_REUSEPORT: the kernel spreads the
connections); a Push any of them is asked for is relayed to the others (``/bench.Floor/Relay``)
and returns once all have queued it. It answers whether serving from more processes would shorten
a fan-out on this machine (issue 26): it does not, while the load client holds the other core.

gRPC options are pilotfish's, plus a pending-call limit above the number of sidecars: grpc
core's default (``grpc.server.max_pending_requests`` 1,000) cancels calls that arrive in a burst
before the server has taken them up, which the floor is not meant to measure.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
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
_RELAY_METHOD = f"/{CONTROL_SERVICE}/Relay"  # a push another process of the floor was asked for
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
    def __init__(self, recording: Recording, siblings: Sequence[str] = ()) -> None:
        self.recording = recording
        self.streams: set[_Stream] = set()
        self.siblings = siblings  # control addresses of the other processes serving the same port

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
            CONTROL_SERVICE,
            {
                "Push": grpc.unary_unary_rpc_method_handler(self._push),
                "Relay": grpc.unary_unary_rpc_method_handler(self._queue),
            },
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

    async def _push(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        relayed = [asyncio.ensure_future(_relay(address, request)) for address in self.siblings]
        await self._queue(request, context)
        await asyncio.gather(*relayed)
        return b""

    async def _queue(self, request: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        scenario = request.decode()
        for stream in self.streams:
            for body in self.recording.push_for(scenario, stream.namespace):
                stream.outbox.put_nowait(body)
        return b""


async def _relay(address: str, request: bytes) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        await channel.unary_unary(_RELAY_METHOD)(request)


def _namespace(node_id: str) -> str:
    """NAMESPACE from ``sidecar~IP~POD.NAMESPACE~DOMAIN``."""
    return node_id.split("~")[2].rsplit(".", 1)[-1]


async def serve(
    recording: Recording, addresses: Sequence[str], ready: Callable[[], None], siblings: Sequence[str] = ()
) -> None:
    server = grpc.aio.server(options=OPTIONS)
    server.add_generic_rpc_handlers(FloorServer(recording, siblings).handlers())
    for address in addresses:
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
    parser.add_argument("--processes", type=int, default=1, help="processes serving the address (SO_REUSEPORT)")
    parser.add_argument("--controls", default="", help=argparse.SUPPRESS)  # a child's: every process's control address
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    recording = Recording.load(args.recording)
    controls = args.controls.split(",") if args.controls else []
    children: list[subprocess.Popen[bytes]] = []
    if args.processes > 1 and not controls:
        controls = [f"127.0.0.1:{_free_port()}" for _ in range(args.processes)]
        for index in range(1, args.processes):
            command = [sys.executable, "-m", "bench.floor_server", "--recording", str(args.recording)]
            command += ["--address", args.address, "--controls", ",".join(controls), "--index", str(index)]
            child = subprocess.Popen(command, stdout=subprocess.PIPE)
            assert child.stdout is not None
            if child.stdout.readline().strip() != b"serving":
                raise RuntimeError("a floor process did not start")
            children.append(child)
    own = [controls[args.index]] if controls else []
    siblings = [c for i, c in enumerate(controls) if i != args.index]
    try:
        ready = lambda: print("serving", file=sys.stdout, flush=True)  # noqa: E731
        uvloop.run(serve(recording, [args.address, *own], ready, siblings))
    finally:
        for child in children:
            child.send_signal(signal.SIGTERM)
            child.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


if __name__ == "__main__":
    main()
