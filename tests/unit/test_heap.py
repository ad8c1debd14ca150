"""HeapKeeper: what it freezes, when, and that a sweep reclaims cycles among frozen objects."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from app.heap import HeapKeeper, pause_collection, resume_collection


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def _cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_settled_moves_the_heap_into_the_permanent_generation() -> None:
    young = [[] for _ in range(1000)]  # tracked containers the young generation holds
    before = gc.get_freeze_count()
    keeper = HeapKeeper()
    keeper.settled()
    # they moved to the permanent generation (counted there; other threads' allocations since
    # may already make the young count non-zero, so it is not what is asserted)
    assert gc.get_freeze_count() - before >= len(young) and keeper.freezes == 1


def test_disabled_keeper_freezes_nothing() -> None:
    keeper = HeapKeeper(enabled=False)
    keeper.settled()
    assert gc.get_freeze_count() == 0
    assert keeper.sweep() == (0, 0.0)


def test_a_storm_freezes_once_per_step_of_connects() -> None:
    keeper = HeapKeeper(connects_per_freeze=3)
    for _ in range(7):
        keeper.connected()
    assert keeper.freezes == 2


def test_a_frozen_cycle_survives_collections_until_a_sweep() -> None:
    keeper = HeapKeeper()
    ref = _cycle()
    keeper.settled()
    gc.collect()
    assert ref() is not None  # the collector does not walk frozen objects
    collected, _ = keeper.sweep()
    assert ref() is None and collected >= 2
    assert gc.get_freeze_count() > 0  # frozen again after the sweep


def test_started_freezes_and_resumes_the_collection_start_up_paused() -> None:
    keeper = HeapKeeper()
    pause_collection()
    try:
        assert not gc.isenabled()
        keeper.started()
        assert gc.isenabled() and gc.get_freeze_count() > 0 and keeper.freezes == 1
    finally:
        resume_collection()


def test_a_disabled_keeper_still_resumes_collection() -> None:
    pause_collection()
    try:
        HeapKeeper(enabled=False).started()
        assert gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        resume_collection()
