"""A controller's work queue, as istiod's controllers.Queue: keys, each queued at most once,
reconciled one at a time in order; a reconcile that raises is logged and its key queued again
after a growing, jittered backoff (per key; reset by a success), so a write that fails (the API
server away, a conflict) is retried and never ends the controller."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from app.sources.kube.client import ApiCallError
from app.supervise import Backoff

logger = logging.getLogger("pilotfish.controllers")

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(
        self, name: str, reconcile: Callable[[K], Awaitable[None]], *, initial: float = 0.005, cap: float = 30.0
    ) -> None:
        """Backoff from ``initial`` (istiod's rate limiter starts at 5 ms) doubling to ``cap``."""
        self.name = name
        self._reconcile = reconcile
        self._initial, self._cap = initial, cap
        self._pending: dict[K, None] = {}  # insertion-ordered set
        self._wake = asyncio.Event()
        self._backoffs: dict[K, Backoff] = {}
        self._retries: dict[K, asyncio.TimerHandle] = {}
        self.failures = 0  # reconciles that raised

    def add(self, key: K) -> None:
        self._pending[key] = None
        self._wake.set()

    async def run(self) -> None:
        """Reconcile queued keys until cancelled."""
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._pending:
                    key = next(iter(self._pending))
                    del self._pending[key]
                    await self._one(key)
        finally:
            for handle in self._retries.values():
                handle.cancel()
            self._retries.clear()

    async def _one(self, key: K) -> None:
        try:
            await self._reconcile(key)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.failures += 1
            backoff = self._backoffs.setdefault(key, Backoff(self._initial, self._cap))
            delay = backoff.delay()
            # an API error is expected now and then; anything else is a bug: its traceback too
            logger.warning("%s: %s failed (%s); retrying in %.2fs", self.name, key, e, delay,
                           exc_info=None if isinstance(e, ApiCallError) else e)  # fmt: skip
            if key not in self._retries:
                self._retries[key] = asyncio.get_running_loop().call_later(delay, self._retry, key)
        else:
            self._backoffs.pop(key, None)

    def _retry(self, key: K) -> None:
        self._retries.pop(key, None)
        self.add(key)
