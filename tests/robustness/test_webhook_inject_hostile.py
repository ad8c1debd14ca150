"""Sidecar injection cannot take validation down with it: a pod whose injection runs long (a
template that loops, a pod of thousands of containers: the strategic merge is quadratic, in
istiod's apimachinery too) holds an injection worker until the API server's deadline, and a
rollout of such pods holds every injection slot; Istio config is reviewed meanwhile all the same,
as istiod's handlers (goroutines of their own) are independent of each other."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from app.config.mesh import default_mesh_config
from app.inject.inputs import InjectionInputs
from app.webhook.file_certificate import file_context
from app.webhook.server import MAX_REVIEWS_IN_FLIGHT, WebhookServer

# every pod injected with this runs far longer than any webhook timeout (30 million template steps)
LOOPING = json.dumps({
    "policy": "enabled",
    "defaultTemplates": ["sidecar"],
    "templates": {"sidecar": "{{ range $i := until 10000 }}{{ range $j := until 3000 }}{{ end }}{{ end }}"},
})  # fmt: skip
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
VS = {
    "apiVersion": "networking.istio.io/v1",
    "kind": "VirtualService",
    "metadata": {"name": "reviews", "namespace": "shop"},
    "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews"}}]}]},
}


def envelope(obj: Any, uid: str) -> dict[str, Any]:
    request = {"uid": uid, "operation": "CREATE", "namespace": "shop", "object": obj}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@pytest.fixture
async def webhook(tmp_path: Path) -> AsyncIterator[tuple[str, ssl.SSLContext]]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    inputs = InjectionInputs(LOOPING, None, default_mesh_config().SerializeToString(), native_sidecars=False)
    server = WebhookServer(partial(file_context, tmp_path / "tls.crt", tmp_path / "tls.key"), injection=lambda: inputs)
    await server.start("127.0.0.1:0")
    client = ssl.create_default_context()
    ca.configure_trust(client)
    try:
        yield f"https://127.0.0.1:{server.port}", client
    finally:
        await server.stop()


async def test_injections_running_to_their_deadline_do_not_hold_up_validation(
    webhook: tuple[str, ssl.SSLContext],
) -> None:
    base, tls = webhook
    async with aiohttp.ClientSession() as http:

        async def post(path: str, body: Any) -> dict[str, Any]:
            async with http.post(base + path, json=body, ssl=tls) as resp:
                assert resp.status == 200, await resp.text()
                answer: dict[str, Any] = (await resp.json())["response"]
                return answer

        # as many injections as the webhook holds at once, each allowed 4 s by the API server
        injecting = [
            asyncio.create_task(post("/inject?timeout=5s", envelope(POD, f"pod-{i}")))
            for i in range(MAX_REVIEWS_IN_FLIGHT)
        ]
        await asyncio.sleep(0.5)  # all of them in, the injection workers busy
        validated = await post("/validate?timeout=10s", envelope(VS, "vs"))
        assert validated == {"uid": "vs", "allowed": True}
        assert not any(task.done() for task in injecting), "validation waited for the injections"
        for answer in await asyncio.gather(*injecting):
            # istiod's answer in the same case (the API server's call times out, failurePolicy
            # Fail): the pod is not admitted
            assert answer["allowed"] is False and "did not finish within 4.0s" in answer["status"]["message"]
