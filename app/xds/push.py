"""The push pipeline between config events and connections: Debouncer, PushQueue, workers.

As in istiod (pilot/pkg/xds/discovery.go ``debounce``, pushqueue.go, model.PushRequest): events
become ``PushRequest``s (app/xds/push_request.py), one Debouncer task merges them and fires after a quiet period or a
maximum delay, the fired request fans out into a PushQueue that keeps at most one pending
request per connection (merging the rest), and a fixed number of workers drain it. Time comes
from an injected ``Clock`` so the debounce logic is tested without wall-clock sleeps.
Single event loop: nothing here is thread-safe, and nothing needs to be.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, replace
from typing import Generic, Protocol, TypeVar

from app.errors import PilotfishError
from app.xds.push_request import UNKNOWN_REASON, PushRequest

log = logging.getLogger(__name__)


class Clock(Protocol):
    """Monotonic seconds and a sleep on them; injected so tests control time."""

    def now(self) -> float: ...

    async def sleep(self, delay: float) -> None: ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` and the running loop's ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, delay: float) -> None:
        await asyncio.sleep(delay)


MONOTONIC_CLOCK = MonotonicClock()


@dataclass(slots=True)
class _Lane:
    """Requests of one lane waiting to fire: merged, how many, first and last submit times."""

    after: float  # quiet period
    max: float  # longest wait from the first request
    req: PushRequest | None = None
    count: int = 0
    first: float = 0.0
    last: float = 0.0

    def add(self, req: PushRequest, now: float) -> bool:
        """Queue ``req``; True when the lane was empty (only then can the next fire come earlier)."""
        first = self.req is None
        self.req = req if self.req is None else self.req.merge(req)
        self.count += 1
        self.last = now
        if first:
            self.first = now
        return first

    def due_at(self) -> float:
        return min(self.last + self.after, self.first + self.max)

    def take(self) -> tuple[PushRequest, int, float]:
        """The merged request, how many it carries, and when the first of them came."""
        assert self.req is not None
        out = (self.req, self.count, self.first)
        self.req, self.count = None, 0
        return out


class Debouncer:
    """Merges submitted requests and hands them to ``on_fire``, one fire at a time.

    Two lanes. Config (full) requests fire after ``debounce_after`` without new ones, or
    ``debounce_max`` after the first not yet fired (istiod PILOT_DEBOUNCE_AFTER /
    PILOT_DEBOUNCE_MAX). Endpoint-only requests wait in their own lane under the same rule
    but their own timers, so config churn that keeps extending the config debounce never
    holds an endpoint push back (a separate lane rather than an adaptive rule: its latency
    bound is simple to state, one quiet period plus a fire in progress); with
    ``eds_debounce`` False (istiod PILOT_ENABLE_EDS_DEBOUNCE) they fire as soon as no fire
    is running. A config fire carries the endpoint requests waiting at that moment.
    Requests submitted while ``on_fire`` runs accumulate and fire after it returns, under
    the same rules. An exception from ``on_fire`` is logged and counted; the requests it
    carried count as committed (the push after a failed one is full: app/xds/discovery.py)."""

    def __init__(
        self,
        on_fire: Callable[[PushRequest], Awaitable[None]],
        *,
        debounce_after: float = 0.1,
        debounce_max: float = 10.0,
        eds_debounce: bool = True,
        clock: Clock = MONOTONIC_CLOCK,
    ) -> None:
        if debounce_after < 0 or debounce_max < 0:
            raise ValueError("debounce_after and debounce_max must not be negative")
        self._on_fire = on_fire
        self._clock = clock
        self._config = _Lane(debounce_after, debounce_max)
        self._endpoints = _Lane(debounce_after, debounce_max) if eds_debounce else _Lane(0.0, 0.0)
        self._wake: asyncio.Future[None] | None = None
        self._running = False
        self._received = 0
        self._committed = 0
        self._fires = 0
        self._failures = 0

    # --- counters (istiod InboundUpdates / CommittedUpdates) -----------------------------

    @property
    def received(self) -> int:
        """Requests submitted so far."""
        return self._received

    @property
    def committed(self) -> int:
        """Submitted requests whose fire has completed; equal to ``received`` when idle."""
        return self._committed

    @property
    def fires(self) -> int:
        """Calls of ``on_fire`` so far (each carries one or more merged requests)."""
        return self._fires

    @property
    def failures(self) -> int:
        """Fires whose ``on_fire`` raised."""
        return self._failures

    # --- input -------------------------------------------------------------------------

    def submit(self, req: PushRequest) -> None:
        """Queue a request; never blocks. Call from the event loop's thread."""
        self._received += 1
        now = self._clock.now()
        if not req.start or not req.reasons:
            req = replace(
                req,
                start=req.start or now,
                reasons=req.reasons or UNKNOWN_REASON,
            )
        lane = self._config if req.full else self._endpoints
        if lane.add(req, now):
            self._wake_up()

    def _wake_up(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    # --- the task ------------------------------------------------------------------------

    async def run(self) -> None:
        """Debounce and fire until cancelled."""
        if self._running:
            raise RuntimeError("Debouncer.run is already running")
        self._running = True
        try:
            while True:
                due = self._take_due()
                if due is not None:
                    await self._fire(*due)
                    continue
                waiting = [lane.due_at() for lane in (self._config, self._endpoints) if lane.req is not None]
                await self._wait(min(waiting) - self._clock.now() if waiting else None)
        finally:
            self._running = False

    def _take_due(self) -> tuple[PushRequest, int, float] | None:
        """The merged request to fire now, how many requests it carries, and their wait."""
        now = self._clock.now()
        config, endpoints = self._config, self._endpoints
        if config.req is not None and now >= config.due_at():
            req, count, first = config.take()
            if endpoints.req is not None:  # the full push carries the endpoints waiting
                more, more_count, more_first = endpoints.take()
                req, count, first = req.merge(more), count + more_count, min(first, more_first)
            return req, count, now - first
        if endpoints.req is not None and now >= endpoints.due_at():
            req, count, first = endpoints.take()
            return req, count, now - first
        return None

    async def _wait(self, delay: float | None) -> None:
        """Until ``delay`` passes (forever if None) or a submit may have made a fire due."""
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._wake = wake
        try:
            if delay is None:
                await wake
                return
            sleeper = asyncio.ensure_future(self._clock.sleep(delay))
            try:
                await asyncio.wait((sleeper, wake), return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                await asyncio.wait((sleeper,))  # let it finish; its CancelledError is not ours
        finally:
            self._wake = None

    async def _fire(self, req: PushRequest, count: int, waited: float) -> None:
        self._fires += 1
        log.info(
            "push debounce stable[%d] %d events, reasons %s: %.3fs since first event, full=%s",
            self._fires,
            count,
            dict(req.reasons),
            waited,
            req.full,
        )
        try:
            await self._on_fire(req)
        except Exception:
            self._failures += 1
            log.exception("push of %d debounced events failed", count)
        self._committed += count


# --- PushQueue -------------------------------------------------------------------------------

C = TypeVar("C", bound=Hashable)


class PushQueueClosed(PilotfishError):
    """The PushQueue was closed: workers stop."""


class PushQueue(Generic[C]):
    """Connections waiting for a push, each with one merged request (istiod PushQueue).

    FIFO by first enqueue. A connection that is being pushed (dequeued, not yet
    ``mark_done``) is never handed out again until it is done: requests for it wait and
    are merged, and it goes back on the queue at ``mark_done``. ``close`` drops what is
    waiting and makes every ``dequeue`` raise PushQueueClosed; pushes in flight finish."""

    def __init__(self) -> None:
        self._queue: OrderedDict[C, None] = OrderedDict()  # O(1) pop-first and remove
        self._pending: dict[C, PushRequest] = {}
        self._processing: set[C] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False

    def enqueue(self, conn: C, req: PushRequest) -> None:
        if self._closed:
            return
        queued = self._pending.get(conn)
        if queued is not None:
            self._pending[conn] = queued.merge(req)
            return
        self._pending[conn] = req
        if conn in self._processing:
            return  # re-queued by mark_done
        self._queue[conn] = None
        self._wake_one()

    async def dequeue(self) -> tuple[C, PushRequest]:
        """The next connection and its request; waits for one. Raises PushQueueClosed."""
        while not self._queue:
            if self._closed:
                raise PushQueueClosed("push queue closed")
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken, then cancelled: pass the wake-up on
                raise
        conn, _ = self._queue.popitem(last=False)
        self._processing.add(conn)
        return conn, self._pending.pop(conn)

    def mark_done(self, conn: C) -> None:
        """The push for ``conn`` finished; requests that arrived meanwhile are queued now."""
        self._processing.discard(conn)
        if conn in self._pending and not self._closed:
            self._queue[conn] = None
            self._wake_one()

    def remove(self, conn: C) -> PushRequest | None:
        """The connection closed: drop its pending request (returned). A push in flight still
        ends with mark_done."""
        self._queue.pop(conn, None)
        return self._pending.pop(conn, None)

    def pending(self) -> int:
        """Connections queued for a push (istiod PushQueue.Pending)."""
        return len(self._queue)

    def busy(self, conn: C) -> bool:
        """A push for ``conn`` waits or is in flight."""
        return conn in self._pending or conn in self._processing

    def queued(self, conn: C) -> bool:
        """A push for ``conn`` waits (queued, or to follow the one in flight)."""
        return conn in self._pending

    def idle(self) -> bool:
        """No connection is queued or being pushed."""
        return not self._queue and not self._processing

    def close(self) -> None:
        self._closed = True
        self._queue.clear()
        self._pending.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    @property
    def closed(self) -> bool:
        return self._closed

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():  # cancelled waiters are skipped
                waiter.set_result(None)
                return


async def run_push_workers(
    queue: PushQueue[C], push: Callable[[C, PushRequest], Awaitable[None]], workers: int = 100
) -> None:
    """Drain ``queue`` with ``workers`` concurrent pushes (istiod PILOT_PUSH_THROTTLE).

    A failing push is logged and its worker goes on. Returns when the queue is closed and
    the pushes in flight are done; cancelling cancels the pushes in flight."""
    if workers < 1:
        raise ValueError("workers must be at least 1")
    async with asyncio.TaskGroup() as tg:
        for i in range(workers):
            tg.create_task(_push_worker(queue, push), name=f"push-worker-{i}")


async def _push_worker(queue: PushQueue[C], push: Callable[[C, PushRequest], Awaitable[None]]) -> None:
    while True:
        try:
            conn, req = await queue.dequeue()
        except PushQueueClosed:
            return
        try:
            await push(conn, req)
        except Exception:
            log.exception("push to %s failed", conn)
        finally:
            queue.mark_done(conn)
