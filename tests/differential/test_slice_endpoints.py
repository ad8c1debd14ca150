"""EndpointSlice endpoints the API server takes that the endpointslice controller never writes
(a selector-less Service's own slice, as users and the mirroring controller make them), served
by istiod and pilotfish from one real API server: the same endpoints, with the same health, in
the same EDS. istiod reads a condition that is not set as true (endpointHealthStatus: an
endpoint neither ready nor said to be not terminating is terminating, never sent) and leaves out
an endpoint whose targetRef names a Pod it does not know (getPod)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from envoy.config.endpoint.v3 import endpoint_pb2

from app.xds.client import node
from app.xds.fetch import fetch
from tests.differential.istiod import running_istiod
from tests.e2e.istio_proxy import istio_version
from tests.kube.common import serving
from tests.support.cluster import Cluster
from tests.support.runtime import running


def endpoint(ip: str, conditions: dict[str, bool], target: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"addresses": [ip], "conditions": conditions}
    if target is not None:
        out["targetRef"] = {"kind": "Pod", **target}
    return out


def endpoints(namespace: str) -> list[dict[str, Any]]:
    return [
        endpoint("10.50.0.1", {"ready": True}, {"name": "known", "namespace": namespace}),
        endpoint("10.50.0.2", {}),  # nothing set: ready
        endpoint("10.50.0.3", {"ready": False}),  # the mirroring controller's notReadyAddresses
        endpoint("10.50.0.4", {"ready": False, "serving": False, "terminating": False}),  # an unready pod
        endpoint("10.50.0.5", {"ready": False, "terminating": True}),
        endpoint("10.50.0.6", {"ready": True}, {"name": "ghost", "namespace": namespace}),  # no such Pod
        endpoint("10.50.0.7", {"ready": True}, {"name": "known"}),  # a targetRef without its namespace
    ]


def health(resources: dict[str, Any], cluster: str) -> dict[str, int]:
    la = endpoint_pb2.ClusterLoadAssignment.FromString(resources["eds"][cluster].value)
    return {
        e.endpoint.address.socket_address.address: e.health_status for group in la.endpoints for e in group.lb_endpoints
    }


async def test_hand_made_slice_endpoints_are_served_as_istiod_serves_them(
    kube: Cluster, pilotfish_kubeconfig: Path, tmp_path: Path
) -> None:
    shop, system = kube.namespace("shop"), kube.namespace("system")
    mesh = f"discoverySelectors: [{{matchLabels: {{kubernetes.io/metadata.name: {shop}}}}}]\n"
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "istio"}, "data": {"mesh": mesh}},
               namespace=system)  # fmt: skip
    client = node(
        f"sidecar~10.50.9.9~client.{shop}~{shop}.svc.cluster.local",
        {"NAMESPACE": shop, "ISTIO_VERSION": istio_version(), "CLUSTER_ID": "Kubernetes", "LABELS": {}},
    )
    cluster = f"outbound|80||hand.{shop}.svc.cluster.local"
    with running_istiod(kube, system, tmp_path / "istiod") as istiod:
        # the Service and Pod before the slice, each read by then: istiod builds a slice's
        # endpoints against the Service it knows at that moment (without one, a terminating
        # endpoint is unhealthy, and stays so), pilotfish against the Service whenever it comes
        kube.apply(
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hand"},
             "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}},
            namespace=shop,
        )  # fmt: skip
        kube.run_pod({"metadata": {"name": "known"}}, "10.50.0.1", namespace=shop)
        await asyncio.sleep(2)
        kube.apply(
            {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
             "metadata": {"name": "hand-1", "labels": {"kubernetes.io/service-name": "hand",
                                                      "endpointslice.kubernetes.io/managed-by": "someone"}},
             "addressType": "IPv4", "ports": [{"name": "http", "port": 8080}], "endpoints": endpoints(shop)},
            namespace=shop,
        )  # fmt: skip
        await asyncio.sleep(2)
        from_istiod = health(await fetch(istiod.xds_address, client), cluster)
    async with running(serving(pilotfish_kubeconfig, system)) as runtime:
        from_pilotfish = health(await fetch(f"127.0.0.1:{runtime.xds.port}", client), cluster)
    assert from_pilotfish == from_istiod
    assert set(from_istiod) == {"10.50.0.1", "10.50.0.2", "10.50.0.4"}  # what this test is about
