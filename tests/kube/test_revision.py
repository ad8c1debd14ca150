"""pilotfish as a control-plane revision (``--revision REV``) on a real kube-apiserver, as istiod's
revisions coexist: the revision reads its own mesh ConfigMap ``istio-REV`` (istiod's
getMeshConfigMapName), not the default revision's ``istio``."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.config.loader import mesh_configmap_name
from tests.kube.common import serving
from tests.support.cluster import Cluster
from tests.support.runtime import running


async def eventually(what: str, check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := check()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
    return value


def mesh_map(name: str, connect_timeout: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"mesh": f"connectTimeout: {connect_timeout}\n"}}  # fmt: skip


def test_the_mesh_configmap_of_a_revision_is_named_as_istiod_names_it() -> None:
    assert mesh_configmap_name("") == "istio"
    assert mesh_configmap_name("default") == "istio"
    assert mesh_configmap_name("canary") == "istio-canary"


async def test_a_revision_reads_its_own_mesh_configmap(kube: Cluster, pilotfish_kubeconfig: Path) -> None:
    system = kube.namespace("system")
    kube.apply(mesh_map("istio", "3s"), mesh_map("istio-canary", "7s"), namespace=system)
    settings = dataclasses.replace(serving(pilotfish_kubeconfig, system), revision="canary", webhook_address="")
    async with running(settings) as runtime:
        assert runtime.push_context().mesh.connect_timeout.seconds == 7
        kube.apply(mesh_map("istio", "4s"), namespace=system)  # the default revision's: not read
        kube.apply(mesh_map("istio-canary", "9s"), namespace=system)
        await eventually("the revision's mesh config", lambda: runtime.push_context().mesh.connect_timeout.seconds == 9)
