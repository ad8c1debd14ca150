"""pilot_k8s_cfg_events moves with the Istio config a running pilotfish reads from Kubernetes
(istiod's crdclient counts each add, update and delete of an Istio kind by kind and event)."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from app.runtime import Runtime
from app.settings import Settings
from tests.kube.test_source import DOC, MESH
from tests.support.kube_api import KubeApi


async def cfg_events(runtime: Runtime) -> dict[tuple[str, str], float]:
    url = f"http://127.0.0.1:{runtime.http.port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        text = await resp.text()
    return {
        (s.labels["type"], s.labels["event"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "pilot_k8s_cfg_events"
        for s in family.samples
    }


async def test_istio_config_events_from_kubernetes_are_counted_by_kind_and_event(tmp_path: Path) -> None:
    api = KubeApi(bookmark_interval=0.2)
    api.apply(MESH)
    async with api.serve(tmp_path) as kubeconfig:
        addresses = {"xds_address": "127.0.0.1:0", "http_address": "127.0.0.1:0"}
        settings = Settings(config_dir=None, kubeconfig=kubeconfig, **addresses)
        runtime = Runtime(settings)
        stop = asyncio.Event()
        task = asyncio.create_task(runtime.run(stop))
        try:
            await asyncio.wait_for(runtime.started.wait(), 30)
            assert await cfg_events(runtime) == {("DestinationRule", "add"): 1}
            api.apply(DOC["DestinationRule"].replace("maxConnections: 5", "maxConnections: 6"))
            api.delete("DestinationRule", "shop", "cart")
            for _ in range(100):
                if ("DestinationRule", "delete") in await cfg_events(runtime):
                    break
                await asyncio.sleep(0.1)
            assert await cfg_events(runtime) == {
                ("DestinationRule", "add"): 1,
                ("DestinationRule", "update"): 1,
                ("DestinationRule", "delete"): 1,
            }
        finally:
            stop.set()
            await asyncio.wait_for(task, 15)
            gc.unfreeze()
