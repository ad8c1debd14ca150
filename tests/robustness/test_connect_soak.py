"""10,000 connect/disconnect cycles against a running pilotfish: each a new gRPC connection, an
ADS stream that gets its first response, and a close (half of them cancelling mid-stream, half
closing the connection). Afterwards nothing a cycle held is left: no streams, no tasks, no file
descriptors, and the process's memory has not grown past a stated bound (in-process client and
server both count).

Bounds, measured after 500 warm-up cycles so caches, pools and the allocator have settled:
tasks +5, file descriptors +10, Python heap +2 MiB (tracemalloc: what pilotfish's objects
hold), resident memory +64 MiB (gRPC core and the allocator too: about +15 MiB here).
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import struct_pb2

from app.runtime import Runtime
from app.settings import Settings
from app.xds.type_urls import CLUSTER
from tests.support.bookinfo import BOOKINFO, NODE

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
CYCLES = int(os.environ.get("PILOTFISH_SOAK_CYCLES", "10000"))
WARMUP = 500
BATCH = 100  # cycles in flight at once
MAX_TASKS, MAX_FDS, MAX_HEAP, MAX_RSS = 5, 10, 2 * 2**20, 64 * 2**20


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    shutil.copytree(BOOKINFO, tmp_path / "config")
    settings = Settings(config_dir=tmp_path / "config", xds_address="127.0.0.1:0", http_address="127.0.0.1:0")
    rt = Runtime(settings)
    stop = asyncio.Event()
    task = asyncio.create_task(rt.run(stop))
    await asyncio.wait_for(rt.started.wait(), 30)
    yield rt
    stop.set()
    await asyncio.wait_for(task, 15)
    gc.unfreeze()


def request(i: int) -> discovery_pb2.DiscoveryRequest:
    req = discovery_pb2.DiscoveryRequest(type_url=CLUSTER)
    req.node.id = NODE.replace("productpage-v1-0", f"productpage-v1-{i}")
    labels = struct_pb2.Struct()
    labels.update({"app": "productpage", "version": "v1"})
    req.node.metadata.fields["LABELS"].struct_value.CopyFrom(labels)
    return req


async def cycle(port: int, i: int) -> None:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        call = channel.stream_stream(
            ADS,
            request_serializer=discovery_pb2.DiscoveryRequest.SerializeToString,
            response_deserializer=discovery_pb2.DiscoveryResponse.FromString,
        )()
        await call.write(request(i))
        response = await asyncio.wait_for(call.read(), 30)
        assert response.resources
        if i % 2:
            call.cancel()  # the client goes away mid-stream; the even ones just drop the connection
    finally:
        await channel.close()


async def cycles(port: int, start: int, count: int) -> None:
    for first in range(start, start + count, BATCH):
        await asyncio.gather(*(cycle(port, i) for i in range(first, min(first + BATCH, start + count))))


async def settled(rt: Runtime) -> None:
    """Until the server has seen every stream go (its disconnects run after the client's close),
    then the runtime's periodic heap sweep: cyclic garbage frozen with the streams of a storm
    waits for it by design (app/heap.py), so only what outlives it counts as held."""
    for _ in range(200):
        if not rt.xds.streams:
            break
        await asyncio.sleep(0.05)
    rt.heap.sweep()
    gc.collect()


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def test_ten_thousand_connects_and_disconnects_leave_nothing_behind(runtime: Runtime) -> None:
    port = runtime.xds.port
    await cycles(port, 0, WARMUP)
    await settled(runtime)
    tracemalloc.start()
    try:
        before = (len(asyncio.all_tasks()), fds(), tracemalloc.get_traced_memory()[0], rss())
        await cycles(port, WARMUP, CYCLES)
        await settled(runtime)
        after = (len(asyncio.all_tasks()), fds(), tracemalloc.get_traced_memory()[0], rss())
    finally:
        tracemalloc.stop()
    assert not runtime.xds.streams
    tasks, files, heap, resident = (a - b for a, b in zip(after, before, strict=True))
    print(f"soak: {CYCLES} cycles; tasks {before[0]}->{after[0]}, fds {before[1]}->{after[1]}, "
          f"Python heap {heap / 2**20:+.2f} MiB, RSS {before[3] / 2**20:.1f}->{after[3] / 2**20:.1f} MiB")  # fmt: skip
    assert tasks <= MAX_TASKS, f"tasks {before[0]} -> {after[0]}"
    assert files <= MAX_FDS, f"file descriptors {before[1]} -> {after[1]}"
    assert heap <= MAX_HEAP, f"the Python heap grew {heap / 2**20:.1f} MiB"
    assert resident <= MAX_RSS, f"resident memory grew {resident / 2**20:.1f} MiB"
