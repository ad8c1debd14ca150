"""supervise: a long-lived task that fails is logged and restarted after a backoff, so bad input
never ends the process; a watch that merely ends is restarted too; cancellation still stops it."""

from __future__ import annotations

import asyncio
import logging

import pytest

from app.supervise import Backoff, supervise

QUICK = Backoff(initial=0.01, cap=0.02)


async def test_a_failing_task_is_logged_and_restarted(caplog: pytest.LogCaptureFixture) -> None:
    runs = 0

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise ValueError(f"bad input #{runs}")

    with caplog.at_level(logging.ERROR):
        await asyncio.wait_for(supervise("flaky", flaky, backoff=QUICK), 5)
    assert runs == 3
    failures = [r for r in caplog.records if "flaky failed; restarting it in" in r.getMessage()]
    assert len(failures) == 2 and all(r.exc_info for r in failures)


async def test_forever_restarts_a_task_that_returns() -> None:
    runs = 0
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal runs
        runs += 1
        if runs == 3:
            done.set()
            await asyncio.sleep(3600)

    task = asyncio.create_task(supervise("watch", watch, forever=True, backoff=QUICK))
    await asyncio.wait_for(done.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert runs == 3


def test_backoff_grows_jittered_to_its_cap_and_resets() -> None:
    backoff = Backoff(initial=1, cap=4, jitter=0.2)
    delays = [backoff.delay() for _ in range(5)]
    assert 0.8 <= delays[0] <= 1.2 and 1.6 <= delays[1] <= 2.4 and all(3.2 <= d <= 4.8 for d in delays[2:])
    backoff.reset()
    assert backoff.delay() <= 1.2
