"""Push traces keep every answer: a client that ACKs or NACKs a pushed response at once (its answer
in the stream's inbox before the push worker resumes) still ends its proxy span and the push, and
a NACK makes the push unconverged, named on the root (app/telemetry/tracing.py).

The runtime is real (config dir, debouncer, push workers, XdsServer, PushTracer with an in-memory
exporter); only the transport is faked: the stream is served by the very handler gRPC would call,
and the fake client's answer to each response is in the server's inbox before the server's write
returns, which is as early as a real client's answer can be processed. Deterministic: no timing.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.discovery.v3 import discovery_pb2
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from app.runtime import Runtime
from app.settings import Settings
from app.telemetry.tracing import PushTracer
from app.xds.type_urls import CLUSTER, ENDPOINT
from tests.support.bookinfo import BOOKINFO, EXTRA_DR, NODE, RATINGS, REVIEWS
from tests.support.runtime import running

ADS = "envoy.service.discovery.v3.AggregatedDiscoveryService"
DELTA = f"/{ADS}/DeltaAggregatedResources"
TIMEOUT = 30.0  # the tracer's: a lost answer would keep the push open this long


class HandlerCall:
    """grpc.HandlerCallDetails for looking a method up in the server's handlers, as gRPC does."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata: tuple[Any, ...] = ()


class EagerClient:
    """A Delta client on an in-process stream. Every response the server writes is answered (an
    ACK, or a NACK for the types in ``nack``) and that answer is in the server's inbox before the
    write returns: the earliest a real client's answer can be there."""

    def __init__(self, nack: Mapping[str, str] | None = None) -> None:
        self.nack = dict(nack or {})
        self._requests: asyncio.Queue[discovery_pb2.DeltaDiscoveryRequest] = asyncio.Queue()
        self.responses: list[Any] = []
        self.seen = asyncio.Condition()

    def send(self, req: discovery_pb2.DeltaDiscoveryRequest) -> None:
        self._requests.put_nowait(req)

    async def requests(self) -> AsyncIterator[discovery_pb2.DeltaDiscoveryRequest]:
        while True:
            req = await self._requests.get()
            yield req
            # resumed: the server's reader has put ``req`` into the stream's inbox
            self._requests.task_done()

    # --- grpc.aio.ServicerContext, as much of it as the server uses --------------------------

    async def write(self, resp: Any) -> None:
        self.responses.append(resp)
        answer = discovery_pb2.DeltaDiscoveryRequest(type_url=resp.type_url, response_nonce=resp.nonce)
        if resp.type_url in self.nack:
            answer.error_detail.code = 3
            answer.error_detail.message = self.nack[resp.type_url]
        self.send(answer)
        await self._requests.join()  # the answer is in the server's inbox
        async with self.seen:
            self.seen.notify_all()

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise AssertionError(f"the stream was aborted: {code} {details}")

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    # --- the test's side ------------------------------------------------------------------------

    async def wait_for(self, count: int) -> None:
        async with self.seen:
            await asyncio.wait_for(self.seen.wait_for(lambda: len(self.responses) >= count), 10)


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.clear()


@pytest.fixture
async def runtime(tmp_path: Path, exported: InMemorySpanExporter) -> AsyncIterator[Runtime]:
    config = tmp_path / "config"
    shutil.copytree(BOOKINFO, config)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    settings = Settings(
        config_dir=config, xds_address="", http_address="127.0.0.1:0", debounce_after=0.01, file_debounce_ms=10
    )
    tracing = (PushTracer(provider.get_tracer("test"), TIMEOUT), lambda _: provider.shutdown())
    async with running(settings, tracing) as rt:
        yield rt


async def connect(rt: Runtime, client: EagerClient) -> asyncio.Task[None]:
    """Serve ``client`` with the ADS Delta handler gRPC would call; returns once it holds CDS and
    the EDS of reviews and ratings, everything answered."""
    (ads,) = [h for h in rt.xds.handlers() if h.service_name() == ADS]
    method = ads.service(HandlerCall(DELTA))
    assert method is not None and method.stream_stream is not None
    served = asyncio.create_task(method.stream_stream(client.requests(), client))
    first = discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER)
    first.node.id = NODE
    client.send(first)
    await client.wait_for(1)
    client.send(discovery_pb2.DeltaDiscoveryRequest(type_url=ENDPOINT, resource_names_subscribe=[REVIEWS, RATINGS]))
    await client.wait_for(2)
    return served


async def finished(exported: InMemorySpanExporter, name: str, within: float = 10.0) -> list[ReadableSpan]:
    """The finished spans called ``name``, once there is one (well before the tracer's timeout)."""
    deadline = time.monotonic() + within
    while not (spans := [s for s in exported.get_finished_spans() if s.name == name]):
        assert time.monotonic() < deadline, f"no {name} span ended within {within}s"
        await asyncio.sleep(0.02)
    return spans


async def change_and_push(rt: Runtime, client: EagerClient) -> None:
    """Add a DestinationRule for ratings: its cluster and assignment are pushed (CDS, EDS)."""
    assert rt.settings.config_dir is not None
    before = len(client.responses)
    (rt.settings.config_dir / "extra-dr.yaml").write_text(EXTRA_DR)
    await client.wait_for(before + 2)
    assert [r.type_url for r in client.responses[before:]] == [CLUSTER, ENDPOINT]


async def test_an_answer_processed_before_the_push_worker_resumes_ends_the_push(
    runtime: Runtime, exported: InMemorySpanExporter
) -> None:
    client = EagerClient()
    served = await connect(runtime, client)
    try:
        await change_and_push(runtime, client)
        roots = await finished(exported, "pilotfish.push")
    finally:
        served.cancel()
    (root,) = [r for r in roots if r.attributes and r.attributes["pilotfish.push.full"]]
    assert root.attributes is not None
    assert root.attributes["pilotfish.push.converged"] is True
    assert root.attributes["pilotfish.push.proxies"] == 1
    (proxy,) = await finished(exported, "pilotfish.proxy.push")
    assert proxy.attributes is not None and proxy.attributes["pilotfish.proxy.acked"] is True
    assert proxy.attributes["xds.types"] == ("cds", "eds")
    assert proxy.end_time is not None and root.end_time is not None and proxy.end_time <= root.end_time


async def test_a_nack_answered_at_once_ends_the_push_unconverged_and_names_the_proxy_and_message(
    runtime: Runtime, exported: InMemorySpanExporter
) -> None:
    client = EagerClient()
    served = await connect(runtime, client)
    client.nack[CLUSTER] = "cluster ratings: bad circuit breakers"  # from now on, CDS is rejected
    try:
        await change_and_push(runtime, client)
        roots = await finished(exported, "pilotfish.push")
    finally:
        served.cancel()
    (root,) = [r for r in roots if r.attributes and r.attributes["pilotfish.push.full"]]
    assert root.attributes is not None
    assert root.attributes["pilotfish.push.converged"] is False
    assert root.attributes["pilotfish.push.nacks"] == 1
    assert root.attributes["pilotfish.push.nacked_proxies"] == ("productpage-v1-0.bookinfo",)
    assert root.status.status_code is StatusCode.ERROR
    assert "productpage-v1-0.bookinfo" in (root.status.description or "")
    assert "cds NACK: cluster ratings: bad circuit breakers" in (root.status.description or "")
    (event,) = [e for e in root.events if e.name == "pilotfish.nack"]
    assert event.attributes is not None
    assert event.attributes["xds.proxy.id"] == "productpage-v1-0.bookinfo"
    assert event.attributes["xds.type"] == "cds"
    assert event.attributes["pilotfish.nack.message"] == "cluster ratings: bad circuit breakers"
    (proxy,) = await finished(exported, "pilotfish.proxy.push")
    assert proxy.status.status_code is StatusCode.ERROR
    assert "bad circuit breakers" in (proxy.status.description or "")
