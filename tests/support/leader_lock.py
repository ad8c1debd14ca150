"""The leader election locks as the tests read and write them: client-go's record in the lock
ConfigMap's annotation, as istiod's and pilotfish's replicas keep it (app/controllers/leader.py)."""

from __future__ import annotations

import dataclasses
import datetime

from app.controllers.leader import LeaderElectionRecord, rfc3339
from tests.support.cluster import Cluster


def lock_record(kube: Cluster, system: str, lock: str) -> LeaderElectionRecord:
    """The lock's record (the empty one while there is no lock)."""
    configmap = kube.get("v1", "ConfigMap", system, lock)
    return LeaderElectionRecord() if configmap is None else LeaderElectionRecord.of(configmap)


def holder(kube: Cluster, system: str, lock: str) -> str:
    return lock_record(kube, system, lock).holder


def take(kube: Cluster, system: str, lock: str, identity: str, key: str = "default", duration: int = 3600) -> None:
    """The lock taken by another replica (``identity`` of revision ``key``), as client-go takes
    it: a record of its own, the transitions counted; an empty ``identity`` releases it."""
    configmap = kube.get("v1", "ConfigMap", system, lock)
    assert configmap is not None, f"no lock {system}/{lock}"
    seen = LeaderElectionRecord.of(configmap)
    now = rfc3339(datetime.datetime.now(datetime.UTC))
    record = dataclasses.replace(
        seen, holder=identity, key=key, duration=duration, acquire_time=now, renew_time=now,
        transitions=seen.transitions + (1 if identity else 0),
    )  # fmt: skip
    kube.request("PUT", kube.path("v1", "ConfigMap", system, lock), record.written_into(configmap))
