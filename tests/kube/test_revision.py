"""pilotfish as a control-plane revision (``--revision REV``) on a real kube-apiserver, as istiod's
revisions coexist: the revision reads its own mesh ConfigMap ``istio-REV`` (istiod's
getMeshConfigMapName), not the default revision's ``istio``; its leases carry the revision as
holder key, and the default revision takes them over (istiod's prioritized leader election);
Istio config labelled for another revision is not read."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.config.loader import mesh_configmap_name
from app.config.objects import EventType
from app.controllers.default_revision import DefaultRevisionWatcher
from app.controllers.leader import NAMESPACE_CONTROLLER
from app.sources.kube.client import api_client
from app.sources.kube.source import KubeSource
from tests.helm.rendering import render
from tests.kube.common import next_events, serving, started
from tests.kube.test_controllers import LEASE, controllers
from tests.support.cluster import Cluster
from tests.support.leader_lock import lock_record, take
from tests.support.runtime import running


async def eventually(what: str, check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := check()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
    return value


def mesh_map(name: str, connect_timeout: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"mesh": f"connectTimeout: {connect_timeout}\n"}}  # fmt: skip


def test_the_mesh_configmap_of_a_revision_is_named_as_istiod_names_it() -> None:
    assert mesh_configmap_name("") == "istio"
    assert mesh_configmap_name("default") == "istio"
    assert mesh_configmap_name("canary") == "istio-canary"


async def test_a_revision_reads_its_own_mesh_configmap(kube: Cluster, pilotfish_kubeconfig: Path) -> None:
    system = kube.namespace("system")
    kube.apply(mesh_map("istio", "3s"), mesh_map("istio-canary", "7s"), namespace=system)
    settings = dataclasses.replace(serving(pilotfish_kubeconfig, system), revision="canary", webhook_address="")
    async with running(settings) as runtime:
        assert runtime.push_context().mesh.connect_timeout.seconds == 7
        kube.apply(mesh_map("istio", "4s"), namespace=system)  # the default revision's: not read
        kube.apply(mesh_map("istio-canary", "9s"), namespace=system)
        await eventually("the revision's mesh config", lambda: runtime.push_context().mesh.connect_timeout.seconds == 9)


def lock_holder(kube: Cluster, system: str) -> tuple[str, str]:
    record = lock_record(kube, system, NAMESPACE_CONTROLLER)
    return record.holder, record.key


async def test_locks_carry_the_revision_and_the_default_revision_takes_them_over(kube: Cluster) -> None:
    """istiod's prioritized election: the holder key is the revision; a lock held by another
    revision is taken at once by the default revision (``istio-revision-tag-default``'s label),
    never by a revision that is not the default, nor from a replica of its own revision."""
    team = secrets.token_hex(4)
    system = kube.namespace("sys", {"team": team})
    tag = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
           "metadata": {"name": "istio-revision-tag-default", "labels": {"istio.io/rev": "canary"}}}  # fmt: skip
    try:
        async with controllers(kube, system, team, "pilotfish-0", ip=False, revision="stable") as made:
            await eventually("leading", lambda: made.leading()[NAMESPACE_CONTROLLER])
            assert lock_holder(kube, system) == ("pilotfish-0", "stable")
            take(
                kube, system, NAMESPACE_CONTROLLER, "istiod-canary-0", "canary"
            )  # another revision takes it (it is the default)
            await eventually("no longer leading", lambda: not made.leading()[NAMESPACE_CONTROLLER], LEASE * 2)
            kube.apply(tag)  # the default tag names canary: stable has no priority
            await asyncio.sleep(LEASE * 1.5)
            assert lock_holder(kube, system) == ("istiod-canary-0", "canary")
            kube.apply({**tag, "metadata": {**tag["metadata"], "labels": {"istio.io/rev": "stable"}}})
            await eventually(
                "taken over by the default revision", lambda: made.leading()[NAMESPACE_CONTROLLER], LEASE * 2
            )
            assert lock_holder(kube, system) == ("pilotfish-0", "stable")
            take(
                kube, system, NAMESPACE_CONTROLLER, "pilotfish-1", "stable"
            )  # a replica of its own revision: never preempted
            await eventually("no longer leading", lambda: not made.leading()[NAMESPACE_CONTROLLER], LEASE * 2)
            await asyncio.sleep(LEASE * 1.5)
            assert lock_holder(kube, system) == ("pilotfish-1", "stable")
    finally:
        kube.delete("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "", "istio-revision-tag-default")


def rule(ns: str, name: str, revision: str | None) -> dict[str, Any]:
    labels = {} if revision is None else {"istio.io/rev": revision}
    return {"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
            "metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": {"host": name}}  # fmt: skip


async def test_a_revision_reads_istio_config_unlabelled_or_labelled_with_it(
    kube: Cluster, pilotfish_kubeconfig: Path
) -> None:
    """istiod's crdclient filter (config.LabelsInRevision): an Istio object labelled
    ``istio.io/rev`` with another revision is not this revision's; relabelled, it comes or goes."""
    system, ns = kube.namespace("system"), kube.namespace("shop")
    kube.apply(rule(ns, "plain", None), rule(ns, "mine", "canary"), rule(ns, "theirs", "default"), namespace=ns)
    source = KubeSource(api_client(pilotfish_kubeconfig), system_namespace=system, revision="canary")
    try:
        await started(source)
        names = {o.key.name for o in source.objects() if o.key.namespace == ns}
        assert names == {"plain", "mine"}
        watch = source.watch()
        kube.apply(rule(ns, "theirs", "canary"), namespace=ns)
        [came] = await next_events(watch, [ns])
        assert (came.type, came.obj.key.name) == (EventType.ADD, "theirs")
        kube.apply(rule(ns, "mine", "default"), namespace=ns)
        [went] = await next_events(watch, [ns])
        assert (went.type, went.obj.key.name) == (EventType.DELETE, "mine")
    finally:
        await source.close()


async def test_the_charts_default_tag_makes_its_revision_the_default_as_istioctls_does(
    kube: Cluster, pilotfish_kubeconfig: Path
) -> None:
    """``--set revisionTags={default}``: the chart's ``istio-revision-tag-default`` names the
    revision as ``istioctl tag set default`` does (tests/e2e/test_revision_tags.py), so the
    default-revision watcher (the elections' priority), with the chart's RBAC, reads it; removed,
    there is no default."""
    [tag] = [
        doc
        for doc in render("--set", "revision=stable", "--set", "revisionTags={default}")
        if doc["kind"] == "MutatingWebhookConfiguration" and doc["metadata"]["name"] == "istio-revision-tag-default"
    ]
    client = api_client(pilotfish_kubeconfig)
    watcher = DefaultRevisionWatcher(client)
    task = asyncio.create_task(watcher.run())
    try:
        await asyncio.sleep(1)
        assert watcher.get() == ""
        kube.apply(tag)
        await eventually("the chart's tag read", lambda: watcher.get() == "stable")
        kube.delete("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "", "istio-revision-tag-default")
        await eventually("no default once it is gone", lambda: watcher.get() == "")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
        if kube.get(
            "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "", "istio-revision-tag-default"
        ):
            kube.delete(
                "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "", "istio-revision-tag-default"
            )
