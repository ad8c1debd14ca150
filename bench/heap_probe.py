"""pilotfish under a heap probe, for the reconnect soak (bench/reconnect_soak.py): ``python -m
bench.heap_probe serve ...`` runs ``app.cli`` as usual, and each SIGUSR1 appends one JSON line to
``$PILOTFISH_HEAP_PROBE``: the RSS, pymalloc's and glibc's share of it, every gc-tracked object
(frozen too) by type, and, when tracemalloc traces (``PYTHONTRACEMALLOC=N``), the allocation
sites that grew most since the previous probe.

The probe lives in the bench, not in the server: a server run without it carries nothing of it.
A probe walks the whole heap (about a second at mesh-1k with 2,000 streams) on the event loop's
thread, so the soak sends it only between churn rounds, once the round has settled. With
``$PILOTFISH_HEAP_PROBE_SWEEP=1`` each probe first collects everything, frozen objects too (the
HeapKeeper's sweep), and reports what that found; with ``$PILOTFISH_HEAP_PROBE_TRIM=1`` it also
reports the RSS after glibc's ``malloc_trim(0)`` (memory freed but kept by the allocator).
"""

from __future__ import annotations

import collections
import ctypes
import gc
import json
import os
import signal
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from types import FrameType

TOP = 25  # types and allocation sites reported per probe


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def pymalloc_mb() -> dict[str, float]:
    """CPython's small-object allocator: its arenas (mapped, in MiB) and the blocks in use in them
    (``sys._debugmallocstats``, which writes to the C stderr)."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as text:
        os.dup2(text.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        text.seek(0)
        lines = text.read().decode(errors="replace").splitlines()
    out: dict[str, float] = {}
    for line in lines:
        value = line.rsplit("=", 1)[-1].strip().replace(",", "")
        if "bytes/arena" in line:
            out["arenas_mb"] = round(int(value) / 2**20, 1)
        elif line.startswith("# bytes in allocated blocks"):
            out["blocks_mb"] = round(int(value) / 2**20, 1)
    return out


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


_LIBC = ctypes.CDLL("libc.so.6")  # loaded once: a probe should not count its own objects as growth
_LIBC.mallinfo2.restype = _Mallinfo2


def malloc_mb() -> dict[str, float]:
    """glibc's heap over all its arenas (``mallinfo2``): in use, free but kept, and mmapped blocks."""
    info = _LIBC.mallinfo2()
    return {
        "in_use_mb": round(info.uordblks / 2**20, 1),
        "free_kept_mb": round(info.fordblks / 2**20, 1),
        "mmapped_mb": round(info.hblkhd / 2**20, 1),
    }


class HeapProbe:
    def __init__(self, out: Path, *, sweep: bool, trim: bool) -> None:
        self._out = out
        self._sweep = sweep
        self._trim = trim
        self._types: collections.Counter[str] = collections.Counter()
        self._snapshot: tracemalloc.Snapshot | None = None
        self._probes = 0

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        started = time.perf_counter()
        row: dict[str, object] = {"probe": self._probes, "rss_mb": rss_mb()}
        self._probes += 1
        if self._sweep:
            gc.unfreeze()
            row["swept"] = gc.collect()
            gc.freeze()
            row["rss_after_sweep_mb"] = rss_mb()
        if self._trim:
            _LIBC.malloc_trim(0)
            row["rss_after_trim_mb"] = rss_mb()
        row["pymalloc"] = pymalloc_mb()
        row["malloc"] = malloc_mb()
        row["frozen"] = gc.get_freeze_count()
        # every gc-tracked object, the frozen ones too: unfreeze and freeze only splice lists and
        # nothing is collected between them (the young generations end up frozen, as after a
        # HeapKeeper freeze)
        gc.unfreeze()
        try:
            types = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
        finally:
            gc.freeze()
        row["objects"] = sum(types.values())
        row["types_top"] = dict(types.most_common(TOP))
        grown = types.copy()
        grown.subtract(self._types)
        row["types_grown"] = {k: v for k, v in grown.most_common(TOP) if v > 0}
        self._types = types
        if tracemalloc.is_tracing():
            snapshot = tracemalloc.take_snapshot().filter_traces((tracemalloc.Filter(False, tracemalloc.__file__),))
            current, _ = tracemalloc.get_traced_memory()
            row["traced_mb"] = round(current / 2**20, 1)
            if self._snapshot is not None:
                stats = snapshot.compare_to(self._snapshot, "traceback")
                row["sites_grown"] = [
                    {"kib": round(s.size_diff / 1024), "count": s.count_diff, "at": _where(s.traceback)}
                    for s in stats[:TOP]
                    if s.size_diff > 0
                ]
            self._snapshot = snapshot
        row["probe_s"] = round(time.perf_counter() - started, 2)
        with self._out.open("a") as out:
            out.write(json.dumps(row) + "\n")


def _where(traceback: tracemalloc.Traceback) -> list[str]:
    """The frames of an allocation site, innermost last, the venv's and stdlib's paths shortened."""
    return [f"{_short(frame.filename)}:{frame.lineno}" for frame in traceback]


def _short(path: str) -> str:
    for marker in ("site-packages/", "/app/", "/lib/python3"):
        if marker in path:
            return path[path.index(marker) + (0 if marker == "/app/" else len(marker)) :].lstrip("/")
    return path


def main() -> int:
    out = os.environ.get("PILOTFISH_HEAP_PROBE")
    if out:
        probe = HeapProbe(
            Path(out),
            sweep=os.environ.get("PILOTFISH_HEAP_PROBE_SWEEP") == "1",
            trim=os.environ.get("PILOTFISH_HEAP_PROBE_TRIM") == "1",
        )
        signal.signal(signal.SIGUSR1, probe)
    from app.cli import main as pilotfish

    return pilotfish(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
