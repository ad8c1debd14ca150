"""KubeSource under faults a real API server cannot be made to produce on cue, against the
emulator (tests/support/kube_api.py): watches cut mid-stream, runs of error statuses and a slow
server, in the middle of changes; afterwards pilotfish holds exactly what the server holds. The
rest of KubeSource's contract (and a real ``410 Gone``, test_informer.py) runs against the real
kube-apiserver."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.config.objects import ConfigEvent, ConfigKey, EventType, Kind
from app.sources.kube.client import api_client
from app.sources.kube.source import KubeSource
from tests.support.kube_api import KubeApi

MESH = """
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {istio-injection: enabled}}
---
apiVersion: v1
kind: Service
metadata: {name: cart, namespace: shop}
spec:
  clusterIP: 10.96.1.1
  selector: {app: cart}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: cart-0, namespace: shop, labels: {app: cart}}
spec: {serviceAccountName: cart}
status: {podIP: 10.1.1.1, phase: Running}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: cart-abc, namespace: shop, labels: {kubernetes.io/service-name: cart}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.1.1.1], conditions: {ready: true}, targetRef: {kind: Pod, name: cart-0, namespace: shop}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: cart, namespace: shop}
spec:
  host: cart
  trafficPolicy: {connectionPool: {tcp: {maxConnections: 5}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: istio, namespace: istio-system}
data:
  mesh: |
    defaultConfig: {discoveryAddress: istiod.istio-system.svc:15012}
    connectTimeout: 3s
---
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated, namespace: istio-system}
data: {x: y}
"""
CART_DR = ConfigKey(Kind.DESTINATION_RULE, "shop", "cart")
CART_DR = ConfigKey(Kind.DESTINATION_RULE, "shop", "cart")
DOC = {doc.split("kind: ", 1)[1].split("\n", 1)[0]: doc for doc in MESH.split("---")}  # the first of each kind


@pytest.fixture
def api() -> KubeApi:
    api = KubeApi()
    api.apply(MESH)
    return api


@pytest.fixture
async def source(tmp_path: Path, api: KubeApi) -> AsyncIterator[KubeSource]:
    async with api.serve(tmp_path) as kubeconfig:
        source = KubeSource(api_client(kubeconfig), page_size=2)
        yield source
        await source.close()


def emulator_keys(api: KubeApi) -> dict[ConfigKey, str]:
    """What pilotfish should hold: every object the emulator has that pilotfish reads, with its
    resourceVersion (the mesh ConfigMap as the MeshConfig)."""
    out: dict[ConfigKey, str] = {}
    for (_, plural), objects in api.objects.items():
        for obj in objects.values():
            meta, kind = obj["metadata"], obj["kind"]
            if plural == "customresourcedefinitions" or (kind == "ConfigMap" and meta["name"] != "istio"):
                continue
            key = ConfigKey(Kind.MESH_CONFIG, "", "mesh") if kind == "ConfigMap" else ConfigKey(
                Kind(kind), meta.get("namespace", "") if kind != "Namespace" else "", meta["name"]
            )
            out[key] = "" if kind == "ConfigMap" else meta["resourceVersion"]  # a MeshConfig has none
    return out


async def test_after_drops_errors_and_slowness_the_state_equals_the_emulators(
    source: KubeSource, api: KubeApi
) -> None:
    held: dict[ConfigKey, ConfigEvent] = {e.obj.key: e for e in await source.start()}

    async def follow() -> None:
        async for events in source.watch():
            for e in events:
                if e.type is EventType.DELETE:
                    held.pop(e.obj.key, None)
                else:
                    held[e.obj.key] = e

    async def converged(step: str) -> None:
        try:
            async with asyncio.timeout(15):
                while versions() != emulator_keys(api):
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(f"after {step}: {versions()} != {emulator_keys(api)}") from None

    def versions() -> dict[ConfigKey, str]:
        return {key: e.obj.meta.resource_version for key, e in held.items()}

    def churn(i: int) -> None:
        api.apply(DOC["Service"].replace("name: cart,", f"name: cart-{i},"))
        api.apply(DOC["DestinationRule"].replace("maxConnections: 5", f"maxConnections: {10 + i}"))
        if i % 2 and i > 1:
            api.delete("Service", "shop", f"cart-{i - 1}")

    follower = asyncio.create_task(follow())
    try:
        api.drop_watches()
        churn(1)
        await converged("a dropped watch")
        api.fail(3, 500)
        api.drop_watches()
        churn(2)
        await converged("API errors")
        api.delay = 0.3
        churn(3)
        api.drop_watches()
        await converged("a slow API server")
        api.delay = 0.0
        churn(4)
        api.drop_watches()
        churn(5)
        await converged("a second drop in the middle of the updates")
        dr = held[CART_DR].obj
        assert dr.spec.traffic_policy.connection_pool.tcp.max_connections == 15  # the latest version
    finally:
        follower.cancel()
