"""py-spy on the server during each scenario (``--profile DIR`` of bench.xds_load): where a push's
server CPU goes, sampled from outside so the server runs as it always does.

Each scenario gets its own recording, ``DIR/<run>-<scenario>.txt`` in py-spy's collapsed-stack
format (one ``frame;frame;... count`` line per distinct stack; flamegraph tools read it), and the
scenario's figures get a ``profile`` summary: how many samples (only while the server ran Python:
idle threads are not sampled), and the functions with most samples, on the stack's top (self) and
anywhere on it (inclusive), as shares of all samples.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

RATE = 500  # samples per second: a 0.1 s push gets ~50
TOP = 15
_LINE = re.compile(r":\d+\)$")  # a frame's line number: one function's lines count together


class Profiler:
    """Records ``pid`` under py-spy, one recording per ``scenario``, into ``directory``."""

    def __init__(self, directory: Path, label: str) -> None:
        # this venv's (pyproject's test extra), else one on PATH
        beside = Path(sys.executable).with_name("py-spy")
        found = str(beside) if beside.exists() else shutil.which("py-spy")
        if found is None:
            raise RuntimeError("--profile needs py-spy (pip install py-spy)")
        self._py_spy = found
        directory.mkdir(parents=True, exist_ok=True)
        self._directory = directory
        self._label = label

    @asynccontextmanager
    async def scenario(self, pid: int, name: str, figures: dict[str, object]) -> AsyncIterator[None]:
        """py-spy runs on ``pid`` while the body does; its summary goes into ``figures``."""
        out = self._directory / f"{self._label}-{name}.txt"
        spy = await asyncio.create_subprocess_exec(
            self._py_spy, "record", "--pid", str(pid), "--rate", str(RATE), "--format", "raw", "--nonblocking",
            "--output", str(out), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        await asyncio.sleep(0.3)  # attached before the change is made
        try:
            yield
        finally:
            spy.send_signal(signal.SIGINT)  # py-spy writes what it has and exits
            await spy.wait()
        figures["profile"] = summary(out.read_text().splitlines() if out.exists() else (), out)


def summary(lines: Iterable[str], path: Path) -> dict[str, object]:
    """Samples, and the functions with most of them on top of the stack and anywhere on it."""
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    total = 0
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_LINE.sub(")", frame) for frame in stack.split(";")]
        total += count
        own[frames[-1]] += count
        for frame in set(frames[1:]):  # the first is the thread
            anywhere[frame] += count

    def shares(counter: Counter[str]) -> list[list[object]]:
        return [[frame, round(n / total, 3)] for frame, n in counter.most_common(TOP)]

    if not total:
        return {"file": str(path), "samples": 0}
    return {"file": str(path), "samples": total, "self": shares(own), "inclusive": shares(anywhere)}
