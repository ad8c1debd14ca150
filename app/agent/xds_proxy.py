"""The agent's xDS proxy: Envoy's ADS stream (SotW or Delta) on a local Unix socket, carried to
the control plane over one upstream stream of the same kind (pilot-agent's xds_proxy.go), with
the agent's own NDS subscription on that upstream.

Envoy's requests, ACKs and NACKs go upstream unchanged (the first message of every upstream
stream carries Envoy's node, which Envoy sends only once); responses come back unchanged, except
NameTables, which the agent keeps for its DNS proxy and ACKs itself. When the upstream stream
breaks (a control-plane restart, a dropped connection) Envoy's stream stays up: the agent
reconnects with jittered backoff and replays Envoy's interest (``interest.py``). grpclib is
the transport on both sides (DESIGN §2: the agent needs no gRPC C-core).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from grpclib.client import Channel
from grpclib.client import Stream as ClientStream
from grpclib.const import Cardinality, Handler
from grpclib.server import Stream as ServerStream

from app.agent.interest import DeltaInterest, SotwInterest
from app.api.nds import NameTable
from app.supervise import Backoff
from app.telemetry.agent import CANCELLED, ERROR, AgentMetrics
from app.xds.type_urls import NAME_TABLE

logger = logging.getLogger("pilotfish.agent")

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/"
SOTW_METHOD = ADS + "StreamAggregatedResources"
DELTA_METHOD = ADS + "DeltaAggregatedResources"

Req = TypeVar("Req", DiscoveryRequest, DeltaDiscoveryRequest)
Resp = TypeVar("Resp", DiscoveryResponse, DeltaDiscoveryResponse)


class _Mode(Generic[Req, Resp]):
    """What differs between SotW and Delta: message types, interest, how a table is ACKed."""

    def __init__(self, delta: bool) -> None:
        self.delta = delta
        self.method = DELTA_METHOD if delta else SOTW_METHOD
        self.request: type[Any] = DeltaDiscoveryRequest if delta else DiscoveryRequest
        self.response: type[Any] = DeltaDiscoveryResponse if delta else DiscoveryResponse
        self.interest: DeltaInterest | SotwInterest = DeltaInterest() if delta else SotwInterest()

    def name_table_request(self) -> Any:
        return self.request(type_url=NAME_TABLE)

    def ack(self, resp: Any) -> Any:
        if self.delta:
            return DeltaDiscoveryRequest(type_url=resp.type_url, response_nonce=resp.nonce)
        return DiscoveryRequest(type_url=resp.type_url, version_info=resp.version_info, response_nonce=resp.nonce)

    def name_table(self, resp: Any) -> NameTable | None:
        bodies = [r.resource for r in resp.resources] if self.delta else list(resp.resources)
        return NameTable.FromString(bodies[0].value) if bodies else None


class XdsProxy:
    """The ADS service the local Envoy connects to; one upstream stream per Envoy stream."""

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        on_name_table: Callable[[NameTable], None] | None = None,
        backoff: Callable[[], Backoff] = Backoff,
        metrics: AgentMetrics | None = None,
        tls: ssl.SSLContext | None = None,
        metadata: Callable[[], dict[str, str]] = dict,
    ) -> None:
        """``tls``: the context for a secure upstream (the mesh root; the workload certificate
        is reloaded into it as it rotates); ``metadata`` what every upstream stream sends (the
        pod's token)."""
        self._host, self._port = upstream
        self._tls = tls
        self._metadata = metadata
        self._on_name_table = on_name_table
        self._backoff = backoff
        self.metrics = metrics or AgentMetrics()
        self.upstream_connected = asyncio.Event()  # some Envoy stream has a live upstream
        self.upstream_connects = 0  # upstream streams opened (first connect and reconnects)

    def __mapping__(self) -> dict[str, Handler]:
        stream = Cardinality.STREAM_STREAM
        return {
            SOTW_METHOD: Handler(self._sotw, stream, DiscoveryRequest, DiscoveryResponse),
            DELTA_METHOD: Handler(self._delta, stream, DeltaDiscoveryRequest, DeltaDiscoveryResponse),
        }

    async def _sotw(self, stream: ServerStream[DiscoveryRequest, DiscoveryResponse]) -> None:
        await self._serve(stream, _Mode(delta=False))

    async def _delta(self, stream: ServerStream[DeltaDiscoveryRequest, DeltaDiscoveryResponse]) -> None:
        await self._serve(stream, _Mode(delta=True))

    async def _serve(self, envoy: ServerStream[Any, Any], mode: _Mode[Any, Any]) -> None:
        link = _Link(envoy, mode, self)
        async with Channel(self._host, self._port, ssl=self._tls) as channel:
            upstream = asyncio.create_task(link.upstream(channel))
            try:
                await link.downstream()
            except asyncio.CancelledError:
                self.metrics.envoy_terminations.add(type=CANCELLED)
                raise
            except Exception:
                self.metrics.envoy_terminations.add(type=ERROR)
                raise
            finally:
                upstream.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await upstream


class _Link:
    """One Envoy stream and the upstream streams that carry it, one after another."""

    def __init__(self, envoy: ServerStream[Any, Any], mode: _Mode[Any, Any], proxy: XdsProxy) -> None:
        self.envoy = envoy
        self.mode = mode
        self.proxy = proxy
        self.node: Any = None
        self.first = asyncio.Event()  # Envoy's first request (and node) arrived
        self.current: ClientStream[Any, Any] | None = None
        self.send_lock = asyncio.Lock()  # replay and pass-through never interleave upstream
        self.sent_node = False  # whether the current upstream stream was given the node

    async def downstream(self) -> None:
        """Envoy's requests: remembered, and passed upstream while there is a stream."""
        while (req := await self.envoy.recv_message()) is not None:
            self.proxy.metrics.requests.add()
            if self.node is None and req.HasField("node"):
                self.node = req.node
            async with self.send_lock:
                # under the lock: a request is either in the replay or sent after it, never both
                self.mode.interest.on_request(req)
                self.first.set()
                if self.current is not None:
                    with contextlib.suppress(Exception):  # a broken upstream: the replay covers it
                        await self.current.send_message(self._with_node(req))

    def _with_node(self, req: Any) -> Any:
        if self.sent_node or self.node is None:
            return req
        self.sent_node = True
        out = self.mode.request()
        out.CopyFrom(req)
        out.node.CopyFrom(self.node)
        return out

    async def upstream(self, channel: Channel) -> None:
        """Open, replay, relay; on a break, back off and do it again."""
        await self.first.wait()
        backoff = self.proxy._backoff()
        metrics = self.proxy.metrics
        while True:
            opened = False
            try:
                method, request, response = self.mode.method, self.mode.request, self.mode.response
                metadata = self.proxy._metadata()
                async with channel.request(
                    method, Cardinality.STREAM_STREAM, request, response, metadata=metadata
                ) as stream:
                    await self._open(stream)
                    opened = True
                    metrics.upstream_connected.add(1)
                    backoff.reset()
                    await self._relay(stream)
                logger.warning("xDS upstream stream closed by the control plane; reconnecting")
                metrics.upstream_terminations.add(type=ERROR)
            except asyncio.CancelledError:
                if opened:
                    metrics.upstream_terminations.add(type=CANCELLED)
                raise
            except Exception as e:  # refused, reset, a gRPC status: all mean reconnect
                logger.warning("xDS upstream %s:%d: %s; reconnecting", self.proxy._host, self.proxy._port, e)
                if opened:
                    metrics.upstream_terminations.add(type=ERROR)
                else:
                    metrics.connection_failures.add()
            finally:
                self.current = None
                if opened:
                    metrics.upstream_connected.add(-1)
            await asyncio.sleep(backoff.delay())

    async def _open(self, stream: ClientStream[Any, Any]) -> None:
        async with self.send_lock:
            self.sent_node = False
            for req in self.mode.interest.replay():
                await stream.send_message(self._with_node(req))
            if self.proxy._on_name_table is not None:
                await stream.send_message(self._with_node(self.mode.name_table_request()))
            self.current = stream
        self.proxy.upstream_connects += 1
        self.proxy.upstream_connected.set()

    async def _relay(self, stream: ClientStream[Any, Any]) -> None:
        while (resp := await stream.recv_message()) is not None:
            self.proxy.metrics.responses.add()
            if resp.type_url == NAME_TABLE:
                table = self.mode.name_table(resp)
                if table is not None and self.proxy._on_name_table is not None:
                    self.proxy._on_name_table(table)
                async with self.send_lock:
                    await stream.send_message(self.mode.ack(resp))
                continue
            if isinstance(self.mode.interest, DeltaInterest):
                self.mode.interest.on_response(resp)
            await self.envoy.send_message(resp)
