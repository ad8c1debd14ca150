"""The forked child that computes ``POST /debug/diff`` (app/debug/diff.py): its answer comes
back, its failure is a clear error and the server keeps going, one that overruns is stopped."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from app.debug.diff import PreviewFailed, in_fork


def answer() -> dict[str, Any]:
    return {"preview": {"unaffected": 3}}


def fails() -> dict[str, Any]:
    raise ValueError("no such thing")


def hangs() -> dict[str, Any]:
    time.sleep(30)
    return {}


async def test_the_childs_answer_comes_back() -> None:
    assert await in_fork(answer, asyncio.Lock()) == {"preview": {"unaffected": 3}}


async def test_a_failure_in_the_child_is_a_clear_error() -> None:
    with pytest.raises(PreviewFailed, match="ValueError: no such thing"):
        await in_fork(fails, asyncio.Lock())
    assert await in_fork(answer, asyncio.Lock()) == {"preview": {"unaffected": 3}}  # and the next one runs


async def test_a_child_past_its_deadline_is_stopped() -> None:
    started = time.monotonic()
    with pytest.raises(PreviewFailed, match=r"longer than 0\.3 s"):
        await in_fork(hangs, asyncio.Lock(), deadline=0.3)
    assert time.monotonic() - started < 10
