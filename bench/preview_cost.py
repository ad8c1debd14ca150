"""Benchmark: what a change preview (``POST /debug/diff``) costs at mesh-1k with 2,000 connected
proxies, and whether serving slows while one runs.

A real ``Runtime`` serves the mesh of bench/mesh.py (default 1,000 services in 50 namespaces) on
uvloop; 2,000 sidecars are connected in-process as Delta ``Connection``s that subscribed as Envoy
does (bench/push_cost.py ``connect_delta``), registered as the server's streams, so the preview
reads their real watches. The change previewed is a DestinationRule edit (svc-0's
maxConnections), which reaches every proxy. Reported: the preview's wall time, the child's peak
RSS (it is a forked copy-on-write snapshot, app/debug/diff.py) and the server's RSS; and, while
nothing runs / while the forked preview runs / while the same preview runs in a worker thread
instead (the alternative the fork replaced; on a private copy of the state), the event loop's
lateness (a 5 ms ticker) and the latency of an xDS request on another, real gRPC, stream (a Delta
client subscribing to one more EDS name, time to its response). Usage:
    python -m bench.preview_cost [--services 1000 --namespaces 50 --proxies 2000] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import platform
import resource
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import uvloop
from envoy.service.discovery.v3 import discovery_pb2

from app.debug.diff import compute, connected
from app.environment import Environment
from app.preview.request import DiffRequest, request_body
from app.runtime import Runtime
from app.settings import Settings
from app.sources.files import FileSource
from app.xds.connection import Connection
from app.xds.delta import DeltaSession
from app.xds.generators.reference import reference_source
from app.xds.mesh_source import proxy_from_node
from app.xds.server import Stream
from app.xds.type_urls import CLUSTER, ENDPOINT
from app.xds.watch import NameSets, counter_nonces
from bench.mesh import Mesh, MeshSpec, sidecars
from bench.push_cost import _node, connect_delta

DELTA = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
TICK = 0.005
CHANGE = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: svc-0, namespace: ns-0}
spec:
  host: svc-0
  trafficPolicy: {connectionPool: {tcp: {maxConnections: 12345}}}
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]
"""


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _ms(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered) * 1000, 2),
        "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 2),
        "max": round(ordered[-1] * 1000, 2),
    }


class Probe:
    """A Delta stream that subscribes to one EDS name after another and times each answer, and
    a ticker recording the loop's lateness."""

    def __init__(self, channel: grpc.aio.Channel, node_id: str, names: list[str]) -> None:
        self.call = channel.stream_stream(
            DELTA,
            request_serializer=discovery_pb2.DeltaDiscoveryRequest.SerializeToString,
            response_deserializer=discovery_pb2.DeltaDiscoveryResponse.FromString,
        )()
        self.node_id = node_id
        self.names = names
        self.latencies: list[float] = []
        self.lateness: list[float] = []

    async def open(self) -> None:
        first = discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER)
        first.node.id = self.node_id
        await self.call.write(first)
        resp: Any = await self.call.read()
        await self.call.write(discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER, response_nonce=resp.nonce))

    async def run(self, until: asyncio.Event) -> None:
        i = 0
        while not until.is_set():
            name = self.names[i % len(self.names)]
            i += 1
            started = time.perf_counter()
            sub = discovery_pb2.DeltaDiscoveryRequest(type_url=ENDPOINT, resource_names_subscribe=[name])
            await self.call.write(sub)
            resp: Any = await self.call.read()
            self.latencies.append(time.perf_counter() - started)
            await self.call.write(discovery_pb2.DeltaDiscoveryRequest(type_url=ENDPOINT, response_nonce=resp.nonce))
            unsub = discovery_pb2.DeltaDiscoveryRequest(type_url=ENDPOINT, resource_names_unsubscribe=[name])
            await self.call.write(unsub)
            await asyncio.sleep(0.01)

    async def tick(self, until: asyncio.Event) -> None:
        while not until.is_set():
            started = time.perf_counter()
            await asyncio.sleep(TICK)
            self.lateness.append(time.perf_counter() - started - TICK)


async def _measured(probe: Probe, work: Callable[[], Awaitable[object]]) -> tuple[dict[str, Any], float]:
    probe.latencies, probe.lateness = [], []
    until = asyncio.Event()
    tasks = [asyncio.create_task(probe.run(until)), asyncio.create_task(probe.tick(until))]
    started = time.perf_counter()
    await work()
    took = time.perf_counter() - started
    until.set()
    await asyncio.gather(*tasks)
    return {"xds_request_ms": _ms(probe.latencies), "loop_lateness_ms": _ms(probe.lateness)}, took


@contextlib.asynccontextmanager
async def _serving(root: Path) -> AsyncIterator[Runtime]:
    settings = Settings(config_dir=root, xds_address="127.0.0.1:0", http_address="127.0.0.1:0")
    runtime = Runtime(settings)
    stop = asyncio.Event()
    task = asyncio.create_task(runtime.run(stop))
    await asyncio.wait_for(runtime.started.wait(), 300)
    try:
        yield runtime
    finally:
        stop.set()
        await task


async def _bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    spec = MeshSpec(args.services, args.namespaces)
    report: dict[str, Any] = {"services": args.services, "namespaces": args.namespaces, "proxies": args.proxies}
    async with _serving(root) as runtime:
        started = time.perf_counter()
        name_sets = NameSets()
        for i, identity in enumerate(sidecars(spec, args.proxies)):
            node = _node(identity)
            conn: Any = Connection(f"bench-{i}", proxy_from_node(node), DeltaSession(counter_nonces(), None, name_sets),
                                   runtime.source)  # fmt: skip
            connect_delta(conn, node)
            runtime.xds.streams[conn.id] = Stream(conn)
        report["connect_seconds"] = round(time.perf_counter() - started, 1)
        report["server_rss_mib"] = round(_rss_mib(), 1)
        names = [f"outbound|80||svc-{i}.{spec.namespace_of(i)}.svc.cluster.local" for i in range(0, args.services, 7)]
        body = request_body([("change.yaml", CHANGE)], [], [], False)
        url = f"http://127.0.0.1:{runtime.http.port}/debug/diff"
        found: dict[str, Any] = {}

        async def forked() -> None:
            async with (
                aiohttp.ClientSession() as http,
                http.post(url, json=body, timeout=aiohttp.ClientTimeout(900)) as r,
            ):
                assert r.status == 200, await r.text()
                found.update(await r.json())

        # the thread alternative, on state of its own (a preview changes its Environment)
        env = Environment()
        files = FileSource(root)
        env.apply(files.load())
        served = reference_source(env.build_push_context(None))
        watching = connected(runtime.streams(), ())
        threaded = functools.partial(
            compute, env, served, watching, files.objects(), DiffRequest((("change.yaml", CHANGE),))
        )

        async def in_thread() -> None:
            await asyncio.to_thread(threaded)

        async with grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}") as channel:
            probe = Probe(channel, sidecars(spec, 1)[0].node_id, names)
            await probe.open()
            report["idle"], _ = await _measured(probe, lambda: asyncio.sleep(5))
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            report["during_forked_preview"], took = await _measured(probe, forked)
            child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            report["preview_seconds"] = round(took, 2)
            report["preview_child_peak_rss_mib"] = round(max(child, before) / 1024, 1)
            report["reached"] = len(found["preview"]["proxies"])
            report["unaffected"] = found["preview"]["unaffected"]
            report["during_threaded_preview"], took = await _measured(probe, in_thread)
            report["threaded_preview_seconds"] = round(took, 2)
    report["python"] = platform.python_version()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--proxies", type=int, default=2000)
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pilotfish-preview-cost-") as tmp:
        Mesh(MeshSpec(args.services, args.namespaces), Path(tmp)).write()
        report = uvloop.run(_bench(args, Path(tmp)))
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
