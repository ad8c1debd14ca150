"""Long-lived tasks that bad input must not end: a failure is logged and the task restarted
after a jittered, growing backoff, so the process keeps serving its last good config (DESIGN §5)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)


class Backoff:
    """Jittered exponential backoff: ``initial`` doubling up to ``cap`` seconds, each wait
    scaled by a random factor in [1 - jitter, 1 + jitter]."""

    def __init__(self, initial: float = 0.8, cap: float = 30.0, jitter: float = 0.2) -> None:
        self._initial, self._cap, self._jitter = initial, cap, jitter
        self._next = initial

    def reset(self) -> None:
        self._next = self._initial

    def delay(self) -> float:
        wait = self._next * random.uniform(1 - self._jitter, 1 + self._jitter)
        self._next = min(self._next * 2, self._cap)
        return wait


async def supervise(
    name: str,
    run: Callable[[], Awaitable[None]],
    *,
    forever: bool = False,
    backoff: Backoff | None = None,
    healthy_after: float = 60.0,
) -> None:
    """Run ``run()`` until this is cancelled, or until it returns unless ``forever`` (a watch
    that ends has stopped following its source: it is restarted too). When it raises, log the
    traceback and run it again after a backoff; a run that lasted ``healthy_after`` seconds
    resets the backoff."""
    backoff = backoff or Backoff()
    while True:
        started = time.monotonic()
        error: Exception | None = None
        try:
            await run()
        except Exception as e:
            error = e
        else:
            if not forever:
                return
        if time.monotonic() - started >= healthy_after:
            backoff.reset()
        delay = backoff.delay()
        what = "failed" if error is not None else "ended"
        logger.error("%s %s; restarting it in %.1fs", name, what, delay, exc_info=error)
        await asyncio.sleep(delay)
