"""All the simulated sidecars of one server run, as one asyncio task each, and the waits the
scenarios measure with.

All sidecars share one ``Inspector`` (so a cluster body 2,000 of them hold is decoded once) and
one ``Activity``. The first sidecar of each namespace carries the floor's ``Recorder``, if any.
A push is over when every expected sidecar has received something since the change and no
sidecar at all has received anything for ``quiet`` seconds (or ``timeout`` has passed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from types import TracebackType

from app.xds.client import Inspector
from bench.envoy import Activity, SimulatedEnvoy
from bench.mesh import SidecarIdentity
from bench.recording import Recorder

POLL = 0.05


class Fleet:
    def __init__(
        self, identities: Sequence[SidecarIdentity], protocol: str, target: str, recorder: Recorder | None
    ) -> None:
        self.activity = Activity()
        inspector = Inspector()
        self.envoys = [SimulatedEnvoy(i, protocol, target, inspector, self.activity) for i in identities]
        if recorder is not None:
            seen: set[str] = set()
            for envoy in self.envoys:
                if envoy.identity.namespace not in seen:
                    seen.add(envoy.identity.namespace)
                    envoy.recorder = recorder
        self._tasks: list[asyncio.Task[None]] = []
        self.started = 0.0

    async def __aenter__(self) -> Fleet:
        return self

    def start(self) -> None:
        """Open every sidecar's stream at once (the connect storm)."""
        self.started = time.monotonic()
        self._tasks = [asyncio.create_task(e.run(), name=e.identity.node_id) for e in self.envoys]

    async def __aexit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        """Stop every sidecar (cancelling its stream) and wait until they are gone."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def wait_complete(self, timeout: float) -> bool:
        """Until every sidecar holds CDS, EDS, LDS and RDS; False on timeout."""
        deadline = self.started + timeout
        while not all(e.complete_at is not None for e in self.envoys):
            self._check()
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(POLL)
        return True

    async def settle(self, since: float, expected: Sequence[SimulatedEnvoy], quiet: float, timeout: float) -> bool:
        """Until every ``expected`` sidecar received something after ``since`` and all have been
        quiet for ``quiet`` seconds; False on timeout."""
        while True:
            self._check()
            now = time.monotonic()
            reached = all(e.events and e.events[-1].at >= since for e in expected)
            if reached and now - max(self.activity.last, since) >= quiet:
                return True
            if now - since > timeout:
                return False
            await asyncio.sleep(POLL)

    def _check(self) -> None:
        """A sidecar task that died of a bug ends the run rather than skewing it."""
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise RuntimeError(f"simulated sidecar {task.get_name()} failed") from task.exception()
