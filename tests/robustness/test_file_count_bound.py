"""The file source's bound on how many config files a directory may hold: past it the directory
is refused whole, with one error naming it and the bound, and the last good config stays in force
(DESIGN §5); back under the bound, everything changed meanwhile is read."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import pytest

from app.config.objects import ConfigKey, EventType, Kind
from app.sources.files import MAX_CONFIG_FILES, FileSource, TooManyFiles, list_config_files

BOUND = 5


def entry(name: str, port: int = 443) -> str:
    return f"""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: ns}}
spec:
  hosts: [{name}.example.com]
  ports: [{{number: {port}, name: tls, protocol: TLS}}]
  resolution: DNS
"""


def key(name: str) -> ConfigKey:
    return ConfigKey(Kind.SERVICE_ENTRY, "ns", name)


def fill(config_dir: Path, count: int, prefix: str = "se") -> None:
    config_dir.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (config_dir / f"{prefix}{i}.yaml").write_text(entry(f"{prefix}{i}"))


def test_the_default_bound_is_ten_thousand_files() -> None:
    assert MAX_CONFIG_FILES == 10_000


def test_listing_stops_past_the_bound(tmp_path: Path) -> None:
    fill(tmp_path, BOUND)
    assert len(list_config_files(tmp_path, max_files=BOUND)) == BOUND
    (tmp_path / "notes.txt").write_text("not config: not counted")
    assert len(list_config_files(tmp_path, max_files=BOUND)) == BOUND
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "one-more.yml").write_text(entry("one-more"))
    with pytest.raises(TooManyFiles, match="more than 5 config files"):
        list_config_files(tmp_path, max_files=BOUND)


def test_too_many_directories_are_refused_too(tmp_path: Path) -> None:
    deep = tmp_path
    for i in range(BOUND + 1):
        deep = deep / f"d{i}"
    deep.mkdir(parents=True)
    with pytest.raises(TooManyFiles, match="more than 5 directories"):
        list_config_files(tmp_path, max_files=BOUND)


def test_a_directory_over_the_bound_is_refused_and_the_last_good_config_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "config"
    fill(config, BOUND)
    source = FileSource(config, max_files=BOUND)
    assert {e.obj.key for e in source.load()} == {key(f"se{i}") for i in range(BOUND)}
    before = source.objects()

    # one more file, and an edit of a file already held: neither is read
    (config / "se0.yaml").write_text(entry("se0", port=8443))
    (config / "extra.yaml").write_text(entry("extra"))
    with caplog.at_level(logging.WARNING, logger="app.sources.files"):
        assert source.load() == []
        assert source.load() == []  # still over: reported once
    assert source.objects() == before
    [error] = source.rejections()
    line = str(error)
    assert line.startswith(f"{config}: holds more than {BOUND} config files"), line
    assert "last good config stays in force" in line
    assert [r.getMessage() for r in caplog.records] == [line]
    assert not [r for r in caplog.records if r.exc_info]
    assert source.rejection_count == 1

    # back under the bound: what changed meanwhile is read, the error is gone
    (config / "se4.yaml").unlink()
    events = source.load()
    assert sorted((e.obj.key.name, e.type) for e in events) == [
        ("extra", EventType.ADD),
        ("se0", EventType.UPDATE),
        ("se4", EventType.DELETE),
    ]
    assert source.rejections() == []
    port = {o.key: o for o in source.objects()}[key("se0")].spec.ports[0].number
    assert port == 8443


def test_a_directory_over_the_bound_at_start_serves_nothing_and_says_why(tmp_path: Path) -> None:
    config = tmp_path / "config"
    fill(config, BOUND + 1)
    source = FileSource(config, max_files=BOUND)
    assert source.load() == [] and source.objects() == []
    [error] = source.rejections()
    assert str(error).startswith(f"{config}: holds more than {BOUND} config files")


async def test_the_watch_refuses_and_recovers_without_raising(tmp_path: Path) -> None:
    config = tmp_path / "config"
    fill(config, BOUND)
    source = FileSource(config, max_files=BOUND, debounce_ms=10)
    source.load()
    batches: asyncio.Queue[list[object]] = asyncio.Queue()

    async def follow() -> None:
        async for batch in source.watch():
            await batches.put(list(batch))

    task = asyncio.create_task(follow())
    try:
        await asyncio.sleep(0.3)  # the watcher is up
        fill(config, 3, prefix="flood")
        for _ in range(100):  # the refusal shows up as a rejection, not as events
            if source.rejections():
                break
            await asyncio.sleep(0.05)
        assert "holds more than 5 config files" in str(source.rejections()[0])
        assert batches.empty() and not task.done()
        for i in range(3):
            (config / f"flood{i}.yaml").unlink()
        (config / "se0.yaml").write_text(entry("se0", port=8443))
        batch = await asyncio.wait_for(batches.get(), 10)
        assert [e.obj.key for e in batch] == [key("se0")]  # type: ignore[attr-defined]
        assert source.rejections() == []
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
