"""A push whose PushContext build raises loses no change (app/xds/discovery.py).

The one fault is injected: the DestinationRule index build raises once, as a bug tripped by some
input would. The change that carried it must still reach the proxy with the next push, even when
that push is for an unrelated change of another kind: a build reuses every index whose kind its
request does not name, so without the failed build marking the next one full the DestinationRule
would stay unapplied until another DestinationRule changed. First through the real runtime (config
dir, debouncer, push workers, gRPC server on a free port, a grpc.aio Delta ADS client), then
through ``Discovery.push`` with an endpoint-only change next.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.service.discovery.v3 import discovery_pb2

from app.model import push_context
from app.runtime import Runtime
from app.xds.type_urls import CLUSTER
from tests.support.bookinfo import EXTRA_DR, NODE, RATINGS
from tests.support.bookinfo_mesh import Mesh
from tests.support.runtime import running_bookinfo
from tests.support.waiting import until

DELTA = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
SERVICE_ENTRY = """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api-ext, namespace: bookinfo}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports:
  - {number: 443, name: tls, protocol: TLS}
"""
API = "outbound|443||api.example.com"
# ratings' one endpoint no longer ready: an endpoint-only change
RATINGS_SLICE = """apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ratings-abc12
  namespace: bookinfo
  labels: {kubernetes.io/service-name: ratings}
addressType: IPv4
ports: [{name: http, port: 9080, protocol: TCP}]
endpoints:
- {addresses: [10.1.0.40], conditions: {ready: false}, targetRef: {kind: Pod, name: ratings-v1-0, namespace: bookinfo}}
"""


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    async with running_bookinfo(tmp_path, debounce_after=0.01, file_debounce_ms=10) as rt:
        yield rt


class Client:
    """A Delta ADS stream watching every cluster; it ACKs each response and keeps what it holds."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.call = channel.stream_stream(
            DELTA,
            request_serializer=discovery_pb2.DeltaDiscoveryRequest.SerializeToString,
            response_deserializer=discovery_pb2.DeltaDiscoveryResponse.FromString,
        )()
        self.clusters: dict[str, cluster_pb2.Cluster] = {}

    async def subscribe(self) -> None:
        first = discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER)
        first.node.id = NODE
        await self.call.write(first)
        await self.receive()

    async def receive(self) -> discovery_pb2.DeltaDiscoveryResponse:
        resp: Any = await asyncio.wait_for(self.call.read(), 20)
        assert resp.type_url == CLUSTER
        for r in resp.resources:
            self.clusters[r.name] = cluster_pb2.Cluster.FromString(r.resource.value)
        for name in resp.removed_resources:
            self.clusters.pop(name, None)
        await self.call.write(discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER, response_nonce=resp.nonce))
        return resp


def max_connections(cluster: cluster_pb2.Cluster) -> int | None:
    thresholds = cluster.circuit_breakers.thresholds
    return thresholds[0].max_connections.value if thresholds else None


def fail_once(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Make the DestinationRule index build raise the next time; returns a list that holds True
    once it has."""
    build_dr_index = push_context._build_dr_index
    raised: list[bool] = []

    def fails_once(*args: Any) -> Any:
        if not raised:
            raised.append(True)
            raise RuntimeError("injected: the DestinationRule index build fails once")
        return build_dr_index(*args)

    monkeypatch.setattr(push_context, "_build_dr_index", fails_once)
    return raised


async def test_a_change_whose_build_raised_is_in_force_after_the_next_unrelated_push(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}") as channel:
        client = Client(channel)
        await client.subscribe()
        assert max_connections(client.clusters[RATINGS]) != 7  # Istio's default, no rule yet
        raised = fail_once(monkeypatch)
        config = runtime.settings.config_dir
        assert config is not None
        (config / "extra-dr.yaml").write_text(EXTRA_DR)  # ratings: maxConnections 7
        await until("the DestinationRule's push failed", lambda: runtime.debouncer.failures == 1, within=20.0)
        assert raised == [True]

        (config / "api-ext.yaml").write_text(SERVICE_ENTRY)  # unrelated: another kind, another host
        await client.receive()
        assert API in client.clusters
        # the DestinationRule whose build raised is in force too
        assert max_connections(client.clusters[RATINGS]) == 7
        client.call.cancel()


def test_an_endpoint_change_after_a_failed_build_is_pushed_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not Mesh().apply(RATINGS_SLICE).full  # by itself: the endpoint fast path
    mesh = Mesh()
    conn, _ = mesh.connect()
    fail_once(monkeypatch)
    with pytest.raises(RuntimeError, match="injected"):
        mesh.apply(EXTRA_DR)
    request = mesh.apply(RATINGS_SLICE)
    assert request.full and request.all_kinds  # no longer the endpoint fast path
    clusters = {
        r.name: cluster_pb2.Cluster.FromString(r.body.value)
        for resp in conn.on_push(request)
        if resp.type_url == CLUSTER
        for r in resp.resources
    }
    assert max_connections(clusters[RATINGS]) == 7
