"""Incremental pushes as a real Envoy receives them: a change arrives as what it changed, and
every cluster stays warm.

A sleep sidecar (no iptables: one egress listener on 127.0.0.1) sees the eight services of its
namespace on the listener's port: ``app`` (pods v1 and v2, a DestinationRule with subsets v1
and v2 and a traffic policy) and seven others with one subset each, 17 EDS clusters in all.
What Envoy got is read from its own accounts:

* ``cluster_manager.cluster_added / cluster_modified / cluster_removed``: clusters CDS changed;
  Envoy's log line ``cds: response indicates N added/updated cluster(s)``: what each CDS response
  carried, unchanged clusters included (Envoy skips those without a stat);
* ``cluster_manager.cds.update_attempt``, ``listener_manager.lds.update_attempt`` and each
  ``http.*.rds.*.update_attempt``: one per response of that type (an empty Delta LDS response
  counts too: it is delivered to the wildcard watch);
* ``cluster.<name>.update_attempt / update_success / membership_change / update_no_rebuild``:
  the EDS subscription of one cluster; a Delta EDS response reaches only the clusters whose
  assignment it carries, a SotW one every cluster it names.

and, on pilotfish's side, ``/debug/syncz``: the nonce last sent per type. pilotfish numbers a
stream's responses 1, 2, 3... (server.py ``counter_nonces``), so the nonces also count them.

The last test needs no pilotfish: it pins what the server's rule "clusters re-sent, their
assignments follow" (connection.py ``FOLLOWS`` / ``force_names``) relies on. A modified EDS
cluster whose ``eds_config`` has ``initial_fetch_timeout: 0s`` (as pilotfish and istiod build
them) stays warming until an assignment for it arrives after the CDS response; Envoy never
asks for it again (its name is still subscribed), and its EDS cache (EdsResourcesCache, used
only when the initial fetch times out: extensions/clusters/eds/eds.cc
``EdsClusterImpl::onConfigUpdateFailed``) is never consulted without a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import subprocess
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import config_source_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf.message import Message

from tests.e2e.backends import Backends
from tests.e2e.conftest import StartBackends, StartEnvoy, StartPilotfish
from tests.e2e.harness import (
    ConfigDir,
    KubernetesRegistration,
    backends_seen,
    free_port,
    routed_to,
    send,
    wait_until,
)
from tests.e2e.processes import LIVE, SIDECAR, Envoy, Pilotfish
from tests.support.envoy import agent_bootstrap, envoy_binary

APP = "app.default.svc.cluster.local"
PODS = {"v1": "127.0.0.51", "v2": "127.0.0.52"}
NEW_POD, NEW_POD_VERSION, NEW_POD_ADDRESS = "v1-b", "v1", "127.0.0.53"  # a second v1 pod, added later
OTHERS = tuple(f"other-{i}" for i in range(7))

T = TypeVar("T")


# --- the mesh ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """Envoy's counters, pilotfish's nonce last sent per type and the length of Envoy's log, at one moment."""

    stats: Mapping[str, int] = field(repr=False)
    nonces: Mapping[str, str]
    log_offset: int


@dataclass(frozen=True)
class Mesh:
    config: ConfigDir
    backends: Backends
    port: int  # the egress listener's, and every service's
    server: Pilotfish
    envoy: Envoy

    def cluster(self, subset: str = "", host: str = APP) -> str:
        return f"outbound|{self.port}|{subset}|{host}"

    @property
    def app_clusters(self) -> set[str]:
        return {self.cluster(), self.cluster("v1"), self.cluster("v2")}

    @property
    def eds_clusters(self) -> set[str]:
        others = {self.cluster(s, f"{o}.default.svc.cluster.local") for o in OTHERS for s in ("", "v1")}
        return self.app_clusters | others

    def settled(self) -> dict[str, str] | None:
        """pilotfish's nonce last sent per type once Envoy has ACKed every response (None before)."""
        (stream,) = self.server.sync_status()
        watches: dict[str, dict[str, Any]] = stream["watches"]
        if any(w["nonceSent"] != w["nonceAcked"] for w in watches.values()):
            return None
        return {t: w["nonceSent"] for t, w in watches.items()}

    def snapshot(self) -> Snapshot:
        """Taken once Envoy has ACKed everything pilotfish sent, so no response is in flight."""
        nonces = wait_until(self.settled, "Envoy to ACK every response")
        return Snapshot(self.envoy.stats(), nonces, len(self.envoy.log()))

    def since(self, before: Snapshot) -> Change:
        return Change(self, before, self.snapshot())


@dataclass(frozen=True)
class Change:
    """What Envoy and pilotfish counted between two snapshots."""

    mesh: Mesh
    before: Snapshot
    after: Snapshot

    def grew(self, counter: str) -> int:
        return self.after.stats.get(counter, 0) - self.before.stats.get(counter, 0)

    def eds(self, counter: str) -> dict[str, int]:
        """The EDS clusters whose ``cluster.<stat name>.<counter>`` grew, by how much (the stat
        name is the cluster's alt_stat_name, ``name;`` as istiod sets it)."""
        clusters = self.mesh.envoy.active_clusters()
        out = {}
        for name in self.mesh.eds_clusters:
            key = f"cluster.{clusters[name].get('alt_stat_name', name)}.{counter}"
            grown = self.after.stats[key] - self.before.stats[key]
            if grown:
                out[name] = grown
        return out

    def rds_responses(self) -> int:
        """RDS responses Envoy took, over every route configuration it subscribes to."""
        counters = [k for k in self.after.stats if ".rds." in k and k.endswith(".update_attempt")]
        assert counters, "Envoy has no RDS subscription"
        return sum(self.grew(k) for k in counters)

    def cds_responses(self) -> list[tuple[int, int]]:
        """(clusters added or updated, removed) that each CDS response in between carried."""
        return self.mesh.envoy.cds_responses(self.before.log_offset)

    def pilotfish_responses(self) -> tuple[set[str], int]:
        """The types pilotfish answered in between, and how many responses it sent in all."""
        types = {t for t, nonce in self.after.nonces.items() if nonce != self.before.nonces.get(t)}
        return types, _last_nonce(self.after.nonces) - _last_nonce(self.before.nonces)


def _last_nonce(nonces: Mapping[str, str]) -> int:
    return max((int(n) for n in nonces.values() if n), default=0)


def write_app_rule(config: ConfigDir, *, max_connections: int, consecutive_5xx: int) -> None:
    config.render(
        "incremental/app-destinationrule.yaml",
        "app-destinationrule.yaml",
        max_connections=max_connections,
        consecutive_5xx=consecutive_5xx,
    )


def max_connections(cluster: Mapping[str, Any]) -> int | None:
    thresholds = cluster.get("circuit_breakers", {}).get("thresholds", [])
    return thresholds[0].get("max_connections") if thresholds else None


@pytest.fixture
def mesh(
    config_dir: ConfigDir, start_backends: StartBackends, start_pilotfish: StartPilotfish, start_envoy: StartEnvoy
) -> Mesh:
    backends = start_backends({**PODS, NEW_POD: NEW_POD_ADDRESS})  # the new pod's backend waits unused
    port = free_port()
    KubernetesRegistration(PODS, cluster_ip="10.96.9.1", service_port=port).write(config_dir, backends.port)
    write_app_rule(config_dir, max_connections=10, consecutive_5xx=5)
    config_dir.render("sidecar/sidecar.yaml", egress_port=port)
    for i, name in enumerate(OTHERS):
        config_dir.render(
            "incremental/other.yaml",
            f"{name}.yaml",
            service=name,
            cluster_ip=f"10.96.9.{10 + i}",
            address=f"127.0.1.{10 + i}",
            port=port,
        )
    server = start_pilotfish(config_dir)
    mesh = Mesh(config_dir, backends, port, server, start_envoy(server, SIDECAR))
    envoy = mesh.envoy
    wait_until(
        lambda: set(envoy.active_clusters()) >= mesh.eds_clusters and not envoy.warming_clusters(),
        "every EDS cluster, warm",
    )
    wait_until(lambda: send(port, host=APP).backend in PODS, "the egress listener to reach app")
    return mesh


def assert_traffic_reaches(mesh: Mesh, versions: set[str], count: int = 20) -> None:
    seen = backends_seen(mesh.port, count, host=APP)
    assert set(seen) == versions, f"expected every request answered by {versions}: {seen}"


# --- DestinationRule change ---------------------------------------------------------------------


def test_destination_rule_change_sends_only_that_services_clusters_and_assignments(mesh: Mesh, api_type: str) -> None:
    envoy = mesh.envoy
    before = mesh.snapshot()
    clusters_before = envoy.active_clusters()
    stream = envoy.xds_stream()
    assert max_connections(clusters_before[mesh.cluster()]) == 10

    write_app_rule(mesh.config, max_connections=20, consecutive_5xx=6)

    def app_updated() -> bool:
        clusters = envoy.active_clusters()  # a modified cluster shows here once it has warmed
        return all(max_connections(clusters.get(name, {})) == 20 for name in mesh.app_clusters)

    wait_until(app_updated, "app's clusters to warm with the new connection pool (on their assignments)")
    assert envoy.warming_clusters() == []
    change = mesh.since(before)
    clusters = envoy.active_clusters()

    # CDS: one response; Envoy modified app's three clusters (service and subsets), nothing else
    assert change.grew("cluster_manager.cds.update_attempt") == 1
    counted = {what: change.grew(f"cluster_manager.cluster_{what}") for what in ("added", "modified", "removed")}
    assert counted == {"added": 0, "modified": 3, "removed": 0}
    (carried,) = change.cds_responses()
    if api_type == "DELTA_GRPC":
        assert carried == (3, 0), "a Delta CDS response carries the changed clusters only"
    else:
        assert carried[0] == len(clusters_before), "a SotW CDS response holds every cluster"
    for name, cluster in clusters.items():
        if name in mesh.app_clusters:
            assert cluster["outlier_detection"]["consecutive_5xx"] == 6, cluster
        else:
            assert cluster == clusters_before[name], f"{name} changed"

    # EDS: the three re-sent clusters got their (unchanged) assignments, which warmed them; no
    # other cluster heard of EDS, over SotW too (a SotW EDS response naming some assignments
    # leaves the others as they are)
    assert set(change.eds("update_success")) >= mesh.app_clusters
    assert set(change.eds("membership_change")) == mesh.app_clusters  # the new cluster objects' hosts
    assert set(change.eds("update_attempt")) == mesh.app_clusters

    # LDS and RDS: nothing sent, not even an empty response
    lds_responses = change.grew("listener_manager.lds.update_attempt")
    assert (lds_responses, change.rds_responses()) == (0, 0)
    assert change.grew("listener_manager.listener_modified") == 0
    assert change.pilotfish_responses() == ({"cds", "eds"}, 2), "pilotfish sent one CDS and one EDS response"

    assert_traffic_reaches(mesh, {"v1", "v2"})
    assert envoy.xds_stream() == stream, "the xDS stream was re-established"
    envoy.assert_nothing_rejected()


# --- endpoint change -----------------------------------------------------------------------------


def add_app_pod(mesh: Mesh) -> None:
    """As Kubernetes does: the new pod first, then the service's EndpointSlice naming it too."""
    port = mesh.backends.port
    mesh.config.render(
        "incremental/pod.yaml",
        f"app-{NEW_POD}.yaml",
        pod=NEW_POD,
        version=NEW_POD_VERSION,
        address=NEW_POD_ADDRESS,
        target_port=port,
    )
    pods = {**PODS, NEW_POD: NEW_POD_ADDRESS}
    endpoints = [
        {
            "addresses": [address],
            "conditions": {"ready": True},
            "targetRef": {"kind": "Pod", "name": f"app-{name}", "namespace": "default"},
        }
        for name, address in pods.items()
    ]
    mesh.config.render(
        "kubernetes/endpointslice.yaml",
        "app-endpointslice.yaml",
        namespace="default",
        target_port=port,
        endpoints=json.dumps(endpoints),
    )


def test_new_endpoint_updates_only_the_assignments_it_changes(mesh: Mesh, api_type: str) -> None:
    envoy = mesh.envoy
    before = mesh.snapshot()
    stream = envoy.xds_stream()
    hosts_before = envoy.cluster_hosts()

    add_app_pod(mesh)
    wait_until(routed_to(mesh.port, NEW_POD, host=APP), "the new pod to get traffic")
    change = mesh.since(before)

    # the new pod joins the service's cluster and subset v1's; v2 and the other services keep theirs
    new_host = f"{NEW_POD_ADDRESS}:{mesh.backends.port}"
    hosts = envoy.cluster_hosts()
    assert new_host in hosts[mesh.cluster()]
    assert new_host in hosts[mesh.cluster("v1")]
    assert new_host not in hosts[mesh.cluster("v2")]
    changed = {mesh.cluster(), mesh.cluster("v1")}
    assert set(change.eds("membership_change")) == changed
    # Delta: only the two assignments whose content changed; SotW, which has no per-resource
    # versions: the service's three, and no other service's. The others keep their hosts
    sent = changed if api_type == "DELTA_GRPC" else mesh.app_clusters
    assert change.eds("update_success") == dict.fromkeys(sent, 1)
    assert set(change.eds("update_attempt")) == sent
    assert {n: h for n, h in hosts.items() if n not in changed} == {
        n: h for n, h in hosts_before.items() if n not in changed
    }

    # no CDS, LDS or RDS at all: the pod has app's service account, so no identity changed
    counted = {what: change.grew(f"cluster_manager.{what}") for what in ("cds.update_attempt", "cluster_modified")}
    assert counted == {"cds.update_attempt": 0, "cluster_modified": 0}
    assert change.cds_responses() == []
    lds_responses = change.grew("listener_manager.lds.update_attempt")
    assert (lds_responses, change.rds_responses()) == (0, 0)
    assert change.pilotfish_responses() == ({"eds"}, 1), "pilotfish sent one EDS response"

    assert_traffic_reaches(mesh, {"v1", "v2", NEW_POD}, count=30)
    assert envoy.xds_stream() == stream, "the xDS stream was re-established"
    envoy.assert_nothing_rejected()


# --- what Envoy needs to warm a modified EDS cluster (no pilotfish) --------------------------------

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
LDS = "type.googleapis.com/envoy.config.listener.v3.Listener"
ADS = "envoy.service.discovery.v3.AggregatedDiscoveryService"


def eds_cluster(name: str, initial_fetch_timeout: int, connect_timeout: int) -> cluster_pb2.Cluster:
    """An EDS cluster over ADS, as pilotfish builds one but for the EDS initial fetch timeout (s)."""
    cluster = cluster_pb2.Cluster(name=name, type=cluster_pb2.Cluster.EDS)
    cluster.connect_timeout.FromSeconds(connect_timeout)
    source = cluster.eds_cluster_config.eds_config
    source.ads.SetInParent()
    source.resource_api_version = config_source_pb2.V3
    source.initial_fetch_timeout.FromSeconds(initial_fetch_timeout)
    return cluster


def assignment(name: str) -> endpoint_pb2.ClusterLoadAssignment:
    cla = endpoint_pb2.ClusterLoadAssignment(cluster_name=name)
    address = cla.endpoints.add().lb_endpoints.add().endpoint.address.socket_address
    address.address, address.port_value = "127.0.0.9", 9
    return cla


def _resource_name(msg: Message) -> str:
    return str(getattr(msg, "name", "") or getattr(msg, "cluster_name", ""))


class ScriptedAds:
    """A bare ADS server (SotW and Delta) whose every response the test decides. It answers the
    first request of each type with ``initial``; after that it sends only what ``push`` hands it
    (no endpoints follow clusters unless pushed) and answers no request. It records every request.
    Runs in its own thread and event loop, so the test may block."""

    def __init__(self, initial: Mapping[str, Sequence[Message]]) -> None:
        self._initial = dict(initial)
        self.requests: list[Any] = []  # DiscoveryRequest / DeltaDiscoveryRequest, as received
        self._streams: list[asyncio.Queue[tuple[str, Sequence[Message]]]] = []
        self._nonces = itertools.count(1)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="scripted-ads", daemon=True)
        self._server: Any = None
        self.port = 0

    def start(self) -> ScriptedAds:
        self._thread.start()
        self.port = self._call(self._start())
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    def push(self, type_url: str, resources: Sequence[Message]) -> None:
        """Send ``resources`` of ``type_url`` on the one open stream."""
        self._call(self._push(type_url, resources))

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    async def _start(self) -> int:
        server = grpc.aio.server()
        handlers = {
            "StreamAggregatedResources": grpc.stream_stream_rpc_method_handler(
                self._serve_sotw,
                request_deserializer=discovery_pb2.DiscoveryRequest.FromString,
                response_serializer=discovery_pb2.DiscoveryResponse.SerializeToString,
            ),
            "DeltaAggregatedResources": grpc.stream_stream_rpc_method_handler(
                self._serve_delta,
                request_deserializer=discovery_pb2.DeltaDiscoveryRequest.FromString,
                response_serializer=discovery_pb2.DeltaDiscoveryResponse.SerializeToString,
            ),
        }
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(ADS, handlers)])
        port: int = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self._server = server
        return port

    async def _stop(self) -> None:
        if self._server is not None:
            await self._server.stop(0)

    async def _push(self, type_url: str, resources: Sequence[Message]) -> None:
        (stream,) = self._streams
        stream.put_nowait((type_url, resources))

    # grpc.aio takes a handler for a coroutine function only when it is one (inspect), not a lambda
    async def _serve_sotw(self, requests: AsyncIterator[Any], context: Any) -> None:
        await self._serve(requests, context, delta=False)

    async def _serve_delta(self, requests: AsyncIterator[Any], context: Any) -> None:
        await self._serve(requests, context, delta=True)

    async def _serve(self, requests: AsyncIterator[Any], context: Any, *, delta: bool) -> None:
        out: asyncio.Queue[tuple[str, Sequence[Message]]] = asyncio.Queue()
        self._streams.append(out)
        answered: set[str] = set()

        async def read() -> None:
            async for request in requests:
                self.requests.append(request)
                if request.type_url not in answered:
                    answered.add(request.type_url)
                    out.put_nowait((request.type_url, self._initial.get(request.type_url, ())))

        reader = asyncio.create_task(read())
        try:
            while True:
                type_url, resources = await out.get()
                await context.write(self._response(type_url, resources, delta=delta))
        finally:
            reader.cancel()
            self._streams.remove(out)

    def _response(self, type_url: str, resources: Sequence[Message], *, delta: bool) -> Any:
        nonce = str(next(self._nonces))
        if delta:
            response = discovery_pb2.DeltaDiscoveryResponse(type_url=type_url, nonce=nonce, system_version_info=nonce)
            for msg in resources:
                response.resources.add(name=_resource_name(msg), version=nonce).resource.Pack(msg)
            return response
        sotw = discovery_pb2.DiscoveryResponse(type_url=type_url, nonce=nonce, version_info=nonce)
        for msg in resources:
            sotw.resources.add().Pack(msg)
        return sotw


@contextmanager
def run_bare_envoy(xds_port: int, api_type: str, workdir: Path) -> Iterator[Envoy]:
    """An Envoy on ADS to any server on ``xds_port`` (CDS and LDS over ADS, as run_envoy's)."""
    admin_port = free_port()
    bootstrap = agent_bootstrap(
        "sidecar~127.0.0.1~bare-1.default~default.svc.cluster.local",
        api_type=api_type,
        xds_port=xds_port,
        admin_port=admin_port,
        sds_path=str(workdir / f"sds-{admin_port}.sock"),
        dynamic=True,
    )
    config = workdir / f"envoy-{admin_port}.json"
    config.write_text(json.dumps(bootstrap))
    log_path = workdir / f"envoy-{admin_port}.log"
    argv = [envoy_binary(), "-c", str(config), "--use-dynamic-base-id", "--log-level", "info", "--concurrency", "1"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    envoy = Envoy(f"envoy on a scripted ADS server, {api_type}", process, log_path)
    envoy.admin_port = admin_port
    LIVE[process.pid] = envoy
    try:
        envoy.wait_ready(admin_port, "Envoy to get its first CDS and LDS and go LIVE", timeout=30)
        yield envoy
        assert envoy.alive(), f"Envoy died during the test\n{envoy.describe()}"
        envoy.assert_nothing_rejected()
    finally:
        envoy.stop()


@pytest.fixture
def scripted_ads() -> Iterator[ScriptedAds]:
    # c0's endpoints are fetched with no timeout, as pilotfish and istiod build every EDS cluster;
    # c1's give up after 1s
    initial = {
        CDS: [eds_cluster("c0", 0, connect_timeout=1), eds_cluster("c1", 1, connect_timeout=1)],
        EDS: [assignment("c0"), assignment("c1")],
        LDS: [],
    }
    ads = ScriptedAds(initial).start()
    try:
        yield ads
    finally:
        ads.stop()


def test_envoy_warms_a_modified_eds_cluster_only_on_an_assignment_sent_after_it(
    scripted_ads: ScriptedAds, api_type: str, tmp_path: Path
) -> None:
    ads = scripted_ads
    with run_bare_envoy(ads.port, api_type, tmp_path) as envoy:
        wait_until(lambda: set(envoy.active_clusters()) == {"c0", "c1"}, "both clusters, warm")
        stats = envoy.stats()
        assert (stats["cluster.c0.update_success"], stats["cluster.c1.update_success"]) == (1, 1)
        asked = len(ads.requests)

        # both clusters modified, no assignment after them
        ads.push(CDS, [eds_cluster("c0", 0, connect_timeout=2), eds_cluster("c1", 1, connect_timeout=2)])

        # c1 gives up waiting after 1s and warms from the assignment Envoy cached (EdsResourcesCache)
        def c1_warmed_from_cache() -> bool:
            return envoy.stats()["cluster.c1.assignment_use_cached"] == 1 and envoy.warming_clusters() == ["c0"]

        wait_until(c1_warmed_from_cache, "c1 to warm from the cached assignment", timeout=20)
        stats = envoy.stats()
        assert stats["cluster_manager.cluster_modified"] == 2
        # c0 never times out, so never uses the cache: it is still warming, the old c0 still serves
        assert (stats["cluster.c0.init_fetch_timeout"], stats["cluster.c0.assignment_use_cached"]) == (0, 0)
        assert envoy.active_clusters()["c0"]["connect_timeout"] == "1s"
        # and Envoy asked for nothing new: a server waiting to be asked leaves c0 warming for ever
        eds_requests = [r for r in ads.requests[asked:] if r.type_url == EDS]
        if api_type == "DELTA_GRPC":
            assert all(not r.resource_names_subscribe for r in eds_requests), eds_requests
        else:
            # the same names again: by the xDS rules an ACK, nothing to answer
            assert all(set(r.resource_names) == {"c0", "c1"} for r in eds_requests), eds_requests

        # c0's own assignment, alone, warms it (over SotW too: the EDS response need not repeat c1's)
        ads.push(EDS, [assignment("c0")])
        wait_until(lambda: not envoy.warming_clusters(), "c0 to warm on its assignment")
        clusters = envoy.active_clusters()
        assert {name: c["connect_timeout"] for name, c in clusters.items()} == {"c0": "2s", "c1": "2s"}
        assert envoy.cluster_hosts()["c1"] == {"127.0.0.9:9"}, "c1 kept its endpoints"
