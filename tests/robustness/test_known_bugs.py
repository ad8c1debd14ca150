"""Bad input that still hurts, found by the corpus and the fuzzing: each test states what DESIGN §5
asks and is a strict xfail until the code it names is fixed (then it passes, and the mark goes).
They run on the file source alone, not on the shared runtime: some of them stop its watch."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import pytest

from app.config.loader import load_documents
from app.sources.files import FileSource

GOOD = """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: other, namespace: ns}
spec:
  hosts: [other.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
"""


@pytest.mark.xfail(
    strict=True,
    raises=KeyError,
    reason="bug: app/config/schema.py _locate descends into a map field given as a list with the map-entry "
    "type and looks the list item's keys up in it: KeyError escapes load_documents, which stops `pilotfish "
    "serve` at start and the file watch (restarted forever) afterwards; istiod rejects the object",
)
@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        ("WorkloadEntry", "  address: 10.0.0.1\n  ports: [{http: 80}]\n"),
        ("Gateway", "  selector: [{istio: ingressgateway}]\n  servers: [{port: {number: 80, protocol: HTTP}}]\n"),
    ],
    ids=["workloadentry-ports-a-list", "gateway-selector-a-list"],
)
def test_a_map_field_written_as_a_list_is_rejected(tmp_path: Path, kind: str, spec: str) -> None:
    (tmp_path / "a-good.yaml").write_text(GOOD)
    bad = tmp_path / "b-bad.yaml"
    meta = "metadata: {name: x, namespace: ns}"
    bad.write_text(f"apiVersion: networking.istio.io/v1\nkind: {kind}\n{meta}\nspec:\n{spec}")
    source = FileSource(tmp_path)
    source.load()
    [error] = source.rejections()
    assert str(error).startswith(f"{bad}: ")
    assert [o.meta.name for o in source.objects()] == ["other"]


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="bug: app/config/loader.py puts PyYAML's problem marks in the rejection: 'invalid YAML: ...' spans "
    "4-5 lines, so the log line of DESIGN §5 is several",
)
def test_an_invalid_yaml_rejection_is_one_line() -> None:
    [rejection] = load_documents("kind: [unclosed\n", "f.yaml").rejected
    assert "\n" not in str(rejection.error), str(rejection.error)


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="bug: app/sources/files.py reads a FIFO named *.yaml like a file: the read blocks until a writer "
    "comes, so `pilotfish serve` does not start and the file watch stalls (every other file's changes wait)",
)
def test_a_fifo_in_the_config_dir_is_named_and_does_not_block(tmp_path: Path) -> None:
    (tmp_path / "a-good.yaml").write_text(GOOD)
    fifo = tmp_path / "b-pipe.yaml"
    os.mkfifo(fifo)

    def unblock() -> None:  # the test must end either way: a writer that closes at once
        time.sleep(1.0)
        with contextlib.suppress(OSError):  # ENXIO: nobody is reading it, nothing to unblock
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    writer = threading.Thread(target=unblock, daemon=True)
    writer.start()
    source = FileSource(tmp_path)
    began = time.monotonic()
    source.load()
    took = time.monotonic() - began
    writer.join()
    assert took < 0.5, f"the load waited {took:.1f}s for a writer"
    assert any(str(e).startswith(f"{fifo}: ") for e in source.rejections())
