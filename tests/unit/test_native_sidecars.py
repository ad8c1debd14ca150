"""Native sidecars as istiod decides them (app/inject/native_sidecars.py): ENABLE_NATIVE_SIDECARS
read as istiod's tri-state, kubelet versions parsed as hashicorp/go-version parses them (the
expected minors below are what go-version v1.9.0, istiod's pin, answers: checked against it),
and DetectNativeSidecar's table: the pod's node if bound and known, else every node."""

from __future__ import annotations

import pytest

from app.config.objects import EventType
from app.inject.native_sidecars import (
    KubeletVersions,
    NativeSidecarMode,
    detect_native_sidecar,
    kubelet_minor,
    native_sidecar_mode,
)
from app.settings import Settings
from app.sources.kube.nodes import node_kubelet
from app.sources.kube.store import Store

AUTO, ENABLED, DISABLED = NativeSidecarMode.AUTO, NativeSidecarMode.ENABLED, NativeSidecarMode.DISABLED


@pytest.mark.parametrize(
    ("version", "minor"),
    [
        ("v1.33.0", 33),
        ("v1.32.9-gke.100", 32),
        ("v1.34.0+k3s1", 34),
        ("v1.30.14-eks-931bdca", 30),
        ("v1.35.1+rke2r1", 35),
        ("v1.33.0-rc.1", 33),  # istiod reads only the minor: a 1.33 pre-release passes
        ("v1.33.0-alpha.1+meta.2", 33),
        ("1.33", 33),
        ("v1.0033.0", 33),
        ("1.33-beta", 33),
        ("v1.33.0-", 33),
        ("v1", 0),  # a missing segment is 0
        ("garbage", None),
        ("", None),  # a node whose kubelet has not reported
        ("V1.33.0", None),
        ("v 1.33.0", None),
        ("1.33.0.", None),
        ("v1..33", None),
        ("v1.33.0+", None),
        ("v1.33.0_x", None),
        ("v1.33.0\n", None),  # go's $ is the end of the text
        ("v1.99999999999999999999.0", None),  # past int64: ParseInt's range error
    ],
)
def test_kubelet_versions_parse_as_go_version_parses_them(version: str, minor: int | None) -> None:
    assert kubelet_minor(version) == minor


def test_the_mode_is_istiods_tri_state_and_an_unknown_value_turns_native_sidecars_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert Settings.from_env(None, {}).native_sidecars is AUTO
    assert Settings.from_env(None, {"ENABLE_NATIVE_SIDECARS": "true"}).native_sidecars is ENABLED
    assert Settings.from_env(None, {"ENABLE_NATIVE_SIDECARS": "false"}).native_sidecars is DISABLED
    with caplog.at_level("WARNING", logger="app.inject.native_sidecars"):
        # istiod compares the exact strings: "True" and "1" are unknown
        assert Settings.from_env(None, {"ENABLE_NATIVE_SIDECARS": "True"}).native_sidecars is DISABLED
        assert native_sidecar_mode("1") is DISABLED
    assert [r.getMessage() for r in caplog.records] == [
        f"ENABLE_NATIVE_SIDECARS={v!r}: want true, false or auto; native sidecars are off" for v in ("True", "1")
    ]


def kubelets(**nodes: str) -> KubeletVersions:
    versions = KubeletVersions()
    for name, version in nodes.items():
        versions.set(name, version)
    return versions


NEW_CLUSTER = {"a": "v1.33.0", "b": "v1.34.0+k3s1"}
MIXED_CLUSTER = {**NEW_CLUSTER, "old": "v1.32.9-gke.100"}


@pytest.mark.parametrize(
    ("mode", "nodes", "node_name", "native"),
    [
        (ENABLED, None, "", True),
        (DISABLED, None, "", False),
        (ENABLED, MIXED_CLUSTER, "old", True),  # true and false ask no node
        (DISABLED, NEW_CLUSTER, "a", False),
        (AUTO, None, "", False),  # no node client (offline, or without Kubernetes)
        (AUTO, {}, "", True),  # no nodes: none holds it back
        (AUTO, NEW_CLUSTER, "", True),
        (AUTO, {"a": "v1.33.0"}, "", True),
        (AUTO, MIXED_CLUSTER, "", False),  # an unbound pod may land on the old node
        (AUTO, MIXED_CLUSTER, "a", True),  # bound to a new node in a mixed cluster
        (AUTO, MIXED_CLUSTER, "old", False),
        (AUTO, {"old": "v1.30.0", "a": "v1.33.0"}, "old", False),
        (AUTO, {**NEW_CLUSTER, "old": "v1.32.0"}, "b", True),
        (AUTO, {"a": "v1.33.0", "z": "garbage"}, "", False),  # unparsable counts as too old
        (AUTO, {"a": "v1.33.0", "z": "garbage"}, "a", True),
        (AUTO, {"a": "v1.33.0", "z": ""}, "", False),
        (AUTO, NEW_CLUSTER, "gone", True),  # bound to a node not seen: every node decides
        (AUTO, MIXED_CLUSTER, "gone", False),
        (AUTO, {"new": "v1.34.0"}, "new", True),
    ],
)
def test_detect_native_sidecar(
    mode: NativeSidecarMode, nodes: dict[str, str] | None, node_name: str, native: bool
) -> None:
    versions = None if nodes is None else kubelets(**nodes)
    assert detect_native_sidecar(mode, versions, node_name) is native


def test_a_node_upgraded_replaced_or_removed_changes_the_decision() -> None:
    versions = kubelets(**MIXED_CLUSTER)
    assert not versions.every_node_supports and len(versions) == 3
    versions.set("old", "v1.33.2")  # its kubelet upgraded
    assert versions.every_node_supports and versions.native_sidecars()
    versions.set("a", "v1.31.0")  # downgraded (a node replaced under the same name)
    versions.set("a", "v1.31.1")
    assert not versions.native_sidecars() and versions.native_sidecars("b")
    versions.delete("a")
    versions.delete("a")  # deleting what is gone changes nothing
    assert versions.every_node_supports and len(versions) == 2
    versions.delete("old")
    versions.delete("b")
    assert versions.native_sidecars() and len(versions) == 0


def test_the_store_keeps_a_nodes_name_and_kubelet_version_only_and_sees_an_upgrade() -> None:
    """A Node's images, conditions and capacity are most of it; the store keeps two fields, and a
    kubelet upgrade (a status write) is a change though other status writes are not."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "resourceVersion": "7", "labels": {"zone": "a"}, "annotations": {"x": "y"}},
        "spec": {"podCIDR": "10.0.0.0/24"},
        "status": {
            "nodeInfo": {"kubeletVersion": "v1.32.1", "osImage": "Ubuntu"},
            "images": [{"names": ["example.com/big:1"], "sizeBytes": 1 << 30}],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    kept = node_kubelet(node)
    assert kept == {"kind": "Node", "metadata": {"name": "n1"}, "status": {"nodeInfo": {"kubeletVersion": "v1.32.1"}}}
    store = Store()
    assert [d.change for d in store.relist([kept])] == [EventType.ADD]
    heartbeat = {**node, "status": {**node["status"], "conditions": [{"type": "Ready", "status": "False"}]}}
    assert store.apply(EventType.UPDATE, node_kubelet(heartbeat)) is None
    upgraded = {**node, "status": {**node["status"], "nodeInfo": {"kubeletVersion": "v1.33.0"}}}
    delta = store.apply(EventType.UPDATE, node_kubelet(upgraded))
    assert delta is not None and delta.change is EventType.UPDATE
    assert node_kubelet({"kind": "Node", "metadata": {"name": "bare"}})["status"]["nodeInfo"]["kubeletVersion"] == ""
