"""A Pod's endpoint locality from its Node, against a real kube-apiserver, as istiod's
getPodLocality reads it: ``pilotfish serve --kubeconfig`` (with the chart's RBAC) watches the
Nodes, a sidecar's Delta ADS stream gets the endpoints of a pod on a Node with topology labels
in that Node's locality (and those of a pod with an istio-locality label of its own in that
one), the sidecar itself is placed where its pod's Node is (its priorities), and relabelling
the Node pushes the endpoints again in its new locality. The mesh's
discoverySelectors keep pilotfish to the test's namespace of the shared cluster; the Node made
here is deleted after."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.service.discovery.v3 import discovery_pb2

from app.xds.client import node
from app.xds.type_urls import ENDPOINT
from tests.kube.common import cart_namespaces, serving, streaming, wait_for_slice
from tests.support.ads import DeltaStream
from tests.support.cluster import Cluster
from tests.support.runtime import running
from tests.support.waiting import until

REGION, ZONE = "topology.kubernetes.io/region", "topology.kubernetes.io/zone"
SUBZONE = "topology.istio.io/subzone"
NODE_IP, LABELLED_IP, CLIENT_IP = "10.7.0.1", "10.7.0.2", "10.7.0.9"
Localities = dict[str, tuple[str, str, str]]  # endpoint address -> (region, zone, subzone)


@pytest.fixture
def zoned_node(kube: Cluster) -> Iterator[str]:
    """A Node in us-east1/us-east1-b/rack-1 (no kubelet: nothing but its labels is read)."""
    name = f"zoned-{secrets.token_hex(3)}"
    labels = {REGION: "us-east1", ZONE: "us-east1-b", SUBZONE: "rack-1", "kubernetes.io/os": "linux"}
    kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
    try:
        yield name
    finally:
        kube.delete("v1", "Node", "", name)


def make_shop(kube: Cluster, node_name: str) -> tuple[str, str]:
    """Namespace ``shop-*`` with Service cart and two running pods on ``node_name`` (one with a
    locality label of its own), the slice the controller makes; the mesh ConfigMap, selecting
    that namespace only, in ``system-*``. Returns (shop, system)."""
    shop, system = cart_namespaces(kube)
    # outlier detection turns locality failover on: the client's own locality orders the priorities
    kube.apply(
        {"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule", "metadata": {"name": "cart"},
         "spec": {"host": "cart", "trafficPolicy": {"outlierDetection": {"consecutive5xxErrors": 5}}}},
        namespace=shop,
    )  # fmt: skip
    own_label = {"istio-locality": "ap-south1.ap-south1-a"}
    pods = (("cart-0", NODE_IP, {"app": "cart"}), ("cart-1", LABELLED_IP, {"app": "cart", **own_label}),
            ("client", CLIENT_IP, {"app": "client"}))  # fmt: skip
    for name, ip, labels in pods:
        pod = {
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": node_name, "containers": [{"name": "app", "ports": [{"containerPort": 8080}]}]},
        }
        kube.run_pod(pod, ip, namespace=shop)
    wait_for_slice(kube, shop, "cart", {NODE_IP, LABELLED_IP})
    return shop, system


class Sidecar(DeltaStream):
    """A Delta ADS stream that subscribes and ACKs as Envoy does, keeping the last
    ClusterLoadAssignment of each cluster it was sent."""

    def __init__(self, channel: grpc.aio.Channel, namespace: str) -> None:
        ident = node(f"sidecar~{CLIENT_IP}~client.{namespace}~{namespace}.svc.cluster.local", {"NAMESPACE": namespace})
        super().__init__(channel, ident)
        self.assignments: dict[str, endpoint_pb2.ClusterLoadAssignment] = {}

    def received(self, resp: discovery_pb2.DeltaDiscoveryResponse) -> None:
        if resp.type_url == ENDPOINT:
            for r in resp.resources:
                self.assignments[r.name] = endpoint_pb2.ClusterLoadAssignment.FromString(r.resource.value)

    def priorities(self, cluster: str) -> dict[str, int]:
        cla = self.assignments.get(cluster)
        if cla is None:
            return {}
        return {lb.endpoint.address.socket_address.address: g.priority for g in cla.endpoints for lb in g.lb_endpoints}

    def localities(self, cluster: str) -> Localities:
        cla = self.assignments.get(cluster)
        if cla is None:
            return {}
        return {
            lb.endpoint.address.socket_address.address: (g.locality.region, g.locality.zone, g.locality.sub_zone)
            for g in cla.endpoints
            for lb in g.lb_endpoints
        }


@contextlib.asynccontextmanager
async def sidecar(port: int, namespace: str) -> AsyncIterator[Sidecar]:
    async with streaming(port, lambda channel: Sidecar(channel, namespace)) as (client, _):
        yield client


async def test_endpoints_take_their_nodes_locality_and_follow_its_relabelling(
    kube: Cluster, pilotfish_kubeconfig: Path, zoned_node: str
) -> None:
    shop, system = await asyncio.to_thread(make_shop, kube, zoned_node)
    cluster = f"outbound|80||cart.{shop}.svc.cluster.local"
    settings = serving(pilotfish_kubeconfig, system)
    labelled = ("ap-south1", "ap-south1-a", "")  # its istio-locality label, not its Node
    async with running(settings) as runtime, sidecar(runtime.xds.port, shop) as client:
        first = {NODE_IP: ("us-east1", "us-east1-b", "rack-1"), LABELLED_IP: labelled}
        await until(f"{cluster} in the Node's locality: {first}", lambda: client.localities(cluster) == first)
        sent = client.assignments[cluster]
        # the client's pod is on the same Node, and its xDS node names no locality: as istiod, the
        # proxy is where its pod's Node is, so the endpoint there comes first (priority 0)
        assert client.priorities(cluster) == {NODE_IP: 0, LABELLED_IP: 1}

        relabel = {"metadata": {"labels": {REGION: "us-west1", ZONE: "us-west1-a", SUBZONE: None}}}
        await asyncio.to_thread(kube.patch, "v1", "Node", "", zoned_node, relabel)
        moved = {NODE_IP: ("us-west1", "us-west1-a", ""), LABELLED_IP: labelled}
        await until(f"{cluster} pushed again in the Node's new locality: {moved}",
                    lambda: client.localities(cluster) == moved)  # fmt: skip
        assert client.assignments[cluster] is not sent

        # a Node change that leaves its topology labels as they are is no push of its pods
        again = client.assignments[cluster]
        await asyncio.to_thread(kube.patch, "v1", "Node", "", zoned_node, {"metadata": {"labels": {"team": "x"}}})
        await asyncio.sleep(1.0)
        assert client.assignments[cluster] is again
