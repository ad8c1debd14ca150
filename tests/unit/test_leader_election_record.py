"""The leader election record as client-go's ConfigMapLock and istiod's fork read and write it."""

from __future__ import annotations

import datetime
import json

import pytest

from app.controllers.leader import LEADER_ANNOTATION, LeaderElectionRecord, rfc3339


def test_times_are_rfc3339_in_whole_seconds_in_utc() -> None:
    moment = datetime.datetime(2026, 11, 27, 16, 0, 0, 500, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    assert rfc3339(moment) == "2026-11-27T14:00:00Z"  # metav1.Time's JSON


def test_record_round_trip_keeps_other_metadata_and_the_resource_version() -> None:
    istiods = {
        "holderIdentity": "istiod-1", "holderKey": "default", "leaseDurationSeconds": 30,
        "acquireTime": "2026-11-27T13:00:00Z", "renewTime": "2026-11-27T13:59:50Z", "leaderTransitions": 3,
    }  # fmt: skip
    read = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "istio-namespace-controller-election", "resourceVersion": "42",
                     "annotations": {"team": "mesh", LEADER_ANNOTATION: json.dumps(istiods)}},
    }  # fmt: skip
    seen = LeaderElectionRecord.of(read)
    assert seen == LeaderElectionRecord("istiod-1", 30, "2026-11-27T13:00:00Z", "2026-11-27T13:59:50Z", 3, "default")
    mine = LeaderElectionRecord("pilotfish-0", 30, "2026-11-27T14:00:00Z", "2026-11-27T14:00:00Z", 4, "canary")
    written = mine.written_into(read)
    assert written["metadata"]["resourceVersion"] == "42"  # a concurrent write is a 409
    assert written["metadata"]["annotations"]["team"] == "mesh"
    assert json.loads(written["metadata"]["annotations"][LEADER_ANNOTATION]) == {
        "holderIdentity": "pilotfish-0", "holderKey": "canary", "leaseDurationSeconds": 30,
        "acquireTime": "2026-11-27T14:00:00Z", "renewTime": "2026-11-27T14:00:00Z", "leaderTransitions": 4,
    }  # fmt: skip
    assert LeaderElectionRecord.of(written) == mine


def test_a_configmap_without_a_record_is_a_free_lock_and_a_bad_record_an_error() -> None:
    assert LeaderElectionRecord.of({"metadata": {"name": "lock"}}) == LeaderElectionRecord()
    for bad in ("{", "[]", '{"leaseDurationSeconds": "x"}'):
        with pytest.raises(ValueError, match=LEADER_ANNOTATION):
            LeaderElectionRecord.of({"metadata": {"annotations": {LEADER_ANNOTATION: bad}}})
