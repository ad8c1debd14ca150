"""The config dir's leftovers from the hostile-input run (issue 24, item 12, config parts).

* A directory below the config dir that cannot be listed was a traceback (the scan raised) and no
  entry in ``/debug/rejections``: now it is named once, as a rejection, the files below it keep
  what they held (they are not known to be gone), and everything else is read as before.
* A 20 MB file of 60,000 valid objects was refused whole (a 16 MiB bound on the file): what is
  bounded now is what costs, a document (3 MiB, the API server's request limit: that document is
  refused unread, the rest of its file still loads) and the documents of a file (100,000: past
  that the file is refused whole and read no further); a file is read a block at a time, so not
  even a line longer than the bound is held whole. The file-count bound and the nesting and
  alias bounds stay (test_file_count_bound.py, test_bad_input_corpus.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config.objects import ConfigKey, Kind
from app.config.yaml_documents import MAX_DOCUMENT_BYTES, MAX_DOCUMENTS
from app.sources.files import FileSource, load_config_file, load_config_files
from app.workers import WorkerPool
from tests.robustness.serving import get_json, serving

NS = "bounds"


def entry(name: str, port: int = 443) -> str:
    return f"""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: {NS}}}
spec:
  hosts: [{name}.example.com]
  ports: [{{number: {port}, name: tls, protocol: TLS}}]
  resolution: DNS
"""


def key(name: str) -> ConfigKey:
    return ConfigKey(Kind.SERVICE_ENTRY, NS, name)


@contextlib.contextmanager
def unlistable(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``directory`` cannot be listed (its files can still be opened by path): mode 000 for a
    user; root lists anything, so for root listing it fails as the kernel fails it (EACCES)."""
    if os.geteuid() != 0:
        directory.chmod(0)
        try:
            yield
        finally:
            directory.chmod(0o755)
        return
    real = os.scandir

    def scandir(path: object = ".") -> object:
        if os.fspath(path) == str(directory):  # type: ignore[arg-type]
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))  # type: ignore[arg-type]
        return real(path)  # type: ignore[call-overload]

    with monkeypatch.context() as patch:
        patch.setattr(os, "scandir", scandir)
        yield


# --- a directory that cannot be listed --------------------------------------------------------


def test_an_unlistable_directory_is_one_rejection_and_what_is_below_it_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "config"
    (config / "team").mkdir(parents=True)
    (config / "top.yaml").write_text(entry("top"))
    (config / "team" / "below.yaml").write_text(entry("below"))
    source = FileSource(config)
    assert {e.obj.key for e in source.load()} == {key("top"), key("below")}
    before = source.objects()

    with unlistable(config / "team", monkeypatch), caplog.at_level(logging.INFO, logger="app"):
        (config / "top.yaml").write_text(entry("top", port=8443))  # a change elsewhere is read
        [event] = source.load()
        assert event.obj.key == key("top") and event.obj.spec.ports[0].number == 8443
        [error] = source.rejections()
        assert str(error) == (
            f"{config / 'team'}: cannot list directory: Permission denied; "
            "the files below it keep their last good config"
        )
        assert {o.key for o in source.objects()} == {o.key for o in before}
        assert source.load() == []  # still unlistable: named once, counted once
        assert source.rejection_count == 1
    assert [r for r in caplog.records if r.exc_info] == []  # no traceback
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [str(error)]

    assert source.load() == []  # listable again: nothing below it changed, nothing to report
    assert source.rejections() == []
    (config / "team" / "below.yaml").write_text(entry("below", port=8443))
    [event] = source.load()
    assert event.obj.key == key("below")


def test_the_config_dir_itself_unlistable_still_stops_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nothing of it is known: as before, a settings error at start (its files are not gone)
    config = tmp_path / "config"
    config.mkdir()
    with unlistable(config, monkeypatch), pytest.raises(Exception, match="cannot list"):
        FileSource(config).load()


async def test_the_running_server_lists_the_unlistable_directory_in_debug_rejections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "config"
    (config / "team").mkdir(parents=True)
    (config / "top.yaml").write_text(entry("top"))
    (config / "team" / "below.yaml").write_text(entry("below"))
    async with serving(config) as rt:
        with unlistable(config / "team", monkeypatch), caplog.at_level(logging.WARNING):
            (config / "later.yaml").write_text(entry("later"))  # a change, so the dir is scanned
            deadline = time.monotonic() + 10
            while not any("cannot list directory" in r for r in await get_json(rt, "/debug/rejections")):
                assert time.monotonic() < deadline, await get_json(rt, "/debug/rejections")
                await asyncio.sleep(0.05)
            rejections = await get_json(rt, "/debug/rejections")
            assert rejections == [
                f"{config / 'team'}: cannot list directory: Permission denied; "
                "the files below it keep their last good config"
            ]
            in_force = {o.key for s in rt.sources for o in s.objects()}
            assert {key("top"), key("below"), key("later")} <= in_force
        assert [r for r in caplog.records if r.exc_info] == []


# --- what is bounded: a document, and the documents of a file --------------------------------


def service(i: int) -> str:
    return f"""apiVersion: v1
kind: Service
metadata:
  name: svc-{i}
  namespace: ns-{i % 50}
  labels: {{app: svc-{i}, tier: backend, team: payments-{i % 50}}}
  annotations: {{owner: team-payments-{i % 50}@example.com}}
spec:
  clusterIP: 10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}
  selector: {{app: svc-{i}}}
  ports: [{{name: http, port: 80, targetPort: 8080}}, {{name: grpc-api, port: 9090}}]
"""


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 20 MB file of 60,000 valid Services (a mesh of this size exists)."""
    path = tmp_path_factory.mktemp("big") / "config" / "services.yaml"
    path.parent.mkdir()
    path.write_text("---\n".join(service(i) for i in range(60_000)))
    assert path.stat().st_size > 20_000_000
    return path


def test_a_20_mb_file_of_60000_objects_is_read_whole(big_file: Path) -> None:
    source = FileSource(big_file.parent)
    events = source.load()
    assert len(events) == 60_000 and source.rejections() == []
    assert events[-1].obj.key == ConfigKey(Kind.SERVICE, "ns-49", "svc-59999")


def test_a_worker_reads_it_whole_too(big_file: Path) -> None:
    # what the file source runs while serving: the file read in a worker process, the objects
    # pickled back (a single file over the batch size is a batch of its own)
    pool = WorkerPool(1, name="big", preload=("app.sources.files",))
    try:
        [result] = pool.submit(load_config_files, [(str(big_file), False)], "istio-system", False).result()
    finally:
        pool.close()
    assert result is not None and len(result.objects) == 60_000 and result.rejected == []


def test_a_document_over_the_bound_is_refused_alone_and_the_rest_of_its_file_loads(tmp_path: Path) -> None:
    huge = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: huge, namespace: bounds}\ndata:\n"
    huge += "".join(f"  k{i}: {'x' * 1000}\n" for i in range(4 * 1024))  # 4 MiB
    path = tmp_path / "mixed.yaml"
    path.write_text("---\n".join([entry("before"), huge, entry("after")]))
    result = load_config_file(path, mesh=False, strict=False)
    assert result is not None and [o.key for o in result.objects] == [key("before"), key("after")]
    [rejection] = result.rejected
    assert rejection.key is None  # not read: its identity is unknown, so the file deletes nothing
    assert str(rejection.error).startswith(f"{path}#1: a document of at least 4,")
    assert "(from line 9): more than the 3 MiB an object may hold, not read" in str(rejection.error)


def test_the_bound_is_in_bytes_whatever_the_characters(tmp_path: Path) -> None:
    # 1.6 million characters of two bytes each: within the bound in characters, not in bytes
    wide = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: wide, namespace: bounds}\ndata:\n"
    wide += "".join(f"  k{i}: {'é' * 1000}\n" for i in range(1600))
    path = tmp_path / "wide.yaml"
    path.write_text(entry("before") + "---\n" + wide, encoding="utf-8")
    result = load_config_file(path, mesh=False, strict=False)
    assert result is not None and [o.key for o in result.objects] == [key("before")]
    [rejection] = result.rejected
    assert "a document of at least 3,2" in str(rejection.error) and "bytes (from line 9)" in str(rejection.error)


def test_a_line_longer_than_the_bound_is_never_held_whole(tmp_path: Path) -> None:
    path = tmp_path / "line.yaml"
    with path.open("w") as f:
        f.write(entry("before") + "---\n" + "junk: ")
        for _ in range(40):  # 40 MiB on one line
            f.write("y" * 2**20)
        f.write("\n---\n" + entry("after"))
    tracemalloc.start()
    try:
        result = load_config_file(path, mesh=False, strict=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result is not None and [o.key for o in result.objects] == [key("before"), key("after")]
    [rejection] = result.rejected
    assert "a document of at least 41,943,047 bytes (from line 9)" in str(rejection.error), rejection
    assert peak < 4 * MAX_DOCUMENT_BYTES, f"{peak / 2**20:.0f} MiB held reading a 40 MiB line"


def test_a_file_of_more_documents_than_the_bound_is_refused_whole(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    path = config / "many.yaml"
    path.write_text(entry("kept"))
    source = FileSource(config)
    [added] = source.load()
    # empty documents cost little each, and still count: a file of separators is no way around it
    path.write_text(entry("kept", port=8443) + "---\n" * MAX_DOCUMENTS)
    assert source.load() == []
    [error] = source.rejections()
    assert str(error) == (
        f"{path}: holds more than 100,000 documents, the most a file may hold: not read further; "
        "what it held before stays in force"
    )
    assert source.objects() == [added.obj]
    path.write_text(entry("kept", port=8443) + "---\n" * (MAX_DOCUMENTS - 2))  # within: read
    [event] = source.load()
    assert event.obj.spec.ports[0].number == 8443 and source.rejections() == []
