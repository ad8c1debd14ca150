"""The gRPC edge: ADS and the per-type discovery services on grpc.aio, stream lifecycle only.

Every stream is one coroutine that owns one ``Connection``. A reader task feeds requests
into the stream's inbox; pushes from the PushQueue workers arrive in the same inbox, so
requests and pushes are handled one at a time, in arrival order, by the stream coroutine. The
stream coroutine itself tells the observer what a push wrote (``Stream.settle``) before it takes
the next inbox item: a client's answer may be queued before the write that carried the response
returns, and must never reach the observer before the push it answers.
The per-type services (CDS, EDS, LDS, RDS; SotW and Delta) are the same handler with the
session restricted to one type. A bad node or a request no client should send (too many
types, an undecodable request: app/xds/limits.py) ends that stream with INVALID_ARGUMENT, and a
stream past what it may make the server hold or do (its subscribed names' bytes, answers that
generate a whole type for nothing) with RESOURCE_EXHAUSTED; the server and the other streams
go on (DESIGN §5). A stale or unknown nonce, a repeated ACK and a subscription change are
served as istiod serves them: they cost what they name (app/xds/limits.py says what is bounded).
Why a stream ends is a ``StreamError`` (app/xds/errors.py) naming its gRPC status, mapped to
grpc's in one place (``grpc_status``). What a stream serves comes from the injected
``ServedSource`` (app/xds/source.py): the server never reads what a client or a push is.

A client that stops reading holds back nothing but itself: what a stream buffers is bounded both
ways (the reader stops taking requests while ``MAX_QUEUED_REQUESTS``, or ``MAX_QUEUED_BYTES`` of
them, wait, so HTTP/2 flow control holds the client back; a write waits for the transport, so at
most one response is in flight and a client is answered no faster than it reads), and a write that
does not complete within the send timeout (istiod PILOT_XDS_SEND_TIMEOUT) gives the stream up,
releasing the push worker that waits for it; the call ends with DEADLINE_EXCEEDED once that write
returns (the client reads, or leaves). Writes go through the stream's ``CallWriter``: one at a
time, never cancelled, so gRPC core never sees two operations of a kind on one call
(GRPC_CALL_ERROR_TOO_MANY_OPERATIONS). Large responses (a connecting proxy's whole set of a type)
wait for one of ``MAX_LARGE_WRITES`` slots before they are encoded and written, which paces a
connect storm's first responses and bounds the memory they hold; requests, ACKs and small pushes
never wait, and a write past the send timeout gives its slot back.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

import grpc
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf.message import DecodeError, Message

from app.errors import ListenError
from app.security.authn import Caller, SecretAccess, SpiffeId
from app.security.server import Authenticator
from app.xds.connection import Connection, Session
from app.xds.delta import DeltaSession
from app.xds.errors import (
    CallEnded,
    DebugUnauthenticated,
    ProtocolError,
    Refused,
    SendTimeout,
    Status,
    StreamError,
)
from app.xds.limits import IdleAnswers, cut_error_detail
from app.xds.observe import StreamObserver, XdsMetrics
from app.xds.resource import encode
from app.xds.response import DeltaResponse, SotwResponse, payload
from app.xds.sotw import SotwSession
from app.xds.source import C, P, ServedSource
from app.xds.type_urls import CLUSTER, DEBUG_PREFIX, ENDPOINT, LISTENER, ROUTE, SECRET, SHORT_NAMES
from app.xds.watch import NameSets, Outcome, RequestKind, counter_nonces

logger = logging.getLogger(__name__)

MAX_REFUSALS = 100


AnyConnection = Connection[Any, Any, Any, Any]
AnyResponse = DeltaResponse | SotwResponse

# service -> (SotW method, Delta method, types it serves; None: any, as ADS)
SERVICES: dict[str, tuple[str, str, frozenset[str] | None]] = {
    "envoy.service.discovery.v3.AggregatedDiscoveryService": (
        "StreamAggregatedResources",
        "DeltaAggregatedResources",
        None,
    ),
    "envoy.service.cluster.v3.ClusterDiscoveryService": ("StreamClusters", "DeltaClusters", frozenset({CLUSTER})),
    "envoy.service.endpoint.v3.EndpointDiscoveryService": ("StreamEndpoints", "DeltaEndpoints", frozenset({ENDPOINT})),
    "envoy.service.listener.v3.ListenerDiscoveryService": ("StreamListeners", "DeltaListeners", frozenset({LISTENER})),
    "envoy.service.route.v3.RouteDiscoveryService": ("StreamRoutes", "DeltaRoutes", frozenset({ROUTE})),
}


@dataclass(slots=True)
class _Push(Generic[P]):
    request: P
    done: asyncio.Future[None]
    dequeued: float  # when a push worker took it (monotonic)
    sent: list[AnyResponse] = field(default_factory=list)  # what the push wrote
    writing: AnyResponse | None = None  # handed to gRPC, the write not returned yet


_EOF = object()

# requests a stream takes ahead of handling them; Envoy sends about one per response it gets
MAX_QUEUED_REQUESTS = 64
# and their bytes: a request may be 4 MiB (and takes about three times that parsed), so 64 of
# them let a client that stops reading make the server hold 860 MB per stream until its send
# timeout; past this the reader waits for the stream to catch up (istiod's request channel
# holds one request)
MAX_QUEUED_BYTES = 4 * 1024 * 1024
# a response this many resources long (a connecting proxy's whole CDS, EDS or LDS) is large:
# at most MAX_LARGE_WRITES are in the transport at once, so a connect storm of thousands holds
# that many encoded responses in memory, not thousands; pushes of what changed are small
LARGE_RESPONSE = 100
MAX_LARGE_WRITES = 32


# a status message longer than this is cut: the client must be able to read it
MAX_STATUS_MESSAGE = 300


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A request that did not parse (bad protobuf, invalid UTF-8 in a string field): the stream
    ends with INVALID_ARGUMENT instead of an exception inside gRPC's reader."""

    reason: str


def _parser(message: type[Any]) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            req = message.FromString(data)
        except DecodeError as e:
            return Undecodable(str(e)[:120])
        cut_error_detail(req)  # before the request waits in the inbox
        return req

    return parse


def grpc_status(status: Status) -> grpc.StatusCode:
    """The gRPC status code of a stream error's ``status`` (app/xds/errors.py): the one mapping
    of the two."""
    return grpc.StatusCode[status.value]


@dataclass(slots=True, eq=False)
class CallWriter:
    """The one way a stream writes to its call. gRPC core takes one write (send-message batch)
    per call at a time and a second fails with GRPC_CALL_ERROR_TOO_MANY_OPERATIONS; grpc.aio
    cannot take a write back once core has it: cancelling the awaiting coroutine leaves the batch
    in core, and the next write, or a status sent with the initial metadata a first write still
    holds, is the second operation. So writes go through ``lock``, one at a time, and are never
    cancelled by a timeout: the send timeout is a timer that gives up on the stream (releases
    its pushes and its large-write slot) while the write itself waits for the client or for the
    call to end. ``in_flight`` stays set when a write never returned (its coroutine was
    cancelled: the call is ending), and then nothing more is written, status included."""

    context: Any  # grpc.aio.ServicerContext
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    in_flight: bool = False
    expired: bool = False  # the send timeout passed during a write
    on_expire: Callable[[], None] | None = None  # told once, when the send timeout passes


# istiod's debug types (``istio.io/debug/*``): (type URL, resource names, the caller's
# identities) -> the resources (name, message) and the ControlPlane identifier to send ("" none)
DebugAnswers = Callable[[str, Sequence[str], Sequence[str]], tuple[Sequence[tuple[str, Message]], str]]


@dataclass(slots=True, eq=False)  # identity: the push queue keys on it
class Stream(Generic[C, P]):
    """A live stream as the push workers see it: its connection and its inbox."""

    connection: Connection[C, P, Any, Any]
    inbox: asyncio.Queue[object] = field(default_factory=asyncio.Queue)
    closed: bool = False
    identity: str = ""  # the secure port's authenticated identities; "" on the plaintext port
    verified: SpiffeId | None = None  # the identity that matched the client (istiod VerifiedIdentity)
    observer: StreamObserver[P] | None = None  # told what each push wrote (app/xds/observe.py)
    writing: _Push[P] | None = None  # the push whose responses are being written

    async def push(self, request: P, dequeued: float | None = None) -> list[AnyResponse]:
        """Hand a push to the stream coroutine and wait until its responses are written; returns
        them (none: nothing changed for this proxy, or the stream closed). ``dequeued``: when
        the push worker took it (default now). The observer hears of it from the stream (see
        ``settle``), not from the caller."""
        taken = time.monotonic() if dequeued is None else dequeued
        item = _Push(request, asyncio.get_running_loop().create_future(), taken)
        if self.closed:
            self.settle(item)
            return []
        self.inbox.put_nowait(item)
        await item.done
        return item.sent

    def settle(self, item: _Push[P]) -> None:
        """The stream is done with a push: the observer is told what it wrote, then the push
        worker is released. The stream coroutine calls this before it takes the next item of its
        inbox, so the observer knows what was sent before any answer to it is processed (an
        answer can be in the inbox before the write that carried the response returns)."""
        if item.done.done():
            return
        try:
            if self.observer is not None and item.request.traces:
                conn = self.connection
                # a response the stream was given up (or ended) under is part of the push as the
                # observer sees it: it was meant for the proxy, and no answer to it will come
                sent = item.sent if item.writing is None else [*item.sent, item.writing]
                self.observer.proxy_pushed(conn.id, conn.client.id, item.request, item.dequeued, sent)
        finally:
            item.done.set_result(None)


class XdsServer(Generic[C, P]):
    """Serves the streams of ``source``'s clients; generic over what the source makes of a node
    (``C``) and what a push request is (``P``), neither of which it reads beyond app/xds/source.py's
    protocols."""

    def __init__(
        self,
        source: ServedSource[C, P],
        on_disconnect: Callable[[Stream[C, P]], None],
        *,
        metrics: XdsMetrics,
        on_connect: Callable[[Stream[C, P]], None] | None = None,
        send_timeout: float = 0.0,
        max_large_writes: int = MAX_LARGE_WRITES,
        observer: StreamObserver[P] | None = None,
        clock: Callable[[], float] = time.monotonic,
        authenticator: Authenticator | None = None,
        extra_handlers: Sequence[grpc.GenericRpcHandler] = (),
        debug: DebugAnswers | None = None,
    ) -> None:
        """``send_timeout`` seconds a response may wait for the transport (0: forever);
        ``metrics`` count what streams do; ``observer`` is told of the clients' answers
        (ACK/NACK) and of closed streams;
        ``clock`` paces each stream's IdleAnswers; ``authenticator`` tells who is behind a
        stream that came through the secure port (the others are not authenticated, as on
        istiod's :15010); ``extra_handlers`` are served too (the certificate service);
        ``debug`` answers istioctl's debug types (without it they get no resources)."""
        self._source = source
        self._debug = debug
        # both may be given later, before start() (a CA read from the API server comes after
        # the constructor)
        self.authenticator = authenticator
        self.extra_handlers = tuple(extra_handlers)
        # asks the API server whether a proxy's service account may read Secrets (istiod
        # Authorize) before credentialName key pairs are generated for it; None: nobody is asked
        self.secret_access: SecretAccess | None = None
        # the latest refusals on the secure port, newest last (/debug/syncz)
        self.refused: collections.deque[dict[str, str]] = collections.deque(maxlen=MAX_REFUSALS)
        self._clock = clock
        self._on_disconnect = on_disconnect
        self._on_connect = on_connect
        self._send_timeout = send_timeout
        self._large_writes = asyncio.Semaphore(max_large_writes)
        self._ids = itertools.count(1)
        self._name_sets = NameSets()  # shared by every stream's watches
        self._metrics = metrics
        self._observer = observer
        self.streams: dict[str, Stream[C, P]] = {}
        self._servers: list[grpc.aio.Server] = []
        self.port = 0

    def handlers(self, *, secure: bool = False) -> list[grpc.GenericRpcHandler]:
        """The xDS services; ``secure`` ones serve the secure port's relay (authenticated)."""
        out = []
        for service, (sotw_method, delta_method, types) in SERVICES.items():
            out.append(
                grpc.method_handlers_generic_handler(
                    service,
                    {
                        sotw_method: grpc.stream_stream_rpc_method_handler(
                            self._handler(SotwSession, types, secure),
                            request_deserializer=_parser(discovery_pb2.DiscoveryRequest),
                            response_serializer=payload,
                        ),
                        delta_method: grpc.stream_stream_rpc_method_handler(
                            self._handler(DeltaSession, types, secure),
                            request_deserializer=_parser(discovery_pb2.DeltaDiscoveryRequest),
                            response_serializer=payload,
                        ),
                    },
                )
            )
        return out

    async def start(self, address: str, *, inner: bool = False) -> int:
        """Serve plaintext on ``address`` ("" for none) and, with ``inner``, the secure port's
        relay on a loopback port of a server of its own, where every call is authenticated and
        the extra handlers (the certificate service) are; returns that port (0 without). Two
        servers, so a call to the plaintext port can never pass for a relayed one."""
        # keepalive as istiod's: clients may ping every 30s; big messages for large meshes
        options = [
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.http2.min_ping_interval_without_data_ms", 15_000),
            ("grpc.max_receive_message_length", 4 * 1024 * 1024),
            ("grpc.max_send_message_length", 256 * 1024 * 1024),
            # a connect storm of thousands of proxies: gRPC core's defaults reject calls past
            # 1,000 waiting to be picked up and cancel those not picked up within 30 s; the
            # loop picks them up as fast as it can, these only keep a burst from being refused
            ("grpc.server.max_pending_requests", 20_000),
            ("grpc.server.max_pending_requests_hard_limit", 40_000),
            ("grpc.server_max_unrequested_time_in_server", 300),
            # gRPC core binds with SO_REUSEPORT unless told not to: a second control plane
            # started on this address would silently take half of the new streams (with its
            # own config) instead of failing to listen, as istiod does
            ("grpc.so_reuseport", 0),
        ]
        inner_port = 0
        if address:
            plaintext = grpc.aio.server(options=options)
            plaintext.add_generic_rpc_handlers(self.handlers())
            try:
                self.port = plaintext.add_insecure_port(address)
            except RuntimeError:  # gRPC's "Failed to bind", without the reason
                self.port = 0
            if self.port == 0:
                raise ListenError(f"xDS: cannot listen on {address}: the address is in use or not local")
            self._servers.append(plaintext)
        if inner:
            relayed = grpc.aio.server(options=options)
            relayed.add_generic_rpc_handlers([*self.handlers(secure=True), *self.extra_handlers])
            inner_port = relayed.add_insecure_port("127.0.0.1:0")
            self._servers.append(relayed)
        for server in self._servers:
            await server.start()
        if address:
            logger.info("xDS serving on %s", address)
        return inner_port

    async def stop(self, grace: float) -> None:
        """Stop accepting (GOAWAY), then end every stream once the push or request it is
        handling is written; streams still busy after ``grace`` seconds are cancelled."""
        servers, self._servers = self._servers, []
        if not servers:
            return  # never started, or stopped already
        stopping = asyncio.gather(*(server.stop(grace) for server in servers))
        for stream in list(self.streams.values()):
            stream.inbox.put_nowait(_EOF)
        await stopping

    def _handler(
        self, session_type: type[SotwSession] | type[DeltaSession], types: frozenset[str] | None, secure: bool
    ) -> Callable[[AsyncIterator[Any], Any], Any]:
        async def handle(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]) -> None:
            await self._serve(requests, context, session_type(counter_nonces(), types, self._name_sets), secure)

        return handle

    async def _serve(
        self,
        requests: AsyncIterator[Any],
        context: grpc.aio.ServicerContext[Any, Any],
        session: Session[Any, Any],
        secure: bool = False,
    ) -> None:
        inbox: asyncio.Queue[object] = asyncio.Queue()
        stream: Stream[C, P] | None = None
        caller: Caller | None = None
        writer = CallWriter(context)
        if secure and self.authenticator is not None:
            caller = await self.authenticator.authenticate(context)
            if caller is None:
                peer = self.authenticator.peer(context)
                who = peer.address if peer is not None else context.peer()
                await self._refuse(context, grpc_status(Status.UNAUTHENTICATED), "authentication failure", who)
        try:
            async with asyncio.TaskGroup() as tg:
                reader = tg.create_task(read_requests(requests, inbox))
                try:
                    while (item := await inbox.get()) is not _EOF:
                        if isinstance(item, _Push):
                            if stream is not None and SECRET in stream.connection.session.watches:
                                await self._review_secrets(stream)
                            await self._write_push(stream, item, writer)
                        elif isinstance(item, Undecodable):
                            raise ProtocolError(f"undecodable request: {item.reason}")
                        else:
                            if stream is None:
                                stream = self._connect(item, session, inbox, caller)
                                writer.on_expire = functools.partial(self._expired, stream)
                            if getattr(item, "type_url", "").startswith(DEBUG_PREFIX):
                                await self._write(writer, self._debug_answer(stream, item, caller, context.peer()))
                                inbox.task_done()
                                continue
                            if getattr(item, "type_url", "") == SECRET:
                                await self._review_secrets(stream)
                            began = time.perf_counter()
                            for resp in stream.connection.answers(item):
                                await self._write(writer, resp)
                                # istiod's pushXds times a request's answer as a push: built and written
                                self._metrics.pushed_type(resp.type_url, time.perf_counter() - began)
                                # a write gRPC takes at once does not suspend: the loop's other
                                # work runs here before the next part of an answer is built
                                await asyncio.sleep(0)
                                began = time.perf_counter()
                            if self._observer is not None:
                                self._answered(stream, item)
                        inbox.task_done()
                finally:
                    reader.cancel()
        except* StreamError as group:
            error = group.exceptions[0]
            assert isinstance(error, StreamError)
            await self._ended(context, writer, stream, error)
        except* Exception as group:
            # a defect in answering this stream (the source raised): it alone ends, as istiod
            # closes a connection whose push failed; the client reconnects and is answered anew
            name = stream.connection.id if stream is not None else "(new)"
            logger.error("xDS stream %s ended: internal error", name, exc_info=group.exceptions[0])
            await _end(writer, grpc.StatusCode.INTERNAL, "internal error")
        finally:
            if stream is not None:
                self._disconnect(stream)

    async def _ended(
        self,
        context: grpc.aio.ServicerContext[Any, Any],
        writer: CallWriter,
        stream: Stream[C, P] | None,
        error: StreamError,
    ) -> None:
        """End the call as ``error`` says: a refusal is counted and listed, a call gRPC ended
        gets nothing more, the others a status and a log line."""
        name = stream.connection.id if stream is not None else "(new)"
        if isinstance(error, Refused):
            await self._refuse(context, grpc_status(error.status), str(error), error.who)
        elif isinstance(error, CallEnded):
            # nothing more can go to the call, not even a status: end as a cancelled call ends
            # (grpc.aio sends nothing for it), not with an error gRPC would log and answer
            logger.info("xDS stream %s: the call ended under a write", name)
            if stream is not None:
                self._disconnect(stream)
            raise asyncio.CancelledError from None
        elif isinstance(error, SendTimeout):
            # as istiod's "timeout sending": the client reconnects and resyncs. The stream was
            # given up when the timer fired (_expired); the write it timed out on has returned
            # now (the client read it), so the status goes out after it
            if stream is not None:
                self._disconnect(stream)
            await _end(writer, grpc_status(error.status), str(error))
        else:
            message = str(error)[:MAX_STATUS_MESSAGE]  # quoted client input is cut already
            logger.warning("xDS stream %s ended: %s", name, message)
            await _end(writer, grpc_status(error.status), message)

    async def _refuse(
        self, context: grpc.aio.ServicerContext[Any, Any], code: grpc.StatusCode, message: str, who: str
    ) -> None:
        """End a secure-port stream that may not have config: counted, listed, logged."""
        logger.warning("xDS stream from %s refused: %s", who, message)
        self._metrics.auth_failure(code.name)
        self.refused.append({"proxy": who, "refused": f"{code.name}: {message}"})
        await context.abort(code, message[:MAX_STATUS_MESSAGE])

    def _connect(
        self, first: Any, session: Session[Any, Any], inbox: asyncio.Queue[object], caller: Caller | None
    ) -> Stream[C, P]:
        if not first.HasField("node") or not first.node.id:
            raise ProtocolError("the first request of a stream must carry node.id")
        client = self._source.client(first.node)
        verified: SpiffeId | None = None
        if caller is not None:
            client, verified = self._source.authorize(client, caller)
        conn_id = f"{client.id}-{next(self._ids)}"
        connection = Connection(conn_id, client, session, self._source, self._outcome, IdleAnswers(self._clock))
        stream = Stream(connection, inbox, observer=self._observer, verified=verified)
        if caller is not None:
            stream.identity = ",".join(caller.identities)
        self.streams[conn_id] = stream
        self._metrics.connected(client.id, client.istio_version, 1)
        if self._on_connect is not None:
            self._on_connect(stream)
        protocol = "delta" if stream.connection.delta else "sotw"
        logger.info("xDS %s connected: %s (%s)", protocol, conn_id, first.node.id)
        return stream

    async def _review_secrets(self, stream: Stream[C, P]) -> None:
        """Before credentialName Secrets are generated for a stream: the API server's current
        word (cached) on whether its verified service account may read them, on its client."""
        if self.secret_access is None or stream.verified is None:
            return
        who = stream.verified
        denied = await self.secret_access.authorize(who.namespace, who.service_account) or ""
        connection = stream.connection
        connection.client = self._source.secret_access(connection.client, denied)

    def _disconnect(self, stream: Stream[C, P]) -> None:
        if stream.closed:
            return
        stream.closed = True
        self.streams.pop(stream.connection.id, None)
        self._metrics.connected(stream.connection.client.id, stream.connection.client.istio_version, -1)
        self._on_disconnect(stream)
        # release workers waiting on pushes this stream will never write (or finish writing);
        # the observer hears what the one being written sent before it hears the stream ended,
        # or it would wait for answers to it until its timeout
        if stream.writing is not None:
            stream.settle(stream.writing)
        while not stream.inbox.empty():
            item = stream.inbox.get_nowait()
            if isinstance(item, _Push):
                stream.settle(item)
        if self._observer is not None:
            self._observer.disconnected(stream.connection.id)
        logger.info("xDS disconnected: %s", stream.connection.id)

    def _expired(self, stream: Stream[C, P]) -> None:
        """A write of the stream did not complete within the send timeout: the stream is given
        up (its pushes released, no more pushed to it) while the write waits on."""
        logger.warning("xDS stream %s ended: timeout sending", stream.connection.id)
        self._disconnect(stream)

    async def _write_push(self, stream: Stream[C, P] | None, item: _Push[P], writer: CallWriter) -> None:
        try:
            if stream is not None and not stream.closed:
                stream.writing = item
                connection = stream.connection
                for resp in connection.on_push(item.request):
                    item.writing = resp
                    written = await self._write(writer, resp)
                    item.writing = None
                    item.sent.append(resp)
                    self._metrics.pushed_type(resp.type_url, connection.build_seconds.get(resp.type_url, 0.0) + written)
        finally:
            # before the stream takes its next inbox item: answers to these responses may be there
            if stream is not None:
                stream.writing = None
                stream.settle(item)
            elif not item.done.done():
                item.done.set_result(None)

    async def _write(self, writer: CallWriter, resp: AnyResponse) -> float:
        """Write one response: one write at a time per call (``CallWriter``), a large one after
        waiting for a slot (the wait is not sending). Returns the seconds the write took; raises
        SendTimeout when it took longer than the send timeout, once it has returned."""
        async with writer.lock:
            if writer.in_flight or writer.expired:
                raise SendTimeout  # never a second write on the call
            large = len(resp.resources) >= LARGE_RESPONSE
            if large:
                await self._large_writes.acquire()
            holding = large

            def expire() -> None:
                nonlocal holding
                writer.expired = True
                self._metrics.write_timeout()
                if holding:  # the slot is for writes that move: this one holds no other back
                    holding = False
                    self._large_writes.release()
                if writer.on_expire is not None:
                    writer.on_expire()

            timer = asyncio.get_running_loop().call_later(self._send_timeout, expire) if self._send_timeout else None
            began = time.perf_counter()
            writer.in_flight = True
            try:
                await writer.context.write(resp)
            except asyncio.CancelledError:
                raise  # core still has the write: in_flight stays set
            except grpc.aio.BaseError as e:  # ExecuteBatchError, UsageError: core ended the call
                writer.in_flight = False
                raise CallEnded(type(e).__name__) from None
            except BaseException:
                writer.in_flight = False
                raise
            else:
                writer.in_flight = False
            finally:
                if timer is not None:
                    timer.cancel()
                if holding:
                    self._large_writes.release()
            took = time.perf_counter() - began
        if writer.expired:
            raise SendTimeout
        self._metrics.sent(resp.type_url, took, sum(len(r.entry) for r in resp.resources))
        return took

    def _debug_answer(self, stream: Stream[C, P], req: Any, caller: Caller | None, peer: str) -> AnyResponse:
        """A debug type's answer, outside the stream's watches (not ACKed, never pushed). As
        istiod with ENABLE_DEBUG_ENDPOINT_AUTH: only for a caller the secure port authenticated."""
        if caller is None:
            raise DebugUnauthenticated(peer)
        delta = stream.connection.delta
        names = list(req.resource_names_subscribe if delta else req.resource_names)
        found, control_plane = self._debug(req.type_url, names, caller.identities) if self._debug else ((), "")
        resources = [encode(name, message) for name, message in found]
        nonce = f"debug-{next(self._ids)}"
        if delta:
            return DeltaResponse(req.type_url, nonce, nonce, resources, control_plane=control_plane)
        return SotwResponse(req.type_url, nonce, nonce, resources, control_plane=control_plane)

    def _answered(self, stream: Stream[C, P], req: Any) -> None:
        """Tell the observer the client answered a response (a NACK carries an error detail)."""
        assert self._observer is not None
        if not req.response_nonce:
            return
        nack = req.HasField("error_detail") and req.error_detail.code != 0
        error = req.error_detail.message if nack else None
        outcome = stream.connection.last_outcome
        causes = outcome.causes if nack and outcome is not None else ()
        self._observer.answered(stream.connection.id, req.type_url, req.response_nonce, error, causes)

    def _outcome(self, outcome: Outcome, client: C) -> None:
        if outcome.kind is RequestKind.NACK:
            self._metrics.rejected(outcome.type_url, client.id, outcome.error_code, outcome.error, outcome.causes)
        elif outcome.kind is RequestKind.STALE:
            # istiod: "Expired nonce received", at debug level, and pilot_xds_expired_nonce
            logger.debug("xDS %s: %s expired nonce", client.id, SHORT_NAMES.get(outcome.type_url, outcome.type_url))
            self._metrics.expired_nonce(outcome.type_url)


async def _end(writer: CallWriter, code: grpc.StatusCode, message: str) -> None:
    """End the call with a status, unless a write is still in core (its coroutine was cancelled:
    the call is ending anyway); then end without one, as a cancelled call does, since a status
    now would be a second operation on the call."""
    if writer.in_flight:
        raise asyncio.CancelledError
    try:
        await writer.context.abort(code, message)
    except grpc.aio.AbortError:
        raise  # how an abort ends the handler
    except grpc.aio.BaseError:
        raise asyncio.CancelledError from None  # the client left as the status went out


async def read_requests(requests: AsyncIterator[Any], inbox: asyncio.Queue[object]) -> None:
    """Move a stream's requests into its inbox, then an end marker; once MAX_QUEUED_REQUESTS
    or MAX_QUEUED_BYTES were taken, waits until the stream has handled them all."""
    taken = 0  # bytes of the requests taken since the stream last caught up
    try:
        async for req in requests:
            inbox.put_nowait(req)
            taken += req.ByteSize() if isinstance(req, Message) else 0  # a few ms for 4 MiB
            if inbox.qsize() >= MAX_QUEUED_REQUESTS or taken >= MAX_QUEUED_BYTES:
                await inbox.join()  # stop reading until the stream has caught up
                taken = 0
    finally:
        inbox.put_nowait(_EOF)
