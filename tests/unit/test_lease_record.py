"""The Lease record as client-go's LeaseLock and istiod's fork read and write it."""

from __future__ import annotations

import datetime

from app.controllers.leader import HOLDER_KEY_ANNOTATION, LeaseRecord, micro_time


def test_micro_time_is_rfc3339_with_six_fraction_digits_in_utc() -> None:
    moment = datetime.datetime(2026, 11, 27, 16, 0, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    assert micro_time(moment) == "2026-11-27T14:00:00.000000Z"  # a whole second keeps its fraction


def test_record_round_trip_keeps_other_metadata_and_the_resource_version() -> None:
    read = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "istio-ip-autoallocate", "resourceVersion": "42", "annotations": {"team": "mesh"}},
        "spec": {"holderIdentity": "istiod-1", "leaseDurationSeconds": 30, "leaseTransitions": 3},
    }  # fmt: skip
    assert LeaseRecord.of(read) == LeaseRecord(holder="istiod-1", duration=30, transitions=3)
    mine = LeaseRecord("pilotfish-0", 30, "2026-11-27T14:00:00.000000Z", "2026-11-27T14:00:00.000000Z", 4, "default")
    written = mine.written_into(read)
    assert written["metadata"]["resourceVersion"] == "42"  # a concurrent write is a 409
    assert written["metadata"]["annotations"] == {"team": "mesh", HOLDER_KEY_ANNOTATION: "default"}
    assert written["spec"] == {
        "holderIdentity": "pilotfish-0", "leaseDurationSeconds": 30, "acquireTime": "2026-11-27T14:00:00.000000Z",
        "renewTime": "2026-11-27T14:00:00.000000Z", "leaseTransitions": 4,
    }  # fmt: skip
    assert LeaseRecord.of(written) == mine
    released = LeaseRecord("", 1, mine.renew_time, mine.renew_time, 4, "").written_into(written)
    assert released["metadata"]["annotations"] == {"team": "mesh"}  # no holder, no holder key
