"""The file config source: the pure FileSet rules, and FileSource on real directories with real watchfiles.

Watch tests never use sleeps: after the change under test they write a "barrier" file and
collect events until the barrier's own event arrives. Events of the change under test cannot
come later than the barrier's, so whatever was collected is exactly what the change caused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from app.api.mesh import MeshConfig
from app.api.networking import LoadBalancerSettings
from app.config.loader import load_documents
from app.config.objects import ConfigEvent, ConfigKey, EventType, Kind
from app.errors import SettingsError
from app.sources.files import FileSet, FileSource, is_config_file, list_config_files

NS = "bookinfo"
SERVICE_KEY = ConfigKey(Kind.SERVICE, NS, "reviews")
DR_KEY = ConfigKey(Kind.DESTINATION_RULE, NS, "reviews")
SE_KEY = ConfigKey(Kind.SERVICE_ENTRY, NS, "httpbin-ext")
BARRIER_KEY = ConfigKey(Kind.SERVICE_ENTRY, "test", "barrier")
TIMEOUT = 10.0


def service(port: int = 9080) -> str:
    return f"""apiVersion: v1
kind: Service
metadata:
  name: reviews
  namespace: {NS}
  labels:
    app: reviews
spec:
  selector:
    app: reviews
  ports:
  - name: http
    port: {port}
    targetPort: 9080
"""


def destination_rule(lb: str = "ROUND_ROBIN", extra: str = "", name: str = "reviews") -> str:
    return f"""apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: {name}
  namespace: {NS}
spec:
  host: {name}.{NS}.svc.cluster.local
  trafficPolicy:
    loadBalancer:
      simple: {lb}
{extra}  subsets:
  - name: v1
    labels:
      version: v1
"""


def service_entry(port: int = 443, name: str = "httpbin-ext", namespace: str = NS, label: str = "") -> str:
    labels = f"\n  labels:\n    step: '{label}'" if label else ""
    return f"""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: {name}
  namespace: {namespace}{labels}
spec:
  hosts:
  - httpbin.org
  ports:
  - number: {port}
    name: https
    protocol: TLS
  resolution: DNS
  location: MESH_EXTERNAL
"""


MESH = """rootNamespace: istio-system
outboundTrafficPolicy:
  mode: REGISTRY_ONLY
"""
BOOKINFO = "---\n".join([service(), destination_rule(), service_entry()])


def write(path: Path, text: str) -> None:
    """Replace a file atomically, as editors and kubectl do, so no reader sees it half written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def summary(events: list[ConfigEvent]) -> list[tuple[EventType, ConfigKey]]:
    return [(e.type, e.obj.key) for e in events]


class Watching:
    """Runs ``source.watch()`` in a task and collects the batches it yields."""

    def __init__(self, source: FileSource) -> None:
        self.source = source
        self.batches: asyncio.Queue[list[ConfigEvent]] = asyncio.Queue()
        self.task = asyncio.create_task(self._run())
        self._step = 0

    async def _run(self) -> None:
        async for batch in self.source.watch():
            assert batch, "watch() never yields an empty batch"
            await self.batches.put(batch)

    async def until(self, done: Callable[[list[ConfigEvent]], bool]) -> list[ConfigEvent]:
        events: list[ConfigEvent] = []

        async def collect() -> None:
            while not done(events):
                events.extend(await self.batches.get())

        await asyncio.wait_for(collect(), TIMEOUT)
        return events

    async def settle(self) -> list[ConfigEvent]:
        """Write the barrier and return every other event up to the barrier's."""
        self._step += 1
        label = str(self._step)
        write(
            self.source.config_dir / "zz-barrier.yaml",
            service_entry(name="barrier", namespace="test", label=label),
        )

        def seen(events: list[ConfigEvent]) -> bool:
            return any(e.obj.key == BARRIER_KEY and e.obj.meta.labels.get("step") == label for e in events)

        events = await self.until(seen)
        return [e for e in events if e.obj.key != BARRIER_KEY]

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, TIMEOUT)


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    d = tmp_path / "config"
    write(d / "bookinfo.yaml", BOOKINFO)
    return d


@pytest.fixture
async def watching(config_dir: Path) -> AsyncIterator[Watching]:
    source = FileSource(config_dir)
    assert len(source.load()) == 3
    w = Watching(source)
    await w.settle()  # the watcher is up and the barrier file exists
    yield w
    await w.close()


# --- listing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "wanted"),
    [
        ("a.yaml", True),
        ("a.yml", True),
        (".a.yaml", False),
        (".#a.yaml", False),
        ("a.yaml~", False),
        (".a.yaml.swp", False),
        ("#a.yaml#", False),
        ("a.json", False),
    ],
)
def test_is_config_file(name: str, wanted: bool) -> None:
    assert is_config_file(name) is wanted


# --- initial load -------------------------------------------------------------------------


def test_initial_load_reads_multi_doc_files_mesh_and_subdirectories(config_dir: Path) -> None:
    write(config_dir / "mesh.yaml", MESH)
    write(config_dir / "networking" / "ratings.yaml", destination_rule(name="ratings"))
    for junk in [".hidden.yaml", ".#bookinfo.yaml", "bookinfo.yaml~", ".bookinfo.yaml.swp", "notes.txt"]:
        write(config_dir / junk, "kind: [not yaml")
    write(config_dir / ".git" / "x.yaml", "kind: [not yaml")

    source = FileSource(config_dir)
    events = source.load()

    assert summary(events) == [
        (EventType.ADD, SERVICE_KEY),
        (EventType.ADD, DR_KEY),
        (EventType.ADD, SE_KEY),
        (EventType.ADD, ConfigKey(Kind.MESH_CONFIG, "", "mesh")),
        (EventType.ADD, ConfigKey(Kind.DESTINATION_RULE, NS, "ratings")),
    ]
    assert [e.obj.source for e in events[:2]] == [
        f"{config_dir}/bookinfo.yaml#0",
        f"{config_dir}/bookinfo.yaml#1",
    ]
    mesh = events[3].obj.spec
    assert mesh.outbound_traffic_policy.mode == MeshConfig.OutboundTrafficPolicy.REGISTRY_ONLY
    assert source.rejections() == []
    assert source.rejection_count == 0
    assert [p.name for p in list_config_files(config_dir)] == ["bookinfo.yaml", "mesh.yaml", "ratings.yaml"]
    # reading again finds nothing new
    assert source.load() == []


def test_a_missing_config_dir_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="not a directory"):
        FileSource(tmp_path / "nope").load()


def test_rejection_is_logged_once_and_counted(config_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(config_dir / "broken.yaml", "kind: [unclosed")
    source = FileSource(config_dir)
    with caplog.at_level(logging.WARNING, logger="app.sources.files"):
        source.load()
        source.load()
    assert len(caplog.records) == 1
    assert "broken.yaml" in caplog.records[0].getMessage()
    assert "invalid YAML" in caplog.records[0].getMessage()
    assert source.rejection_count == 1
    assert len(source.rejections()) == 1


# --- watching -----------------------------------------------------------------------------


async def test_edit_updates_only_the_changed_object(watching: Watching, config_dir: Path) -> None:
    write(
        config_dir / "bookinfo.yaml",
        "---\n".join([service(), destination_rule("LEAST_REQUEST"), service_entry()]),
    )
    events = await watching.settle()
    assert summary(events) == [(EventType.UPDATE, DR_KEY)]
    assert events[0].obj.spec.traffic_policy.load_balancer.simple == LoadBalancerSettings.LEAST_REQUEST
    assert events[0].old is not None
    assert events[0].old.spec.traffic_policy.load_balancer.simple == LoadBalancerSettings.ROUND_ROBIN


async def test_whitespace_and_comment_edit_yields_nothing(watching: Watching, config_dir: Path) -> None:
    spaced = "# reviewed\n\n" + BOOKINFO.replace("\n", "   \n").replace("---", "\n---")
    write(config_dir / "bookinfo.yaml", spaced)
    assert await watching.settle() == []


async def test_object_removed_from_a_file_is_deleted(watching: Watching, config_dir: Path) -> None:
    last = {o.key: o for o in watching.source.objects()}[SE_KEY]
    write(config_dir / "bookinfo.yaml", "---\n".join([service(), destination_rule()]))
    events = await watching.settle()
    assert summary(events) == [(EventType.DELETE, SE_KEY)]
    assert events[0].obj == last


async def test_deleted_file_deletes_its_objects(watching: Watching, config_dir: Path) -> None:
    (config_dir / "bookinfo.yaml").unlink()
    events = await watching.settle()
    assert sorted(summary(events)) == sorted((EventType.DELETE, k) for k in [SERVICE_KEY, DR_KEY, SE_KEY])


async def test_new_file_in_new_subdirectory_is_added(watching: Watching, config_dir: Path) -> None:
    write(config_dir / "team" / "ratings.yaml", destination_rule(name="ratings"))
    events = await watching.settle()
    assert summary(events) == [(EventType.ADD, ConfigKey(Kind.DESTINATION_RULE, NS, "ratings"))]


async def test_broken_yaml_keeps_objects_until_fixed(watching: Watching, config_dir: Path) -> None:
    source = watching.source
    before = source.objects()[:3]
    write(config_dir / "bookinfo.yaml", BOOKINFO + "---\nkind: [unclosed\n")
    assert await watching.settle() == []
    assert source.objects()[:3] == before
    [error] = source.rejections()
    assert "bookinfo.yaml" in str(error) and "invalid YAML" in str(error)
    assert source.rejection_count == 1

    write(config_dir / "bookinfo.yaml", "---\n".join([service(8080), destination_rule(), service_entry()]))
    events = await watching.settle()
    assert summary(events) == [(EventType.UPDATE, SERVICE_KEY)]
    assert source.rejections() == []
    assert source.rejection_count == 1


async def test_invalid_object_keeps_last_good_version(watching: Watching, config_dir: Path) -> None:
    source = watching.source
    good_dr = {o.key: o for o in source.objects()}[DR_KEY]
    bad_dr = destination_rule("LEAST_REQUEST", extra="    connectionPool: {}\n")
    write(config_dir / "bookinfo.yaml", "---\n".join([service(8080), bad_dr, service_entry(8443)]))
    events = await watching.settle()
    assert summary(events) == [(EventType.UPDATE, SERVICE_KEY), (EventType.UPDATE, SE_KEY)]
    assert {o.key: o for o in source.objects()}[DR_KEY] == good_dr
    [error] = source.rejections()
    assert "trafficPolicy.connectionPool" in str(error) and "bookinfo.yaml#1" in str(error)

    write(
        config_dir / "bookinfo.yaml",
        "---\n".join([service(8080), destination_rule("LEAST_REQUEST"), service_entry(8443)]),
    )
    events = await watching.settle()
    assert summary(events) == [(EventType.UPDATE, DR_KEY)]
    assert source.rejections() == []


async def test_duplicate_key_first_file_wins(tmp_path: Path) -> None:
    d = tmp_path / "config"
    write(d / "a.yaml", destination_rule("ROUND_ROBIN"))
    write(d / "b.yaml", "---\n".join([destination_rule("LEAST_REQUEST"), service_entry()]))
    source = FileSource(d)
    events = source.load()
    assert summary(events) == [(EventType.ADD, DR_KEY), (EventType.ADD, SE_KEY)]
    assert events[0].obj.source == f"{d}/a.yaml"
    [error] = source.rejections()
    assert f"{d}/b.yaml#0" in str(error) and f"{d}/a.yaml" in str(error)

    w = Watching(source)
    try:
        write(d / "a.yaml", service())  # the DR leaves a.yaml: b.yaml's version takes over
        events = await w.settle()
        assert summary(events) == [(EventType.ADD, SERVICE_KEY), (EventType.UPDATE, DR_KEY)]
        assert events[1].obj.source == f"{d}/b.yaml#0"
        assert source.rejections() == []
    finally:
        await w.close()


async def test_change_between_load_and_watch_is_not_lost(config_dir: Path) -> None:
    source = FileSource(config_dir)
    source.load()
    write(
        config_dir / "bookinfo.yaml", "---\n".join([service(), destination_rule("RANDOM"), service_entry()])
    )
    w = Watching(source)
    try:
        events = await w.until(lambda ev: any(e.obj.key == DR_KEY for e in ev))
        assert summary(events) == [(EventType.UPDATE, DR_KEY)]
    finally:
        await w.close()


async def test_configmap_style_symlink_swap_is_seen(tmp_path: Path) -> None:
    """A mounted ConfigMap changes by swapping the hidden ``..data`` link; no event names the file."""
    d = tmp_path / "config"
    write(d / "..v1" / "se.yaml", service_entry(443))
    os.symlink("..v1", d / "..data")
    os.symlink("..data/se.yaml", d / "se.yaml")
    source = FileSource(d)
    assert summary(source.load()) == [(EventType.ADD, SE_KEY)]
    w = Watching(source)
    try:
        await w.settle()
        write(d / "..v2" / "se.yaml", service_entry(8443))
        os.symlink("..v2", d / "..data.tmp")
        os.replace(d / "..data.tmp", d / "..data")
        events = await w.settle()
        assert summary(events) == [(EventType.UPDATE, SE_KEY)]
        assert events[0].obj.spec.ports[0].number == 8443
    finally:
        await w.close()


async def test_closing_the_iterator_stops_the_watcher(config_dir: Path) -> None:
    source = FileSource(config_dir, debounce_ms=10)
    changes = source.watch()
    write(config_dir / "more.yaml", destination_rule(name="ratings"))
    first = await asyncio.wait_for(anext(changes), TIMEOUT)  # the initial read: everything is new
    assert {e.type for e in first} == {EventType.ADD}
    await asyncio.wait_for(changes.aclose(), TIMEOUT)
    with pytest.raises(StopAsyncIteration):
        await anext(changes)


# --- the pure core ------------------------------------------------------------------------


def test_fileset_unparsable_file_keeps_everything() -> None:
    fs = FileSet()
    fs.apply({"a.yaml": load_documents(BOOKINFO, "a.yaml")})
    objects = fs.objects()
    applied = fs.apply({"a.yaml": load_documents("a: [", "a.yaml")})
    assert applied.events == []
    assert fs.objects() == objects
    assert len(applied.new_errors) == 1


def test_fileset_reordered_documents_yield_nothing() -> None:
    fs = FileSet()
    fs.apply({"a.yaml": load_documents(BOOKINFO, "a.yaml")})
    reordered = "---\n".join([service_entry(), destination_rule(), service()])
    assert fs.apply({"a.yaml": load_documents(reordered, "a.yaml")}).events == []


def test_fileset_unidentifiable_document_deletes_nothing() -> None:
    fs = FileSet()
    fs.apply({"a.yaml": load_documents(BOOKINFO, "a.yaml")})
    nameless = service_entry().replace("name: httpbin-ext\n", "")
    applied = fs.apply(
        {"a.yaml": load_documents("---\n".join([service(), destination_rule(), nameless]), "a.yaml")}
    )
    assert applied.events == []
    assert SE_KEY in {o.key for o in fs.objects()}
    assert ["metadata.name" in str(e) for e in fs.errors()] == [True]


def test_fileset_earlier_path_takes_over_a_key() -> None:
    fs = FileSet()
    fs.apply({"d/b.yaml": load_documents(destination_rule("RANDOM"), "d/b.yaml")})
    applied = fs.apply({"d/a.yaml": load_documents(destination_rule("LEAST_REQUEST"), "d/a.yaml")})
    assert summary(applied.events) == [(EventType.UPDATE, DR_KEY)]
    assert [str(e) for e in applied.new_errors] == [
        "d/b.yaml: DestinationRule bookinfo/reviews: is also defined in d/a.yaml, which is in force; "
        "this definition is ignored"
    ]
    applied = fs.apply({"d/a.yaml": None})
    assert summary(applied.events) == [(EventType.UPDATE, DR_KEY)]
    assert fs.errors() == []


def test_fileset_duplicate_in_one_file_keeps_the_first() -> None:
    fs = FileSet()
    text = "---\n".join([destination_rule("RANDOM"), destination_rule("LEAST_REQUEST")])
    applied = fs.apply({"a.yaml": load_documents(text, "a.yaml")})
    assert summary(applied.events) == [(EventType.ADD, DR_KEY)]
    assert applied.events[0].obj.source == "a.yaml#0"
    assert ["a.yaml#1" in str(e) and "a.yaml#0" in str(e) for e in applied.new_errors] == [True]


def test_fileset_rejected_object_without_previous_version_is_absent() -> None:
    fs = FileSet()
    applied = fs.apply({"a.yaml": load_documents(destination_rule(extra="    foo: bar\n"), "a.yaml")})
    assert applied.events == []
    assert fs.objects() == []
    assert len(fs.errors()) == 1


# --- symlinks: followed safely, loops detected, unreadable links named and their config kept -----


def test_symlinked_directories_are_followed_and_loops_end_there(config_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "shared"
    write(outside / "ratings.yaml", destination_rule(name="ratings"))
    (config_dir / "shared").symlink_to(outside, target_is_directory=True)
    (config_dir / "loop").symlink_to(config_dir, target_is_directory=True)  # a directory loop
    (outside / "back").symlink_to(outside, target_is_directory=True)
    source = FileSource(config_dir)
    keys = [key for _, key in summary(source.load())]
    assert ConfigKey(Kind.DESTINATION_RULE, NS, "ratings") in keys
    assert len(keys) == len(set(keys)) and source.rejections() == []  # each directory read once


def test_a_symlink_loop_file_is_named_and_a_dangling_link_keeps_the_last_good_objects(config_dir: Path) -> None:
    (config_dir / "a.yaml").symlink_to(config_dir / "b.yaml")
    (config_dir / "b.yaml").symlink_to(config_dir / "a.yaml")  # a file loop
    source = FileSource(config_dir)
    good = summary(source.load())
    errors = [str(e) for e in source.rejections()]
    assert any(e.startswith(f"{config_dir / 'a.yaml'}: cannot read file") for e in errors), errors
    assert (EventType.ADD, SERVICE_KEY) in good
    # the file holding the Service becomes a link to nothing: reported, nothing deleted
    target = config_dir / "bookinfo.yaml"
    target.rename(config_dir / "elsewhere.txt")
    target.symlink_to(config_dir / "missing.yaml")
    assert source.load() == []
    assert any(str(e).startswith(f"{target}: cannot read file") for e in source.rejections())
    assert SERVICE_KEY in {o.key for o in source.objects()}


def test_an_oversized_document_is_refused_unread_and_its_last_good_objects_kept(config_dir: Path) -> None:
    # what is bounded is a document (3 MiB, the API server's limit), not the file
    source = FileSource(config_dir)
    source.load()
    before = source.objects()
    big = config_dir / "bookinfo.yaml"
    with big.open("r+b") as f:
        f.truncate(17 * 2**20)  # sparse: nothing is written; the last document grows to 17 MiB
    assert source.load() == []
    [error] = source.rejections()
    assert str(error).startswith(f"{big}#") and "more than the 3 MiB an object may hold, not read" in str(error)
    assert source.objects() == before
