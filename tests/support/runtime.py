"""A pilotfish Runtime running in the test's event loop until the block ends."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from app.runtime import Runtime
from app.settings import Settings
from tests.support.bookinfo import BOOKINFO


@contextlib.asynccontextmanager
async def running(settings: Settings, *extra: Any) -> AsyncIterator[Runtime]:
    """``Runtime(settings, *extra)`` started (``/ready``) and, on the way out, stopped and awaited."""
    rt = Runtime(settings, *extra)
    stop = asyncio.Event()
    task = asyncio.create_task(rt.run(stop))
    try:
        await asyncio.wait_for(rt.started.wait(), 30)
        yield rt
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
        gc.unfreeze()  # the runtime froze the test process's heap (app/heap.py)


@contextlib.asynccontextmanager
async def running_bookinfo(workdir: Path, **settings: Any) -> AsyncIterator[Runtime]:
    """A Runtime on a copy of examples/bookinfo in ``workdir/config`` (the test may edit it),
    on loopback ports the system picks; ``settings`` override the fields of Settings."""
    config = workdir / "config"
    shutil.copytree(BOOKINFO, config)
    base = Settings(config_dir=config, xds_address="127.0.0.1:0", http_address="127.0.0.1:0")
    async with running(dataclasses.replace(base, **settings)) as rt:
        yield rt
