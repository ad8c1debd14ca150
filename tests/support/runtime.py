"""A pilotfish Runtime running in the test's event loop until the block ends."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from typing import Any

from app.runtime import Runtime
from app.settings import Settings


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
