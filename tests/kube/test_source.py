"""KubeSource: the emulator's objects become the same ConfigEvents a config dir makes, through
the same validation; status writes push nothing; the mesh ConfigMap is the MeshConfig; start
fails with one clear error when the API server cannot be used."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.config import new_client_from_config

from app.config.model import ConfigEvent, ConfigKey, EventType, Kind
from app.environment import Environment
from app.sources.kube.client import KubeConfigError, api_client
from app.sources.kube.source import KubeSource, KubeUnavailable
from tests.support.kube_api import KubeApi, kubeconfig_text

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
DOC = {doc.split("kind: ", 1)[1].split("\n", 1)[0]: doc for doc in MESH.split("---")}  # the first of each kind


@pytest.fixture
async def client(tmp_path: Path, api: KubeApi) -> AsyncIterator[ApiClient]:
    async with api.serve(tmp_path) as kubeconfig:
        yield await new_client_from_config(str(kubeconfig))


@pytest.fixture
def api() -> KubeApi:
    api = KubeApi(bookmark_interval=0.2)
    api.apply(MESH)
    return api


@pytest.fixture
async def source(client: ApiClient) -> AsyncIterator[KubeSource]:
    source = KubeSource(client, page_size=2)
    yield source
    await source.close()


async def next_events(source: KubeSource, watch: AsyncIterator[list[ConfigEvent]]) -> list[ConfigEvent]:
    return await asyncio.wait_for(anext(watch), 10)


async def test_start_reads_every_kind_as_the_file_source_would(source: KubeSource) -> None:
    events = await source.start()
    assert {e.type for e in events} == {EventType.ADD}
    keys = {e.obj.key for e in events}
    assert {
        ConfigKey(Kind.NAMESPACE, "", "shop"),
        ConfigKey(Kind.SERVICE, "shop", "cart"),
        ConfigKey(Kind.POD, "shop", "cart-0"),
        ConfigKey(Kind.ENDPOINT_SLICE, "shop", "cart-abc"),
        CART_DR,
        ConfigKey(Kind.MESH_CONFIG, "", "mesh"),
    } == keys  # the unrelated ConfigMap is not read (the informer selects istio only)
    env = Environment()
    env.apply(events)
    push = env.build_push_context(None)
    assert push.mesh.connect_timeout.seconds == 3
    assert push.endpoints("cart.shop.svc.cluster.local", "shop")

async def test_istio_kinds_are_read_in_the_newest_version_served(source: KubeSource, api: KubeApi) -> None:
    await source.start()
    assert any(r.startswith("GET /apis/networking.istio.io/v1/destinationrules?") for r in api.requests)


async def test_changes_and_deletes_arrive_and_status_writes_are_silent(source: KubeSource, api: KubeApi) -> None:
    await source.start()
    watch = source.watch()
    api.set_status("DestinationRule", "shop", "cart", {"conditions": [{"type": "Reconciled"}]})
    api.apply(DOC["DestinationRule"].replace("maxConnections: 5", "maxConnections: 9"))
    [update] = await next_events(source, watch)
    assert (update.type, update.obj.key) == (EventType.UPDATE, CART_DR)
    assert update.obj.spec.traffic_policy.connection_pool.tcp.max_connections == 9
    assert update.old is not None and update.old.spec.traffic_policy.connection_pool.tcp.max_connections == 5
    api.delete("DestinationRule", "shop", "cart")
    [gone] = await next_events(source, watch)
    assert (gone.type, gone.obj.key) == (EventType.DELETE, CART_DR)


async def test_an_invalid_object_is_reported_and_its_last_good_version_kept(source: KubeSource, api: KubeApi) -> None:
    await source.start()
    seen: list[ConfigEvent] = []

    async def collect() -> None:
        async for events in source.watch():
            seen.extend(events)

    async def until(check: Callable[[], bool]) -> None:
        async with asyncio.timeout(10):
            while not check():
                await asyncio.sleep(0.02)

    collector = asyncio.create_task(collect())
    try:
        api.apply(DOC["DestinationRule"].replace("maxConnections: 5", "maxConnections: lots"))
        await until(lambda: bool(source.rejections()))
        [error] = source.rejections()
        assert "DestinationRule" in str(error) and "shop/cart" in str(error) and "maxConnections" in str(error)
        assert seen == []  # nothing changed for the mesh
        dr = next(o for o in source.objects() if o.key == CART_DR)
        assert dr.spec.traffic_policy.connection_pool.tcp.max_connections == 5  # the last good one
        api.apply(DOC["DestinationRule"].replace("maxConnections: 5", "maxConnections: 6"))  # fixed
        await until(lambda: bool(seen))
        assert source.rejections() == [] and [e.type for e in seen] == [EventType.UPDATE]
    finally:
        collector.cancel()


async def test_istio_kinds_are_read_from_when_their_crd_is_installed_until_it_is_deleted(tmp_path: Path) -> None:
    # istiod's CRD watcher: a kind whose CRD is missing is no error; its informer starts with the CRD
    api = KubeApi(istio_crds=False)
    api.apply(MESH)  # the DestinationRule is stored, but no API serves it yet
    async with api.serve(tmp_path) as kubeconfig:
        source = KubeSource(await new_client_from_config(str(kubeconfig)))
        try:
            events = await source.start()
            keys = {e.obj.key for e in events}
            assert ConfigKey(Kind.SERVICE, "shop", "cart") in keys and CART_DR not in keys
            watch = source.watch()
            api.install_istio_crds(versions=("v1beta1", "v1alpha3"))  # an older Istio: v1 not served
            [added] = await next_events(source, watch)
            assert (added.type, added.obj.key, added.obj.api_version) == (
                EventType.ADD,
                CART_DR,
                "networking.istio.io/v1beta1",
            )
            api.delete("CustomResourceDefinition", "", "destinationrules.networking.istio.io")
            [gone] = await next_events(source, watch)
            assert (gone.type, gone.obj.key) == (EventType.DELETE, CART_DR)
        finally:
            await source.close()


async def test_a_crd_that_stops_serving_the_version_read_moves_the_informer_without_churn(
    source: KubeSource, api: KubeApi
) -> None:
    await source.start()
    watch = source.watch()
    api.install_istio_crds(versions=("v1beta1",))  # v1 no longer served
    other = DOC["DestinationRule"].replace("name: cart, namespace: shop", "name: other, namespace: shop")
    api.apply(other)
    [added] = await next_events(source, watch)  # the existing rule is neither removed nor updated
    assert (added.type, added.obj.key, added.obj.api_version) == (
        EventType.ADD,
        ConfigKey(Kind.DESTINATION_RULE, "shop", "other"),
        "networking.istio.io/v1beta1",
    )
    assert any(r.startswith("GET /apis/networking.istio.io/v1beta1/destinationrules?") for r in api.requests)


async def test_a_refused_token_is_one_clear_error(tmp_path: Path, api: KubeApi) -> None:
    async with api.serve(tmp_path) as kubeconfig:
        wrong = tmp_path / "wrong"
        wrong.write_text(kubeconfig.read_text().replace("pilotfish-test-token", "nope"))
        source = KubeSource(await api_client(wrong))
        try:
            with pytest.raises(KubeUnavailable, match=re.escape("refused pilotfish (HTTP 401)")):
                await source.start()
        finally:
            await source.close()


async def test_an_unreachable_server_and_a_missing_kubeconfig_are_clear_errors(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(kubeconfig_text("https://127.0.0.1:1", tmp_path / "none.pem", "t").replace(
        "certificate-authority", "insecure-skip-tls-verify: true\n    x"))
    with pytest.raises(KubeConfigError, match="no such file"):
        await api_client(tmp_path / "missing")
    source = KubeSource(await api_client(config))
    try:
        with pytest.raises(KubeUnavailable, match=re.escape("cannot reach the API server at https://127.0.0.1:1")):
            await source.start()
    finally:
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


async def test_after_drops_410s_errors_and_slowness_the_state_equals_the_emulators(
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
        api.drop_watches()
        churn(4)
        api.compact()  # 410 in the middle of the updates
        churn(5)
        await converged("410 Gone")
        dr = held[CART_DR].obj
        assert dr.spec.traffic_policy.connection_pool.tcp.max_connections == 15  # the latest version
    finally:
        follower.cancel()
