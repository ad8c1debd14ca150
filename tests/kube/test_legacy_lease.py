"""Upgrading from a release of pilotfish that led by Leases (app/controllers/legacy_lease.py), on
a real kube-apiserver with the chart's RBAC: while an old replica keeps its Lease renewed, a new
replica does not lead although the ConfigMap lock is free (no two writers during the rolling
upgrade); once the renewals stop it leads after the Lease's duration and deletes the Lease; a
released Lease is deleted at once; the chart's Role lets no replica renew or create a Lease;
a Lease that is not pilotfish's is left alone."""

from __future__ import annotations

import asyncio
import datetime
import secrets
from pathlib import Path
from typing import Any

import pytest

from app.controllers.leader import NAMESPACE_CONTROLLER
from app.controllers.legacy_lease import HOLDER_KEY_ANNOTATION, LegacyLease
from tests.kube.test_controllers import LEASE, controllers
from tests.support.cluster import ApiError, Cluster, chart_role
from tests.support.leader_lock import holder

COORDINATION = "coordination.k8s.io/v1"


def micro_time() -> str:
    """A metav1.MicroTime as client-go writes it."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def old_lease(identity: str, *, duration: int = 3, key: str | None = "default") -> dict[str, Any]:
    """A Lease as pilotfish's Lease-lock releases wrote it (client-go's LeaseLock record, istiod's
    holder key annotation)."""
    now = micro_time()
    annotations = {} if key is None else {HOLDER_KEY_ANNOTATION: key}
    return {
        "apiVersion": COORDINATION, "kind": "Lease",
        "metadata": {"name": NAMESPACE_CONTROLLER, "annotations": annotations},
        "spec": {"holderIdentity": identity, "leaseDurationSeconds": duration, "acquireTime": now, "renewTime": now,
                 "leaseTransitions": 0},
    }  # fmt: skip


def lease(kube: Cluster, system: str) -> dict[str, Any] | None:
    return kube.get(COORDINATION, "Lease", system, NAMESPACE_CONTROLLER)


async def eventually(what: str, check: Any, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def test_the_record_is_read_only_from_pilotfishs_leases() -> None:
    written = old_lease("pilotfish-old-0")
    written["metadata"]["resourceVersion"] = "7"
    record = LegacyLease.of(written)
    assert record is not None
    assert (record.holder, record.duration, record.resource_version) == ("pilotfish-old-0", 3, "7")
    assert LegacyLease.of(old_lease("someone", key=None)) is None
    assert record.same_record(LegacyLease.of(written)) and not record.same_record(None)


async def test_a_new_replica_waits_for_the_old_releases_lease_then_deletes_it(
    kube: Cluster, pilotfish_kubeconfig: Path
) -> None:
    team = secrets.token_hex(4)
    system = kube.namespace("sys", {"team": team})
    chart_role(kube, system)
    kube.create(old_lease("pilotfish-old-0"), system)
    renewing = True

    async def renew() -> None:  # the old release's leader, renewing every second (as admin:
        while renewing:  # its own Role would no longer let it, below)
            current = lease(kube, system)
            assert current is not None
            current["spec"]["renewTime"] = micro_time()
            kube.request("PUT", kube.path(COORDINATION, "Lease", system, NAMESPACE_CONTROLLER), current)
            await asyncio.sleep(1)

    renewer = asyncio.create_task(renew())
    try:
        async with controllers(
            kube, system, team, "pilotfish-new-0", ip=False, kubeconfig=pilotfish_kubeconfig
        ) as made:
            await asyncio.sleep(LEASE * 3)  # several retry periods, and longer than the Lease's 3 s
            assert not made.leading()[NAMESPACE_CONTROLLER]
            assert holder(kube, system, NAMESPACE_CONTROLLER) == ""
            renewing = False
            await renewer
            await eventually("leading once the old lease expired", lambda: made.leading()[NAMESPACE_CONTROLLER], 15)
            assert lease(kube, system) is None  # deleted: nothing dangles
            assert holder(kube, system, NAMESPACE_CONTROLLER) == "pilotfish-new-0"
    finally:
        renewing = False
        await asyncio.gather(renewer, return_exceptions=True)

    # with the chart's Role a replica may read and delete those Leases, never take one
    token = kube.token("istio-system", "pilotfish")
    path = kube.path(COORDINATION, "Lease", system)
    with pytest.raises(ApiError) as refused:
        kube.request(
            "POST", path, {**old_lease("pilotfish-old-1"), "metadata": {"name": NAMESPACE_CONTROLLER}}, token=token
        )
    assert refused.value.status == 403


async def test_a_released_lease_is_deleted_at_once_and_anothers_left_alone(
    kube: Cluster, pilotfish_kubeconfig: Path
) -> None:
    team = secrets.token_hex(4)
    system = kube.namespace("sys", {"team": team})
    chart_role(kube, system)
    kube.create(old_lease("", duration=3600), system)  # released by the old leader as it stopped
    async with controllers(kube, system, team, "pilotfish-new-0", ip=False, kubeconfig=pilotfish_kubeconfig) as made:
        await eventually("leading", lambda: made.leading()[NAMESPACE_CONTROLLER], LEASE * 3)
        assert lease(kube, system) is None

    other = kube.namespace("sys", {"team": team})
    chart_role(kube, other)
    kube.create(old_lease("someone-else", duration=3600, key=None), other)  # not one of pilotfish's
    async with controllers(kube, other, team, "pilotfish-new-0", ip=False, kubeconfig=pilotfish_kubeconfig) as made:
        await eventually("leading", lambda: made.leading()[NAMESPACE_CONTROLLER], LEASE * 3)
        kept = lease(kube, other)
        assert kept is not None and kept["spec"]["holderIdentity"] == "someone-else"
