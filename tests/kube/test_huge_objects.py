"""An object as large as the API server takes does not stall the control plane: a ServiceEntry
at its CRD's bounds (256 hosts, 4,096 endpoints: 1M endpoints in the registry's terms) applied
through a real kube-apiserver while a proxy is connected. It was measured stalling the event
loop 14-20 s (every endpoint converted, indexed and sent again for each host); the hosts now
share one endpoint tuple and one assignment build.

No wall-clock limit: the longest the event loop went without running a 5 ms ticker is compared
with the time the change took to reach the proxy; it was nearly all of it."""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path
from typing import Any

import grpc
from envoy.config.endpoint.v3 import endpoint_pb2

from app.xds.client import node
from app.xds.type_urls import ENDPOINT
from tests.kube.common import serving
from tests.support.ads import DeltaStream
from tests.support.cluster import Cluster
from tests.support.runtime import running
from tests.support.waiting import until

UNLIMITED = [("grpc.max_receive_message_length", -1)]
HOSTS = 256  # the CRD's maxItems for hosts
ENDPOINTS = 4096  # and for endpoints


def wide_entry(namespace: str, tag: str) -> dict[str, Any]:
    spec = {
        "hosts": [f"h{i}.{tag}.example.com" for i in range(HOSTS)],
        "ports": [{"number": 80, "name": "http", "protocol": "HTTP"}],
        "resolution": "STATIC",
        "location": "MESH_INTERNAL",
        "endpoints": [{"address": f"10.20.{i // 256}.{i % 256}"} for i in range(ENDPOINTS)],
    }
    meta = {"name": "wide", "namespace": namespace}
    return {"apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry", "metadata": meta, "spec": spec}


class Ticker:
    """The event loop's longest lateness running a 5 ms sleep, since ``reset``."""

    def __init__(self) -> None:
        self.worst = 0.0

    def reset(self) -> None:
        self.worst = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            await asyncio.sleep(0.005)
            self.worst = max(self.worst, loop.time() - began - 0.005)


class Sidecar(DeltaStream):
    """Keeps the endpoint count of each assignment received."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.endpoints: dict[str, int] = {}

    def received(self, resp: Any) -> None:
        if resp.type_url != ENDPOINT:
            return
        for r in resp.resources:
            la = endpoint_pb2.ClusterLoadAssignment.FromString(r.resource.value)
            self.endpoints[la.cluster_name] = sum(len(g.lb_endpoints) for g in la.endpoints)

    def has_all(self, names: set[str]) -> bool:
        return all(self.endpoints.get(n) == ENDPOINTS for n in names)


async def test_a_service_entry_at_its_crd_bounds_reaches_a_proxy_without_stalling_the_loop(
    kube: Cluster, pilotfish_kubeconfig: Path
) -> None:
    shop, system = kube.namespace("shop"), kube.namespace("system")
    mesh = f"discoverySelectors: [{{matchLabels: {{kubernetes.io/metadata.name: {shop}}}}}]\n"
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "istio"}, "data": {"mesh": mesh}},
               namespace=system)  # fmt: skip
    ident = node(f"sidecar~10.9.0.1~client.{shop}~{shop}.svc.cluster.local", {"NAMESPACE": shop})
    ticker = Ticker()
    async with (
        running(serving(pilotfish_kubeconfig, system)) as runtime,
        # one response holds every assignment: 50 MB (pilot-agent takes any size, gRPC's default 4 MB)
        grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}", options=UNLIMITED) as channel,
    ):
        sidecar = Sidecar(channel, ident)
        streamed = asyncio.create_task(sidecar.run())
        ticking = asyncio.create_task(ticker.run())
        try:
            await until("the proxy initialised", lambda: sidecar.client.complete)
            for tag in ("one", "two"):  # created, then every host replaced
                names = {f"outbound|80||h{i}.{tag}.example.com" for i in range(HOSTS)}
                ticker.reset()
                began = time.monotonic()
                await asyncio.to_thread(kube.apply, wide_entry(shop, tag))
                await until(f"the {tag} hosts' assignments sent", functools.partial(sidecar.has_all, names), 60)
                took = time.monotonic() - began
                assert ticker.worst < took / 2, (tag, took, ticker.worst)
        finally:
            ticking.cancel()
            streamed.cancel()
            await asyncio.gather(streamed, return_exceptions=True)
        assert runtime.rejections() == []
