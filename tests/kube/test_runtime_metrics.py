"""pilot_k8s_cfg_events and pilot_k8s_reg_events move with the Istio config and the Kubernetes
objects a running pilotfish reads from a real kube-apiserver (istiod's crdclient counts each add,
update and delete of an Istio kind by kind and event; its kube controller, of Services, Pods,
Nodes and EndpointSlices, by its informers' names). The mesh's discoverySelectors keep pilotfish
to the test's namespace of the shared cluster."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from app.runtime import Runtime
from app.settings import Settings
from tests.kube.common import make_mesh
from tests.support.cluster import Cluster


async def cfg_events(runtime: Runtime, name: str = "pilot_k8s_cfg_events") -> dict[tuple[str, str], float]:
    url = f"http://127.0.0.1:{runtime.http.port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        text = await resp.text()
    return {
        (s.labels["type"], s.labels["event"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for s in family.samples
    }


async def test_istio_config_events_from_kubernetes_are_counted_by_kind_and_event(
    kube: Cluster, pilotfish_kubeconfig: Path
) -> None:
    mesh = await asyncio.to_thread(make_mesh, kube)
    only_shop = f"discoverySelectors: [{{matchLabels: {{kubernetes.io/metadata.name: {mesh.shop}}}}}]\n"
    kube.apply(mesh.mesh_config(only_shop))
    addresses = {"xds_address": "127.0.0.1:0", "http_address": "127.0.0.1:0"}
    settings = Settings(config_dir=None, kubeconfig=pilotfish_kubeconfig, system_namespace=mesh.system, **addresses)
    runtime = Runtime(settings)
    stop = asyncio.Event()
    task = asyncio.create_task(runtime.run(stop))
    try:
        await asyncio.wait_for(runtime.started.wait(), 30)
        assert await cfg_events(runtime) == {("DestinationRule", "add"): 1}
        kube.apply(mesh.destination_rule(max_connections=6))
        kube.delete("networking.istio.io/v1", "DestinationRule", mesh.shop, "cart")
        for _ in range(100):
            if ("DestinationRule", "delete") in await cfg_events(runtime):
                break
            await asyncio.sleep(0.1)
        assert await cfg_events(runtime) == {
            ("DestinationRule", "add"): 1,
            ("DestinationRule", "update"): 1,
            ("DestinationRule", "delete"): 1,
        }
        # the registry's objects: the test namespace's Service, its pod and slice (the shared
        # cluster's Nodes too), added as listed; the Service's update is one more
        registry = await cfg_events(runtime, "pilot_k8s_reg_events")
        assert registry[("Services", "add")] >= 1 and registry[("Pods", "add")] >= 1
        assert registry[("EndpointSlice", "add")] >= 1
        kube.apply(
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "cart", "labels": {"tier": "web"}},
             "spec": {"selector": {"app": "cart"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}},
            namespace=mesh.shop,
        )  # fmt: skip
        for _ in range(100):
            if ("Services", "update") in await cfg_events(runtime, "pilot_k8s_reg_events"):
                break
            await asyncio.sleep(0.1)
        assert (await cfg_events(runtime, "pilot_k8s_reg_events"))[("Services", "update")] == 1
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
        gc.unfreeze()
