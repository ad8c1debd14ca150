"""Push traces end to end: pilotfish configured only by OTEL_* variables exports over OTLP/gRPC to
a real receiver (opentelemetry-proto's TraceService servicer on 127.0.0.1), with real xDS streams.
A DestinationRule change yields one ``pilotfish.push`` trace whose proxy spans end after the
proxies' ACKs."""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.discovery.v3 import discovery_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from app.runtime import Runtime
from app.settings import Settings
from app.telemetry.tracing import tracing_from_env
from app.xds.type_urls import CLUSTER, ENDPOINT
from tests.support.bookinfo import BOOKINFO, EXTRA_DR, NODE, RATINGS, REVIEWS

DELTA = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP trace receiver that keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[trace_pb2.Span] = []
        self.resources: list[Any] = []

    async def Export(self, request: Any, context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend(scope_spans.spans)
        self.resources.extend(rs.resource for rs in request.resource_spans)
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, int]]:
    server = grpc.aio.server()
    found = Receiver()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(found, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield found, port
    await server.stop(0)


def attributes(span: trace_pb2.Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            out[kv.key] = [getattr(v, v.WhichOneof("value")) for v in value.array_value.values]
        else:
            out[kv.key] = getattr(value, kind) if kind else None
    return out


async def subscribe(channel: grpc.aio.Channel, node_id: str) -> Any:
    """A Delta stream holding CDS and the EDS of reviews and ratings, everything ACKed."""
    call = channel.stream_stream(
        DELTA,
        request_serializer=discovery_pb2.DeltaDiscoveryRequest.SerializeToString,
        response_deserializer=discovery_pb2.DeltaDiscoveryResponse.FromString,
    )()
    first = discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER)
    first.node.id = node_id
    await call.write(first)
    cds = await call.read()
    await call.write(discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER, response_nonce=cds.nonce))
    eds_names = [REVIEWS, RATINGS]
    await call.write(discovery_pb2.DeltaDiscoveryRequest(type_url=ENDPOINT, resource_names_subscribe=eds_names))
    eds = await call.read()
    await call.write(discovery_pb2.DeltaDiscoveryRequest(type_url=ENDPOINT, response_nonce=eds.nonce))
    return call


async def ack_pushes(call: Any, until: float) -> float:
    """ACK every pushed response until ``until`` (monotonic); the wall time of the last ACK."""
    last = 0.0
    while time.monotonic() < until:
        try:
            resp = await asyncio.wait_for(call.read(), until - time.monotonic())
        except TimeoutError:
            break
        await asyncio.sleep(0.05)  # a proxy that takes its time: the span must wait for it
        await call.write(discovery_pb2.DeltaDiscoveryRequest(type_url=resp.type_url, response_nonce=resp.nonce))
        last = time.time()
    return last


async def test_a_destination_rule_change_is_one_push_trace_ending_after_the_acks(
    receiver: tuple[Receiver, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found, port = receiver
    for key, value in {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
    }.items():
        monkeypatch.setenv(key, value)
    config = tmp_path / "config"
    shutil.copytree(BOOKINFO, config)
    settings = Settings(config_dir=config, xds_address="127.0.0.1:0", http_address="127.0.0.1:0", debounce_after=0.05)
    rt = Runtime(settings, tracing_from_env(os.environ))
    stop = asyncio.Event()
    task = asyncio.create_task(rt.run(stop))
    try:
        await asyncio.wait_for(rt.started.wait(), 30)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{rt.xds.port}") as channel:
            other = NODE.replace("productpage-v1-0", "productpage-v1-1")
            calls = [await subscribe(channel, NODE), await subscribe(channel, other)]
            (config / "extra-dr.yaml").write_text(EXTRA_DR)
            until = time.monotonic() + 3
            acked = await asyncio.gather(*(ack_pushes(call, until) for call in calls))
            for call in calls:
                call.cancel()
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)  # the runtime flushes its spans on the way out
        gc.unfreeze()

    roots = [s for s in found.spans if s.name == "pilotfish.push" and attributes(s)["pilotfish.push.full"]]
    (root,) = [r for r in roots if any("DestinationRule" in k for k in attributes(r)["pilotfish.push.configs_updated"])]
    in_trace = [s for s in found.spans if s.trace_id == root.trace_id]
    names = sorted(s.name for s in in_trace)
    assert names.count("pilotfish.debounce") == 1 and names.count("pilotfish.pushcontext.build") == 1
    proxies = [s for s in in_trace if s.name == "pilotfish.proxy.push"]
    assert sorted(attributes(s)["xds.proxy.id"] for s in proxies) == sorted(
        ["productpage-v1-0.bookinfo", "productpage-v1-1.bookinfo"]
    )
    for span, last_ack in zip(sorted(proxies, key=lambda s: attributes(s)["xds.proxy.id"]), acked, strict=True):
        got = attributes(span)
        assert got["xds.types"] == ["cds", "eds"] and got["xds.resources"] >= 2 and got["xds.bytes"] > 0
        assert got["pilotfish.proxy.acked"] is True and got["pilotfish.queue_wait_s"] >= 0
        assert span.parent_span_id == root.span_id
        assert span.end_time_unix_nano >= (last_ack - 0.01) * 1e9  # ends at the ACK, not at the send
        assert span.end_time_unix_nano <= root.end_time_unix_nano
    root_attributes = attributes(root)
    assert root_attributes["pilotfish.push.converged"] is True
    assert root_attributes["pilotfish.push.proxies"] == 2
    assert root_attributes["pilotfish.push.events"] >= 1
    service = {kv.key: kv.value.string_value for r in found.resources for kv in r.attributes}
    assert service["service.name"] == "pilotfish" and service["deployment.environment"] == "test"
