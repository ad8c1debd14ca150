"""The push tracer (app/telemetry/tracing.py) against the SDK's in-memory exporter: one trace per
debounced push, proxy spans that end at the proxy's answers, links for merged pushes, the timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from app.config.objects import ConfigKey, Kind
from app.errors import SettingsError
from app.telemetry.tracing import PushTracer, tracing_from_env
from app.xds.cause import Cause
from app.xds.push_request import PushRequest
from app.xds.resource import encode
from app.xds.response import DeltaResponse
from app.xds.type_urls import CLUSTER, ENDPOINT

DR = ConfigKey(Kind.DESTINATION_RULE, "ns", "reviews")


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.clear()


def tracer(exporter: InMemorySpanExporter, timeout: float = 30.0) -> PushTracer:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return PushTracer(provider.get_tracer("test"), timeout)


def response(type_url: str, nonce: str) -> DeltaResponse:
    return DeltaResponse(type_url, nonce, "", [encode("c", cluster_pb2.Cluster(name="c"))])


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def request(start: float) -> PushRequest:
    return PushRequest(full=True, configs_updated=frozenset({DR}), reasons={"config": 2}, start=start)


async def test_a_push_trace_ends_when_the_last_proxy_acked_everything(exported: InMemorySpanExporter) -> None:
    t = tracer(exported)
    now = time.monotonic()
    handle = t.push_fired(request(now - 0.2), now)
    assert handle is not None
    t.context_built(handle, now, now + 0.01)
    traced = PushRequest(full=True, configs_updated=frozenset({DR}), start=now - 0.2, traces=(handle,))
    t.push_queued(handle, 3)
    t.proxy_pushed("a-1", "a.ns", traced, now + 0.02, [response(CLUSTER, "1"), response(ENDPOINT, "2")])
    t.proxy_pushed("b-2", "b.ns", traced, now + 0.02, [response(CLUSTER, "7")])
    t.proxy_pushed("c-3", "c.ns", traced, now + 0.02, [])  # skipped: nothing sent
    t.answered("a-1", CLUSTER, "1", None)
    t.answered("a-1", ENDPOINT, "0", None)  # an answer to an older response: not this push's
    assert not by_name(exported.get_finished_spans(), "pilotfish.push")
    t.answered("a-1", ENDPOINT, "2", None)
    # a NACK ends it too, as an error, naming what the rejected resources were made from
    t.answered("b-2", CLUSTER, "7", "unknown field", [Cause("DestinationRule", "ns", "reviews", "dr.yaml#0")])
    spans = exported.get_finished_spans()
    (root,) = by_name(spans, "pilotfish.push")
    assert root.attributes is not None
    # every proxy answered, but b rejected the push: it ended, not converged, naming the NACK
    assert root.attributes["pilotfish.push.converged"] is False
    assert root.attributes["pilotfish.push.nacked_proxies"] == ("b.ns",)
    assert root.status.status_code is StatusCode.ERROR and "b.ns: cds NACK: unknown field" in (
        root.status.description or ""
    )
    assert root.attributes["pilotfish.push.proxies"] == 2
    assert root.attributes["pilotfish.push.events"] == 2
    assert root.attributes["pilotfish.push.configs_updated"] == ("DestinationRule/ns/reviews",)
    assert root.attributes["pilotfish.push.full"] is True
    assert len(by_name(spans, "pilotfish.debounce")) == 1
    assert len(by_name(spans, "pilotfish.pushcontext.build")) == 1
    proxies = {s.attributes["xds.proxy.id"]: s for s in by_name(spans, "pilotfish.proxy.push") if s.attributes}
    assert set(proxies) == {"a.ns", "b.ns"}
    a, b = proxies["a.ns"], proxies["b.ns"]
    assert a.attributes is not None and a.attributes["xds.types"] == ("cds", "eds")
    assert a.attributes["xds.resources"] == 2
    assert a.status.status_code is StatusCode.UNSET
    assert b.status.status_code is StatusCode.ERROR and "unknown field" in (b.status.description or "")
    assert b.attributes is not None
    assert b.attributes["pilotfish.nack.configs"] == ("DestinationRule ns/reviews (dr.yaml#0)",)
    [event] = [e for e in root.events if e.name == "pilotfish.nack"]
    assert event.attributes is not None
    assert event.attributes["pilotfish.nack.configs"] == ("DestinationRule ns/reviews (dr.yaml#0)",)
    for span in (a, b):
        assert span.parent is not None and span.parent.span_id == root.context.span_id
        assert span.end_time is not None and root.end_time is not None and span.end_time <= root.end_time
    # the root starts at the first event, before the fire
    assert root.start_time is not None and a.start_time is not None and root.start_time < a.start_time


async def test_a_proxy_push_carrying_merged_pushes_is_a_child_of_the_newest_and_links_the_others(
    exported: InMemorySpanExporter,
) -> None:
    t = tracer(exported)
    now = time.monotonic()
    first, second = t.push_fired(request(now), now), t.push_fired(request(now), now + 0.1)
    assert first is not None and second is not None
    t.push_queued(first, 1)
    t.push_queued(second, 1)
    merged = PushRequest(full=True, traces=(first,)).merge(PushRequest(full=True, traces=(second,)))
    t.proxy_pushed("a-1", "a.ns", merged, now + 0.2, [response(CLUSTER, "1")])
    t.answered("a-1", CLUSTER, "1", None)
    spans = exported.get_finished_spans()
    roots = by_name(spans, "pilotfish.push")
    assert len(roots) == 2 and all(r.attributes and r.attributes["pilotfish.push.converged"] for r in roots)
    (proxy,) = by_name(spans, "pilotfish.proxy.push")
    newest = next(r for r in roots if r.context.trace_id == proxy.context.trace_id)
    other = next(r for r in roots if r is not newest)
    assert [link.context.trace_id for link in proxy.links] == [other.context.trace_id]


async def test_a_push_not_answered_in_time_ends_unconverged(exported: InMemorySpanExporter) -> None:
    t = tracer(exported, timeout=0.05)
    now = time.monotonic()
    handle = t.push_fired(request(now), now)
    assert handle is not None
    t.push_queued(handle, 1)
    traced = PushRequest(full=True, traces=(handle,))
    t.proxy_pushed("a-1", "a.ns", traced, now, [response(CLUSTER, "1")])
    await asyncio.sleep(0.2)
    spans = exported.get_finished_spans()
    (root,) = by_name(spans, "pilotfish.push")
    assert root.attributes is not None and root.attributes["pilotfish.push.converged"] is False
    (proxy,) = by_name(spans, "pilotfish.proxy.push")
    assert proxy.attributes is not None and proxy.attributes["pilotfish.proxy.acked"] is False
    t.answered("a-1", CLUSTER, "1", None)  # too late: nothing left to end
    assert len(exported.get_finished_spans()) == len(spans)


async def test_a_stream_that_closes_ends_its_proxy_spans_and_the_push(exported: InMemorySpanExporter) -> None:
    t = tracer(exported)
    now = time.monotonic()
    handle = t.push_fired(request(now), now)
    assert handle is not None
    t.push_queued(handle, 1)
    t.proxy_pushed("a-1", "a.ns", PushRequest(full=True, traces=(handle,)), now, [response(CLUSTER, "1")])
    t.disconnected("a-1")
    spans = exported.get_finished_spans()
    (proxy,) = by_name(spans, "pilotfish.proxy.push")
    assert proxy.status.status_code is StatusCode.ERROR
    # it ends at once; the push is not in force where the proxy went, which is not an error
    (root,) = by_name(spans, "pilotfish.push")
    assert root.attributes is not None and root.attributes["pilotfish.push.converged"] is False
    assert root.attributes["pilotfish.push.disconnected_proxies"] == ("a.ns",)
    assert root.status.status_code is StatusCode.UNSET


async def test_a_push_queued_for_no_stream_ends_at_once(exported: InMemorySpanExporter) -> None:
    t = tracer(exported)
    now = time.monotonic()
    handle = t.push_fired(request(now), now)
    assert handle is not None
    t.push_queued(handle, 0)
    assert len(by_name(exported.get_finished_spans(), "pilotfish.push")) == 1


def test_exporter_none_is_no_tracer_and_unknown_values_are_errors() -> None:
    assert tracing_from_env({}) is None
    assert tracing_from_env({"OTEL_TRACES_EXPORTER": "none"}) is None
    with pytest.raises(SettingsError, match="OTEL_TRACES_EXPORTER='zipkin'"):
        tracing_from_env({"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(SettingsError, match="OTEL_EXPORTER_OTLP_PROTOCOL='http/json'"):
        tracing_from_env({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    # the SDK's own checks of its variables, as a settings error naming them, not a traceback
    for key, value, reason in (
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0", "max_queue_size must be a positive integer"),
        ("OTEL_BSP_SCHEDULE_DELAY", "-5", "schedule_delay_millis must be positive"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "abc", "could not convert string to float"),
    ):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(key, value)  # the SDK reads the process environment
            with pytest.raises(SettingsError, match=f"{key}='{value}'.*{reason}"):
                tracing_from_env({"OTEL_TRACES_EXPORTER": "otlp", key: value})
    console = tracing_from_env({"OTEL_TRACES_EXPORTER": "console"})
    assert console is not None
    console[1](5.0)
