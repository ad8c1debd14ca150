"""PushRequest merging, the Debouncer, the PushQueue and the push workers, on a fake clock.

Time only moves when a test calls ``FakeClock.advance``; ``settle`` lets every runnable task run.
No wall-clock sleeps and no timing assertions.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging

import pytest

from app.config.objects import ConfigKey, Kind
from app.xds.push import Debouncer, PushQueue, PushQueueClosed, run_push_workers
from app.xds.push_request import PushRequest, TriggerReason

T0 = 100.0  # not 0.0: a start of 0.0 means "unknown"


async def settle(rounds: int = 30) -> None:
    """Let every task that can run, run (each round is one loop iteration)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class FakeClock:
    """A manual clock: sleepers wake only when ``advance`` moves past their deadline."""

    def __init__(self, start: float = T0) -> None:
        self._now = start
        self._seq = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self._now

    async def sleep(self, delay: float) -> None:
        if delay <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + delay, next(self._seq), fut))
        await fut

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def advance(self, delta: float) -> None:
        """Move time forward, waking sleepers in deadline order and letting each react."""
        target = self._now + delta
        await settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, fut = heapq.heappop(self._sleepers)
            if fut.done():
                continue
            self._now = deadline
            fut.set_result(None)
            await settle()
        self._now = target
        await settle()


def full(*kinds: Kind, reason: str = "config", start: float = 0.0) -> PushRequest:
    keys = frozenset(ConfigKey(k, "ns", k.lower()) for k in kinds)
    return PushRequest(full=True, configs_updated=keys, reasons={reason: 1}, start=start)


def eds(*hosts: str, start: float = 0.0) -> PushRequest:
    services = frozenset((h, "ns") for h in hosts)
    return PushRequest(full=False, endpoint_services=services, reasons={"endpoint": 1}, start=start)


# --- PushRequest.merge ------------------------------------------------------------------------


def test_merge_full_if_either_is_full_and_unions_what_changed() -> None:
    a = full(Kind.VIRTUAL_SERVICE)
    b = eds("a.ns.svc.cluster.local")
    for merged in (a.merge(b), b.merge(a)):
        assert merged.full is True
        assert merged.config_kinds == {Kind.VIRTUAL_SERVICE}
        assert merged.endpoint_services == {("a.ns.svc.cluster.local", "ns")}
    both = eds("a").merge(eds("b"))
    assert both.full is False
    assert both.endpoint_services == {("a", "ns"), ("b", "ns")}
    assert full(Kind.DESTINATION_RULE).merge(full(Kind.SIDECAR)).config_kinds == {
        Kind.DESTINATION_RULE,
        Kind.SIDECAR,
    }


def test_merge_adds_reason_counts_without_deduplicating() -> None:
    merged = full(reason="config").merge(full(reason="config")).merge(eds("x"))
    assert dict(merged.reasons) == {"config": 2, "endpoint": 1}


def test_merge_keeps_the_oldest_known_start() -> None:
    assert full(start=5.0).merge(full(start=3.0)).start == 3.0
    assert full(start=3.0).merge(full(start=5.0)).start == 3.0
    # 0.0 is "unknown", not "oldest"
    assert full(start=0.0).merge(full(start=5.0)).start == 5.0
    assert full(start=5.0).merge(full(start=0.0)).start == 5.0


def test_merge_forced_if_either_is_forced() -> None:
    forced = PushRequest(full=True, forced=True)
    assert full(Kind.GATEWAY).merge(forced).forced is True
    assert forced.merge(full(Kind.GATEWAY)).forced is True
    assert full(Kind.GATEWAY).merge(full(Kind.SIDECAR)).forced is False


def test_a_full_request_naming_no_kinds_stays_all_kinds_after_merge() -> None:
    everything = PushRequest(full=True)
    assert everything.all_kinds
    for merged in (everything.merge(full(Kind.GATEWAY)), full(Kind.GATEWAY).merge(everything)):
        assert merged.all_kinds
        assert merged.config_kinds == frozenset()
    # an endpoint-only request names no kinds but does not mean "all kinds"
    assert not eds("a").all_kinds
    assert full(Kind.GATEWAY).merge(eds("a")).config_kinds == {Kind.GATEWAY}


def test_merge_leaves_its_inputs_unchanged() -> None:
    a = full(Kind.VIRTUAL_SERVICE, start=7.0)
    b = full(Kind.SIDECAR, start=2.0)
    a.merge(b)
    assert a == full(Kind.VIRTUAL_SERVICE, start=7.0)
    assert dict(a.reasons) == {"config": 1}
    assert b == full(Kind.SIDECAR, start=2.0)


def test_push_request_is_hashable() -> None:
    assert hash(full(Kind.GATEWAY)) == hash(full(Kind.GATEWAY))


# --- Debouncer ----------------------------------------------------------------------------


class Recorder:
    """An on_fire that records each request and, when gated, blocks until released."""

    def __init__(self, gated: bool = False) -> None:
        self.fired: list[PushRequest] = []
        self.running = 0
        self.max_running = 0
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()
        self.fail_next = False

    async def __call__(self, req: PushRequest) -> None:
        self.fired.append(req)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await self.gate.wait()
            if self.fail_next:
                self.fail_next = False
                raise RuntimeError("push context build failed")
        finally:
            self.running -= 1


async def start(debouncer: Debouncer) -> asyncio.Task[None]:
    task = asyncio.create_task(debouncer.run())
    await settle()
    return task


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_fires_after_the_quiet_period() -> None:
    clock, rec = FakeClock(), Recorder()
    d = Debouncer(rec, debounce_after=0.5, debounce_max=4.0, clock=clock)
    task = await start(d)
    d.submit(full(Kind.VIRTUAL_SERVICE))
    await clock.advance(0.25)
    assert rec.fired == []
    await clock.advance(0.25)
    assert [r.config_kinds for r in rec.fired] == [{Kind.VIRTUAL_SERVICE}]
    assert rec.fired[0].start == T0  # stamped at submit
    assert (d.received, d.committed, d.fires) == (1, 1, 1)
    await stop(task)


async def test_each_request_restarts_the_quiet_period_and_all_are_merged() -> None:
    clock, rec = FakeClock(), Recorder()
    d = Debouncer(rec, debounce_after=0.5, debounce_max=4.0, clock=clock)
    task = await start(d)
    d.submit(full(Kind.VIRTUAL_SERVICE))
    await clock.advance(0.25)
    d.submit(full(Kind.DESTINATION_RULE))
    await clock.advance(0.25)  # 0.5 after the first, 0.25 after the second
    assert rec.fired == []
    d.submit(full(Kind.SIDECAR))
    await clock.advance(0.25)
    assert rec.fired == []
    await clock.advance(0.25)
    assert len(rec.fired) == 1
    merged = rec.fired[0]
    assert merged.full and merged.config_kinds == {Kind.VIRTUAL_SERVICE, Kind.DESTINATION_RULE, Kind.SIDECAR}
    assert dict(merged.reasons) == {"config": 3}
    assert merged.start == T0
    assert (d.received, d.committed, d.fires) == (3, 3, 1)
    await stop(task)


async def test_endpoint_lane_is_not_held_back_by_config_churn() -> None:
    # config changes every 0.25 s keep the config debounce going until its max delay; an
    # endpoint change among them fires after its own quiet period, alone (EDS fast path)
    clock, rec = FakeClock(), Recorder()
    d = Debouncer(rec, debounce_after=0.5, debounce_max=4.0, clock=clock)
    task = await start(d)
    d.submit(full(Kind.VIRTUAL_SERVICE))
    await clock.advance(0.25)
    d.submit(eds("a"))
    for _ in range(2):
        d.submit(full(Kind.VIRTUAL_SERVICE))
        await clock.advance(0.25)
    assert [(r.full, r.endpoint_services) for r in rec.fired] == [(False, {("a", "ns")})]
    assert (d.received, d.committed) == (4, 1)
    await stop(task)


async def test_a_config_fire_carries_the_endpoint_requests_waiting() -> None:
    clock, rec = FakeClock(), Recorder()
    d = Debouncer(rec, debounce_after=0.5, debounce_max=4.0, clock=clock)
    task = await start(d)
    d.submit(full(Kind.VIRTUAL_SERVICE))
    await clock.advance(0.25)
    d.submit(eds("a"))  # its own quiet period would end at 0.75; the config one ends at 0.5
    await clock.advance(0.25)
    assert len(rec.fired) == 1
    merged = rec.fired[0]
    assert merged.full and merged.endpoint_services == {("a", "ns")}
    assert dict(merged.reasons) == {"config": 1, "endpoint": 1}
    await clock.advance(1.0)
    assert len(rec.fired) == 1  # nothing left to fire
    assert (d.received, d.committed, d.fires) == (2, 2, 1)
    await stop(task)


async def test_fires_at_max_delay_when_requests_never_stop() -> None:
    clock, rec = FakeClock(), Recorder()
    d = Debouncer(rec, debounce_after=0.5, debounce_max=2.0, clock=clock)
    task = await start(d)
    for _ in range(7):  # t = 0 .. 1.75, never 0.5 quiet
        d.submit(full(Kind.SERVICE_ENTRY))
        await clock.advance(0.25)
    assert rec.fired == []
    d.submit(full(Kind.SERVICE_ENTRY))  # t = 1.75
    await clock.advance(0.25)  # t = 2.0: max delay since the first
    assert len(rec.fired) == 1
    assert dict(rec.fired[0].reasons) == {"config": 8}
    # the max delay counts from the first request not yet fired
    d.submit(full(Kind.SIDECAR))
    await clock.advance(0.25)
    assert len(rec.fired) == 1
    await clock.advance(0.25)
    assert [r.config_kinds for r in rec.fired][1] == {Kind.SIDECAR}
    await stop(task)


async def test_endpoint_requests_are_debounced_by_default() -> None:
    clock, rec = FakeClock(), Recorder()
    d = Debouncer(rec, debounce_after=0.5, debounce_max=4.0, clock=clock)
    task = await start(d)
    d.submit(eds("a"))
    await settle()
    assert rec.fired == []
    await clock.advance(0.5)
    assert [r.endpoint_services for r in rec.fired] == [{("a", "ns")}]
    await stop(task)


async def test_without_eds_debounce_endpoint_requests_fire_at_once_and_full_ones_wait() -> None:
    clock, rec = FakeClock(), Recorder()
    d = Debouncer(rec, debounce_after=0.5, debounce_max=4.0, eds_debounce=False, clock=clock)
    task = await start(d)
    d.submit(full(Kind.VIRTUAL_SERVICE))
    d.submit(eds("a"))
    await settle()  # no time passes
    assert len(rec.fired) == 1
    assert rec.fired[0].full is False and rec.fired[0].endpoint_services == {("a", "ns")}
    await clock.advance(0.25)
    assert len(rec.fired) == 1
    await clock.advance(0.25)
    assert [r.full for r in rec.fired] == [False, True]
    assert rec.fired[1].config_kinds == {Kind.VIRTUAL_SERVICE}
    assert (d.received, d.committed, d.fires) == (2, 2, 2)
    await stop(task)


async def test_never_two_fires_at_once_and_requests_during_a_fire_fire_afterwards() -> None:
    clock, rec = FakeClock(), Recorder(gated=True)
    d = Debouncer(rec, debounce_after=0.5, debounce_max=2.0, clock=clock)
    task = await start(d)
    d.submit(full(Kind.VIRTUAL_SERVICE))
    await clock.advance(0.5)
    assert len(rec.fired) == 1 and rec.running == 1
    d.submit(full(Kind.DESTINATION_RULE))
    d.submit(full(Kind.SIDECAR))
    await clock.advance(8.0)  # well past both the quiet period and the max delay
    assert len(rec.fired) == 1  # still inside the first fire
    assert (d.received, d.committed) == (3, 0)
    rec.gate.set()
    await settle()
    assert len(rec.fired) == 2
    assert rec.fired[1].config_kinds == {Kind.DESTINATION_RULE, Kind.SIDECAR}
    assert rec.max_running == 1
    assert (d.received, d.committed, d.fires) == (3, 3, 2)
    await stop(task)


async def test_a_request_during_a_fire_still_waits_its_quiet_period() -> None:
    clock, rec = FakeClock(), Recorder(gated=True)
    d = Debouncer(rec, debounce_after=0.5, debounce_max=4.0, clock=clock)
    task = await start(d)
    d.submit(full(Kind.VIRTUAL_SERVICE))
    await clock.advance(0.5)
    d.submit(full(Kind.SIDECAR))
    await clock.advance(0.25)
    rec.gate.set()
    await settle()
    assert len(rec.fired) == 1  # only 0.25 quiet so far
    await clock.advance(0.25)
    assert len(rec.fired) == 2
    await stop(task)


async def test_a_failing_fire_is_counted_and_the_debouncer_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    clock, rec = FakeClock(), Recorder()
    rec.fail_next = True
    d = Debouncer(rec, debounce_after=0.5, debounce_max=4.0, clock=clock)
    task = await start(d)
    with caplog.at_level(logging.ERROR, logger="app.xds.push"):
        d.submit(full(Kind.GATEWAY))
        await clock.advance(0.5)
    assert "failed" in caplog.text
    assert (d.fires, d.failures, d.committed) == (1, 1, 1)
    d.submit(full(Kind.SIDECAR))
    await clock.advance(0.5)
    assert (d.fires, d.failures, d.committed) == (2, 1, 2)
    assert not task.done()
    await stop(task)


async def test_a_request_without_reasons_is_counted_as_unknown() -> None:
    clock, rec = FakeClock(), Recorder()
    d = Debouncer(rec, debounce_after=0.5, clock=clock)
    task = await start(d)
    d.submit(PushRequest(full=True, start=42.0))
    await clock.advance(0.5)
    assert dict(rec.fired[0].reasons) == {TriggerReason.UNKNOWN: 1}
    assert rec.fired[0].start == 42.0  # a known start is kept
    await stop(task)


async def test_cancelling_while_waiting_drops_the_pending_request_and_its_timer() -> None:
    clock, rec = FakeClock(), Recorder()
    d = Debouncer(rec, debounce_after=0.5, clock=clock)
    task = await start(d)
    d.submit(full(Kind.GATEWAY))
    await settle()
    assert clock.sleepers == 1
    await stop(task)
    assert clock.sleepers == 0
    await clock.advance(1.0)
    assert rec.fired == []
    assert (d.received, d.committed) == (1, 0)


async def test_cancelling_during_a_fire_cancels_it() -> None:
    clock, rec = FakeClock(), Recorder(gated=True)
    d = Debouncer(rec, debounce_after=0.5, clock=clock)
    task = await start(d)
    d.submit(full(Kind.GATEWAY))
    await clock.advance(0.5)
    assert rec.running == 1
    await stop(task)
    assert rec.running == 0
    assert d.committed == 0


async def test_requests_submitted_before_run_are_fired() -> None:
    clock, rec = FakeClock(), Recorder()
    d = Debouncer(rec, debounce_after=0.5, clock=clock)
    d.submit(full(Kind.GATEWAY))
    task = await start(d)
    await clock.advance(0.5)
    assert len(rec.fired) == 1
    await stop(task)


async def test_the_real_clock_with_no_quiet_period_fires_without_waiting() -> None:
    rec = Recorder()
    d = Debouncer(rec, debounce_after=0.0)  # MonotonicClock
    task = await start(d)
    d.submit(full(Kind.GATEWAY))
    await settle()
    assert len(rec.fired) == 1 and rec.fired[0].start > 0
    await stop(task)


async def test_run_twice_is_refused() -> None:
    d = Debouncer(Recorder(), clock=FakeClock())
    task = await start(d)
    with pytest.raises(RuntimeError):
        await d.run()
    await stop(task)


# --- PushQueue ---------------------------------------------------------------------------------


async def test_enqueue_of_a_pending_connection_merges() -> None:
    q: PushQueue[str] = PushQueue()
    q.enqueue("a", full(Kind.VIRTUAL_SERVICE))
    q.enqueue("a", eds("x"))
    assert q.pending() == 1
    conn, req = await q.dequeue()
    assert conn == "a"
    assert req.full and req.config_kinds == {Kind.VIRTUAL_SERVICE}
    assert req.endpoint_services == {("x", "ns")}
    assert q.pending() == 0


async def test_fifo_by_first_enqueue() -> None:
    q: PushQueue[str] = PushQueue()
    for conn in ("a", "b", "c", "a", "b"):
        q.enqueue(conn, eds(conn))
    order = [(await q.dequeue())[0] for _ in range(3)]
    assert order == ["a", "b", "c"]


async def test_a_connection_being_pushed_is_requeued_at_mark_done() -> None:
    q: PushQueue[str] = PushQueue()
    q.enqueue("a", eds("x"))
    conn, _ = await q.dequeue()
    q.enqueue("a", eds("y"))
    q.enqueue("a", eds("z"))
    assert q.pending() == 0  # not handed out while in flight
    other = asyncio.create_task(q.dequeue())
    await settle()
    assert not other.done()
    q.mark_done(conn)
    await settle()
    assert other.done()
    conn2, req2 = other.result()
    assert conn2 == "a" and req2.endpoint_services == {("y", "ns"), ("z", "ns")}
    q.mark_done(conn2)
    assert q.pending() == 0


async def test_mark_done_without_new_requests_does_not_requeue() -> None:
    q: PushQueue[str] = PushQueue()
    q.enqueue("a", eds("x"))
    conn, _ = await q.dequeue()
    q.mark_done(conn)
    assert q.pending() == 0


async def test_dequeue_waits_for_an_enqueue() -> None:
    q: PushQueue[str] = PushQueue()
    waiter = asyncio.create_task(q.dequeue())
    await settle()
    assert not waiter.done()
    q.enqueue("a", eds("x"))
    await settle()
    assert waiter.result()[0] == "a"


async def test_remove_drops_a_pending_connection() -> None:
    q: PushQueue[str] = PushQueue()
    q.enqueue("a", eds("x"))
    q.enqueue("b", eds("y"))
    q.remove("a")
    assert q.pending() == 1
    assert (await q.dequeue())[0] == "b"
    q.remove("missing")  # no error


async def test_remove_while_in_flight_drops_what_arrived_meanwhile() -> None:
    q: PushQueue[str] = PushQueue()
    q.enqueue("a", eds("x"))
    conn, _ = await q.dequeue()
    q.enqueue("a", eds("y"))
    q.remove("a")
    q.mark_done(conn)
    assert q.pending() == 0


async def test_close_stops_blocked_and_later_dequeues_and_ignores_enqueues() -> None:
    q: PushQueue[str] = PushQueue()
    waiters = [asyncio.create_task(q.dequeue()) for _ in range(3)]
    await settle()
    q.close()
    await settle()
    for w in waiters:
        with pytest.raises(PushQueueClosed):
            w.result()
    q.enqueue("a", eds("x"))
    assert q.pending() == 0
    with pytest.raises(PushQueueClosed):
        await q.dequeue()
    assert q.closed


async def test_close_drops_queued_connections() -> None:
    q: PushQueue[str] = PushQueue()
    q.enqueue("a", eds("x"))
    q.close()
    assert q.pending() == 0
    with pytest.raises(PushQueueClosed):
        await q.dequeue()


async def test_a_waiter_cancelled_after_being_woken_passes_the_item_on() -> None:
    q: PushQueue[str] = PushQueue()
    first = asyncio.create_task(q.dequeue())
    await settle()
    second = asyncio.create_task(q.dequeue())
    await settle()
    q.enqueue("a", eds("x"))  # wakes `first`, which has not run yet
    first.cancel()
    await settle()
    assert first.cancelled()
    assert second.result()[0] == "a"


# --- workers ---------------------------------------------------------------------------------


class Pusher:
    def __init__(self) -> None:
        self.pushed: list[tuple[str, PushRequest]] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.running: set[str] = set()
        self.max_running = 0
        self.fail: set[str] = set()

    async def __call__(self, conn: str, req: PushRequest) -> None:
        assert conn not in self.running, "one connection pushed twice at once"
        self.pushed.append((conn, req))
        self.running.add(conn)
        self.max_running = max(self.max_running, len(self.running))
        try:
            gate = self.gates.get(conn)
            if gate is not None:
                await gate.wait()
            if conn in self.fail:
                raise RuntimeError(f"send to {conn} failed")
        finally:
            self.running.discard(conn)


def start_workers(workers: int) -> tuple[PushQueue[str], Pusher, asyncio.Task[None]]:
    """A queue, a Pusher and ``workers`` workers draining one into the other (they start at the next await)."""
    q: PushQueue[str] = PushQueue()
    pusher = Pusher()
    return q, pusher, asyncio.create_task(run_push_workers(q, pusher, workers=workers))


async def test_workers_push_everything_and_stop_when_the_queue_closes() -> None:
    q, pusher, task = start_workers(3)
    for conn in ("a", "b", "c", "d"):
        q.enqueue(conn, eds(conn))
    await settle()
    assert sorted(c for c, _ in pusher.pushed) == ["a", "b", "c", "d"]
    q.close()
    await settle()
    assert task.done() and task.result() is None


async def test_workers_bound_concurrent_pushes() -> None:
    q, pusher, task = start_workers(2)
    gate = asyncio.Event()
    conns = ["a", "b", "c", "d", "e"]
    pusher.gates = dict.fromkeys(conns, gate)
    for conn in conns:
        q.enqueue(conn, eds(conn))
    await settle()
    assert len(pusher.running) == 2
    assert q.pending() == 3
    gate.set()
    await settle()
    assert [c for c, _ in pusher.pushed] == conns  # FIFO
    assert pusher.max_running == 2
    q.close()
    await task


async def test_a_failing_push_is_logged_and_the_worker_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    q, pusher, task = start_workers(1)
    pusher.fail = {"a"}
    with caplog.at_level(logging.ERROR, logger="app.xds.push"):
        q.enqueue("a", eds("x"))
        q.enqueue("b", eds("y"))
        await settle()
    assert "push to a failed" in caplog.text
    assert [c for c, _ in pusher.pushed] == ["a", "b"]
    # the failed connection was marked done: it can be pushed again
    q.enqueue("a", eds("z"))
    await settle()
    assert [c for c, _ in pusher.pushed] == ["a", "b", "a"]
    q.close()
    await task


async def test_a_connection_is_never_pushed_by_two_workers_at_once() -> None:
    q, pusher, task = start_workers(4)
    pusher.gates["a"] = asyncio.Event()
    q.enqueue("a", eds("x"))
    await settle()
    q.enqueue("a", eds("y"))
    q.enqueue("a", eds("z"))
    await settle()
    assert len(pusher.pushed) == 1  # three idle workers, but "a" is in flight
    pusher.gates["a"].set()
    await settle()
    assert [r.endpoint_services for _, r in pusher.pushed] == [{("x", "ns")}, {("y", "ns"), ("z", "ns")}]
    q.close()
    await task


async def test_cancelling_the_workers_cancels_pushes_in_flight_and_marks_them_done() -> None:
    q, pusher, task = start_workers(2)
    pusher.gates["a"] = asyncio.Event()
    q.enqueue("a", eds("x"))
    await settle()
    q.enqueue("a", eds("y"))  # arrives while "a" is in flight
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pusher.running == set()
    assert q.pending() == 1  # mark_done ran on the way out and re-queued "a"


async def test_at_least_one_worker() -> None:
    with pytest.raises(ValueError):
        await run_push_workers(PushQueue[str](), Pusher(), workers=0)
