"""The push, in one place: what a debounced ``PushRequest`` does (istiod DiscoveryServer.Push).

``Discovery`` builds the snapshot after the one served (a full request rebuilds the PushContext
slices its keys affect, in a worker thread so the loop keeps serving streams; an endpoint-only
request shares every index and reads the registry's new endpoints, cheap enough for the loop),
publishes it to the generator together with generation's state for it (one reference, replaced
whole), drops from the resource cache what the change made stale, and queues the connected
streams the push can change something for: a stream no push waits or runs for is asked first,
and one whose proxy does not depend on the change (istiod ProxyNeedsPush) is done with at once.
The order is the contract: the cache is invalidated once the new snapshot is served and the
streams are queued after both, so a push reads the new snapshot through a cache holding nothing
the change made stale. The runtime, the tests and the benchmarks all push through here.

A build that raises publishes nothing, while the Environment already holds the change. A build
reuses every index whose kind its request does not name, so that change would stay unapplied
until another change of its kind came: instead the push after a failed one is full, naming
every kind (every index rebuilt, every proxy considered).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from app.environment import Environment
from app.model.push_context import PushContext
from app.xds.cache import ResourceCache
from app.xds.generators.source import XdsGenerator
from app.xds.next_push import next_push_context
from app.xds.observe import PushObserver
from app.xds.push import PushQueue
from app.xds.push_request import PushRequest

S = TypeVar("S", bound=Hashable)

_EVERY_KIND = PushRequest(full=True)  # merged into a request, it names every kind
_ENQUEUE_BATCH = 500  # streams checked and queued between two turns of the event loop


@dataclass(frozen=True, slots=True)
class Pushed:
    """What one push did: its request as queued (carrying the observer's handle), the snapshot
    now served, when its build started and ended (monotonic seconds) and the streams queued."""

    request: PushRequest
    push: PushContext
    started: float
    built: float
    streams: int


@dataclass(frozen=True, slots=True)
class _Served(Generic[S]):
    """A push whose snapshot is served: its request as queued, the snapshot, when its build
    ended, and the streams connected then."""

    request: PushRequest
    push: PushContext
    built: float
    streams: tuple[S, ...]


@dataclass(frozen=True, slots=True)
class _Begun:
    """A push under way: its request, its build (inputs taken), when it started, its trace."""

    request: PushRequest
    build: Callable[[], PushContext]
    started: float
    trace: Hashable | None


class Discovery(Generic[S]):
    """Owns the push: the snapshot served (through its ``generator``), the ``queue`` of streams
    waiting for a push, and the sequence from request to queue. ``streams`` are the connected
    streams, read once the new snapshot is served; none for a Discovery whose connections are
    pushed by hand (tests, benchmarks). ``unaffected`` says whether a push changes nothing for
    an idle stream (and then completes it there), so it is not queued. ``observer`` hears of
    each push (app/xds/observe.py)."""

    def __init__(
        self,
        env: Environment,
        cache: ResourceCache,
        *,
        streams: Callable[[], Collection[S]] = tuple,
        unaffected: Callable[[S, PushRequest], bool] | None = None,
        observer: PushObserver[PushRequest] | None = None,
    ) -> None:
        self.env = env
        self.generator = XdsGenerator(cache)
        self.queue: PushQueue[S] = PushQueue()
        self._streams = streams
        self._unaffected = unaffected
        self._observer = observer
        self._full_next = False  # a push failed before its snapshot was served

    def push_context(self) -> PushContext:
        """The snapshot served."""
        return self.generator.push_context()

    def start(self) -> None:
        """Serve the first snapshot, built from the Environment as it is now."""
        self.generator.publish(self.env.build_push_context(None))

    def push(self, request: PushRequest) -> Pushed:
        """Push ``request`` with its build on the caller's thread."""
        begun = self._begin(request)
        try:
            served = self._publish(begun, begun.build())
            return self._queued(begun, served, self._enqueue(served.streams, served.request))
        except Exception as e:
            self._failed(begun, e)
            raise

    async def fire(self, request: PushRequest) -> Pushed:
        """Push ``request`` (the Debouncer's fire); a full build runs in a worker thread."""
        begun = self._begin(request)
        try:
            push = await asyncio.to_thread(begun.build) if begun.request.full else begun.build()
            served = self._publish(begun, push)
            queued = 0
            for start in range(0, len(served.streams), _ENQUEUE_BATCH):
                if start:
                    await asyncio.sleep(0)  # thousands of filter checks: the loop serves in between
                queued += self._enqueue(served.streams[start : start + _ENQUEUE_BATCH], served.request)
            return self._queued(begun, served, queued)
        except Exception as e:
            self._failed(begun, e)
            raise

    def _failed(self, begun: _Begun, error: Exception) -> None:
        """The observer hears at once that nothing of the push will come (its trace would wait for
        its timeout, and end unconverged without saying why)."""
        if begun.trace is not None:
            assert self._observer is not None
            self._observer.push_failed(begun.trace, error)

    def _begin(self, request: PushRequest) -> _Begun:
        if self._full_next:
            request = request.merge(_EVERY_KIND)
        self._full_next = True  # until this push's snapshot is served: one that raises leaves it set
        build = self._build(request)
        started = time.monotonic()
        trace = self._observer.push_fired(request, started) if self._observer is not None else None
        return _Begun(request, build, started, trace)

    def _build(self, request: PushRequest) -> Callable[[], PushContext]:
        """The build of the snapshot after the one served, for ``request``: a full request
        rebuilds the slices its keys affect, an endpoint-only one reads the registry's new
        endpoints. The inputs (and the scope memo) are taken now, on the caller's thread; the
        returned build may run on another."""
        return next_push_context(self.push_context(), self.env, request)

    def _publish(self, begun: _Begun, push: PushContext) -> _Served[S]:
        built = time.monotonic()
        request, trace, observer = begun.request, begun.trace, self._observer
        self.generator.publish(push, request)  # served, and the cache invalidated
        self._full_next = False
        request = replace(request, pushes=(push.version,))
        if trace is not None:
            assert observer is not None
            if request.full:
                observer.context_built(trace, begun.started, built)
            request = replace(request, traces=(trace,))
        return _Served(request, push, built, tuple(self._streams()))

    def _enqueue(self, streams: Sequence[S], request: PushRequest) -> int:
        """Queue the streams the push may change something for; returns how many. A stream no
        push waits or runs for is asked first (``unaffected``): a scoped change then queues
        its few proxies, not every stream (each skipped one costs a filter check, not a
        pass through the queue, a worker and the stream's task)."""
        queued = 0
        for stream in streams:
            if self._unaffected is not None and not self.queue.busy(stream) and self._unaffected(stream, request):
                continue
            self.queue.enqueue(stream, request)
            queued += 1
        return queued

    def _queued(self, begun: _Begun, served: _Served[S], queued: int) -> Pushed:
        if begun.trace is not None:
            assert self._observer is not None
            self._observer.push_queued(begun.trace, queued)
        return Pushed(served.request, served.push, begun.started, served.built, queued)
