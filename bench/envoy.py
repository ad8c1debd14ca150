"""One simulated Envoy sidecar on the wire: its gRPC channel, its ADS stream, and what it received.

Like Envoy, a sidecar has one HTTP/2 connection (one grpc.aio channel with a local subchannel
pool, so 2,000 channels are 2,000 TCP connections) and one ADS stream on it at a time. When
the stream ends (an error, or the server closing it) the failure is counted with its status
and the number of responses the stream had delivered, and the sidecar reconnects after a
jittered exponential backoff (Envoy's 500 ms base, 30 s cap), keeping what it holds. A churn
(``reconnect()``) drops the connection and comes back at once on a new one.

Every response is ACKed (and followed by what it makes Envoy ask for, see app/xds/client.py) before
it is logged as an ``Event`` stamped with the time those requests were written: the proxy's
"last ACK" of a push is its last event in the push's window.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from envoy.service.discovery.v3 import discovery_pb2

from app.xds.client import AdsClient, Inspector, ads_client, node
from bench.mesh import SidecarIdentity

_ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/"
METHODS = {"delta": _ADS + "DeltaAggregatedResources", "sotw": _ADS + "StreamAggregatedResources"}
_RESPONSES = {"delta": discovery_pb2.DeltaDiscoveryResponse, "sotw": discovery_pb2.DiscoveryResponse}
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.use_local_subchannel_pool", 1),  # one connection per sidecar, as Envoy has
]
BACKOFF_BASE = 0.5
BACKOFF_MAX = 30.0


@dataclass(frozen=True, slots=True)
class Event:
    at: float  # time.monotonic() once the ACK and follow-up requests were written
    type_url: str
    size: int  # the serialized response, bytes
    resources: int
    removed: int


@dataclass(slots=True)
class Activity:
    """Shared by a fleet: when any sidecar last received a response (for quiet periods)."""

    last: float = 0.0


Recorder = Callable[["SimulatedEnvoy", bytes], None]


@dataclass(eq=False)
class SimulatedEnvoy:
    identity: SidecarIdentity
    protocol: str
    target: str
    inspector: Inspector
    activity: Activity
    recorder: Recorder | None = None  # sees every serialized response (the floor's recording)
    events: list[Event] = field(default_factory=list)
    complete_at: float | None = None  # when it first held CDS, EDS, LDS and RDS
    stream_errors: list[str] = field(default_factory=list)  # "CODE 'details' after N responses"
    reconnects: int = 0  # streams opened after the first one, churn included
    _restart: bool = False
    _new_connection: bool = True
    _call: Any = None

    def __post_init__(self) -> None:
        identity = self.identity
        self.ads: AdsClient = ads_client(
            self.protocol, node(identity.node_id, identity.metadata()), self.inspector, identity.agent
        )
        response = _RESPONSES[self.protocol]
        self._decode: Callable[[bytes], tuple[bytes, Any]] = lambda data: (data, response.FromString(data))

    async def run(self) -> None:
        """Hold a stream until cancelled, reconnecting as Envoy does."""
        failures = 0
        channel = self._open()
        try:
            while True:
                responses, error = await self._stream(channel)
                self.reconnects += 1
                if self._restart:
                    self._restart = False
                    if self._new_connection:
                        await channel.close()
                        channel = self._open()
                    continue
                self.stream_errors.append(f"{error} after {responses} responses")
                failures = 0 if responses else failures + 1
                await asyncio.sleep(random.uniform(0, min(BACKOFF_MAX, BACKOFF_BASE * 2**failures)))
        finally:
            await channel.close()

    def reconnect(self, new_connection: bool = True) -> None:
        """Churn: drop the connection (or only the stream) now and reconnect at once, presenting
        what is held."""
        if self._call is not None:
            self._restart = True
            self._new_connection = new_connection
            self._call.cancel()

    def _open(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(self.target, options=CHANNEL_OPTIONS)

    async def _stream(self, channel: grpc.aio.Channel) -> tuple[int, str]:
        """One stream, until it ends: (responses it delivered, how it ended)."""
        call = channel.stream_stream(
            METHODS[self.protocol],
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=self._decode,
        )()
        self._call = call
        responses = 0
        try:
            for request in self.ads.start():
                await call.write(request)
            while await self._receive(call):
                responses += 1
            return responses, "OK (the server ended the stream)"
        except (grpc.aio.AioRpcError, asyncio.CancelledError, asyncio.InvalidStateError):
            # InvalidStateError: a write after the server ended the call (istiod refuses a stream
            # over its request rate limit as soon as it opens); the status says why
            if _being_cancelled():
                call.cancel()
                raise
            if self._restart:
                return responses, ""
            # grpc python reports a write that raced the server's end of the call as
            # INTERNAL 'Internal error from Core', whatever status the server sent
            return responses, f"{(await call.code()).name} {await call.details()!r}"
        finally:
            self._call = None

    async def _receive(self, call: Any) -> bool:
        """Read one response, ACK it, log it; False at the end of the stream. Nothing of the
        response outlives this call: an idle sidecar must not keep its last response alive."""
        item = await call.read()
        if item is grpc.aio.EOF:
            return False
        raw, resp = item
        received, requests = self.ads.on_response(resp)
        for request in requests:
            await call.write(request)
        now = time.monotonic()
        self.events.append(Event(now, received.type_url, len(raw), received.resources, received.removed))
        self.activity.last = now
        if self.complete_at is None and self.ads.complete:
            self.complete_at = now
        if self.recorder is not None:
            self.recorder(self, raw)
        return True


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
