"""The informer store's idea of a change: status writes are none, except the status fields the
config model reads (a Pod's IPs and readiness, a ServiceEntry's allocated addresses)."""

from __future__ import annotations

from typing import Any

from app.config.objects import EventType
from app.sources.kube.store import Store, without_managed_fields


def obj(kind: str, status: dict[str, Any], version: str) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": "a", "namespace": "ns", "resourceVersion": version}, "status": status}


def test_pod_readiness_and_ip_are_changes_a_service_status_is_not() -> None:
    store = Store()
    store.apply(EventType.ADD, obj("Pod", {"phase": "Pending"}, "1"))
    assigned = store.apply(EventType.UPDATE, obj("Pod", {"phase": "Running", "podIP": "10.0.0.1"}, "2"))
    assert assigned is not None
    ready = {"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}
    assert store.apply(EventType.UPDATE, obj("Pod", ready, "3")) is not None
    probed = {**ready, "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": "now"}]}
    assert store.apply(EventType.UPDATE, obj("Pod", probed, "4")) is None
    store.apply(EventType.ADD, obj("Service", {}, "1"))
    lb = obj("Service", {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}, "2")
    assert store.apply(EventType.UPDATE, lb) is None


def test_serviceentry_allocated_addresses_are_a_change() -> None:
    store = Store()
    store.apply(EventType.ADD, obj("ServiceEntry", {}, "1"))
    allocated = {"addresses": [{"host": "api.example", "value": "240.240.0.1"}]}
    assert store.apply(EventType.UPDATE, obj("ServiceEntry", allocated, "2")) is not None
    conditions = {**allocated, "conditions": [{"type": "Reconciled", "status": "True"}]}
    assert store.apply(EventType.UPDATE, obj("ServiceEntry", conditions, "3")) is None


def test_managed_fields_are_not_kept() -> None:
    applied = {"kind": "Pod", "metadata": {"name": "a", "managedFields": [{"manager": "kubectl"}]}, "spec": {}}
    assert without_managed_fields(applied) == {"kind": "Pod", "metadata": {"name": "a"}, "spec": {}}
    assert "managedFields" in applied["metadata"]  # the object given is left as it is
    bare = {"kind": "Pod", "metadata": {"name": "a"}}
    assert without_managed_fields(bare) is bare


def test_a_relist_takes_an_unchanged_resource_version_as_no_change_without_comparing() -> None:
    """One resourceVersion is one write: a relist of many unchanged objects compares versions
    only (here the listed copy differs, which only a comparison of the objects would see)."""
    def pod(name: str, phase: str, version: str) -> dict[str, Any]:
        made = obj("Pod", {"phase": phase}, version)
        return {**made, "metadata": {**made["metadata"], "name": name}}

    store = Store()
    store.relist([pod("a", "Pending", "7"), pod("b", "Pending", "8")])
    changed = store.relist([pod("a", "Running", "7"), pod("b", "Running", "9")])
    assert [(d.change, d.obj["metadata"]["name"]) for d in changed] == [(EventType.UPDATE, "b")]
