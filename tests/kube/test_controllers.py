"""What pilotfish writes to a real kube-apiserver as the elected leader (app/controllers):
``istio-ca-root-cert`` in each selected namespace (created, put back, repaired, updated with the
root, in new namespaces), ServiceEntry ``status.addresses`` (written, stable across a restart,
conflicts resolved as istiod), and the lock (a ConfigMap, as istiod's): two replicas, exactly one leads and writes; the
leader stopping hands the lease over and writes resume. The discoverySelectors keep each test to
namespaces of its own in the shared cluster; leases are short (2 s)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from app.controllers.leader import IP_AUTOALLOCATE_CONTROLLER, NAMESPACE_CONTROLLER
from app.controllers.manager import Controllers
from app.settings import Settings
from app.sources.kube.client import api_client
from tests.support.cluster import Cluster
from tests.support.leader_lock import holder, lock_record, take
from tests.support.runtime import running

ROOT_1 = "-----BEGIN CERTIFICATE-----\nroot one\n-----END CERTIFICATE-----\n"
ROOT_2 = "-----BEGIN CERTIFICATE-----\nroot two\n-----END CERTIFICATE-----\n"
CRL = "-----BEGIN X509 CRL-----\nrevoked\n-----END X509 CRL-----\n"
LEASE = 2.0


@contextlib.asynccontextmanager
async def controllers(
    kube: Cluster,
    system: str,
    team: str,
    identity: str,
    *,
    root: str | None = ROOT_1,
    ip: bool = True,
    revision: str = "",
    kubeconfig: Path | None = None,
) -> AsyncIterator[Controllers]:
    """Controllers of one replica, as the admin or with ``kubeconfig``'s credentials."""
    client = api_client(kubeconfig or kube.admin_kubeconfig)
    made = Controllers(
        client,
        system_namespace=system,
        identity=identity,
        revision=revision,
        root=root,
        selectors=[{"matchLabels": {"team": team}}],
        lease_duration=LEASE,
        ip_autoallocate=ip,
        ipv4_prefix="240.240.0.0/16",
        ipv6_prefix="2001:2::/48",
    )
    task = asyncio.create_task(made.run())
    try:
        yield made
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 15)
        await client.close()


async def eventually(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await asyncio.to_thread(check)
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def crl(kube: Cluster, ns: str) -> str | None:
    cm = kube.get("v1", "ConfigMap", ns, "istio-ca-crl")
    return None if cm is None else (cm.get("data") or {}).get("ca-crl.pem", "")


def root_cert(kube: Cluster, ns: str) -> str | None:
    cm = kube.get("v1", "ConfigMap", ns, "istio-ca-root-cert")
    return None if cm is None else (cm.get("data") or {}).get("root-cert.pem")


async def test_root_cert_in_selected_namespaces_kept_and_following_the_root(kube: Cluster) -> None:
    team = secrets.token_hex(4)
    system = kube.namespace("sys", {"team": team})
    a, b = kube.namespace("rc", {"team": team}), kube.namespace("rc", {"team": team})
    other = kube.namespace("rc")
    async with controllers(kube, system, team, "replica-a", ip=False) as made:
        for ns in (system, a, b):
            assert await eventually(f"{ns}'s ConfigMap", lambda ns=ns: root_cert(kube, ns)) == ROOT_1
        cm = kube.get("v1", "ConfigMap", a, "istio-ca-root-cert")
        assert cm is not None and cm["metadata"]["labels"] == {"istio.io/config": "true"}
        assert kube.get("v1", "ConfigMap", other, "istio-ca-root-cert") is None  # not selected
        # istio-ca-crl beside it (PILOT_ENABLE_CA_CRL), empty while the CA has no CRL, as istiod's
        await eventually("a's CRL ConfigMap", lambda: crl(kube, a) is not None)
        assert crl(kube, a) == ""
        made.set_crl(CRL)
        for ns in (system, a, b):
            await eventually(f"{ns}'s CRL", lambda ns=ns: crl(kube, ns) == CRL)
        assert crl(kube, other) is None
        record = lock_record(kube, system, NAMESPACE_CONTROLLER)  # a ConfigMap lock, as istiod's
        assert (record.holder, record.duration, record.key) == ("replica-a", 2, "default")

        kube.delete("v1", "ConfigMap", a, "istio-ca-root-cert")  # deleted: put back
        await eventually("the deleted ConfigMap back", lambda: root_cert(kube, a) == ROOT_1)
        kube.patch("v1", "ConfigMap", b, "istio-ca-root-cert", {"data": {"root-cert.pem": "edited", "extra": "kept"}})
        await eventually("the edited ConfigMap repaired", lambda: root_cert(kube, b) == ROOT_1)
        repaired = kube.get("v1", "ConfigMap", b, "istio-ca-root-cert")
        assert repaired is not None and repaired["data"]["extra"] == "kept"  # only its key is istiod's

        made.set_root(ROOT_2)
        for ns in (system, a, b):
            await eventually(f"{ns} on the new root", lambda ns=ns: root_cert(kube, ns) == ROOT_2)
        c = kube.namespace("rc", {"team": team})  # a new namespace gets one
        await eventually("the new namespace's ConfigMap", lambda: root_cert(kube, c) == ROOT_2)
        kube.patch("v1", "Namespace", "", other, {"metadata": {"labels": {"team": team}}})  # now selected
        await eventually("the relabelled namespace's ConfigMap", lambda: root_cert(kube, other) == ROOT_2)
        made.set_selectors([{"matchLabels": {"team": "nobody"}}])  # out of scope: left alone, not deleted
        kube.delete("v1", "ConfigMap", a, "istio-ca-root-cert")
        await asyncio.sleep(1.0)
        assert root_cert(kube, a) is None and root_cert(kube, b) == ROOT_2
    # stopped: the lease is given up (client-go's ReleaseOnCancel)
    assert holder(kube, system, NAMESPACE_CONTROLLER) == ""


def service_entry(ns: str, name: str, host: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "ServiceEntry",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"hosts": [host], "resolution": "DNS", "ports": [{"number": 80, "name": "http", "protocol": "HTTP"}],
                 **spec},
    }  # fmt: skip


def allocated(kube: Cluster, ns: str, name: str) -> list[dict[str, str]]:
    se = kube.get("networking.istio.io/v1", "ServiceEntry", ns, name)
    return list(((se or {}).get("status") or {}).get("addresses") or [])


async def test_service_entry_addresses_written_stable_across_a_restart_and_conflicts_resolved(kube: Cluster) -> None:
    team = secrets.token_hex(4)
    system = kube.namespace("sys", {"team": team})
    ns = kube.namespace("se", {"team": team})
    kube.apply(service_entry(ns, "a", "a.example.com"))
    kube.apply(service_entry(ns, "none", "n.example.com", resolution="NONE"))
    async with controllers(kube, system, team, "replica-a", root=None):
        first = await eventually("a's addresses", lambda: allocated(kube, ns, "a"))
    assert [x["host"] for x in first] == ["a.example.com", "a.example.com"]
    v4, v6 = (ipaddress.ip_address(x["value"]) for x in first)
    assert v4 in ipaddress.ip_network("240.240.0.0/16") and v6 in ipaddress.ip_network("2001:2::/48")
    assert allocated(kube, ns, "none") == []  # resolution NONE: nothing allocated

    # another term (a restart, or a new leader): a keeps its addresses, b gets others
    kube.apply(service_entry(ns, "b", "b.example.com"))
    async with controllers(kube, system, team, "replica-b", root=None):
        second = await eventually("b's addresses", lambda: allocated(kube, ns, "b"))
        assert allocated(kube, ns, "a") == first
        assert not {x["value"] for x in second} & {x["value"] for x in first}
        # a status that claims a's address (a stale writer): the newer entry is reassigned
        kube.apply(service_entry(ns, "c", "c.example.com"))
        await eventually("c's addresses", lambda: allocated(kube, ns, "c"))
        kube.patch_status("networking.istio.io/v1", "ServiceEntry", ns, "c", {"addresses": first[:1] and [
            {"value": first[0]["value"], "host": "c.example.com"}]})  # fmt: skip
        await eventually(
            "c reassigned",
            lambda: (got := allocated(kube, ns, "c")) and first[0]["value"] not in {x["value"] for x in got},
        )
        assert allocated(kube, ns, "a") == first  # the oldest keeps it
        # opted out: the addresses are cleared
        kube.patch("networking.istio.io/v1", "ServiceEntry", ns, "b",
                   {"metadata": {"labels": {"networking.istio.io/enable-autoallocate-ip": "false"}}})  # fmt: skip
        await eventually("b's addresses cleared", lambda: allocated(kube, ns, "b") == [])
    assert holder(kube, system, IP_AUTOALLOCATE_CONTROLLER) == ""


async def test_two_replicas_one_leader_writes_and_a_stopped_leader_hands_over(kube: Cluster) -> None:
    team = secrets.token_hex(4)
    system = kube.namespace("sys", {"team": team})
    ns = kube.namespace("rc", {"team": team})
    stacks = {name: contextlib.AsyncExitStack() for name in ("replica-a", "replica-b")}
    try:
        replicas = {
            name: await stack.enter_async_context(controllers(kube, system, team, name, ip=False))
            for name, stack in stacks.items()
        }
        await eventually("the ConfigMap", lambda: root_cert(kube, ns) == ROOT_1)
        leaders = [name for name, made in replicas.items() if made.leading()[NAMESPACE_CONTROLLER]]
        assert len(leaders) == 1 and holder(kube, system, NAMESPACE_CONTROLLER) == leaders[0]
        leader, follower = leaders[0], next(n for n in replicas if n != leaders[0])
        for _ in range(3):  # deleted again and again: only the leader puts it back
            kube.delete("v1", "ConfigMap", ns, "istio-ca-root-cert")
            await eventually("the ConfigMap back", lambda: root_cert(kube, ns) == ROOT_1)
        assert replicas[follower].namespace_controller.writes == 0
        assert replicas[leader].namespace_controller.writes >= 3
        assert not replicas[follower].leading()[NAMESPACE_CONTROLLER]

        # the leader stops (and releases the lease): the other takes it within the lease's time
        await stacks[leader].aclose()
        stopped = asyncio.get_running_loop().time()
        await eventually("the follower leading", lambda: replicas[follower].leading()[NAMESPACE_CONTROLLER], LEASE * 3)
        assert asyncio.get_running_loop().time() - stopped <= LEASE * 2
        assert holder(kube, system, NAMESPACE_CONTROLLER) == follower
        kube.delete("v1", "ConfigMap", ns, "istio-ca-root-cert")
        await eventually("writes resumed", lambda: root_cert(kube, ns) == ROOT_1)
        # counted once its POST returns: the test may read the ConfigMap before the writer resumes
        await eventually("the new leader's write counted", lambda: replicas[follower].namespace_controller.writes >= 1)
    finally:
        for stack in stacks.values():
            await stack.aclose()


async def test_a_lock_taken_by_another_stops_the_writes_until_it_is_released(kube: Cluster) -> None:
    team = secrets.token_hex(4)
    system = kube.namespace("sys", {"team": team})
    ns = kube.namespace("rc", {"team": team})
    async with controllers(kube, system, team, "replica-a", ip=False) as made:
        await eventually("the ConfigMap", lambda: root_cert(kube, ns) == ROOT_1)
        transitions = lock_record(kube, system, NAMESPACE_CONTROLLER).transitions
        # another client-go replica takes the lock over (as istiod's default revision preempts)
        take(kube, system, NAMESPACE_CONTROLLER, "intruder")
        await eventually("replica-a no longer leading", lambda: not made.leading()[NAMESPACE_CONTROLLER], LEASE * 2)
        writes = made.namespace_controller.writes
        kube.delete("v1", "ConfigMap", ns, "istio-ca-root-cert")
        await asyncio.sleep(LEASE)
        assert root_cert(kube, ns) is None and made.namespace_controller.writes == writes  # stopped writing
        # released as client-go releases (empty holder, 1 s): taken again, writes resume
        assert holder(kube, system, NAMESPACE_CONTROLLER) == "intruder"
        take(kube, system, NAMESPACE_CONTROLLER, "", key="", duration=1)
        await eventually("the ConfigMap back", lambda: root_cert(kube, ns) == ROOT_1)
        again = lock_record(kube, system, NAMESPACE_CONTROLLER)
        assert again.holder == "replica-a" and again.transitions == transitions + 2


async def test_a_runtime_leads_writes_its_cas_root_and_serves_the_addresses_it_allocated(
    kube: Cluster, tmp_path: Path
) -> None:
    """Allocation and use agree: the ServiceEntry's Service in the runtime's own PushContext
    carries the addresses its controller wrote to the status."""
    team = secrets.token_hex(4)
    system = kube.namespace("sys", {"team": team})
    ns = kube.namespace("se", {"team": team})
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "istio", "namespace": system},
                "data": {"mesh": f"discoverySelectors: [{{matchLabels: {{team: '{team}'}}}}]\n"}})  # fmt: skip
    kube.apply(service_entry(ns, "ext", "ext.example.com"))
    settings = Settings(
        config_dir=None, kubeconfig=kube.admin_kubeconfig, system_namespace=system, ca_dir=tmp_path,
        xds_address="127.0.0.1:0", secure_xds_address="127.0.0.1:0", http_address="127.0.0.1:0",
        leader_identity="runtime-1", leader_lease_duration=LEASE,
    )  # fmt: skip
    async with running(settings) as runtime:
        assert runtime.controllers is not None
        assert await eventually("the root ConfigMap", lambda: root_cert(kube, ns)) == runtime.ca_root()
        written = await eventually("ext's addresses", lambda: allocated(kube, ns, "ext"))

        def served() -> tuple[str, ...]:
            service = runtime.push_context().service_index.by_hostname.get("ext.example.com", {}).get(ns)
            return service.auto_addresses if service is not None else ()

        assert await eventually("the allocated addresses served", served) == tuple(x["value"] for x in written)
        assert runtime.controllers.leading() == {NAMESPACE_CONTROLLER: True, IP_AUTOALLOCATE_CONTROLLER: True}
        assert runtime.metrics.leader.values == {  # leader_election_master_status{name}
            (("name", NAMESPACE_CONTROLLER),): 1,
            (("name", IP_AUTOALLOCATE_CONTROLLER),): 1,
        }
        runtime.root_changed(ROOT_2)  # the CA's root hook
        await eventually("the new root written", lambda: root_cert(kube, ns) == ROOT_2)
