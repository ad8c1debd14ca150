"""pilotfish as a revision beside a running istiod (``pilot-discovery`` of the pinned module) on
one real API server: they contend for istiod's own leader election locks (ConfigMaps), so only
one of them writes the root ConfigMaps and ServiceEntry addresses; pilotfish, not the default
revision, leaves istiod's lock alone until ``istio-revision-tag-default`` names its revision,
then takes it at once, and istiod does not take it back; once istiod is uninstalled (stopped, its
chart's mesh ConfigMap ``istio`` deleted) pilotfish keeps the locks and writes the root ConfigMap
of a namespace made after."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.controllers.leader import IP_AUTOALLOCATE_CONTROLLER, NAMESPACE_CONTROLLER
from app.controllers.manager import Controllers
from app.sources.kube.client import api_client
from tests.differential.istiod import running_istiod
from tests.support.cluster import Cluster
from tests.support.leader_lock import lock_record

LEASE = 2.0
LOCKS = (NAMESPACE_CONTROLLER, IP_AUTOALLOCATE_CONTROLLER)
ROOT = "-----BEGIN CERTIFICATE-----\nroot\n-----END CERTIFICATE-----\n"
TAG: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
    "metadata": {"name": "istio-revision-tag-default", "labels": {"istio.io/rev": "canary"}},
}  # fmt: skip


def holders(kube: Cluster, system: str) -> set[tuple[str, str]]:
    return {(r.holder, r.key) for r in (lock_record(kube, system, lock) for lock in LOCKS)}


@contextlib.contextmanager
def default_tag(kube: Cluster) -> Iterator[None]:
    """``istioctl tag set default --revision canary``, as far as the elections read it."""
    kube.apply(TAG)
    try:
        yield
    finally:
        kube.delete(TAG["apiVersion"], TAG["kind"], "", TAG["metadata"]["name"])


async def test_one_lock_for_istiod_and_pilotfish_taken_by_the_default_revision(kube: Cluster, tmp_path: Path) -> None:
    team = secrets.token_hex(4)
    system = kube.namespace("sys", {"team": team})
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "istio"}, "data": {"mesh": "{}"}},
               namespace=system)  # fmt: skip
    with running_istiod(kube, system, tmp_path / "istiod") as istiod:
        kube.wait_for("istiod holding its locks", lambda: holders(kube, system) == {("istiod-0", "default")}, 30)
        client = api_client(kube.admin_kubeconfig)
        made = Controllers(
            client, system_namespace=system, identity="pilotfish-canary-0", revision="canary", root=ROOT,
            selectors=[{"matchLabels": {"team": team}}], lease_duration=LEASE,
            ipv4_prefix="240.240.0.0/16", ipv6_prefix="2001:2::/48",
        )  # fmt: skip
        task = asyncio.create_task(made.run())
        try:
            await asyncio.sleep(LEASE * 1.5)  # istiod's lock (30 s, renewed): not pilotfish's
            assert made.leading() == {lock: False for lock in LOCKS}
            assert holders(kube, system) == {("istiod-0", "default")}
            with default_tag(kube):
                async with asyncio.timeout(LEASE * 3):
                    while made.leading() != {lock: True for lock in LOCKS}:
                        await asyncio.sleep(0.1)
                assert holders(kube, system) == {("pilotfish-canary-0", "canary")}
                await asyncio.sleep(8.0)  # istiod's retry period (30 s / 4): it does not take them back
                assert holders(kube, system) == {("pilotfish-canary-0", "canary")}
                assert made.leading() == {lock: True for lock in LOCKS}
                # helm uninstall istiod: its pod goes (stopped off the loop: pilotfish runs on it),
                # and its chart's mesh ConfigMap
                await asyncio.to_thread(istiod.process.stop)
                kube.delete("v1", "ConfigMap", system, "istio")
                later = kube.namespace("later", {"team": team})
                async with asyncio.timeout(15):
                    while (written := kube.get("v1", "ConfigMap", later, "istio-ca-root-cert")) is None:
                        await asyncio.sleep(0.1)
                assert written["data"]["root-cert.pem"] == ROOT
                assert holders(kube, system) == {("pilotfish-canary-0", "canary")}
                assert made.leading() == {lock: True for lock in LOCKS}
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 15)
            await client.close()
