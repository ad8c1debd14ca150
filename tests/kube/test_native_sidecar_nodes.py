"""ENABLE_NATIVE_SIDECARS=auto against a real kube-apiserver, as istiod decides it: pilotfish
lists the Nodes with the chart's RBAC, and the API server's calls to its webhook store a pod with
istio-proxy as a native sidecar (an init container, restartPolicy Always) while every node's
kubelet is 1.33 or newer, and as a classic container once a 1.32 node joins; a pod bound to a
1.33 node still gets one. There is no kubelet: the test writes the Nodes' status (their kubelet
version) itself, through the status subresource."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings
from tests.kube.test_injection_webhook import ADMISSION, KIND, chart_injector
from tests.support.cluster import Cluster
from tests.support.runtime import running

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "hello", "labels": {"app": "hello"}},
    "spec": {"containers": [{"name": "hello", "image": "example.com/hello:1"}]},
}
NEW, OLD = "native-sidecars-133", "native-sidecars-132"


@pytest.fixture
def add_node(kube: Cluster) -> Iterator[Callable[[str, str], None]]:
    """Adds a Node with a kubelet version (the cluster's node-1 reports the API server's, 1.36);
    the nodes added are gone after, as other tests share the cluster."""
    made: list[str] = []

    def add(name: str, version: str) -> None:
        kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        made.append(name)
        kube.patch_status("v1", "Node", "", name, {"nodeInfo": {"kubeletVersion": version}})

    try:
        yield add
    finally:
        for name in made:
            kube.delete("v1", "Node", "", name)


def proxy(pod: dict[str, Any]) -> str:
    """Where the pod's istio-proxy is: "native" (an init container with restartPolicy Always),
    "classic" (a container) or "none"."""
    spec = pod["spec"]
    inits = {c["name"]: c for c in spec.get("initContainers", [])}
    if "istio-proxy" in inits:
        assert inits["istio-proxy"]["restartPolicy"] == "Always"
        return "native"
    return "classic" if any(c["name"] == "istio-proxy" for c in spec["containers"]) else "none"


async def test_native_sidecars_only_while_every_node_can_run_them(
    kube: Cluster, add_node: Callable[[str, str], None], pilotfish_kubeconfig: Path, tmp_path: Path
) -> None:
    settings = Settings(
        config_dir=None,
        kubeconfig=pilotfish_kubeconfig,
        xds_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        secure_xds_address="127.0.0.1:0",
        webhook_address="127.0.0.1:0",
        revision="default",
        ca_dir=tmp_path / "ca",
        kube_controllers=False,
    )
    namespace = kube.namespace("native", labels={"istio-injection": "enabled"})
    path = kube.path("v1", "Pod", namespace)
    add_node(NEW, "v1.33.0")

    def dry_run(pod: dict[str, Any]) -> str:
        probe = {**pod, "metadata": {**pod["metadata"], "name": "dry-run"}}
        return proxy(kube.request("POST", path, probe, query={"dryRun": "All"}))

    async with running(settings) as runtime:
        assert runtime.webhook is not None
        config = chart_injector(f"https://127.0.0.1:{runtime.webhook.port}/inject")
        try:
            await asyncio.to_thread(kube.apply, config)
            # the caBundle patched and the configuration taken up: a dry run shows when
            called = "the API server calling the injector"
            await asyncio.to_thread(kube.wait_for, called, lambda: dry_run(POD) != "none")
            stored = await asyncio.to_thread(kube.create, POD, namespace)
            assert proxy(stored) == "native", stored["spec"]  # node-1 1.36, the test's node 1.33

            await asyncio.to_thread(add_node, OLD, "v1.32.9-gke.100")
            await asyncio.to_thread(
                kube.wait_for, "the 1.32 node seen by the injector", lambda: dry_run(POD) == "classic"
            )
            second = {**POD, "metadata": {**POD["metadata"], "name": "hello-2"}}
            stored = await asyncio.to_thread(kube.create, second, namespace)
            assert proxy(stored) == "classic", stored["spec"]
            names = [c["name"] for c in stored["spec"]["initContainers"] + stored["spec"]["containers"]]
            assert names == ["istio-init", "hello", "istio-proxy"]
            # a pod bound to the 1.33 node runs there: its kubelet decides, as istiod's
            bound = {**POD, "spec": {**POD["spec"], "nodeName": NEW}}
            assert await asyncio.to_thread(dry_run, bound) == "native"
            assert await asyncio.to_thread(dry_run, {**POD, "spec": {**POD["spec"], "nodeName": OLD}}) == "classic"
        finally:
            await asyncio.to_thread(kube.delete, ADMISSION, KIND, "", config["metadata"]["name"])
