"""The informer under faults a real API server cannot be made to produce on cue, against the
emulator (tests/support/kube_api.py) with pilotfish's client over HTTPS:
connections cut mid-watch (the re-watch goes on from the last version seen, nothing lost, no
relist) and a run of error statuses (backoff, then the same state). The rest of the informer's
contract is tested against the real kube-apiserver (test_informer.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from app.config.objects import EventType
from app.sources.kube.client import api_client
from app.sources.kube.informer import Informer
from app.sources.kube.resources import KUBE_RESOURCES, KubeResource
from app.sources.kube.store import Delta
from app.supervise import Backoff
from tests.support.kube_api import KubeApi

SERVICES = next(r for r in KUBE_RESOURCES if r.plural == "services")


def service(name: str, port: int = 80) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"ports": [{"name": "http", "port": port}], "clusterIP": "10.96.0.1"},
    }


class Run:
    """An informer running against the emulator, and what it handed over."""

    def __init__(self, api: KubeApi, informer: Informer) -> None:
        self.api = api
        self.informer = informer
        self.deltas: list[tuple[EventType, str]] = []

    def record(self, _: KubeResource, deltas: list[Delta]) -> None:
        self.deltas.extend((d.change, d.obj["metadata"]["name"]) for d in deltas)

    def store_names(self) -> dict[str, str]:
        return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in self.informer.store.objects()}

    def emulator_names(self) -> dict[str, str]:
        return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in self.api.state("Service").values()}

    async def until(self, what: str, check: Callable[[], bool], timeout: float = 10) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not check():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out waiting for {what}; deltas {self.deltas}")
            await asyncio.sleep(0.02)

    async def converged(self) -> None:
        await self.until("the store to equal the emulator", lambda: self.store_names() == self.emulator_names())

    async def watching(self, count: int = 1) -> None:
        """Until the server has taken ``count`` watch requests."""
        await self.until(f"watch #{count}", lambda: len(self.watch_versions()) >= count)

    def watch_versions(self) -> list[str]:
        """The resourceVersion each watch request started from."""
        out = []
        for line in self.api.requests:
            if "watch=true" in line and "/services" in line:
                query = dict(p.split("=", 1) for p in line.split("?", 1)[1].split("&"))
                out.append(query.get("resourceVersion", ""))
        return out


@pytest.fixture
def api() -> KubeApi:
    api = KubeApi()
    api.apply(*(service(f"s{i}") for i in range(7)))
    return api


@pytest.fixture
async def run(tmp_path: Path, api: KubeApi) -> AsyncIterator[Run]:
    async with api.serve(tmp_path) as kubeconfig:
        client = api_client(kubeconfig)
        holder: list[Run] = []
        informer = Informer(
            client,
            SERVICES,
            "v1",
            lambda resource, deltas: holder[0].record(resource, deltas),
            page_size=3,
            watch_timeout=30,
            backoff=Backoff(initial=0.05, cap=0.2),
        )
        holder.append(Run(api, informer))
        task = asyncio.create_task(informer.run())
        try:
            yield holder[0]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()


async def test_a_dropped_watch_resumes_from_the_last_version_seen_with_nothing_lost(run: Run) -> None:
    await run.watching()
    run.api.apply(service("s1", port=81))
    await run.until("the update", lambda: (EventType.UPDATE, "s1") in run.deltas)
    run.api.drop_watches()
    run.api.apply(service("s2", port=82))  # while no watch is open
    await run.watching(2)
    await run.converged()
    versions = run.watch_versions()
    assert int(versions[1]) >= int(versions[0]) + 1  # resumed after the update it saw
    assert run.informer.lists == 1  # no relist: the version was still there
    assert run.deltas[7:] == [(EventType.UPDATE, "s1"), (EventType.UPDATE, "s2")]


async def test_api_errors_back_off_and_recover_to_the_same_state(run: Run, api: KubeApi) -> None:
    await run.watching()
    api.fail(4, 500)
    api.drop_watches()
    api.apply(service("after-errors"))
    await run.converged()
    assert run.deltas[7:] == [(EventType.ADD, "after-errors")]
    assert len([line for line in api.requests if "watch=true" in line]) >= 5  # 4 failed, then one served
