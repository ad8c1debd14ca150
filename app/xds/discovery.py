"""The push, in one place: what a debounced ``PushRequest`` does (istiod DiscoveryServer.Push).

``Discovery`` builds the snapshot after the one served (a full request rebuilds the PushContext
slices its keys affect, in a worker thread so the loop keeps serving streams; an endpoint-only
request shares every index and reads the registry's new endpoints, cheap enough for the loop),
publishes it to the generator together with generation's state for it (one reference, replaced
whole), drops from the resource cache what the change made stale, and queues every connected
stream; each stream's Connection skips a push its proxy does not depend on. The order is the
contract: the cache is invalidated once the new snapshot is served and the streams are queued
after both, so a push reads the new snapshot through a cache holding nothing the change made
stale. The runtime, the tests and the benchmarks all push through here.

A build that raises publishes nothing, while the Environment already holds the change. A build
reuses every index whose kind its request does not name, so that change would stay unapplied
until another change of its kind came: instead the push after a failed one is full, naming
every kind (every index rebuilt, every proxy considered).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Hashable
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
    pushed by hand (tests, benchmarks). ``observer`` hears of each push (app/xds/observe.py)."""

    def __init__(
        self,
        env: Environment,
        cache: ResourceCache,
        *,
        streams: Callable[[], Collection[S]] = tuple,
        observer: PushObserver[PushRequest] | None = None,
    ) -> None:
        self.env = env
        self.generator = XdsGenerator(cache)
        self.queue: PushQueue[S] = PushQueue()
        self._streams = streams
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
        return self._publish(begun, begun.build())

    async def fire(self, request: PushRequest) -> Pushed:
        """Push ``request`` (the Debouncer's fire); a full build runs in a worker thread."""
        begun = self._begin(request)
        push = await asyncio.to_thread(begun.build) if begun.request.full else begun.build()
        return self._publish(begun, push)

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

    def _publish(self, begun: _Begun, push: PushContext) -> Pushed:
        built = time.monotonic()
        request, trace, observer = begun.request, begun.trace, self._observer
        self.generator.publish(push, request)  # served, and the cache invalidated
        self._full_next = False
        streams = self._streams()
        request = replace(request, pushes=(push.version,))
        if trace is not None:
            assert observer is not None
            if request.full:
                observer.context_built(trace, begun.started, built)
            request = replace(request, traces=(trace,))
        for stream in streams:
            self.queue.enqueue(stream, request)
        if trace is not None:
            assert observer is not None
            observer.push_queued(trace, len(streams))
        return Pushed(request, push, begun.started, built, len(streams))
