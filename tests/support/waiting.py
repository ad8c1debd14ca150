"""Waiting in async tests for a condition the code under test brings about."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(what: str, done: Callable[[], bool], within: float = 30.0, every: float = 0.02) -> None:
    """Return once ``done()`` holds; fail naming ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, f"not within {within:.0f}s: {what}"
        await asyncio.sleep(every)
