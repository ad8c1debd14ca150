"""Leader election over a ``coordination.k8s.io/v1`` Lease, as client-go's LeaderElector runs it
with a LeaseLock (tools/leaderelection, istiod's fork in pilot/pkg/leaderelection), so istiod,
client-go and pilotfish replicas read and write the same lease records.

* The record is the Lease's spec (``holderIdentity``, ``leaseDurationSeconds``, ``acquireTime``,
  ``renewTime``, ``leaseTransitions``) plus istiod's ``leader.istio.io/holder-key`` annotation
  (the holder's revision).
* A lease held by another is taken only once it has not changed for its
  ``leaseDurationSeconds`` as measured on this replica's clock from when this replica saw it
  change (client-go's observedTime, so no clock skew between replicas matters); an empty holder
  (a released lease) is free at once. Writes carry the resourceVersion read, so of two replicas
  racing for a free lease the API server lets one win (409 for the other).
* Acquiring retries every ``retry_period`` (jittered, client-go's JitterUntil factor 1.2); once
  leading, the lease is renewed every ``retry_period``; when no renewal succeeds within
  ``renew_deadline`` the lease counts as lost: the leader's coroutines are cancelled (a replica
  that loses the lease stops writing) and the election starts over (istiod's Run loop).
* Durations as istiod: a 30 s lease, renew deadline ttl/2, retry period ttl/4.
* ``ReleaseOnCancel``: when the election is cancelled (shutdown) while leading, the lease is
  given up (empty holder, 1 s duration) so another replica takes over at once.

* The holder key is this replica's revision (``default`` without one). Both of pilotfish's
  elections are, as istiod's namespace controller and IP auto-allocation elections, one per
  cluster across revisions (not istiod's per-revision elections, ``-REV`` locks without a key)
  and prioritized (istiod's LocationPrioritizedComparison): a lock held, unexpired, by another
  revision's replica is taken over at once when this replica's revision is the default one
  (``default_revision()``, the ``istio-revision-tag-default`` webhook's label); the replica
  that lost it stops within its renew deadline.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from app.sources.kube.client import ApiCallError, KubeClient
from app.supervise import supervise

logger = logging.getLogger("pilotfish.leader")

# istiod's lock names (pilot/pkg/leaderelection/leaderelection.go)
NAMESPACE_CONTROLLER = "istio-namespace-controller-election"
IP_AUTOALLOCATE_CONTROLLER = "istio-ip-autoallocate"
HOLDER_KEY_ANNOTATION = "leader.istio.io/holder-key"
DEFAULT_KEY = "default"  # istiod's key when no revision is set
LEASE_DURATION = 30.0  # istiod's ttl
_JITTER = 1.2  # client-go's JitterFactor


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """client-go's LeaderElectionRecord, as a Lease carries it."""

    holder: str = ""
    duration: int = 0  # leaseDurationSeconds
    acquire_time: str = ""
    renew_time: str = ""
    transitions: int = 0
    key: str = ""  # istiod's holder key (the holder's revision)

    @classmethod
    def of(cls, lease: dict[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        annotations = (lease.get("metadata") or {}).get("annotations") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=str(spec.get("acquireTime") or ""),
            renew_time=str(spec.get("renewTime") or ""),
            transitions=int(spec.get("leaseTransitions") or 0),
            key=str(annotations.get(HOLDER_KEY_ANNOTATION) or ""),
        )

    def written_into(self, lease: dict[str, Any]) -> dict[str, Any]:
        """``lease`` (as read, with its resourceVersion) carrying this record; the holder key
        annotation set, or removed when there is none (istiod's ensureHolderKey)."""
        meta = dict(lease.get("metadata") or {})
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != HOLDER_KEY_ANNOTATION}
        if self.key:
            annotations[HOLDER_KEY_ANNOTATION] = self.key
        meta["annotations"] = annotations
        spec = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }
        return {**lease, "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


def micro_time(now: datetime.datetime) -> str:
    """A MicroTime as the API server writes it (RFC 3339, six fraction digits, UTC)."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
        """``name``: the Lease (istiod's lock name) in ``namespace``; ``identity``: this replica
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
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._runs: list[tuple[str, Callable[[], Awaitable[None]]]] = []
        self._observed = LeaseRecord()
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
        now = micro_time(datetime.datetime.now(datetime.UTC))
        record = LeaseRecord(self.identity, int(self.lease_duration), now, now, 0, self._key)
        try:
            lease = await self._client.call("GET", f"{self._path}/{self.name}")
        except ApiCallError as e:
            if e.status != 404:
                return self._failed("read", e)
            try:
                await self._client.call("POST", self._path, record.written_into({"metadata": {"name": self.name}}))
            except ApiCallError as e2:
                return self._failed("create", e2)
            self._observe(record)
            return self._succeeded()
        seen = LeaseRecord.of(lease)
        if seen != self._observed:
            self._observe(seen)
        if seen.holder and not self._is_holder() and self._clock() < self._observed_at + seen.duration:
            if not self._preempts(seen.key):
                return False  # held by another and not expired
            logger.info("leader lease %s is held by %s of revision %r: the default revision takes it", self,
                        seen.holder, seen.key)  # fmt: skip
        if self._is_holder():
            record = LeaseRecord(self.identity, record.duration, seen.acquire_time, now, seen.transitions, self._key)
        else:
            record = LeaseRecord(self.identity, record.duration, now, now, seen.transitions + 1, self._key)
        try:
            await self._client.call("PUT", f"{self._path}/{self.name}", record.written_into(lease))
        except ApiCallError as e:
            return self._failed("update", e)
        self._observe(record)
        return self._succeeded()

    async def _release(self) -> None:
        """client-go's release: an empty holder with a 1 s lease, so another takes it at once."""
        now = micro_time(datetime.datetime.now(datetime.UTC))
        try:
            async with asyncio.timeout(self.renew_deadline):
                lease = await self._client.call("GET", f"{self._path}/{self.name}")
                if LeaseRecord.of(lease).holder != self.identity:
                    return
                record = LeaseRecord("", 1, now, now, self._observed.transitions, "")
                await self._client.call("PUT", f"{self._path}/{self.name}", record.written_into(lease))
        except (ApiCallError, TimeoutError) as e:
            logger.error("failed to release lease %s: %s", self, e)
            return
        self._observe(record)
        logger.info("released leader lease %s", self)

    # --- bookkeeping -------------------------------------------------------------------------

    def _observe(self, record: LeaseRecord) -> None:
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

    def _failed(self, what: str, error: ApiCallError) -> bool:
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
