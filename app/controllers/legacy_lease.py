"""The Leases pilotfish's earlier releases led by, consulted before taking a ConfigMap lock of the
same name, so a rolling upgrade from such a release never has two leaders writing.

Releases before the ConfigMap locks (leader.py) took ``coordination.k8s.io/v1`` Leases named as
istiod's locks, with istiod's ``leader.istio.io/holder-key`` annotation. During a ``helm
upgrade`` the old replicas still run: one may hold its Lease while a new replica finds the
ConfigMap lock free. client-go's answer to a lock migration, which istiod's fork keeps
(k8sresourcelock.MultiLock), is to read both locks for a release: a holder on the other lock that
is not ours counts as a live leader until its record stops changing for its lease duration. Here
the same rule, on the Lease alone:

* a Lease of the lock's name held by another identity is waited for until it has not changed for
  its ``leaseDurationSeconds`` as measured on this replica's clock since it was seen to change
  (client-go's observedTime); the default revision does not preempt it (its holder reads no
  ConfigMap and would lead on);
* a released, expired or own Lease is deleted (preconditioned on the resourceVersion read, so a
  renewal racing the delete wins), so nothing dangles; an old replica cannot take it again: the
  chart's Role grants Leases only ``get`` and ``delete`` now, so the old leader's renewals fail
  and it stops within its renew deadline;
* no Lease, one without the holder-key annotation (not one of pilotfish's), or Leases not
  readable (RBAC without them: no old replica can hold one either) leave the election alone.

Unlike MultiLock the Lease is never written: old replicas cannot renew it anyway, and writing it
would keep it alive forever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.sources.kube.client import ApiCallError, KubeClient

logger = logging.getLogger("pilotfish.leader")

HOLDER_KEY_ANNOTATION = "leader.istio.io/holder-key"  # what pilotfish's Lease records carried


@dataclass(frozen=True, slots=True)
class LegacyLease:
    """The parts of an earlier release's Lease that say whether it may still be led by."""

    holder: str
    duration: int  # leaseDurationSeconds
    resource_version: str  # moves on every write: a renewal changes it

    @classmethod
    def of(cls, lease: dict[str, Any]) -> LegacyLease | None:
        """The record of a Lease pilotfish wrote (None: a Lease of someone else's)."""
        meta = lease.get("metadata") or {}
        if HOLDER_KEY_ANNOTATION not in (meta.get("annotations") or {}):
            return None
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration=int(spec.get("leaseDurationSeconds") or 0),
            resource_version=str(meta.get("resourceVersion") or ""),
        )

    def same_record(self, other: LegacyLease | None) -> bool:
        """Unchanged since ``other`` was seen (the resourceVersion moves on any write)."""
        return other is not None and self.resource_version == other.resource_version


class LegacyLeaseGuard:
    def __init__(
        self, client: KubeClient, namespace: str, name: str, identity: str, *, clock: Callable[[], float]
    ) -> None:
        self._client, self._identity, self._clock = client, identity, clock
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self._what = f"{namespace}/{name}"
        self._observed: LegacyLease | None = None
        self._observed_at = 0.0
        self._waiting_for = ""
        self._left: LegacyLease | None = None  # a stale Lease this replica may not delete

    async def clear(self) -> bool:
        """True when no replica of an earlier release may lead by the Lease (deleting it when it
        is left over); False while one may, or when it changed under the delete."""
        try:
            lease = await self._client.call("GET", self._path)
        except ApiCallError as e:
            if e.status not in (403, 404):
                logger.warning("legacy lease %s: read failed: %s", self._what, e)
                return False
            return True
        seen = LegacyLease.of(lease)
        if seen is None or seen.same_record(self._left):
            return True
        if not seen.same_record(self._observed):
            self._observed, self._observed_at = seen, self._clock()
        if seen.holder and seen.holder != self._identity and self._clock() < self._observed_at + seen.duration:
            if self._waiting_for != seen.holder:
                logger.info(
                    "leader lease %s of an earlier release is held by %s: waiting until it is released or expires",
                    self._what, seen.holder,
                )  # fmt: skip
                self._waiting_for = seen.holder
            return False
        return await self._delete(seen)

    async def _delete(self, seen: LegacyLease) -> bool:
        precondition = {"resourceVersion": seen.resource_version}
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": precondition}
        try:
            await self._client.call("DELETE", self._path, body)
        except ApiCallError as e:
            if e.status == 404:
                return True
            if e.status == 403:  # may read but not delete it: left as it is, no longer in force
                logger.warning("legacy lease %s: delete refused (%s); leaving it", self._what, e)
                self._left = seen
                return True
            logger.info("legacy lease %s: not deleted (%s); reading it again", self._what, e)
            return False
        logger.info("deleted leader lease %s of an earlier release (holder %r)", self._what, seen.holder)
        return True
