"""Both sources validate what they ingest in a worker process, not on the event loop (issue 24,
item 6: the same quadratic check froze every stream when the informer or the file source read
an object): the objects come in validated all the same while nothing in this process validates,
and an object whose validation fails in the worker (it died) is rejected like an invalid one,
keeping its last good version, while the rest of its batch comes in."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.config.objects import ConfigEvent, EventType
from app.sources.files import FileSource
from app.sources.kube.resources import ISTIO_RESOURCES
from app.sources.kube.source import KubeSource
from app.sources.kube.store import Delta

VS_RESOURCE = next(r for r in ISTIO_RESOURCES if str(r.kind) == "VirtualService")


def vs(name: str, hosts: int = 1, regex: str = "") -> dict[str, Any]:
    route: dict[str, Any] = {"route": [{"destination": {"host": "reviews"}}]}
    if regex:
        route["match"] = [{"uri": {"regex": regex}}]
    spec = {"hosts": [f"h{i}.example.com" for i in range(hosts)], "http": [route]}
    meta = {"name": name, "namespace": "shop", "resourceVersion": "1"}
    return {"apiVersion": "networking.istio.io/v1", "kind": "VirtualService", "metadata": meta, "spec": spec}


@pytest.fixture
def nowhere_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Validating in this process fails the test."""

    def here(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("validated in the process serving the event loop")

    import app.config.loader
    import app.sources.files
    import app.sources.kube.source

    monkeypatch.setattr(app.config.loader, "load_object", here)
    monkeypatch.setattr(app.sources.kube.source, "load_object", here)
    monkeypatch.setattr(app.sources.files, "read_documents", here)
    monkeypatch.setattr(app.config.loader, "read_documents", here)


class _NoClient:
    async def close(self) -> None:
        pass


def failing_for(poison: str) -> Any:
    """A pool whose calls fail (as if the worker died) when their arguments mention ``poison``."""
    from app.workers import WorkerError, WorkerPool

    class FailingFor(WorkerPool):
        def submit(self, fn: Callable[..., Any], *args: Any, deadline: float | None = None) -> Future[Any]:
            if poison in repr(args):
                future: Future[Any] = Future()
                future.set_exception(WorkerError("the worker process ended (exit status -9)"))
                return future
            return super().submit(fn, *args, deadline=deadline)

    return FailingFor(1, name="failing")


@pytest.fixture
async def kube() -> AsyncIterator[Callable[..., Any]]:
    """Feed a KubeSource deltas as its informer would; the events (or rejections) they make."""
    sources: list[KubeSource] = []

    async def feed(objs: list[dict[str, Any]], pool: Any = None) -> tuple[KubeSource, list[ConfigEvent]]:
        kwargs = {"pool": pool} if pool is not None else {}
        source = KubeSource(_NoClient(), **kwargs)  # type: ignore[arg-type]  # never started
        sources.append(source)
        source._on_deltas(VS_RESOURCE, [Delta(EventType.ADD, obj) for obj in objs])
        watch = source.watch()
        try:
            events = await asyncio.wait_for(anext(watch), 30)
        finally:
            await watch.aclose()
        return source, events

    yield feed
    for source in sources:
        await source.close()


async def test_the_informers_objects_are_validated_off_the_event_loop(
    kube: Callable[..., Any], nowhere_here: None
) -> None:
    source, events = await kube([vs("many", hosts=20_000), vs("bad", regex="(?<=a)b"), vs("one")])
    assert [(e.type, e.obj.meta.name) for e in events] == [(EventType.ADD, "many"), (EventType.ADD, "one")]
    assert len(events[0].obj.spec.hosts) == 20_000
    [rejected] = source.rejections()
    assert "VirtualService shop/bad: field http[0].match[0].uri.regex" in str(rejected)


async def test_an_object_whose_worker_fails_is_rejected_and_the_rest_come_in(kube: Callable[..., Any]) -> None:
    pool = failing_for("poison")
    try:
        source, events = await kube([vs("one"), vs("poison"), vs("two")], pool)
        assert [e.obj.meta.name for e in events] == ["one", "two"]
        [rejected] = source.rejections()
        assert "VirtualService shop/poison" in str(rejected) and "could not be validated" in str(rejected)
    finally:
        pool.close()


@contextlib.asynccontextmanager
async def watching(source: FileSource) -> AsyncIterator[list[ConfigEvent]]:
    """The events of ``source.watch()`` as they come, while the block runs."""
    events: list[ConfigEvent] = []

    async def consume() -> None:
        async for batch in source.watch():
            events.extend(batch)

    task = asyncio.create_task(consume())
    try:
        yield events
    finally:
        task.cancel()
        await asyncio.wait([task])
        await source.close()


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never came to pass")


async def test_the_files_are_validated_off_the_event_loop(tmp_path: Path, nowhere_here: None) -> None:
    source = FileSource(tmp_path, debounce_ms=10)
    async with watching(source) as events:
        (tmp_path / "vs.yaml").write_text(yaml.safe_dump_all([vs("many", hosts=20_000), vs("bad", regex="(?<=a)b")]))
        await until(lambda: bool(events) and bool(source.rejections()))
        assert [(e.type, e.obj.meta.name, len(e.obj.spec.hosts)) for e in events] == [(EventType.ADD, "many", 20_000)]
        [rejected] = source.rejections()
        assert "VirtualService shop/bad: field http[0].match[0].uri.regex" in str(rejected)


async def test_a_file_whose_worker_fails_keeps_its_last_good_objects(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(vs("a")))
    (tmp_path / "poison.yaml").write_text(yaml.safe_dump(vs("p")))
    source = FileSource(tmp_path, debounce_ms=10)
    source.load()  # as pilotfish starts: read here, before anything is served
    assert sorted(o.meta.name for o in source.objects()) == ["a", "p"]
    source._pool = failing_for("poison")
    async with watching(source):
        changed_a, changed_p = vs("a"), vs("p")
        changed_a["spec"]["hosts"] = ["new-a.example.com"]
        changed_p["spec"]["hosts"] = ["new-p.example.com"]
        (tmp_path / "a.yaml").write_text(yaml.safe_dump(changed_a))
        (tmp_path / "poison.yaml").write_text(yaml.safe_dump(changed_p))

        def hosts() -> dict[str, list[str]]:
            return {o.meta.name: list(o.spec.hosts) for o in source.objects()}

        await until(lambda: hosts()["a"] == ["new-a.example.com"] and bool(source.rejections()))
        assert hosts() == {"a": ["new-a.example.com"], "p": ["h0.example.com"]}  # p: its last good version
        [error] = source.rejections()
        assert str(error).startswith(str(tmp_path / "poison.yaml")) and "could not be read" in str(error)


DR_RESOURCE = next(r for r in ISTIO_RESOURCES if str(r.kind) == "DestinationRule")


def dr(name: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": "shop", "resourceVersion": "1"}
    spec = {"host": "reviews", "trafficPolicy": {"connectionPool": {"tcp": {"maxConnections": 5}}}}
    return {"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule", "metadata": meta, "spec": spec}


def recording_pool() -> tuple[Any, list[str]]:
    """A real worker pool that records the names of the objects each call validates."""
    from app.workers import WorkerPool

    names: list[str] = []

    class Recording(WorkerPool):
        def submit(self, fn: Callable[..., Any], *args: Any, deadline: float | None = None) -> Future[Any]:
            names.extend(doc["metadata"]["name"] for doc, _ in args[0])
            return super().submit(fn, *args, deadline=deadline)

    return Recording(1, name="recording"), names


async def test_small_watched_objects_of_linear_kinds_are_validated_here_the_rest_in_the_worker() -> None:
    """The round trip to the worker costs more than validating a small DestinationRule: up to
    8 KiB of watch events per batch are validated on the loop, never a VirtualService (its RE2
    compiles are not bounded by its size) nor an object of unknown size (a list's)."""
    pool, sent = recording_pool()
    source = KubeSource(_NoClient(), pool=pool)  # type: ignore[arg-type]  # never started
    try:
        source._on_deltas(
            DR_RESOURCE,
            [
                Delta(EventType.ADD, dr("watched"), 600),
                Delta(EventType.ADD, dr("listed")),  # size unknown
                Delta(EventType.ADD, dr("large"), 9000),
                Delta(EventType.ADD, dr("fits"), 7000),
                Delta(EventType.ADD, dr("over-budget"), 1000),  # 600 + 7000 + 1000 > 8192
            ],
        )
        source._on_deltas(VS_RESOURCE, [Delta(EventType.ADD, vs("routes"), 600)])
        watch = source.watch()
        try:
            events = await asyncio.wait_for(anext(watch), 30)
        finally:
            await watch.aclose()
        names = ["watched", "listed", "large", "fits", "over-budget", "routes"]
        assert [e.obj.meta.name for e in events] == names  # all validated, in order
        assert sent == ["listed", "large", "over-budget", "routes"]
    finally:
        await source.close()
        pool.close()


async def test_the_first_lists_objects_of_linear_kinds_are_validated_here_whatever_their_size() -> None:
    """Before ``start()`` returns nothing is served, so the round trip to a worker started at a
    lower priority is not worth it for what validates in time linear in its size: the first
    lists' objects of those kinds are validated on the loop, a VirtualService still in the worker,
    and the events come in the informers' order."""
    pool, sent = recording_pool()
    source = KubeSource(_NoClient(), pool=pool)  # type: ignore[arg-type]  # never started
    try:
        first = [
            [(DR_RESOURCE, Delta(EventType.ADD, dr(name))) for name in ("listed", "another")],
            [(VS_RESOURCE, Delta(EventType.ADD, vs("routes")))],
        ]
        events = await asyncio.wait_for(source._drain(first, starting=True), 30)
        assert [e.obj.meta.name for e in events] == ["listed", "another", "routes"]
        assert sent == ["routes"]
        # after the start, a list's objects of unknown size go to the worker again
        source._on_deltas(DR_RESOURCE, [Delta(EventType.ADD, dr("relisted"))])
        watch = source.watch()
        try:
            [event] = await asyncio.wait_for(anext(watch), 30)
        finally:
            await watch.aclose()
        assert event.obj.meta.name == "relisted" and sent == ["routes", "relisted"]
    finally:
        await source.close()
        pool.close()
