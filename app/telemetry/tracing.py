"""OpenTelemetry traces of pushes, from the first config event to the last proxy's ACK.

One trace per debounced push: the root span ``pilotfish.push`` starts at the push's first event
and ends when every proxy it was sent to has answered everything sent to it (or at the timeout,
``pilotfish.push.converged`` false). Its children: ``pilotfish.debounce`` (first event to fire),
``pilotfish.pushcontext.build`` (when the push rebuilt the snapshot) and one
``pilotfish.proxy.push`` per proxy that was sent something, from the push worker taking it to
the proxy's last ACK (a NACK ends it with an error status and Envoy's message). A proxy push
that carries several debounced pushes (the push queue merged them) is a child of the newest and
links to the others.

A NACK means the push did not converge: that proxy keeps its last good config (DESIGN §5), so
what the push meant to change is not in force everywhere. The root still ends as soon as every
proxy has answered (the NACK is an answer: nothing more will come), but with
``pilotfish.push.converged`` false, status ERROR naming the first rejecting proxy and Envoy's
message, ``pilotfish.push.nacks`` (how many responses were rejected),
``pilotfish.push.nacked_proxies`` (which proxies) and one ``pilotfish.nack`` event per NACK (proxy,
type, message and the config objects the rejected resources were made from, which the proxy span
carries too as ``pilotfish.nack.configs``; at most ``MAX_KEYS``). A proxy whose stream ends
before it answered (it left, or was given up at the send timeout, even in the middle of a write)
is not a NACK: its span ends at once with an error status, and the root, not converged, counts
it (``pilotfish.push.disconnects``, ``pilotfish.push.disconnected_proxies``) without an error.

The stream reports what a push wrote (``proxy_pushed``) before it processes the next request
from its client (app/xds/server.py ``Stream.settle``), so an answer is never processed before
the span waiting for it exists.

Configured only by the standard environment variables (OTEL_TRACES_EXPORTER otlp / console /
none, OTEL_EXPORTER_OTLP_*, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER[_ARG],
OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_*). With the exporter ``none`` (the default) there is no
tracer and the pipeline makes no call here. Spans go out through a BatchSpanProcessor (a
background thread, at most OTEL_BSP_MAX_QUEUE_SIZE spans held: the newest are dropped when the
collector cannot take them), and an unsampled push is not followed at all.

Stopping flushes within a bound the caller gives: the SDK's own shutdown waits up to 30 s for its
export thread and each export retries for OTEL_EXPORTER_OTLP_TIMEOUT (10 s), so with the collector
down or slow SIGTERM took 30 s, up to Kubernetes' SIGKILL, where istiod is gone within its 10 s
shutdownDuration. Past the bound the exporters are shut down, which aborts their retries and
in-flight calls, and the spans still queued are dropped (logged).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.trace import Link, Span, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from app.errors import SettingsError
from app.xds.cause import Cause
from app.xds.push_request import PushRequest
from app.xds.response import DeltaResponse, SotwResponse
from app.xds.type_urls import SHORT_NAMES

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0  # PILOTFISH_TRACE_TIMEOUT: how long a push may take to converge
MAX_KEYS = 50  # changed config keys listed on a push span (the count is always there)
_PROTOCOLS = ("grpc", "http/protobuf")


def _exporter(name: str, env: Mapping[str, str]) -> SpanExporter:
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    if name == "console":
        return ConsoleSpanExporter()
    if name != "otlp":
        raise SettingsError(f"OTEL_TRACES_EXPORTER={name!r}: want otlp, console or none")
    # the Python SDK's default transport for otlp is gRPC (port 4317)
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        return HttpExporter()
    raise SettingsError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: want one of {', '.join(_PROTOCOLS)}")


def tracing_from_env(env: Mapping[str, str] = os.environ, timeout: float = DEFAULT_TIMEOUT) -> Tracing | None:
    """The push tracer the environment asks for and the call that flushes and stops its export;
    None for OTEL_TRACES_EXPORTER none (the default). Raises SettingsError for an exporter or
    protocol it does not know. The exporters, sampler and resource read their own standard
    variables from the process environment."""
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "none").split(",") if n.strip()]
    names = [n for n in names if n != "none"]
    if not names:
        return None
    # the SDK only for a tracer: without one (the default) serve does not import it
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    try:
        exporters = [_exporter(name, env) for name in names]
        processors: list[SpanProcessor] = [BatchSpanProcessor(exporter) for exporter in exporters]
    except ValueError as e:  # the SDK's reading of its variables (a queue of 0, a timeout "abc")
        given = sorted(f"{k}={v!r}" for k, v in env.items() if k.startswith(("OTEL_BSP_", "OTEL_EXPORTER_OTLP_")))
        raise SettingsError(f"OpenTelemetry trace export ({', '.join(given)}): {e}") from None
    attributes = {}
    if not env.get("OTEL_SERVICE_NAME") and "service.name=" not in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        attributes[SERVICE_NAME] = "pilotfish"
    # no exit hook of the SDK's: it would flush unbounded; the caller stops it (``stop_within``)
    provider = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False)  # OTEL_TRACES_SAMPLER
    for processor in processors:
        provider.add_span_processor(processor)

    def stop(seconds: float) -> None:
        stop_within(provider, exporters, seconds)

    return PushTracer(provider.get_tracer("pilotfish"), timeout), stop


# the tracer and the call that flushes and stops its export within the seconds it is given
Tracing = tuple["PushTracer", Callable[[float], None]]


def stop_within(provider: TracerProvider, exporters: Sequence[SpanExporter], seconds: float) -> None:
    """Flush what is batched and stop the export, returning within about ``seconds`` (+1 s for the
    exporters to let go) however the collector behaves: blocks the calling thread, never the loop."""
    flush = threading.Thread(target=provider.shutdown, name="otel-span-flush", daemon=True)
    flush.start()
    flush.join(seconds)
    if not flush.is_alive():
        return
    logger.warning("trace export: spans not flushed within %.1fs (collector unreachable or slow); dropped", seconds)
    for exporter in exporters:  # aborts the retries and closes the channel: the flush ends with it
        exporter.shutdown()
    flush.join(1.0)  # a daemon thread besides: an exporter that does not let go cannot hold the exit


@dataclass(eq=False)  # a handle: hashed by identity
class _Push:
    root: Span
    fired: float
    expected: int | None = None  # streams it was queued for, once known
    done: int = 0  # streams that reported
    proxies: int = 0  # streams it was sent to
    awaiting: set[_ProxyPush] = field(default_factory=set)
    timer: asyncio.TimerHandle | None = None
    ended: bool = False
    nacks: int = 0  # responses of this push a proxy rejected
    nacked: dict[str, str] = field(default_factory=dict)  # proxy id -> its first NACK, in order
    gone: list[str] = field(default_factory=list)  # proxies whose stream ended before they answered


@dataclass(eq=False)
class _ProxyPush:
    span: Span
    stream_id: str
    proxy_id: str
    pushes: tuple[_Push, ...]
    pending: dict[str, str]  # type URL -> the nonce whose answer is awaited
    nack: str = ""


class PushTracer:
    """The PushObserver (app/xds/observe.py) that turns a push into spans. Event loop only."""

    def __init__(self, tracer: trace.Tracer, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._tracer = tracer
        self._timeout = timeout
        self._epoch_offset = time.time_ns() - time.monotonic_ns()  # monotonic -> epoch ns
        self._by_stream: dict[str, list[_ProxyPush]] = {}
        self._open: set[_Push] = set()  # pushes whose root has not ended

    def _ns(self, monotonic: float) -> int:
        return int(monotonic * 1e9) + self._epoch_offset

    def push_fired(self, request: PushRequest, fired: float) -> Hashable | None:
        keys = sorted(f"{k.kind}/{k.namespace}/{k.name}" for k in request.configs_updated)
        attributes: dict[str, AttributeValue] = {
            "pilotfish.push.full": request.full,
            "pilotfish.push.reasons": sorted(request.reasons),
            "pilotfish.push.events": sum(request.reasons.values()),
            "pilotfish.push.configs_updated": keys[:MAX_KEYS],
            "pilotfish.push.configs_updated_count": len(keys),
            "pilotfish.push.endpoint_services": len(request.endpoint_services),
        }
        start = request.start or fired
        root = self._tracer.start_span("pilotfish.push", start_time=self._ns(start), attributes=attributes)
        if not root.is_recording():  # not sampled: nothing of it is followed
            return None
        self._child(root, "pilotfish.debounce", start, fired)
        push = _Push(root, fired)
        push.timer = asyncio.get_running_loop().call_later(self._timeout, self._expire, push)
        self._open.add(push)
        return push

    def context_built(self, handle: Hashable, started: float, ended: float) -> None:
        if isinstance(handle, _Push):
            self._child(handle.root, "pilotfish.pushcontext.build", started, ended)

    def push_queued(self, handle: Hashable, streams: int) -> None:
        if isinstance(handle, _Push):
            handle.expected = streams
            self._maybe_finish(handle)

    def push_failed(self, handle: Hashable, error: BaseException) -> None:
        """The push raised before it was queued: its root ends now, an error naming the exception."""
        if isinstance(handle, _Push) and not handle.ended:
            handle.root.record_exception(error)
            handle.root.set_status(Status(StatusCode.ERROR, f"the push failed: {type(error).__name__}: {error}"))
            self._finish(handle, converged=False)

    def proxy_pushed(
        self,
        stream_id: str,
        proxy_id: str,
        request: PushRequest,
        dequeued: float,
        responses: Sequence[DeltaResponse | SotwResponse],
    ) -> None:
        pushes = tuple(h for h in request.traces if isinstance(h, _Push))
        live = tuple(p for p in pushes if not p.ended)
        if responses and live:
            parent = live[-1]
            types = [SHORT_NAMES.get(r.type_url, r.type_url) for r in responses]
            attributes: dict[str, AttributeValue] = {
                "xds.proxy.id": proxy_id,
                "pilotfish.stream.id": stream_id,
                "xds.types": types,
                "xds.resources": sum(len(r.resources) for r in responses),
                "xds.bytes": sum(len(x.entry) for r in responses for x in r.resources),
                "pilotfish.queue_wait_s": round(max(0.0, dequeued - parent.fired), 6),
            }
            span = self._tracer.start_span(
                "pilotfish.proxy.push",
                context=trace.set_span_in_context(parent.root),
                links=[Link(p.root.get_span_context()) for p in live[:-1]],
                start_time=self._ns(dequeued),
                attributes=attributes,
            )
            proxy = _ProxyPush(span, stream_id, proxy_id, live, {r.type_url: r.nonce for r in responses})
            self._by_stream.setdefault(stream_id, []).append(proxy)
            for push in live:
                push.awaiting.add(proxy)
                push.proxies += 1
        for push in pushes:
            push.done += 1
            self._maybe_finish(push)

    def answered(
        self, stream_id: str, type_url: str, nonce: str, error: str | None, causes: Sequence[Cause] = ()
    ) -> None:
        for proxy in list(self._by_stream.get(stream_id, ())):
            if proxy.pending.get(type_url) != nonce:
                continue
            del proxy.pending[type_url]
            if error is not None:
                self._nacked(proxy, type_url, error, tuple(str(c) for c in causes))
            if not proxy.pending:
                self._end_proxy(proxy, proxy.nack or None)

    def disconnected(self, stream_id: str) -> None:
        for proxy in list(self._by_stream.get(stream_id, ())):
            for push in proxy.pushes:
                if not push.ended:
                    push.gone.append(proxy.proxy_id)
            self._end_proxy(proxy, "the stream closed before the proxy answered")

    def close(self) -> None:
        """The control plane stops: every push still open ends now, unconverged and marked
        ``pilotfish.push.interrupted``, with the proxy pushes waiting under it, so that what was
        in flight at SIGTERM is exported rather than lost (pushes still queued for streams never
        report, and the timeout's timer dies with the loop)."""
        for push in list(self._open):
            push.root.set_attribute("pilotfish.push.interrupted", True)
            self._expire(push)

    def _nacked(self, proxy: _ProxyPush, type_url: str, error: str, configs: tuple[str, ...]) -> None:
        """A response of ``proxy`` was rejected: the proxy span and every push it carries say so,
        naming the config objects the rejected resources were made from."""
        short = SHORT_NAMES.get(type_url, type_url)
        if not proxy.nack:
            proxy.nack = f"{short} NACK: {error}"
        if configs:
            proxy.span.set_attribute("pilotfish.nack.configs", configs)
        for push in proxy.pushes:
            if push.ended:
                continue
            push.nacks += 1
            push.nacked.setdefault(proxy.proxy_id, f"{short} NACK: {error}")
            if push.nacks <= MAX_KEYS:
                event: dict[str, AttributeValue] = {
                    "xds.proxy.id": proxy.proxy_id,
                    "pilotfish.stream.id": proxy.stream_id,
                    "xds.type": short,
                    "pilotfish.nack.message": error,
                    "pilotfish.nack.configs": configs,
                }
                push.root.add_event("pilotfish.nack", event)

    # --- ends ---------------------------------------------------------------------------------

    def _child(self, parent: Span, name: str, start: float, end: float) -> None:
        span = self._tracer.start_span(name, context=trace.set_span_in_context(parent), start_time=self._ns(start))
        span.end(end_time=self._ns(end))

    def _end_proxy(self, proxy: _ProxyPush, error: str | None, acked: bool = True) -> None:
        proxy.span.set_attribute("pilotfish.proxy.acked", acked and error is None)
        if error is not None:
            proxy.span.set_status(Status(StatusCode.ERROR, error))
        proxy.span.end()
        spans = self._by_stream.get(proxy.stream_id)
        if spans is not None:
            spans.remove(proxy)
            if not spans:
                del self._by_stream[proxy.stream_id]
        for push in proxy.pushes:
            push.awaiting.discard(proxy)
            self._maybe_finish(push)

    def _maybe_finish(self, push: _Push) -> None:
        if not push.ended and push.expected is not None and push.done >= push.expected and not push.awaiting:
            self._finish(push, converged=True)

    def _finish(self, push: _Push, converged: bool) -> None:
        push.ended = True
        self._open.discard(push)
        if push.timer is not None:
            push.timer.cancel()
        # a push some proxy rejected is not in force there: not converged, and the root says why;
        # nor is it where the stream ended first (a routine event: no error, but not converged)
        push.root.set_attribute("pilotfish.push.converged", converged and not push.nacks and not push.gone)
        push.root.set_attribute("pilotfish.push.proxies", push.proxies)
        if push.gone:
            push.root.set_attribute("pilotfish.push.disconnects", len(push.gone))
            push.root.set_attribute("pilotfish.push.disconnected_proxies", sorted(push.gone)[:MAX_KEYS])
        if push.nacks:
            push.root.set_attribute("pilotfish.push.nacks", push.nacks)
            push.root.set_attribute("pilotfish.push.nacked_proxies", sorted(push.nacked)[:MAX_KEYS])
            proxy_id, nack = next(iter(push.nacked.items()))
            rejected = f"{len(push.nacked)} prox{'y' if len(push.nacked) == 1 else 'ies'} rejected the push"
            push.root.set_status(Status(StatusCode.ERROR, f"{rejected}; first {proxy_id}: {nack}"))
        push.root.end()

    def _expire(self, push: _Push) -> None:
        """The timeout: the push ends unconverged, with the proxy pushes still waiting under it."""
        if push.ended:
            return
        waiting = [proxy for proxy in push.awaiting if proxy.pushes[-1] is push]
        self._finish(push, converged=False)
        for proxy in waiting:
            self._end_proxy(proxy, None, acked=False)
