"""The informer contract (client-go's reflector), with the real kubernetes-asyncio client over
HTTPS against the API server emulator: paginated lists, watches from the list's version,
bookmarks, re-watch after a dropped connection, relist on 410 with the gap's changes, backoff
on errors; after every fault the informer's store equals the emulator's state."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.config import new_client_from_config

from app.config.model import EventType
from app.sources.kube.informer import Informer
from app.sources.kube.resources import KUBE_RESOURCES, KubeResource
from app.sources.kube.store import Delta
from app.supervise import Backoff
from tests.support.kube_api import KubeApi

SERVICES = next(r for r in KUBE_RESOURCES if r.plural == "services")


def service(name: str, namespace: str = "default", port: int = 80, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, **meta},
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
async def client(tmp_path: Path, api: KubeApi) -> AsyncIterator[ApiClient]:
    async with api.serve(tmp_path) as kubeconfig:
        client = await new_client_from_config(str(kubeconfig))
        try:
            yield client
        finally:
            await client.close()


@pytest.fixture
def api() -> KubeApi:
    return KubeApi(bookmark_interval=0.2)


@pytest.fixture
async def run(api: KubeApi, client: ApiClient) -> AsyncIterator[Run]:
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
    yield holder[0]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
def seven(api: KubeApi) -> None:
    api.apply(*(service(f"s{i}") for i in range(7)))


@pytest.mark.usefixtures("seven")
async def test_a_paginated_list_then_a_watch_from_its_version(run: Run) -> None:
    await asyncio.wait_for(run.informer.synced.wait(), 10)
    lists = [line for line in run.api.requests if "/services" in line and "watch" not in line]
    assert len(lists) == 3 and all("limit=3" in line for line in lists)  # 3 + 3 + 1
    assert sum("continue=" in line for line in lists) == 2
    assert run.deltas == [(EventType.ADD, f"s{i}") for i in range(7)]
    await run.watching()
    assert run.watch_versions() == [str(run.api.version)]  # the list's version


@pytest.mark.usefixtures("seven")
async def test_watched_changes_arrive_in_order_and_status_writes_are_no_change(run: Run) -> None:
    await run.watching()
    api = run.api
    api.apply(service("s1", port=81))
    api.set_status("Service", "default", "s2", {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}})
    api.apply(service("new"))
    api.delete("Service", "default", "s3")
    await run.converged()
    assert run.deltas[7:] == [(EventType.UPDATE, "s1"), (EventType.ADD, "new"), (EventType.DELETE, "s3")]


@pytest.mark.usefixtures("seven")
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


@pytest.mark.usefixtures("seven")
async def test_bookmarks_move_the_watch_version_on_a_quiet_resource(run: Run, api: KubeApi) -> None:
    await run.watching()
    api.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}})  # another resource
    await asyncio.sleep(0.5)  # a bookmark or two carry the new version
    api.drop_watches()
    await run.watching(2)
    assert run.watch_versions()[1] == str(api.version)


@pytest.mark.usefixtures("seven")
async def test_410_relists_and_hands_over_exactly_the_gaps_changes(run: Run, api: KubeApi) -> None:
    await run.watching()
    api.drop_watches()
    api.fail(2, 503)  # the re-watch fails for a while, so the changes below land in a gap
    api.apply(service("s1", port=81))
    api.set_status("Service", "default", "s2", {"loadBalancer": {}})  # no change to report
    api.apply(service("gap"))
    api.delete("Service", "default", "s4")
    api.compact()  # the versions of the gap are gone: the watch gets 410
    await run.converged()
    assert run.informer.lists == 2
    assert sorted(run.deltas[7:], key=str) == sorted(
        [(EventType.UPDATE, "s1"), (EventType.ADD, "gap"), (EventType.DELETE, "s4")], key=str
    )


async def test_an_expired_continue_token_restarts_the_list(api: KubeApi, client: ApiClient) -> None:
    api.apply(*(service(f"s{i}") for i in range(7)))
    got: list[Delta] = []
    informer = Informer(client, SERVICES, "v1", lambda _, d: got.extend(d), page_size=3, backoff=Backoff(0.05, 0.2))
    real_get = informer._get_json
    pages = 0

    async def compact_after_the_first_page(params: Any) -> Any:
        nonlocal pages
        pages += 1
        if pages == 2:
            api.apply(service("late"))  # between the first and second page, then compacted
            api.compact()
        return await real_get(params)

    informer._get_json = compact_after_the_first_page  # type: ignore[method-assign]
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 10)
        names = sorted(d.obj["metadata"]["name"] for d in got)
        assert names == sorted([*(f"s{i}" for i in range(7)), "late"])  # one complete list, no duplicates
        assert informer.lists == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.usefixtures("seven")
async def test_api_errors_back_off_and_recover_to_the_same_state(run: Run, api: KubeApi) -> None:
    await run.watching()
    api.fail(4, 500)
    api.drop_watches()
    api.apply(service("after-errors"))
    await run.converged()
    assert run.deltas[7:] == [(EventType.ADD, "after-errors")]
    assert sum("injected failure" in line for line in api.requests) == 0  # requests are logged, not bodies
    assert len([line for line in api.requests if "watch=true" in line]) >= 5  # 4 failed, then one served


async def test_a_watch_the_server_ends_at_its_timeout_resumes_without_a_relist(api: KubeApi, client: ApiClient) -> None:
    api.apply(service("a"))
    got: list[Delta] = []
    informer = Informer(client, SERVICES, "v1", lambda _, d: got.extend(d), watch_timeout=1, backoff=Backoff(0.05, 0.2))
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 10)
        await asyncio.sleep(2.5)  # two or three watches have timed out
        api.apply(service("b"))
        async with asyncio.timeout(10):
            while len(got) < 2:
                await asyncio.sleep(0.02)
        watches = [line for line in api.requests if "watch=true" in line]
        assert len(watches) >= 3 and all("timeoutSeconds=1" in line for line in watches)
        assert informer.lists == 1 and [d.obj["metadata"]["name"] for d in got] == ["a", "b"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
