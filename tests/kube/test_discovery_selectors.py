"""MeshConfig discoverySelectors against a real kube-apiserver, with istiod's rules
(pkg/kube/namespace/filter.go): only the namespaces whose labels match a selector are read,
Istio config included; a namespace relabelled to match or not brings its objects in or takes
them out; a selector change in the mesh ConfigMap re-scopes everything; cluster-scoped objects
and the ConfigMap are always read."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.config.objects import ConfigEvent, ConfigKey, EventType, Kind
from app.sources.kube.client import api_client
from app.sources.kube.discovery import selects
from app.sources.kube.source import KubeSource
from app.sources.mesh_file import MeshFileSource
from tests.kube.common import changes_until, ours, started
from tests.support.cluster import Cluster


def service(name: str, ns: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ports": [{"name": "http", "port": 80}]},
    }


def rule(ns: str) -> dict[str, object]:
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "DestinationRule",
        "metadata": {"name": "r", "namespace": ns},
        "spec": {"host": f"svc.{ns}.svc.cluster.local"},
    }


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


@dataclass(frozen=True)
class Namespaces:
    """The test's namespaces: shop (labelled ``team`` = the test's own value), other, system
    (the root namespace, holding the mesh ConfigMap)."""

    shop: str
    other: str
    system: str
    team: str  # a label value no other test's namespace has

    def all(self) -> tuple[str, str, str]:
        return (self.shop, self.other, self.system)

    def keys(self, ns: str) -> set[ConfigKey]:
        return {
            ConfigKey(Kind.NAMESPACE, "", ns),
            ConfigKey(Kind.SERVICE, ns, "cart" if ns == self.shop else "ads"),
            ConfigKey(Kind.DESTINATION_RULE, ns, "r"),
        }

    def mesh_config(self, selectors: str) -> dict[str, object]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "istio", "namespace": self.system},
            "data": {"mesh": f"rootNamespace: {self.system}\n{selectors}"},
        }

    def select_team(self) -> str:
        return f"discoverySelectors:\n- matchLabels: {{team: {self.team}}}\n"


MESH = ConfigKey(Kind.MESH_CONFIG, "", "mesh")


@pytest.fixture
def spaces(kube: Cluster) -> Namespaces:
    team = f"shop-{secrets.token_hex(4)}"
    spaces = Namespaces(kube.namespace("shop", {"team": team}), kube.namespace("other"), kube.namespace("system"), team)
    kube.apply(service("cart", spaces.shop), service("ads", spaces.other), rule(spaces.shop), rule(spaces.other))
    kube.apply(spaces.mesh_config(spaces.select_team()))
    return spaces


@pytest.fixture
async def source(spaces: Namespaces, pilotfish_kubeconfig: Path) -> AsyncIterator[KubeSource]:
    source = KubeSource(api_client(pilotfish_kubeconfig), system_namespace=spaces.system)
    yield source
    await source.close()


def relabel(kube: Cluster, ns: str, **labels: str | None) -> None:
    kube.patch("v1", "Namespace", "", ns, {"metadata": {"labels": labels}})


async def changes(
    watch: AsyncIterator[list[ConfigEvent]], spaces: Namespaces, expected: set[tuple[EventType, ConfigKey]]
) -> set[tuple[EventType, ConfigKey]]:
    """The test's namespaces' changes, gathered until ``expected`` have all come."""
    return await changes_until(watch, spaces.all(), lambda got: expected <= got)


async def test_only_selected_namespaces_are_read_and_relabelling_moves_objects(
    source: KubeSource, spaces: Namespaces, kube: Cluster
) -> None:
    mine = ours(spaces.all())
    keys = {e.obj.key for e in await started(source) if mine(e.obj.key)}
    assert keys == spaces.keys(spaces.shop) | {MESH}  # the system namespace is not selected; its ConfigMap is read
    watch = source.watch()
    relabel(kube, spaces.other, team=spaces.team)
    expected = {(EventType.ADD, k) for k in spaces.keys(spaces.other)}
    assert await changes(watch, spaces, expected) == expected
    relabel(kube, spaces.shop, team=None)  # no longer selected
    expected = {(EventType.DELETE, k) for k in spaces.keys(spaces.shop)}
    assert await changes(watch, spaces, expected) == expected
    kube.apply(service("late", spaces.shop))  # in a namespace not read: nothing
    kube.apply(service("late", spaces.other))
    expected = {(EventType.ADD, ConfigKey(Kind.SERVICE, spaces.other, "late"))}
    assert await changes(watch, spaces, expected) == expected


async def test_a_selector_change_in_the_mesh_config_rescopes_everything(
    source: KubeSource, spaces: Namespaces, kube: Cluster
) -> None:
    await started(source)
    watch = source.watch()
    kube.apply(spaces.mesh_config(""))  # no selectors: every namespace
    added = spaces.keys(spaces.other) | {ConfigKey(Kind.NAMESPACE, "", spaces.system)}
    got = await changes(watch, spaces, {(EventType.ADD, k) for k in added} | {(EventType.UPDATE, MESH)})
    assert {k for t, k in got if t is EventType.ADD} == added
    kube.apply(spaces.mesh_config("discoverySelectors:\n- matchExpressions: [{key: team, operator: DoesNotExist}]\n"))
    got = await changes(watch, spaces, {(EventType.DELETE, k) for k in spaces.keys(spaces.shop)})
    assert {k for t, k in got if t is EventType.DELETE} == spaces.keys(spaces.shop)


async def test_a_mesh_config_given_from_a_file_scopes_instead_of_the_configmap(
    tmp_path: Path, spaces: Namespaces, pilotfish_kubeconfig: Path
) -> None:
    # serve --mesh-config FILE: the ConfigMap is not read; the file's selectors scope (here by
    # the label every namespace carries)
    mesh_file = tmp_path / "mesh.yaml"
    mesh_file.write_text(f"discoverySelectors:\n- matchLabels: {{kubernetes.io/metadata.name: {spaces.other}}}\n")
    files = MeshFileSource(mesh_file)
    [mesh_event] = await files.start()
    client = api_client(pilotfish_kubeconfig)
    source = KubeSource(client, mesh_from_configmap=False, system_namespace=spaces.system)
    try:
        source.use_mesh_config(mesh_event.obj.spec)
        mine = ours(spaces.all())
        keys = {e.obj.key for e in await started(source) if mine(e.obj.key)}
        assert keys == spaces.keys(spaces.other)  # no MeshConfig from the ConfigMap, nothing of shop
        watch = source.watch()
        mesh_file.write_text("discoverySelectors: []\n")
        [changed] = await asyncio.wait_for(anext(files.watch()), 10)
        source.use_mesh_config(changed.obj.spec)
        added = spaces.keys(spaces.shop) | {ConfigKey(Kind.NAMESPACE, "", spaces.system)}
        got = await changes(watch, spaces, {(EventType.ADD, k) for k in added})
        assert {k for t, k in got if t is EventType.ADD} == added
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


async def test_a_namespace_relabelled_in_brings_its_objects_in_steps(
    source: KubeSource, spaces: Namespaces, kube: Cluster, tmp_path: Path
) -> None:
    """What a relabel brings in at once (every object of the namespace) comes out of ``watch``
    in steps, with a turn of the event loop between: 600 DestinationRules here (3,000
    ServiceEntries in one step took 0.3 s of the loop to apply)."""
    other = spaces.other
    rules = [{**rule(other), "metadata": {"name": f"r{i}", "namespace": other}} for i in range(600)]
    listed = tmp_path / "rules.json"
    listed.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": rules}))
    await asyncio.to_thread(kube.kubectl, "create", "-f", str(listed))
    await started(source)
    watch = source.watch()
    relabel(kube, other, team=spaces.team)
    sizes: list[int] = []
    came: set[ConfigKey] = set()
    namespace = ConfigKey(Kind.NAMESPACE, "", other)
    async with asyncio.timeout(30):
        while len(came) < 603:  # the 600, the first rule, the Service and the Namespace
            events = await anext(watch)
            sizes.append(len(events))
            came |= {e.obj.key for e in events if e.obj.key.namespace == other or e.obj.key == namespace}
    assert max(sizes) <= 256 < sum(sizes), sizes
