"""The nodes' kubelet versions, from an informer on Nodes, for ENABLE_NATIVE_SIDECARS=auto: the
webhook decides per pod whether the proxy is a native sidecar from them (istiod's webhook keeps a
Node informer for this, its objects stripped by StripNodeUnusedFields).

A Node is large (images, conditions, capacity) and a big cluster has thousands; no field or
label selector narrows what is listed, so the store keeps each Node's name and kubelet version
only, and the lists come in small pages."""

from __future__ import annotations

import asyncio

from app.config.objects import EventType
from app.inject.native_sidecars import KubeletVersions
from app.sources.kube.client import KubeClient
from app.sources.kube.informer import Informer
from app.sources.kube.resources import NODES, KubeResource
from app.sources.kube.store import Delta, Raw

# a page of 100 full Nodes is a few MB of JSON, parsed before being narrowed
PAGE_SIZE = 100


def node_kubelet(obj: Raw) -> Raw:
    """What of a Node is kept: its name and ``status.nodeInfo.kubeletVersion``."""
    version = ((obj.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or ""
    return {
        "kind": "Node",
        "metadata": {"name": (obj.get("metadata") or {}).get("name", "")},
        "status": {"nodeInfo": {"kubeletVersion": str(version)}},
    }


class NodeInformer:
    def __init__(self, client: KubeClient, *, page_size: int = PAGE_SIZE) -> None:
        self.kubelets = KubeletVersions()
        self._informer = Informer(client, NODES, "v1", self._on_deltas, page_size=page_size, transform=node_kubelet)

    @property
    def synced(self) -> asyncio.Event:
        """Set once the first list is in ``kubelets``."""
        return self._informer.synced

    async def run(self) -> None:
        """List and watch the Nodes until cancelled."""
        await self._informer.run()

    def _on_deltas(self, _: KubeResource, deltas: list[Delta]) -> None:
        for delta in deltas:
            name = str(delta.obj["metadata"]["name"])
            if delta.change is EventType.DELETE:
                self.kubelets.delete(name)
            else:
                self.kubelets.set(name, str(delta.obj["status"]["nodeInfo"]["kubeletVersion"]))
