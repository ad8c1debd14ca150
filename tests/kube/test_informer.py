"""The informer contract (client-go's reflector) against a real kube-apiserver and etcd, with the
pilotfish's client (app/sources/kube/client.py): paginated lists, a watch from the list's version, status and
managedFields-only writes that are no change, bookmarks, a watch the server ends, and a real
``410 Gone`` after an etcd compaction (for the watch and for a list's continue token) relisted
with exactly the gap's changes; after each, the informer's store equals the server's state.

The 410s use Events: their watch cache is off in every cluster (kube-apiserver's default
``--watch-cache-sizes``), so their watches and lists are served by etcd, and a resourceVersion
older than etcd's compaction is gone. A resource in the watch cache keeps at least 75 s of
history in memory, whatever etcd compacted.

Dropped connections and error statuses stay on the emulator (test_informer_faults.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from app.config.objects import EventType
from app.sources.kube.client import KubeClient, api_client
from app.sources.kube.informer import Informer
from app.sources.kube.resources import KUBE_RESOURCES, KubeResource
from app.sources.kube.store import Delta
from app.supervise import Backoff
from tests.support.cluster import Cluster, Requests

SERVICES = next(r for r in KUBE_RESOURCES if r.plural == "services")
EVENTS = KubeResource("Event", "", ("v1",), "events")


def service(name: str, port: int = 80) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"ports": [{"name": "http", "port": port}]},
    }


def event(name: str, namespace: str, message: str = "it happened") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "namespace": namespace},
        "reason": "Tested",
        "message": message,
        "type": "Normal",
        "source": {"component": "pilotfish-tests"},
    }


class Run:
    """An informer running in one namespace of the cluster, what it asked and handed over."""

    def __init__(self, kube: Cluster, namespace: str, informer: Informer, requests: Requests) -> None:
        self.kube = kube
        self.namespace = namespace
        self.informer = informer
        self.requests = requests
        self.deltas: list[tuple[EventType, str]] = []
        # each delta's size against its object's JSON size (the source validates by it)
        self.sizes: list[tuple[int, int]] = []
        self.kind = "Service" if informer.resource is SERVICES else "Event"

    def record(self, _: KubeResource, deltas: list[Delta]) -> None:
        self.deltas.extend((d.change, d.obj["metadata"]["name"]) for d in deltas)
        self.sizes.extend((d.size, len(json.dumps(d.obj, separators=(",", ":")))) for d in deltas)

    def store_versions(self) -> dict[str, str]:
        return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in self.informer.store.objects()}

    def server_versions(self) -> dict[str, str]:
        items = self.kube.list("v1", self.kind, self.namespace)
        return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in items}

    async def until(self, what: str, check: Callable[[], bool], timeout: float = 20) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not check():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out waiting for {what}; deltas {self.deltas}")
            await asyncio.sleep(0.05)

    async def converged(self) -> None:
        await self.until("the store to equal the server", lambda: self.store_versions() == self.server_versions())

    async def watching(self, count: int = 1) -> None:
        await self.until(f"watch #{count}", lambda: len(self.watch_versions()) >= count)

    def watch_versions(self) -> list[str]:
        """The resourceVersion each watch request started from."""
        return [q.get("resourceVersion", "") for q in self.requests.watches(self.informer.resource.plural)]


Start = Callable[..., Awaitable[Run]]


@pytest.fixture
async def client(kube: Cluster) -> AsyncIterator[KubeClient]:
    client = api_client(kube.admin_kubeconfig)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def start(kube: Cluster, client: KubeClient) -> AsyncIterator[Start]:
    """Starts an informer on a resource in a new namespace holding ``objects(namespace)``."""
    tasks: list[asyncio.Task[None]] = []
    requests = Requests(client)

    async def start_one(
        resource: KubeResource, objects: Callable[[str], list[dict[str, Any]]], **options: Any
    ) -> Run:
        namespace = kube.namespace("informer")
        kube.apply(*objects(namespace), namespace=namespace)
        holder: list[Run] = []
        options = {"page_size": 3, "watch_timeout": 30, "backoff": Backoff(initial=0.05, cap=0.2), **options}
        informer = Informer(
            client, resource, "v1", lambda r, d: holder[0].record(r, d), namespace=namespace, **options
        )
        holder.append(Run(kube, namespace, informer, requests))
        tasks.append(asyncio.create_task(informer.run()))
        await asyncio.wait_for(informer.synced.wait(), 20)
        return holder[0]

    yield start_one
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def seven(_: str) -> list[dict[str, Any]]:
    return [service(f"s{i}") for i in range(7)]


def continue_version(token: str) -> str:
    """The resourceVersion of the list a continue token goes on with (JSON, base64url)."""
    return str(json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))["rv"])


async def test_a_paginated_list_then_a_watch_from_its_version(start: Start) -> None:
    run = await start(SERVICES, seven)
    lists = run.requests.lists("services")
    assert len(lists) == 3 and all(q["limit"] == "3" for q in lists)  # 3 + 3 + 1
    tokens = [q["continue"] for q in lists if "continue" in q]
    assert len(tokens) == 2
    assert run.deltas == [(EventType.ADD, f"s{i}") for i in range(7)]
    await run.watching()
    # every page is of one snapshot, and the watch goes on from it
    assert run.watch_versions() == [continue_version(tokens[0])] == [continue_version(tokens[1])]


async def test_watched_changes_arrive_in_order_and_status_or_managed_fields_writes_are_no_change(
    start: Start, kube: Cluster
) -> None:
    run = await start(SERVICES, seven)
    await run.watching()
    ns = run.namespace
    kube.apply(service("s1", port=81), namespace=ns)
    condition = {"type": "Probed", "status": "True", "reason": "Tested", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    kube.patch_status("v1", "Service", ns, "s2", {"conditions": [condition]})
    before = kube.get("v1", "Service", ns, "s4")
    [after] = kube.apply(service("s4"), namespace=ns, manager="another-manager")  # the same fields, a second owner
    assert before is not None and after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]
    kube.apply(service("new"), namespace=ns)
    kube.delete("v1", "Service", ns, "s3")
    await run.converged()  # the store holds the status and managedFields writes too
    assert run.deltas[7:] == [(EventType.UPDATE, "s1"), (EventType.ADD, "new"), (EventType.DELETE, "s3")]
    # a listed object's size is unknown; a watched one's is its event's, more than its own JSON
    assert all(size == 0 for size, _ in run.sizes[:7])
    assert all(size > own for size, own in run.sizes[7:])


async def test_bookmarks_move_the_watch_version_of_a_quiet_watch(start: Start, kube: Cluster) -> None:
    run = await start(SERVICES, seven, watch_timeout=3)  # the server bookmarks 2 s before the end
    # once the server has the watch: a watch that starts after the cache has moved past its
    # version (with no event for it) is bookmarked only from the next change on
    await run.until("the watch established", lambda: bool(run.requests.established))
    elsewhere = kube.namespace("elsewhere")
    [written] = kube.apply(service("busy"), namespace=elsewhere)  # services change, not in this namespace
    version = int(written["metadata"]["resourceVersion"])
    await run.until("a watch from the version of the write elsewhere", lambda: any(
        v and int(v) >= version for v in run.watch_versions()
    ))  # fmt: skip
    assert run.informer.lists == 1 and len(run.deltas) == 7  # no relist, no event: bookmarks only


async def test_410_after_a_compaction_relists_and_hands_over_exactly_the_gaps_changes(
    start: Start, kube: Cluster
) -> None:
    run = await start(EVENTS, lambda ns: [event(f"e{i}", ns) for i in range(7)], watch_timeout=2)
    ns = run.namespace
    await run.watching()
    release = run.requests.hold_next_watch()  # the watch ends at its timeout; the next one waits
    await asyncio.wait_for(run.requests.held.wait(), 20)
    kube.apply(event("e1", ns, message="it happened again"))
    kube.apply(event("e2", ns), manager="another-manager")  # managedFields only: no change
    kube.apply(event("gap", ns))
    kube.delete("v1", "Event", ns, "e4")
    compacted = kube.compact()  # the versions of the gap are gone: the held watch gets 410
    assert int(run.watch_versions()[-1]) < compacted
    release()
    await run.converged()
    assert run.informer.lists == 2  # relisted
    assert sorted(run.deltas[7:], key=str) == sorted(
        [(EventType.UPDATE, "e1"), (EventType.ADD, "gap"), (EventType.DELETE, "e4")], key=str
    )


async def test_an_expired_continue_token_restarts_the_list(kube: Cluster, client: KubeClient) -> None:
    namespace = kube.namespace("informer")
    kube.apply(*(event(f"e{i}", namespace) for i in range(7)))
    got: list[Delta] = []
    informer = Informer(client, EVENTS, "v1", lambda _, d: got.extend(d), namespace=namespace, page_size=3,
                        backoff=Backoff(0.05, 0.2))  # fmt: skip
    real_get = informer._get_json
    pages = 0

    async def compact_after_the_first_page(params: Any) -> Any:
        nonlocal pages
        pages += 1
        if pages == 2:  # between the first and the second page: a write, then a compaction
            kube.apply(event("late", namespace))
            kube.compact()
        return await real_get(params)

    informer._get_json = compact_after_the_first_page  # type: ignore[method-assign]
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 20)
        assert pages == 5  # 1 page, a continue the server answered 410, then 3 pages from the start
        names = sorted(d.obj["metadata"]["name"] for d in got)
        assert names == sorted([*(f"e{i}" for i in range(7)), "late"])  # one complete list, no duplicates
        assert informer.lists == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_watch_the_server_ends_at_its_timeout_resumes_without_a_relist(start: Start, kube: Cluster) -> None:
    run = await start(SERVICES, lambda _: [service("a")], watch_timeout=1)
    await asyncio.sleep(2.5)  # two or three watches have timed out
    kube.apply(service("b"), namespace=run.namespace)
    await run.until("b", lambda: len(run.deltas) == 2)
    watches = run.requests.watches("services")
    assert len(watches) >= 3 and all(q["timeoutSeconds"] == "1" for q in watches)
    assert run.informer.lists == 1 and run.deltas == [(EventType.ADD, "a"), (EventType.ADD, "b")]
