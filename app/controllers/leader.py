"""Leader election over a ConfigMap lock, as istiod runs its namespace controller and IP
auto-allocation elections (pilot/pkg/leaderelection NewLeaderElection: client-go's LeaderElector,
istiod's fork, with its ConfigMapLock), so istiod's replicas and pilotfish's, of any revision,
contend for the same lock and exactly one of them writes.

* The record is client-go's LeaderElectionRecord as JSON in the lock ConfigMap's
  ``control-plane.alpha.kubernetes.io/leader`` annotation (``holderIdentity``, ``holderKey``,
  ``leaseDurationSeconds``, ``acquireTime``, ``renewTime``, ``leaderTransitions``); the holder
  key is the holder's revision (``default`` without one).
* A lock held by another is taken only once it has not changed for its
  ``leaseDurationSeconds`` as measured on this replica's clock from when this replica saw it
  change (client-go's observedTime, so no clock skew between replicas matters); an empty holder
  (a released lock) is free at once. Writes carry the resourceVersion read, so of two replicas
  racing for a free lock the API server lets one win (409 for the other).
* Prioritized, as istiod's (LocationPrioritizedComparison, one cluster): a lock held, unexpired,
  by another revision's replica is taken over at once when this replica's revision is the
  default one (``default_revision()``, the ``istio-revision-tag-default`` webhook's label); the
  replica that lost it stops within its renew deadline. (istiod's per-revision elections, Leases
  named ``LOCK-REV`` without a key, are for controllers pilotfish does not run.)
* Acquiring retries every ``retry_period`` (jittered, client-go's JitterUntil factor 1.2); once
  leading, the lock is renewed every ``retry_period``; when no renewal succeeds within
  ``renew_deadline`` the lock counts as lost: the leader's coroutines are cancelled (a replica
  that loses the lock stops writing) and the election starts over (istiod's Run loop).
* Durations as istiod: a 30 s lease, renew deadline ttl/2, retry period ttl/4.
* ``ReleaseOnCancel``: when the election is cancelled (shutdown) while leading, the lock is
  given up (empty holder, 1 s duration) so another replica takes over at once.
* Before taking the lock, a Lease of its name that an earlier release of pilotfish leads by is
  waited for until released or expired, then deleted (legacy_lease.py): a rolling upgrade from
  those releases never has two leaders.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from app.controllers.legacy_lease import LegacyLeaseGuard
from app.sources.kube.client import ApiCallError, KubeClient
from app.supervise import supervise

logger = logging.getLogger("pilotfish.leader")

# istiod's lock names (pilot/pkg/leaderelection/leaderelection.go)
NAMESPACE_CONTROLLER = "istio-namespace-controller-election"
IP_AUTOALLOCATE_CONTROLLER = "istio-ip-autoallocate"
LEADER_ANNOTATION = "control-plane.alpha.kubernetes.io/leader"  # client-go's record on a ConfigMap lock
DEFAULT_KEY = "default"  # istiod's key when no revision is set
LEASE_DURATION = 30.0  # istiod's ttl
_JITTER = 1.2  # client-go's JitterFactor


@dataclass(frozen=True, slots=True)
class LeaderElectionRecord:
    """client-go's LeaderElectionRecord (istiod's fork: with the holder key)."""

    holder: str = ""
    duration: int = 0  # leaseDurationSeconds
    acquire_time: str = ""
    renew_time: str = ""
    transitions: int = 0
    key: str = ""  # istiod's holder key (the holder's revision)

    @classmethod
    def of(cls, configmap: dict[str, Any]) -> LeaderElectionRecord:
        """The record a lock ConfigMap carries (none: the empty record, a free lock); raises
        ValueError when its annotation is not one (client-go's Get fails then too)."""
        annotations = (configmap.get("metadata") or {}).get("annotations") or {}
        text = annotations.get(LEADER_ANNOTATION)
        if text is None:
            return cls()
        try:
            record = json.loads(text)
            if not isinstance(record, dict):
                raise TypeError(f"a JSON {type(record).__name__}")
            return cls(
                holder=str(record.get("holderIdentity") or ""),
                duration=int(record.get("leaseDurationSeconds") or 0),
                acquire_time=str(record.get("acquireTime") or ""),
                renew_time=str(record.get("renewTime") or ""),
                transitions=int(record.get("leaderTransitions") or 0),
                key=str(record.get("holderKey") or ""),
            )
        except (ValueError, TypeError) as e:
            raise ValueError(f"annotation {LEADER_ANNOTATION} is not a leader election record: {e}") from None

    def written_into(self, configmap: dict[str, Any]) -> dict[str, Any]:
        """``configmap`` (as read, with its resourceVersion) carrying this record, as client-go's
        json.Marshal writes it."""
        meta = dict(configmap.get("metadata") or {})
        record = {
            "holderIdentity": self.holder,
            "holderKey": self.key,
            "leaseDurationSeconds": self.duration,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaderTransitions": self.transitions,
        }
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            LEADER_ANNOTATION: json.dumps(record, separators=(",", ":")),
        }
        return {**configmap, "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def rfc3339(now: datetime.datetime) -> str:
    """A metav1.Time as Go's JSON has it (RFC 3339, whole seconds, UTC)."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class LeaderElection:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = LEASE_DURATION,
        key: str = DEFAULT_KEY,
        default_revision: Callable[[], str] | None = None,
        on_change: Callable[[str, bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``name``: the lock ConfigMap (istiod's lock name) in ``namespace``; ``identity``: this replica
        (istiod's POD_NAME); ``key``: its revision; ``default_revision``: the mesh's default
        revision now ("" for none), making the election prioritized (None: it is not);
        ``on_change(name, leading)`` is told each time this replica starts or stops leading."""
        if lease_duration < 1:
            raise ValueError(f"leader election {name}: the lease duration must be at least 1s")
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration = lease_duration
        self.renew_deadline = lease_duration / 2
        self.retry_period = lease_duration / 4
        self._key = key
        self._default_revision = default_revision
        self._client = client
        self._on_change = on_change
        self._clock = clock
        self._path = f"/api/v1/namespaces/{namespace}/configmaps"
        self._legacy = LegacyLeaseGuard(client, namespace, name, identity, clock=clock)
        self._runs: list[tuple[str, Callable[[], Awaitable[None]]]] = []
        self._observed = LeaderElectionRecord()
        self._observed_at = 0.0
        self._leading = False
        self._last_error = ""

    def add_run_function(self, name: str, run: Callable[[], Awaitable[None]]) -> LeaderElection:
        """A coroutine to run while leading (supervised: restarted after a failure); cancelled
        when the lease is lost."""
        self._runs.append((name, run))
        return self

    @property
    def leading(self) -> bool:
        return self._leading

    @property
    def leader(self) -> str:
        """The holder last seen ("" before the first read, or when released)."""
        return self._observed.holder

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def run(self) -> None:
        """Acquire, run the coroutines while leading, start over when the lease is lost; until
        cancelled, then release the lease if held."""
        try:
            while True:
                await self._acquire()
                self._set_leading(True)
                try:
                    async with asyncio.TaskGroup() as tg:
                        tasks = [tg.create_task(supervise(f"{name} ({self})", run)) for name, run in self._runs]
                        try:
                            await self._renew()
                        finally:
                            for task in tasks:
                                task.cancel()
                finally:
                    self._set_leading(False)
                logger.info("leader election lock lost: %s; trying again", self)
                if self._is_holder():  # as client-go, give up what may still be ours
                    await self._release()
        finally:
            if self._is_holder():
                await asyncio.shield(self._release())

    # --- client-go's loops ------------------------------------------------------------------

    async def _acquire(self) -> None:
        logger.info("attempting to acquire leader lease %s as %s", self, self.identity)
        while not await self._try_acquire_or_renew():
            await asyncio.sleep(self.retry_period * (1 + random.random() * _JITTER))

    async def _renew(self) -> None:
        """Renew every retry period; returns when no renewal succeeded within the deadline."""
        while True:
            try:
                async with asyncio.timeout(self.renew_deadline):
                    while not await self._try_acquire_or_renew():
                        await asyncio.sleep(self.retry_period)
            except TimeoutError:
                logger.warning("failed to renew lease %s within %.1fs", self, self.renew_deadline)
                return
            await asyncio.sleep(self.retry_period)

    async def _try_acquire_or_renew(self) -> bool:
        """client-go's tryAcquireOrRenew: True when this replica holds the lease now."""
        now = rfc3339(datetime.datetime.now(datetime.UTC))
        record = LeaderElectionRecord(self.identity, int(self.lease_duration), now, now, 0, self._key)
        try:
            lease = await self._client.call("GET", f"{self._path}/{self.name}")
        except ApiCallError as e:
            if e.status != 404:
                return self._failed("read", e)
            if not await self._legacy.clear():
                return False
            try:
                await self._client.call("POST", self._path, record.written_into({"metadata": {"name": self.name}}))
            except ApiCallError as e2:
                return self._failed("create", e2)
            self._observe(record)
            return self._succeeded()
        try:
            seen = LeaderElectionRecord.of(lease)
        except ValueError as e:
            return self._failed("read", e)
        if seen != self._observed:
            self._observe(seen)
        if seen.holder and not self._is_holder() and self._clock() < self._observed_at + seen.duration:
            if not self._preempts(seen.key):
                return False  # held by another and not expired
            logger.info("leader lease %s is held by %s of revision %r: the default revision takes it", self,
                        seen.holder, seen.key)  # fmt: skip
        duration = record.duration
        if self._is_holder():
            record = LeaderElectionRecord(self.identity, duration, seen.acquire_time, now, seen.transitions, self._key)
        else:
            if not await self._legacy.clear():
                return False
            record = LeaderElectionRecord(self.identity, duration, now, now, seen.transitions + 1, self._key)
        try:
            await self._client.call("PUT", f"{self._path}/{self.name}", record.written_into(lease))
        except ApiCallError as e:
            return self._failed("update", e)
        self._observe(record)
        return self._succeeded()

    async def _release(self) -> None:
        """client-go's release: an empty holder with a 1 s lease, so another takes it at once."""
        now = rfc3339(datetime.datetime.now(datetime.UTC))
        try:
            async with asyncio.timeout(self.renew_deadline):
                lease = await self._client.call("GET", f"{self._path}/{self.name}")
                if LeaderElectionRecord.of(lease).holder != self.identity:
                    return
                record = LeaderElectionRecord("", 1, now, now, self._observed.transitions, "")
                await self._client.call("PUT", f"{self._path}/{self.name}", record.written_into(lease))
        except (ApiCallError, TimeoutError, ValueError) as e:
            logger.error("failed to release lease %s: %s", self, e)
            return
        self._observe(record)
        logger.info("released leader lease %s", self)

    # --- bookkeeping -------------------------------------------------------------------------

    def _observe(self, record: LeaderElectionRecord) -> None:
        self._observed = record
        self._observed_at = self._clock()

    def _preempts(self, holder_key: str) -> bool:
        """istiod's LocationPrioritizedComparison (one cluster): this replica's revision is the
        default one and the holder's is another."""
        if self._default_revision is None:
            return False
        default = self._default_revision()
        return bool(default) and default == self._key and holder_key != self._key

    def _is_holder(self) -> bool:
        return self._observed.holder == self.identity

    def _failed(self, what: str, error: ApiCallError | ValueError) -> bool:
        message = str(error)
        if message != self._last_error:  # once per distinct failure, not every retry
            logger.warning("leader lease %s: %s failed: %s", self, what, message)
            self._last_error = message
        return False

    def _succeeded(self) -> bool:
        self._last_error = ""
        return True

    def _set_leading(self, leading: bool) -> None:
        if leading:
            logger.info("leader election lock obtained: %s (%s)", self, self.identity)
        self._leading = leading
        if self._on_change is not None:
            self._on_change(self.name, leading)
