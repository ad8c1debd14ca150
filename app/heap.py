"""Keeps CPython's full garbage collections off the push path.

The control plane's heap is large, long-lived and almost free of reference cycles: the
PushContext, the encoded-resource cache, every stream's watch state. CPython's cyclic collector
still walks all of it on every full (generation 2) collection, and those come whenever the
heap grew by a quarter, i.e. in the middle of a push or a connect storm. Measured at mesh-1k
with 2,000 Delta streams (bench/xds_load with gc callbacks): 0.7-1.0 s per full collection,
one landing in each DestinationRule and endpoint push, none of them finding garbage.

The keeper moves what has settled into the permanent generation (``gc.freeze``, a list splice)
where the heap has just taken a new long-lived shape: after a PushContext is built and its push
fanned out, and after every ``connects_per_freeze`` new streams. Full collections then walk only
what was allocated since. Objects freed by reference counting are freed as always; the one cost
is that cyclic garbage among frozen objects waits for ``sweep`` (unfreeze, collect, freeze),
which the runtime runs periodically when no push is in flight.

Start-up is the extreme case: importing the control plane's modules and ingesting the first
lists allocate hundreds of thousands of objects that live as long as the process, and the collector
walked the growing heap again and again on the way (measured on ``serve --kubeconfig`` of a
200-service mesh: 0.2-0.3 s of the 1.0 s of CPU to ready, much of it inside the JSON decoding of
the list pages, where the allocations trigger it). ``pause_collection`` stops it before the
imports; ``HeapKeeper.started`` freezes what start-up built and resumes it once serving (``serve``
resumes it anyway after 10 s: a start-up that long is waiting on the API server, not building).
"""

from __future__ import annotations

import gc
import time


class HeapKeeper:
    def __init__(self, *, enabled: bool = True, connects_per_freeze: int = 256) -> None:
        self.enabled = enabled
        self._connects_per_freeze = connects_per_freeze
        self._connects = 0
        self.freezes = 0
        self.sweeps = 0

    def settled(self) -> None:
        """The heap's long-lived part just changed shape: freeze what is there."""
        if self.enabled:
            gc.freeze()
            self.freezes += 1

    def started(self) -> None:
        """Start-up is over: what it built is frozen, and collection resumes (``pause_collection``)."""
        self.settled()
        resume_collection()

    def connected(self) -> None:
        """A stream connected; a storm's state is frozen in steps as it builds up."""
        self._connects += 1
        if self._connects % self._connects_per_freeze == 0:
            self.settled()

    def sweep(self) -> tuple[int, float]:
        """Collect everything, frozen objects too, then freeze again; (collected, seconds)."""
        if not self.enabled:
            return 0, 0.0
        started = time.perf_counter()
        gc.unfreeze()
        collected = gc.collect()
        gc.freeze()
        self.sweeps += 1
        return collected, time.perf_counter() - started


def pause_collection() -> None:
    """No cyclic collection until ``resume_collection`` (reference counting frees as always)."""
    gc.disable()


def resume_collection() -> None:
    gc.enable()
