"""Push traces in the edge cases operators meet, over real gRPC streams to a real Runtime whose push
tracer exports to the SDK's in-memory exporter: a stream given up in the middle of a push (the
send timeout passed with a response still unwritten), a NACK over SotW. A push trace ends when
nothing more can come; it never waits out PILOTFISH_TRACE_TIMEOUT for a proxy that is gone, and
no span is held for it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.discovery.v3 import discovery_pb2
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from app.config.objects import ConfigKey, Kind
from app.model import push_context
from app.runtime import Runtime
from app.settings import Settings
from app.telemetry.tracing import PushTracer
from app.xds.push_request import PushRequest
from app.xds.type_urls import ENDPOINT
from tests.robustness.serving import Client, with_node
from tests.support.bookinfo import BOOKINFO, EXTRA_DR, NODE
from tests.support.runtime import running

TRACE_TIMEOUT = 30.0
SEND_TIMEOUT = 1.0
BIG = "outbound|80||big.example.com"
# a client whose receive window stays at gRPC's 64 KiB (no BDP growth)
SMALL_WINDOW = [("grpc.http2.bdp_probe", 0)]


def service_entry(endpoints: int) -> str:
    """A STATIC ServiceEntry whose assignment (about 40 bytes an endpoint) can outgrow the window."""
    lines = [
        "apiVersion: networking.istio.io/v1",
        "kind: ServiceEntry",
        "metadata: {name: big, namespace: bookinfo}",
        "spec:",
        "  hosts: [big.example.com]",
        "  ports: [{number: 80, name: http, protocol: HTTP}]",
        "  resolution: STATIC",
        "  location: MESH_INTERNAL",
        "  endpoints:",
    ]
    lines += [f"  - address: 10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(1, endpoints + 1)]
    return "\n".join(lines) + "\n"


@contextlib.asynccontextmanager
async def traced_runtime(
    tmp_path: Path, **overrides: Any
) -> AsyncIterator[tuple[Runtime, InMemorySpanExporter, Path]]:
    """A Runtime on bookinfo and the big ServiceEntry, its push tracer exporting to memory."""
    config = tmp_path / "config"
    shutil.copytree(BOOKINFO, config)
    (config / "big.yaml").write_text(service_entry(3000))
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
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
    tracing = (PushTracer(provider.get_tracer("test"), TRACE_TIMEOUT), lambda _: provider.shutdown())
    async with running(dataclasses.replace(settings, **overrides), tracing) as rt:
        yield rt, exported, config


@pytest.fixture
async def traced(tmp_path: Path) -> AsyncIterator[tuple[Runtime, InMemorySpanExporter, Path]]:
    async with traced_runtime(tmp_path) as found:
        yield found


async def stalled_client(channel: grpc.aio.Channel, pod: str) -> Client:
    """A SotW client holding the big assignment (read and ACKed), which then stops reading."""
    client = Client(channel, delta=False)
    node = NODE.replace("productpage-v1-0", pod)
    await client.send(with_node(discovery_pb2.DiscoveryRequest(type_url=ENDPOINT, resource_names=[BIG]), node))
    first = await client.recv()
    ack = discovery_pb2.DiscoveryRequest(type_url=ENDPOINT, resource_names=[BIG], response_nonce=first.nonce)
    await client.send(ack)
    return client


def pushes_of(exported: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exported.get_finished_spans() if s.name == name]


async def ended(exported: InMemorySpanExporter, after: float, within: float) -> ReadableSpan:
    """The first ``pilotfish.push`` that started after ``after`` (time.time()) and ended."""
    for _ in range(int(within / 0.05)):
        for span in pushes_of(exported, "pilotfish.push"):
            if (span.start_time or 0) > after * 1e9:
                return span
        await asyncio.sleep(0.05)
    raise AssertionError(f"no push trace ended within {within}s")


# was: the send timeout gave the stream up (disconnected) before the push being written reported
# what it wrote, so its proxy span was opened after the stream had closed, waited for answers
# that could never come, and held the push trace open until PILOTFISH_TRACE_TIMEOUT (30 s)
async def test_a_stream_given_up_in_the_middle_of_a_push_ends_its_trace_at_once(
    traced: tuple[Runtime, InMemorySpanExporter, Path],
) -> None:
    rt, exported, config = traced
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{rt.xds.port}", options=SMALL_WINDOW)
    try:
        await stalled_client(channel, "stalled-0")
        # the next assignment (120 KB) outgrows the window of the client, which no longer reads
        changed = time.time()
        (config / "big.yaml").write_text(service_entry(3001))
        root = await ended(exported, changed, TRACE_TIMEOUT + 5)
        took = time.time() - changed
    finally:
        await channel.close()
    assert root.attributes is not None
    assert took < TRACE_TIMEOUT / 2, f"the push trace ended after {took:.1f}s: it waited for the timeout"
    # the proxy never got the push: not converged, the proxy named, not an error
    assert root.attributes["pilotfish.push.converged"] is False
    assert root.attributes["pilotfish.push.disconnected_proxies"] == ("stalled-0.bookinfo",)
    assert root.status.status_code is StatusCode.UNSET
    proxies = pushes_of(exported, "pilotfish.proxy.push")
    (proxy,) = [s for s in proxies if s.parent is not None and s.parent.span_id == root.context.span_id]
    assert proxy.status.status_code is StatusCode.ERROR and "stream closed" in (proxy.status.description or "")
    assert rt.tracer is not None and not rt.tracer._by_stream  # nothing held for the stream


# was: a push the stop cut short (its PushContext build cancelled with the debouncer before it
# was queued, or still queued for streams when the queue closed) never reported, its timeout's
# timer died with the loop, and its trace was never exported: what was in flight at SIGTERM (a
# restart) was missing from the traces. The push is cut here by hand: fired, never queued.
async def test_a_push_in_flight_when_the_control_plane_stops_is_exported_interrupted(tmp_path: Path) -> None:
    async with traced_runtime(tmp_path) as (rt, exported, _):
        assert rt.tracer is not None
        now = time.monotonic()
        key = ConfigKey(Kind.DESTINATION_RULE, "bookinfo", "cut")
        cut = PushRequest(full=True, configs_updated=frozenset({key}))
        assert rt.tracer.push_fired(cut, now) is not None
    roots = pushes_of(exported, "pilotfish.push")
    (root,) = [s for s in roots if s.attributes and s.attributes.get("pilotfish.push.interrupted")]
    assert root.attributes is not None
    assert root.attributes["pilotfish.push.configs_updated"] == ("DestinationRule/bookinfo/cut",)
    assert root.attributes["pilotfish.push.converged"] is False


# was: a push whose PushContext build raised never reported; its trace waited for the timeout and
# ended unconverged without a word of why
async def test_a_push_whose_build_raised_ends_its_trace_at_once_naming_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_dr_index = push_context._build_dr_index

    def fails_once(*args: Any) -> Any:
        monkeypatch.setattr(push_context, "_build_dr_index", build_dr_index)
        raise RuntimeError("injected: the DestinationRule index build fails")

    async with traced_runtime(tmp_path) as (_, exported, config):
        monkeypatch.setattr(push_context, "_build_dr_index", fails_once)
        changed = time.time()
        (config / "extra-dr.yaml").write_text(EXTRA_DR)
        root = await ended(exported, changed, TRACE_TIMEOUT / 2)
    assert root.attributes is not None and root.attributes["pilotfish.push.converged"] is False
    assert root.status.status_code is StatusCode.ERROR
    assert "RuntimeError: injected: the DestinationRule index build fails" in (root.status.description or "")
