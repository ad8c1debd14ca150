"""The preview agrees with the push (issue 28 item 1): a running pilotfish (config dir, debouncer,
push workers, gRPC server) with Delta ADS clients that subscribe as Envoy does
(app/xds/client.py); each change is previewed through ``POST /debug/diff``, then applied by
writing its file, and what every client then holds is compared, type by type, with the preview:
the names added, the names whose version changed, the names gone. For a DestinationRule, a
VirtualService, a ServiceEntry, a Sidecar, an endpoint change (a new ready pod of ratings) and a
pod relabelled so that the Sidecar selects it (its proxy pushed its new labels' config, the
pod's endpoints their new labels); one of them previewed again with an invalid object beside it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from app.runtime import Runtime
from app.xds.client import node
from app.xds.type_urls import EXPLICIT_TYPES
from tests.support.ads import DeltaStream
from tests.support.bookinfo import BOOKINFO
from tests.support.runtime import running_bookinfo

PODS = {  # pod -> (ip, labels) of the bookinfo sidecars connected
    "productpage-v1-0": ("10.1.0.10", {"app": "productpage", "version": "v1"}),
    "details-v1-0": ("10.1.0.20", {"app": "details", "version": "v1"}),
    "reviews-v2-0": ("10.1.0.32", {"app": "reviews", "version": "v2"}),
    "ratings-v1-0": ("10.1.0.40", {"app": "ratings", "version": "v1"}),
}
CHANGES = {
    "destination-rule": """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings-extra, namespace: bookinfo}
spec:
  host: ratings
  trafficPolicy: {connectionPool: {tcp: {maxConnections: 7}}}
""",
    "virtual-service": """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: details, namespace: bookinfo}
spec:
  hosts: [details]
  http:
  - timeout: 3s
    route:
    - destination: {host: details}
""",
    "service-entry": """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api-ext, namespace: bookinfo}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports:
  - {number: 443, name: tls, protocol: TLS}
""",
    "sidecar": """apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: ratings, namespace: bookinfo}
spec:
  workloadSelector: {labels: {app: ratings}}
  egress:
  - hosts: ["./details.bookinfo.svc.cluster.local"]
""",
    "endpoint": """apiVersion: v1
kind: Pod
metadata:
  name: ratings-v1-1
  namespace: bookinfo
  labels: {app: ratings, version: v1}
spec:
  serviceAccountName: bookinfo-ratings
  containers:
  - name: ratings
    ports: [{containerPort: 9080, name: http}]
status:
  phase: Running
  podIP: 10.1.0.41
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ratings-xyz34
  namespace: bookinfo
  labels: {kubernetes.io/service-name: ratings}
addressType: IPv4
ports: [{name: http, port: 9080, protocol: TCP}]
endpoints:
- {addresses: [10.1.0.41], conditions: {ready: true}, targetRef: {kind: Pod, name: ratings-v1-1, namespace: bookinfo}}
""",
}
# reviews-v2-0 relabelled app: ratings, which the "sidecar" change's Sidecar selects
WORKLOADS = (BOOKINFO / "workloads.yaml").read_text()
RELABELLED = "labels: {app: ratings, version: v2, security.istio.io/tlsMode: istio}"
CHANGES["relabel"] = WORKLOADS.replace(
    "labels: {app: reviews, version: v2, security.istio.io/tlsMode: istio}", RELABELLED
)
assert CHANGES["relabel"] != WORKLOADS
FILES = {"relabel": "workloads.yaml"}  # a change's file, when it replaces one of bookinfo's
INVALID = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: broken, namespace: bookinfo}
spec:
  host: ratings
  trafficPolicy: {connectionPool: {tcp: {maxConnections: -1}}}
"""


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    async with running_bookinfo(tmp_path, debounce_after=0.01, file_debounce_ms=10) as rt:
        yield rt


class Sidecar(DeltaStream):
    """A Delta ADS stream that subscribes and ACKs as Envoy does; ``last`` is when it last got
    a response."""

    def __init__(self, channel: grpc.aio.Channel, pod: str) -> None:
        ip, labels = PODS[pod]
        super().__init__(channel, node(f"sidecar~{ip}~{pod}.bookinfo~bookinfo.svc.cluster.local", {"LABELS": labels}))
        self.id = f"{pod}.bookinfo"

    def holds(self) -> dict[str, dict[str, str]]:
        """What the client holds, by type: of EDS and RDS only what it still subscribes to (a
        push may send the assignments of clusters its CDS part just removed, before the
        client's unsubscription arrives; Envoy drops them with the clusters)."""
        out = {}
        for type_url, held in self.client.held.items():
            wanted = held.names if type_url in EXPLICIT_TYPES else held.versions.keys()
            out[type_url] = {name: version for name, version in held.versions.items() if name in wanted}
        return out


def changed(before: dict[str, dict[str, str]], after: dict[str, dict[str, str]]) -> dict[str, dict[str, list[str]]]:
    """Per type, what a client's holding gained, changed and lost."""
    out = {}
    for type_url in before.keys() | after.keys():
        old, new = before.get(type_url, {}), after.get(type_url, {})
        found = {
            "added": sorted(new.keys() - old.keys()),
            "modified": sorted(n for n in new.keys() & old.keys() if new[n] != old[n]),
            "removed": sorted(old.keys() - new.keys()),
        }
        if any(found.values()):
            out[type_url] = found
    return out


async def settled(sidecars: list[Sidecar], quiet: float = 0.6, within: float = 20.0) -> None:
    """Every client complete and none answered for ``quiet`` seconds from now on."""
    start = time.monotonic()
    deadline = start + within
    while (
        not all(s.client.complete for s in sidecars)
        or time.monotonic() - max(start, *(s.last for s in sidecars)) < quiet
    ):
        assert time.monotonic() < deadline, "the clients did not settle"
        await asyncio.sleep(0.05)


async def pushed(runtime: Runtime, served: object, within: float = 20.0) -> None:
    """The runtime serves a snapshot after ``served``."""
    deadline = time.monotonic() + within
    while runtime.push_context() is served:
        assert time.monotonic() < deadline, "no push"
        await asyncio.sleep(0.02)


async def post_diff(runtime: Runtime, files: dict[str, str]) -> dict[str, Any]:
    body = {"files": [{"name": name, "text": text} for name, text in files.items()]}
    url = f"http://127.0.0.1:{runtime.http.port}/debug/diff"
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as resp:
        assert resp.status == 200, await resp.text()
        found: dict[str, Any] = await resp.json()
        return found


async def test_each_previewed_change_is_what_the_clients_then_receive(runtime: Runtime) -> None:
    config = runtime.settings.config_dir
    assert config is not None
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}") as channel:
        sidecars = [Sidecar(channel, pod) for pod in PODS]
        tasks = [asyncio.create_task(s.run()) for s in sidecars]
        try:
            await settled(sidecars)
            reached_any = set()
            for what, text in CHANGES.items():
                name = FILES.get(what, f"{what}.yaml")
                found = await post_diff(runtime, {name: text})
                doc = found["preview"]
                assert doc["change"] and doc["rejected"] == []
                assert len(doc["proxies"]) + doc["unaffected"] == len(sidecars)
                preview = {p["id"]: p["types"] for p in doc["proxies"]}
                before = {s.id: s.holds() for s in sidecars}
                await asyncio.sleep(0.3)  # nothing was applied: nothing arrives
                assert {s.id: s.holds() for s in sidecars} == before, what
                served = runtime.push_context()
                (config / name).write_text(text)
                await pushed(runtime, served)
                await settled(sidecars)
                for s in sidecars:
                    got = changed(before[s.id], s.holds())
                    want = {
                        t: {k: d[k] for k in ("added", "modified", "removed")} for t, d in preview.get(s.id, {}).items()
                    }
                    assert got == want, f"{what}: {s.id}: got {got} want {want}"
                reached_any.update((what, p) for p in preview)
            assert {what for what, _ in reached_any} == set(CHANGES)  # every change reached someone
            assert ("relabel", "reviews-v2-0.bookinfo") in reached_any  # the relabelled pod's own proxy
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_an_invalid_object_is_rejected_and_the_rest_previewed(runtime: Runtime) -> None:
    config = runtime.settings.config_dir
    assert config is not None
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}") as channel:
        sidecars = [Sidecar(channel, "productpage-v1-0")]
        tasks = [asyncio.create_task(s.run()) for s in sidecars]
        try:
            await settled(sidecars)
            found = await post_diff(runtime, {"broken.yaml": INVALID, "dr.yaml": CHANGES["destination-rule"]})
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    doc = found["preview"]
    assert doc["change"] == [{"kind": "DestinationRule", "namespace": "bookinfo", "name": "ratings-extra", "op": "add"}]
    [rejected] = doc["rejected"]
    assert (rejected["kind"], rejected["namespace"], rejected["name"]) == ("DestinationRule", "bookinfo", "broken")
    assert "maxConnections" in rejected["field"]
    [message] = found["messages"]
    assert message.startswith("broken.yaml: DestinationRule bookinfo/broken: field ")
    [proxy] = doc["proxies"]
    assert proxy["id"] == "productpage-v1-0.bookinfo"
