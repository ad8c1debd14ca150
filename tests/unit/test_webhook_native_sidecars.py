"""``POST /inject`` with ENABLE_NATIVE_SIDECARS=auto: the webhook decides per review from the
nodes' kubelets, as istiod's DetectNativeSidecar: an unbound pod by every node, a pod bound to a
known node by that node (the worker asks the server which node when it matters); a review that
comes before the nodes are listed waits for them, and is refused when they do not come in time."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from app.config.mesh import default_mesh_config
from app.inject.inputs import InjectionInputs
from app.inject.native_sidecars import KubeletVersions
from app.webhook.file_certificate import file_context
from app.webhook.server import WebhookServer
from tests.support.json_patch import apply_patch

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "hello", "labels": {"app": "hello"}},
    "spec": {"containers": [{"name": "hello", "image": "example.com/hello:1"}]},
}


@dataclass
class Nodes:
    """What the Node informer gives the webhook: its kubelets, and whether they are listed."""

    kubelets: KubeletVersions = field(default_factory=KubeletVersions)
    synced: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
async def webhook(tmp_path: Path) -> AsyncIterator[tuple[str, ssl.SSLContext, Nodes]]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    # the inputs' own decision (auto without nodes) is off: the nodes decide
    inputs = InjectionInputs(None, None, default_mesh_config().SerializeToString(), native_sidecars=False)
    nodes = Nodes()
    server = WebhookServer(
        partial(file_context, tmp_path / "tls.crt", tmp_path / "tls.key"), injection=lambda: inputs, nodes=nodes
    )
    await server.start("127.0.0.1:0")
    client = ssl.create_default_context()
    ca.configure_trust(client)
    yield f"https://127.0.0.1:{server.port}/inject", client, nodes
    await server.stop()


async def inject(session: aiohttp.ClientSession, url: str, tls: ssl.SSLContext, node: str = "") -> dict[str, Any]:
    pod = {**POD, "spec": {**POD["spec"], "nodeName": node}} if node else POD
    request = {"uid": "u-1", "operation": "CREATE", "namespace": "shop", "object": pod}
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    async with session.post(url, json=body, ssl=tls) as resp:
        assert resp.status == 200
        answer: dict[str, Any] = await resp.json()
    response = answer["response"]
    assert set(answer) == {"apiVersion", "kind", "response"} and response["uid"] == "u-1"
    assert response["allowed"] is True, response
    return apply_patch(pod, json.loads(base64.b64decode(response["patch"])))


def proxy_is_native(pod: dict[str, Any]) -> bool:
    """istio-proxy among the init containers, restartPolicy Always; else a classic container."""
    inits = {c["name"]: c for c in pod["spec"].get("initContainers", [])}
    containers = [c["name"] for c in pod["spec"]["containers"]]
    if "istio-proxy" in inits:
        assert inits["istio-proxy"].get("restartPolicy") == "Always" and "istio-proxy" not in containers
        return True
    assert "istio-proxy" in containers
    return False


async def test_each_pod_gets_native_sidecars_as_its_nodes_kubelets_allow(
    webhook: tuple[str, ssl.SSLContext, Nodes],
) -> None:
    url, tls, nodes = webhook
    nodes.kubelets.set("new", "v1.33.0")
    nodes.kubelets.set("newer", "v1.34.0+k3s1")
    nodes.synced.set()
    async with aiohttp.ClientSession() as session:
        assert proxy_is_native(await inject(session, url, tls))
        assert proxy_is_native(await inject(session, url, tls, node="new"))
        nodes.kubelets.set("old", "v1.32.9-gke.100")  # a 1.32 node joins
        assert not proxy_is_native(await inject(session, url, tls))  # it could land there
        assert proxy_is_native(await inject(session, url, tls, node="newer"))  # bound elsewhere
        assert not proxy_is_native(await inject(session, url, tls, node="old"))
        assert not proxy_is_native(await inject(session, url, tls, node="unknown"))  # every node decides
        nodes.kubelets.delete("old")
        assert proxy_is_native(await inject(session, url, tls))


async def test_a_review_waits_for_the_nodes_to_be_listed(webhook: tuple[str, ssl.SSLContext, Nodes]) -> None:
    url, tls, nodes = webhook
    async with aiohttp.ClientSession() as session:
        asyncio.get_running_loop().call_later(0.3, nodes.synced.set)
        assert proxy_is_native(await inject(session, url, tls))
        nodes.synced.clear()  # as if never listed: refused within the API server's timeout
        request = {"uid": "u-2", "operation": "CREATE", "namespace": "shop", "object": POD}
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        async with session.post(f"{url}?timeout=2s", json=body, ssl=tls) as resp:
            response = (await resp.json())["response"]
        assert response["allowed"] is False
        assert response["status"]["message"] == (
            "not reviewed: the nodes' kubelet versions are not listed yet (ENABLE_NATIVE_SIDECARS=auto)"
        )
