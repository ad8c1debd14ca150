"""One object must not stall the control plane (issue 24, item 6): a real pilotfish runtime (xDS,
debug HTTP, the validating webhook) keeps answering ``/ready`` while a worst-case VirtualService
is validated, through the webhook and through the file source. It was measured freezing every
stream for 13.9 s (5,000 hosts, compared pairwise on the event loop).

No wall-clock limit: while the object is validated, ``/ready`` never goes unanswered for more than
a small fraction of the time the validation takes (probes one after another). On the event loop,
it went unanswered for all of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import ssl
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import aiohttp
import trustme
import yaml

from app.runtime import Runtime
from app.settings import Settings
from tests.support.runtime import running

# quadratic before (~13 s for 10,000 hosts on the loop); in a worker, tens of ms for the hosts,
# and some hundred ms for the regexes, each just under Envoy's program size, up to the budget
HOSTS = 10_000
REGEXES = 60


def worst_case(name: str) -> dict[str, Any]:
    routes = [
        {"match": [{"uri": {"regex": f"/r{i:03d}/" + r"\pN{128}"}}], "route": [{"destination": {"host": "reviews"}}]}
        for i in range(REGEXES)
    ]
    spec = {"hosts": [f"h{i}.example.com" for i in range(HOSTS)], "http": routes}
    meta = {"name": name, "namespace": "shop"}
    return {"apiVersion": "networking.istio.io/v1", "kind": "VirtualService", "metadata": meta, "spec": spec}


@contextlib.asynccontextmanager
async def serving(workdir: Path) -> AsyncIterator[tuple[Runtime, str, ssl.SSLContext]]:
    """A runtime with the webhook; (it, the webhook's URL, the client TLS context)."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(workdir / "tls.crt"))
    cert.private_key_pem.write_to_path(str(workdir / "tls.key"))
    config = workdir / "config"
    config.mkdir()
    settings = Settings(
        config_dir=config,
        xds_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        webhook_address="127.0.0.1:0",
        webhook_cert=workdir / "tls.crt",
        webhook_key=workdir / "tls.key",
        debounce_after=0.01,
        file_debounce_ms=10,
        gc_freeze=False,
        shutdown_grace=1.0,
    )
    async with running(settings) as rt:
        assert rt.webhook is not None
        client = ssl.create_default_context()
        ca.configure_trust(client)
        yield rt, f"https://127.0.0.1:{rt.webhook.port}/validate?timeout=30s", client


async def probing_ready(rt: Runtime, work: Awaitable[Any]) -> tuple[Any, float, float]:
    """Run ``work`` while probing ``/ready`` one probe after another; (its result, its seconds,
    the longest time from one answered probe, or the start, to the next)."""
    answered = [time.monotonic()]
    task = asyncio.ensure_future(work)
    async with aiohttp.ClientSession() as http:
        while not task.done():
            async with http.get(f"http://127.0.0.1:{rt.http.port}/ready") as resp:
                assert resp.status == 200
            answered.append(time.monotonic())
            await asyncio.sleep(0.005)
    result = await task
    took = time.monotonic() - answered[0]
    return result, took, max(b - a for a, b in itertools.pairwise(answered))


async def test_ready_answers_while_the_webhook_validates_a_worst_case_object(tmp_path: Path) -> None:
    async with serving(tmp_path) as (rt, url, tls):
        body = json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "u-1", "operation": "CREATE", "namespace": "shop", "object": worst_case("big")},
            }
        ).encode()

        async def review() -> Any:
            headers = {"Content-Type": "application/json"}
            async with aiohttp.ClientSession() as http, http.post(url, data=body, headers=headers, ssl=tls) as resp:
                assert resp.status == 200
                return await resp.json()

        answer, took, unanswered = await probing_ready(rt, review())
        assert answer["response"] == {"uid": "u-1", "allowed": True}, answer
        assert unanswered < took / 5, (took, unanswered)


async def test_ready_answers_while_the_file_source_validates_a_worst_case_object(tmp_path: Path) -> None:
    async with serving(tmp_path) as (rt, _, _):
        staged = tmp_path / "big.yaml"
        staged.write_text(yaml.dump(worst_case("big"), Dumper=yaml.CSafeDumper))

        async def in_force() -> None:
            staged.rename(tmp_path / "config" / "big.yaml")
            while not any(o.meta.name == "big" for s in rt.sources for o in s.objects()):
                await asyncio.sleep(0.005)

        _, took, unanswered = await probing_ready(rt, in_force())
        assert unanswered < took / 5, (took, unanswered)
