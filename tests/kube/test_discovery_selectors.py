"""MeshConfig discoverySelectors, with istiod's rules (pkg/kube/namespace/filter.go): only the
namespaces whose labels match a selector are read, Istio config included; a namespace whose
labels start or stop matching brings its objects in or takes them out; a selector change in
the mesh ConfigMap re-scopes everything; cluster-scoped objects and the ConfigMap are always read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio.config import new_client_from_config

from app.config.model import ConfigEvent, ConfigKey, EventType, Kind
from app.sources.kube.discovery import selects
from app.sources.kube.source import KubeSource
from app.sources.mesh_file import MeshFileSource
from tests.support.kube_api import KubeApi


def namespace(name: str, **labels: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def service(name: str, ns: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterIP": "10.96.0.9", "ports": [{"name": "http", "port": 80}]},
    }


def rule(ns: str) -> dict[str, object]:
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "DestinationRule",
        "metadata": {"name": "r", "namespace": ns},
        "spec": {"host": f"svc.{ns}.svc.cluster.local"},
    }


def mesh_config(selectors: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "istio", "namespace": "istio-system"},
        "data": {"mesh": f"rootNamespace: istio-system\n{selectors}"},
    }


SELECT_TEAM_SHOP = "discoverySelectors:\n- matchLabels: {team: shop}\n"


def test_label_selector_semantics() -> None:
    assert selects([], {})
    assert selects([{"matchLabels": {"a": "1"}}, {"matchLabels": {"b": "2"}}], {"b": "2"})  # any selector
    both = {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}
    assert selects([both], {"a": "1", "env": "prod"}) and not selects([both], {"a": "1", "env": "dev"})
    assert selects([{"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}], {})
    assert not selects([{"matchExpressions": [{"key": "x", "operator": "Exists"}]}], {})
    assert selects([{"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["1"]}]}], {})
    assert not selects([{"matchExpressions": [{"key": "x", "operator": "Bogus"}]}], {"x": "1"})
    assert selects([{}], {"anything": "x"})  # an empty selector matches every namespace, as in Kubernetes


@pytest.fixture
def api() -> KubeApi:
    api = KubeApi(bookmark_interval=0.2)
    api.apply(namespace("shop", team="shop"), namespace("other"), namespace("istio-system"))
    api.apply(service("cart", "shop"), service("ads", "other"), rule("shop"), rule("other"))
    api.apply(mesh_config(SELECT_TEAM_SHOP))
    return api


@pytest.fixture
async def source(tmp_path: Path, api: KubeApi) -> AsyncIterator[KubeSource]:
    async with api.serve(tmp_path) as kubeconfig:
        source = KubeSource(await new_client_from_config(str(kubeconfig)))
        yield source
        await source.close()


async def changes(watch: AsyncIterator[list[ConfigEvent]]) -> set[tuple[EventType, ConfigKey]]:
    events = await asyncio.wait_for(anext(watch), 10)
    return {(e.type, e.obj.key) for e in events}


SHOP = {
    ConfigKey(Kind.NAMESPACE, "", "shop"),
    ConfigKey(Kind.SERVICE, "shop", "cart"),
    ConfigKey(Kind.DESTINATION_RULE, "shop", "r"),
}
OTHER = {
    ConfigKey(Kind.NAMESPACE, "", "other"),
    ConfigKey(Kind.SERVICE, "other", "ads"),
    ConfigKey(Kind.DESTINATION_RULE, "other", "r"),
}
MESH = ConfigKey(Kind.MESH_CONFIG, "", "mesh")


async def test_only_selected_namespaces_are_read_and_relabelling_moves_objects(
    source: KubeSource, api: KubeApi
) -> None:
    keys = {e.obj.key for e in await source.start()}
    assert keys == SHOP | {MESH}  # istio-system is not selected either; the ConfigMap is read anyway
    watch = source.watch()
    api.apply(namespace("other", team="shop"))
    assert await changes(watch) == {(EventType.ADD, k) for k in OTHER}
    api.apply(namespace("shop"))  # no longer selected
    assert await changes(watch) == {(EventType.DELETE, k) for k in SHOP}
    api.apply(service("late", "shop"))  # in a namespace not read: nothing
    api.apply(service("late", "other"))
    assert await changes(watch) == {(EventType.ADD, ConfigKey(Kind.SERVICE, "other", "late"))}


async def test_a_selector_change_in_the_mesh_config_rescopes_everything(source: KubeSource, api: KubeApi) -> None:
    await source.start()
    watch = source.watch()
    api.apply(mesh_config(""))  # no selectors: every namespace
    got = await changes(watch)
    assert {k for t, k in got if t is EventType.ADD} == OTHER | {ConfigKey(Kind.NAMESPACE, "", "istio-system")}
    assert (EventType.UPDATE, MESH) in got
    api.apply(mesh_config("discoverySelectors:\n- matchExpressions: [{key: team, operator: DoesNotExist}]\n"))
    got = await changes(watch)
    assert {k for t, k in got if t is EventType.DELETE} == SHOP


async def test_a_mesh_config_given_from_a_file_scopes_instead_of_the_configmap(tmp_path: Path, api: KubeApi) -> None:
    # serve --mesh-config FILE: the ConfigMap is not read; the file's selectors scope
    mesh_file = tmp_path / "mesh.yaml"
    mesh_file.write_text("discoverySelectors:\n- matchLabels: {kubernetes.io/metadata.name: other}\n")
    files = MeshFileSource(mesh_file)
    [mesh_event] = await files.start()
    async with api.serve(tmp_path / "kube") as kubeconfig:
        source = KubeSource(await new_client_from_config(str(kubeconfig)), mesh_from_configmap=False)
        try:
            source.use_mesh_config(mesh_event.obj.spec)
            api.apply(namespace("other", **{"kubernetes.io/metadata.name": "other"}))
            keys = {e.obj.key for e in await source.start()}
            assert keys == OTHER  # no MeshConfig from the ConfigMap, nothing of shop
            watch = source.watch()
            mesh_file.write_text("discoverySelectors: []\n")
            [changed] = await asyncio.wait_for(anext(files.watch()), 10)
            source.use_mesh_config(changed.obj.spec)
            got = await changes(watch)
            assert {k for t, k in got if t is EventType.ADD} == SHOP | {ConfigKey(Kind.NAMESPACE, "", "istio-system")}
        finally:
            await source.close()


async def test_a_mesh_file_that_does_not_load_keeps_the_last_good_one(tmp_path: Path) -> None:
    mesh_file = tmp_path / "mesh.yaml"
    mesh_file.write_text("connectTimeout: 3s\n")
    files = MeshFileSource(mesh_file)
    [event] = await files.start()
    assert event.obj.spec.connect_timeout.seconds == 3
    watch = files.watch()
    mesh_file.write_text("connectTimeout: soon\n")
    reload = asyncio.ensure_future(anext(watch))
    async with asyncio.timeout(10):
        while not files.rejections():
            await asyncio.sleep(0.05)
    assert "connectTimeout" in str(files.rejections()[0])
    assert files.objects()[0].spec.connect_timeout.seconds == 3
    mesh_file.write_text("connectTimeout: 4s\n")
    [fixed] = await asyncio.wait_for(reload, 10)
    assert fixed.type is EventType.UPDATE and fixed.obj.spec.connect_timeout.seconds == 4
    assert files.rejections() == []
