"""KubeSource against a real kube-apiserver, with the credentials charts/pilotfish gives it: the
cluster's objects become the same ConfigEvents a config dir makes, through the same validation;
status and managedFields-only writes push nothing; the mesh ConfigMap is the MeshConfig; an
Istio kind is read from when its CRD is installed, in the newest version served; start fails
with one clear error when the API server cannot be used."""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.config.objects import ConfigEvent, ConfigKey, EventType, Kind
from app.environment import Environment
from app.sources.kube.client import KubeClient, api_client
from app.sources.kube.kubeconfig import KubeConfigError
from app.sources.kube.source import KubeSource, KubeUnavailable
from tests.kube.common import Mesh, make_mesh, next_events, ours, started
from tests.support.cluster import ApiError, Cluster, Requests, istio_crd

WORKLOAD_ENTRIES = "workloadentries.networking.istio.io"


@pytest.fixture
def mesh(kube: Cluster) -> Mesh:
    return make_mesh(kube)


@pytest.fixture
async def client(pilotfish_kubeconfig: Path) -> KubeClient:
    return api_client(pilotfish_kubeconfig)


@pytest.fixture
def requests(client: KubeClient) -> Requests:
    """What the source asks the API server."""
    return Requests(client)


@pytest.fixture
async def source(mesh: Mesh, client: KubeClient) -> AsyncIterator[KubeSource]:
    source = KubeSource(client, system_namespace=mesh.system, page_size=2)
    yield source
    await source.close()  # closes the client too


async def test_start_reads_every_kind_as_the_file_source_would(source: KubeSource, mesh: Mesh) -> None:
    events = await started(source)
    # the test's own objects (other tests' namespaces may still be going away around it)
    mine = [e for e in events if ours(mesh.namespaces)(e.obj.key)]
    assert {e.type for e in mine} == {EventType.ADD}
    keys = {e.obj.key for e in mine}
    assert {
        ConfigKey(Kind.NAMESPACE, "", mesh.shop),
        ConfigKey(Kind.NAMESPACE, "", mesh.system),
        ConfigKey(Kind.SERVICE, mesh.shop, "cart"),
        ConfigKey(Kind.POD, mesh.shop, "cart-0"),
        ConfigKey(Kind.ENDPOINT_SLICE, mesh.shop, mesh.slice),
        mesh.cart_dr,
        ConfigKey(Kind.MESH_CONFIG, "", "mesh"),
    } == keys  # neither the unrelated ConfigMap nor kube-root-ca.crt (the informer selects istio)
    # the slices after every pod, whichever list came first: the registry builds each slice once
    kinds = [e.obj.kind for e in events]
    assert kinds.index(Kind.ENDPOINT_SLICE) > max(i for i, kind in enumerate(kinds) if kind is Kind.POD)
    env = Environment()
    env.apply(events)
    push = env.build_push_context(None)
    assert push.mesh.connect_timeout.seconds == 3
    assert push.endpoints(f"cart.{mesh.shop}.svc.cluster.local", mesh.shop)


async def test_istio_kinds_are_read_in_the_newest_version_served(source: KubeSource, requests: Requests) -> None:
    await started(source)
    assert requests.lists("destinationrules")
    paths = [p for p, _ in requests.seen if p.endswith("/destinationrules")]
    assert paths and all(p == "/apis/networking.istio.io/v1/destinationrules" for p in paths)


async def test_changes_and_deletes_arrive_and_status_or_managed_fields_writes_are_silent(
    source: KubeSource, mesh: Mesh, kube: Cluster
) -> None:
    await started(source)
    watch = source.watch()
    condition = {"type": "Reconciled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    kube.patch_status("networking.istio.io/v1", "DestinationRule", mesh.shop, "cart", {"conditions": [condition]})
    kube.apply(mesh.destination_rule(), manager="another-manager")  # the same spec, a second owner
    kube.apply(mesh.destination_rule(max_connections=9))
    [update] = await next_events(watch, mesh.namespaces)
    assert (update.type, update.obj.key) == (EventType.UPDATE, mesh.cart_dr)
    assert update.obj.spec.traffic_policy.connection_pool.tcp.max_connections == 9
    assert update.old is not None and update.old.spec.traffic_policy.connection_pool.tcp.max_connections == 5
    kube.delete("networking.istio.io/v1", "DestinationRule", mesh.shop, "cart")
    [gone] = await next_events(watch, mesh.namespaces)
    assert (gone.type, gone.obj.key) == (EventType.DELETE, mesh.cart_dr)


async def test_an_invalid_object_is_reported_and_its_last_good_version_kept(
    source: KubeSource, mesh: Mesh, kube: Cluster
) -> None:
    await started(source)
    seen: list[ConfigEvent] = []
    mine = ours(mesh.namespaces)

    async def collect() -> None:
        async for events in source.watch():
            seen.extend(e for e in events if mine(e.obj.key))

    async def until(check: Callable[[], bool]) -> None:
        async with asyncio.timeout(20):
            while not check():
                await asyncio.sleep(0.02)

    collector = asyncio.create_task(collect())
    try:
        kube.apply(mesh.destination_rule(max_connections=-1))  # the CRD's schema takes it, Istio does not
        await until(lambda: bool(source.rejections()))
        [error] = source.rejections()
        assert "DestinationRule" in str(error) and f"{mesh.shop}/cart" in str(error) and "maxConnections" in str(error)
        assert seen == []  # nothing changed for the mesh
        dr = next(o for o in source.objects() if o.key == mesh.cart_dr)
        assert dr.spec.traffic_policy.connection_pool.tcp.max_connections == 5  # the last good one
        kube.apply(mesh.destination_rule(max_connections=6))  # fixed
        await until(lambda: bool(seen))
        assert source.rejections() == [] and [e.type for e in seen] == [EventType.UPDATE]
    finally:
        collector.cancel()


async def test_telemetry_is_read_in_v1_and_an_invalid_one_is_reported_by_object_and_field(
    source: KubeSource, mesh: Mesh, kube: Cluster, requests: Requests
) -> None:
    await started(source)
    assert any(p == "/apis/telemetry.istio.io/v1/telemetries" for p, _ in requests.seen)
    watch = source.watch()
    logs: dict[str, Any] = {"providers": [{"name": "envoy"}], "filter": {"expression": "response.code >= 400"}}
    telemetry = {
        "apiVersion": "telemetry.istio.io/v1alpha1",
        "kind": "Telemetry",
        "metadata": {"name": "logs", "namespace": mesh.shop},
        "spec": {"accessLogging": [logs]},
    }
    kube.apply(telemetry)
    [added] = await next_events(watch, mesh.namespaces)
    assert (added.type, added.obj.key) == (EventType.ADD, ConfigKey(Kind.TELEMETRY, mesh.shop, "logs"))
    assert added.obj.spec.access_logging[0].filter.expression == "response.code >= 400"
    # the CRD's schema takes an expression that does not parse; pilotfish refuses it by name
    broken = copy.deepcopy(telemetry)
    broken["spec"]["accessLogging"][0]["filter"]["expression"] = "response.code >= (400"
    drained = asyncio.create_task(next_events(watch, mesh.namespaces))  # events flow while a watch reads
    try:
        kube.apply(broken)
        async with asyncio.timeout(20):
            while not source.rejections():
                await asyncio.sleep(0.02)
    finally:
        drained.cancel()
    [error] = source.rejections()
    assert "Telemetry" in str(error) and f"{mesh.shop}/logs" in str(error)
    assert "accessLogging[0].filter.expression" in str(error)
    kept = next(o for o in source.objects() if o.key == ConfigKey(Kind.TELEMETRY, mesh.shop, "logs"))
    assert kept.spec.access_logging[0].filter.expression == "response.code >= 400"  # the last good one


# --- CRDs coming and going (the WorkloadEntry CRD, put back as Istio ships it after each test) ----


def restore_crd(kube: Cluster, name: str) -> None:
    def gone_or_served() -> bool:
        crd = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", name)
        return crd is None or not crd["metadata"].get("deletionTimestamp")

    kube.wait_for(f"CRD {name} deleted", gone_or_served)
    kube.apply(istio_crd(name))

    def established() -> bool:
        crd = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", name)
        conditions = (crd or {}).get("status", {}).get("conditions") or []
        served = [v["name"] for v in (crd or {}).get("spec", {}).get("versions", []) if v.get("served")]
        return "v1" in served and any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    kube.wait_for(f"CRD {name} established", established)


@pytest.fixture
def workload_entry_crd(kube: Cluster) -> Iterator[dict[str, Any]]:
    """Istio's WorkloadEntry CRD, for a test to change or delete; restored after."""
    try:
        yield istio_crd(WORKLOAD_ENTRIES)
    finally:
        restore_crd(kube, WORKLOAD_ENTRIES)


def older_istio(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD as an Istio that did not serve v1 yet would install it (v1beta1 stored)."""
    older = copy.deepcopy(crd)
    older["spec"]["versions"] = [v for v in older["spec"]["versions"] if v["name"] != "v1"]
    for version in older["spec"]["versions"]:
        version["storage"] = version["name"] == "v1beta1"
    return older


def workload_entry(namespace: str, name: str, version: str = "v1") -> dict[str, Any]:
    return {
        "apiVersion": f"networking.istio.io/{version}",
        "kind": "WorkloadEntry",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"address": "10.1.2.3", "labels": {"app": "vm"}},
    }


def served(kube: Cluster, version: str) -> bool:
    """Whether the API server serves WorkloadEntries in ``version`` (now)."""
    try:
        kube.request("GET", f"/apis/networking.istio.io/{version}/workloadentries", query={"limit": "1"})
    except ApiError as e:
        if e.status == 404:
            return False
        raise
    return True


async def test_istio_kinds_are_read_from_when_their_crd_is_installed_until_it_is_deleted(
    source: KubeSource, requests: Requests, mesh: Mesh, kube: Cluster, workload_entry_crd: dict[str, Any]
) -> None:
    # istiod's CRD watcher: a kind whose CRD is missing is no error; its informer starts with the CRD
    kube.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", WORKLOAD_ENTRIES)
    await asyncio.to_thread(kube.wait_for, "the CRD gone", lambda: kube.get(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", "", WORKLOAD_ENTRIES) is None)  # fmt: skip
    await started(source)
    assert not requests.lists("workloadentries")  # not read, and no error either
    watch = source.watch()
    kube.apply(older_istio(workload_entry_crd))  # an older Istio: v1 not served
    await asyncio.to_thread(kube.wait_for, "v1beta1 served", lambda: served(kube, "v1beta1"))
    kube.apply(workload_entry(mesh.shop, "vm-1", "v1beta1"))
    key = ConfigKey(Kind.WORKLOAD_ENTRY, mesh.shop, "vm-1")
    [added] = await next_events(watch, mesh.namespaces)
    assert (added.type, added.obj.key, added.obj.api_version) == (EventType.ADD, key, "networking.istio.io/v1beta1")
    kube.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", WORKLOAD_ENTRIES)
    [gone] = await next_events(watch, mesh.namespaces)
    assert (gone.type, gone.obj.key) == (EventType.DELETE, key)


async def test_a_crd_that_stops_serving_the_version_read_moves_the_informer_without_churn(
    source: KubeSource, requests: Requests, mesh: Mesh, kube: Cluster, workload_entry_crd: dict[str, Any]
) -> None:
    kube.apply(workload_entry(mesh.shop, "vm-1"))
    events = await started(source)
    assert ConfigKey(Kind.WORKLOAD_ENTRY, mesh.shop, "vm-1") in {e.obj.key for e in events}
    watch = source.watch()
    changed = copy.deepcopy(workload_entry_crd)
    for version in changed["spec"]["versions"]:
        version["served"] = version["name"] == "v1beta1"  # v1 (still stored) no longer served
    kube.apply(changed)
    await asyncio.to_thread(kube.wait_for, "v1 no longer served", lambda: not served(kube, "v1"))
    kube.apply(workload_entry(mesh.shop, "vm-2", "v1beta1"))
    [added] = await next_events(watch, mesh.namespaces)  # vm-1 is neither removed nor updated
    assert (added.type, added.obj.key, added.obj.api_version) == (
        EventType.ADD,
        ConfigKey(Kind.WORKLOAD_ENTRY, mesh.shop, "vm-2"),
        "networking.istio.io/v1beta1",
    )
    assert "/apis/networking.istio.io/v1beta1/workloadentries" in {p for p, _ in requests.seen}


# --- credentials ------------------------------------------------------------------------------


async def test_a_refused_token_is_one_clear_error(tmp_path: Path, kube: Cluster) -> None:
    wrong = kube.token_kubeconfig("not-a-token", tmp_path / "wrong")
    source = KubeSource(api_client(wrong))
    try:
        with pytest.raises(KubeUnavailable, match=re.escape("refused pilotfish (HTTP 401)")):
            await source.start()
    finally:
        await source.close()


async def test_an_account_without_rights_waits_for_them_and_a_start_given_up_leaves_nothing_behind(
    tmp_path: Path, kube: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    # RBAC may be bound after pilotfish starts (a chart installs both at once): a 403 is retried,
    # with the API server's reason; a caller that stops waiting for start() leaves no task behind
    ns = kube.namespace("norights")
    kube.service_account(ns, "nobody")
    source = KubeSource(api_client(kube.token_kubeconfig(kube.token(ns, "nobody"), tmp_path / "nobody")))
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(source.start(), 1.5)
    finally:
        await source.close()
    assert any("HTTP 403" in r.getMessage() and f"system:serviceaccount:{ns}:nobody" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    for _ in range(3):
        await asyncio.sleep(0)
    waiting = [t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") == "Event.wait"]
    assert waiting == []  # no informer's first-list wait left pending (its future would die unretrieved)


async def test_an_unreachable_server_and_a_missing_kubeconfig_are_clear_errors(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    with pytest.raises(KubeConfigError, match="no such file"):
        api_client(tmp_path / "missing")
    source = KubeSource(api_client(config))
    try:
        with pytest.raises(KubeUnavailable, match=re.escape("cannot reach the API server at https://127.0.0.1:1")):
            await source.start()
    finally:
        await source.close()


async def test_in_a_cluster_an_api_server_not_up_yet_is_waited_for(
    tmp_path: Path, kube: Cluster, pilotfish_kubeconfig: Path, unused_tcp_port: int
) -> None:
    """As istiod waits for its informers to sync: in a cluster (a node or the control plane
    restarting with pilotfish), a server that does not answer yet is tried again until it does,
    rather than ending serve into the kubelet's crash-loop backoff (up to 5 min after the server
    is back)."""
    config = yaml.safe_load(pilotfish_kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{unused_tcp_port}"
    later = tmp_path / "kubeconfig"
    later.write_text(yaml.safe_dump(config))
    upstream = kube.server.removeprefix("https://").split(":")

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(upstream[0], int(upstream[1]))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(1 << 16):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    source = KubeSource(api_client(later), wait_for_server=True)
    server: asyncio.Server | None = None
    try:
        starting = asyncio.ensure_future(source.start())
        await asyncio.sleep(2)
        assert not starting.done(), "start() gave up on a server that is not up yet"
        server = await asyncio.start_server(relay, "127.0.0.1", unused_tcp_port)  # the server comes up
        await asyncio.wait_for(starting, 30)
    finally:
        await source.close()
        if server is not None:
            server.close()


# --- EnvoyFilters, read; WasmPlugins, only warned of ---------------------------------------------


def envoy_filter(namespace: str, name: str, lua: str) -> dict[str, Any]:
    patch = {"operation": "INSERT_BEFORE", "value": {"name": "envoy.lua", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua", "inlineCode": lua}}}  # fmt: skip
    return {
        "apiVersion": "networking.istio.io/v1alpha3",
        "kind": "EnvoyFilter",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "configPatches": [{"applyTo": "HTTP_FILTER", "match": {"context": "SIDECAR_INBOUND"}, "patch": patch}]
        },
    }


def wasm_plugin(namespace: str, name: str, url: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace}
    return {"apiVersion": "extensions.istio.io/v1alpha1", "kind": "WasmPlugin", "metadata": meta, "spec": {"url": url}}


def not_applied(caplog: pytest.LogCaptureFixture, what: str) -> int:
    return sum(f"{what}: not applied" in r.getMessage() for r in caplog.records)


async def logged(caplog: pytest.LogCaptureFixture, what: str, times: int) -> None:
    async with asyncio.timeout(20):
        while not_applied(caplog, what) < times:
            await asyncio.sleep(0.02)


async def test_envoy_filters_are_config_and_wasm_plugins_are_warned_of_once_per_spec(
    source: KubeSource, mesh: Mesh, kube: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    # an EnvoyFilter is config (read in v1alpha3, the only version istiod serves it in); a
    # WasmPlugin, which pilotfish does not apply, gets a warning (as a file's or the webhook's
    # would) once per change of its spec, and no config event
    kube.apply(envoy_filter(mesh.shop, "lua", "-- one"))
    kube.apply(wasm_plugin(mesh.shop, "auth", "oci://example.com/auth:1"))
    events = await started(source)
    [lua] = [e for e in events if e.obj.key == ConfigKey(Kind.ENVOY_FILTER, mesh.shop, "lua")]
    assert lua.obj.spec.config_patches[0].patch.value.fields["name"].string_value == "envoy.lua"
    auth = f"WasmPlugin '{mesh.shop}/auth'"
    await logged(caplog, auth, 1)
    [line] = [r.getMessage() for r in caplog.records if f"{auth}: not applied" in r.getMessage()]
    assert "pilotfish applies no WasmPlugin" in line
    watch = source.watch()
    kube.patch_status("extensions.istio.io/v1alpha1", "WasmPlugin", mesh.shop, "auth", {"conditions": [
        {"type": "Reconciled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})  # fmt: skip
    kube.apply(wasm_plugin(mesh.shop, "auth", "oci://example.com/auth:2"))  # its spec changed
    await logged(caplog, auth, 2)
    kube.apply(envoy_filter(mesh.shop, "lua", "-- two"))
    [update] = await next_events(watch, mesh.namespaces)
    assert (update.type, update.obj.key) == (EventType.UPDATE, lua.obj.key)
    assert not_applied(caplog, auth) == 2  # the status write warned of nothing


async def test_an_account_that_may_not_list_wasm_plugins_starts_and_says_so_once(
    tmp_path: Path, mesh: Mesh, kube: Cluster, pilotfish_kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # the chart's rights but the WasmPlugins' (an older chart's): the start waits for no such
    # informer, and a refused list is one line, not a warning at every retry
    roles = kube.list("rbac.authorization.k8s.io/v1", "ClusterRole")
    chart = next(r for r in roles if r["metadata"]["name"].startswith("pilotfish") and "wasmplugins" in str(r))
    rules = [r for r in chart["rules"] if "wasmplugins" not in r.get("resources", ())]
    ns = kube.namespace("older-chart")
    kube.service_account(ns, "pilotfish")
    role = f"older-chart-{ns}"
    kube.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": rules,
        }
    )
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": "pilotfish", "namespace": ns}]})  # fmt: skip
    token = kube.token(ns, "pilotfish")
    kube.wait_for("the role in force", lambda: kube.request(
        "GET", "/api/v1/services", query={"limit": "1"}, token=token, ok=(200,)), timeout=30)  # fmt: skip
    kube.apply(wasm_plugin(mesh.shop, "auth", "oci://example.com/auth:1"))
    source = KubeSource(api_client(kube.token_kubeconfig(token, tmp_path / "older")), system_namespace=mesh.system)
    try:
        await started(source)
        async with asyncio.timeout(20):
            while not any("may not list wasmplugins" in r.getMessage() for r in caplog.records):
                await asyncio.sleep(0.02)
        await asyncio.sleep(2)  # past the informers' first retry (0.8 s)
    finally:
        await source.close()
        kube.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", role)
        kube.delete("rbac.authorization.k8s.io/v1", "ClusterRole", "", role)
    assert sum("wasmplugins" in r.getMessage() for r in caplog.records) == 1
    assert not_applied(caplog, f"WasmPlugin '{mesh.shop}/auth'") == 0
