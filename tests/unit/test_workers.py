"""The worker processes validation runs in, off the event loop (app/workers.py): calls and
their failures come back as futures, a call past its deadline or a worker that dies costs that
call only, and what the loader builds crosses the process boundary intact; ``start()`` runs the
workers before any call."""

from __future__ import annotations

import contextlib
import operator
import os
import pickle
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from app.config.loader import load_documents
from app.workers import DeadlineExceeded, WorkerError, WorkerPool, dumps
from tests.robustness.corpus import good_text


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    pool = WorkerPool(1, name="test", preload=("app.config.loader",))
    yield pool
    pool.close()


def test_a_call_runs_in_another_process_and_its_errors_come_back(pool: WorkerPool) -> None:
    assert pool.submit(operator.add, 2, 3).result(30) == 5
    assert pool.submit(os.getpid).result(30) != os.getpid()
    with pytest.raises(WorkerError, match="ValueError: invalid literal"):
        pool.submit(int, "many").result(30)
    assert pool.submit(operator.add, 1, 1).result(30) == 2  # the worker goes on


def test_a_call_past_its_deadline_is_killed_and_the_worker_replaced(pool: WorkerPool) -> None:
    first = pool.submit(os.getpid).result(30)
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        pool.submit(time.sleep, 60, deadline=time.monotonic() + 0.5).result(30)
    assert time.monotonic() - started < 30  # not the minute the call asked for
    assert pool.submit(os.getpid).result(30) != first


def test_a_worker_that_dies_fails_its_call_only(pool: WorkerPool) -> None:
    with pytest.raises(WorkerError, match="ended"):
        pool.submit(os._exit, 3).result(30)
    assert pool.submit(operator.mul, 6, 7).result(30) == 42


def test_a_call_that_cannot_be_sent_fails_alone(pool: WorkerPool) -> None:
    nested: list[object] = []
    for _ in range(100_000):
        nested = [nested]
    with pytest.raises(WorkerError, match="cannot send"):
        pool.submit(len, nested).result(30)
    assert pool.submit(operator.add, 1, 2).result(30) == 3


def test_close_fails_what_is_queued_and_refuses_more() -> None:
    pool = WorkerPool(1, name="test")
    running = pool.submit(time.sleep, 60)
    queued = pool.submit(operator.add, 1, 2)
    time.sleep(0.5)
    pool.close()
    for future in (running, queued):
        with pytest.raises(WorkerError):
            future.result(30)
    with pytest.raises(WorkerError, match="closed"):
        pool.submit(operator.add, 1, 2)


def test_load_results_cross_the_process_boundary_intact() -> None:
    # read-only label maps and ConfigErrors do not pickle by default
    text = good_text("dr", "cart") + "---\n" + good_text("pod", "cart-0") + "---\nkind: Service\napiVersion: v1\n"
    result = load_documents(text, "f.yaml")
    assert result.objects and result.rejected
    copy = pickle.loads(dumps(result))
    assert [(o.kind, o.meta, o.spec, o.status, o.source) for o in copy.objects] == [
        (o.kind, o.meta, o.spec, o.status, o.source) for o in result.objects
    ]
    assert [(r.key, str(r.error), r.error.field, r.error.reason) for r in copy.rejected] == [
        (r.key, str(r.error), r.error.field, r.error.reason) for r in result.rejected
    ]


def _worker_children() -> list[int]:
    """This process's children running a worker (/proc: every thread's children)."""
    found = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            for pid in f.read().split():
                with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as cmd:
                    if b"from app.workers import main" in cmd.read():
                        found.append(int(pid))
    return found


def test_start_runs_the_workers_before_the_first_call() -> None:
    before = set(_worker_children())
    pool = WorkerPool(1, name="test", preload=("app.config.loader",))
    try:
        assert set(_worker_children()) == before  # nothing runs before start()
        pool.start()
        deadline = time.monotonic() + 30
        while not set(_worker_children()) - before and time.monotonic() < deadline:
            time.sleep(0.05)
        started = set(_worker_children()) - before
        assert len(started) == 1
        assert pool.submit(os.getpid).result(30) in started  # the first call is answered by it
    finally:
        pool.close()


@dataclass(frozen=True, slots=True)
class _Slotted:
    name: str
    items: tuple[int, ...] = ()
    nested: _Slotted | None = None


def test_slotted_dataclasses_cross_as_their_fields() -> None:
    value = _Slotted("a", (1, 2), _Slotted("b"))
    assert pickle.loads(dumps([value, value])) == [value, value]
    assert pickle.loads(dumps(_Slotted("c"))).nested is None
