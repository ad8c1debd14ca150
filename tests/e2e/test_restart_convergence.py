"""A change made while pilotfish was down reaches Envoy after the restart (issue 24, item 1).

A sleep sidecar reaches ``app`` through its egress listener; app's DestinationRule sets a
connection pool. pilotfish is killed, the rule changes (``maxConnections`` 10 -> 20: app's three
EDS clusters are modified, their endpoints are not), pilotfish starts again on the same ports
and Envoy reconnects, presenting what it holds (Delta ``initial_resource_versions``; SotW the old
stream's versions and nonces). The modified clusters must become active, not stay warming, and
traffic must flow: Envoy warms a modified EDS cluster only on an assignment sent after it, and
with ``initial_fetch_timeout: 0s`` waits for it for ever (test_incremental_push.py, last test).

Three ways in, SotW and Delta each where they exist:

* Envoy straight to pilotfish (Envoy asks CDS first, then EDS: the EDS answer must carry the
  endpoints it already has, unchanged, since the clusters it is about to warm need them);
* through a relay that holds the reconnect's first CDS request until the EDS request was
  answered, so the clusters come after their endpoints and pilotfish must send them again;
* through ``pilotfish agent`` (Delta, as its bootstrap): Envoy's stream to the agent stays up and
  the agent replays Envoy's interest, with the versions Envoy holds, on its new upstream stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from envoy.service.discovery.v3 import discovery_pb2

from tests.e2e.backends import Backends
from tests.e2e.conftest import StartBackends
from tests.e2e.harness import ConfigDir, KubernetesRegistration, backends_seen, free_port, routed_to, wait_until
from tests.e2e.processes import SIDECAR, Envoy, Pilotfish, _spawn, http_get, run_pilotfish
from tests.e2e.test_agent import FakeResolver, run_agent
from tests.support.envoy import agent_bootstrap, envoy_binary

APP = "app.default.svc.cluster.local"
PODS = {"v1": "127.0.0.71", "v2": "127.0.0.72"}
CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
ADS = "envoy.service.discovery.v3.AggregatedDiscoveryService"
RELEASE_AFTER = 2.0  # seconds the relay holds a CDS request back when no EDS response comes

T = TypeVar("T")


@dataclass(frozen=True)
class Mesh:
    config: ConfigDir
    backends: Backends
    port: int  # the egress listener's and app's

    @property
    def app_clusters(self) -> set[str]:
        return {f"outbound|{self.port}|{subset}|{APP}" for subset in ("", "v1", "v2")}

    def write_rule(self, max_connections: int) -> None:
        self.config.render(
            "incremental/app-destinationrule.yaml",
            "app-destinationrule.yaml",
            max_connections=max_connections,
            consecutive_5xx=5,
        )


@pytest.fixture
def mesh(config_dir: ConfigDir, start_backends: StartBackends) -> Mesh:
    backends = start_backends(PODS)
    port = free_port()
    KubernetesRegistration(PODS, cluster_ip="10.96.7.1", service_port=port).write(config_dir, backends.port)
    config_dir.render("sidecar/sidecar.yaml", egress_port=port)
    found = Mesh(config_dir, backends, port)
    found.write_rule(max_connections=10)
    return found


def app_settled(envoy: Envoy, mesh: Mesh, max_connections: int) -> bool:
    """Every app cluster active with ``max_connections``, none warming."""
    active = envoy.active_clusters()
    warming = set(envoy.warming_clusters())
    return not (warming & mesh.app_clusters) and all(
        name in active
        and active[name].get("circuit_breakers", {}).get("thresholds", [{}])[0].get("max_connections")
        == max_connections
        for name in mesh.app_clusters
    )


def converged_after_restart(envoy: Envoy, mesh: Mesh) -> None:
    """What every variant checks once pilotfish is back: the rule changed while it was down is
    in force in Envoy (no app cluster left warming) and traffic reaches app."""

    def settled() -> bool:
        return app_settled(envoy, mesh, 20)

    try:
        wait_until(settled, "the clusters modified while pilotfish was down to be active, none warming")
    except AssertionError as e:
        warming = envoy.warming_clusters()
        raise AssertionError(f"{e}\nstill warming: {warming}") from None
    seen = backends_seen(mesh.port, 10, host=APP)
    assert set(seen) <= set(PODS), f"a request found no backend: {seen}"


def crash(server: Pilotfish) -> None:
    """SIGKILL: pilotfish is gone without a goodbye (no GOAWAY, streams just break)."""
    server.kill()
    server.returncode = server.process.returncode  # run_pilotfish's exit check: killed on purpose


@contextmanager
def run_sidecar(xds_port: int, api_type: str, workdir: Path) -> Iterator[Envoy]:
    """The sleep sidecar's Envoy (as run_envoy) on ADS to whatever serves ``xds_port``."""
    admin_port = free_port()
    bootstrap = agent_bootstrap(
        SIDECAR.node_id,
        node_cluster=SIDECAR.cluster,
        node_metadata=SIDECAR.metadata,
        api_type=api_type,
        xds_port=xds_port,
        admin_port=admin_port,
        sds_path=str(workdir / f"sds-{admin_port}.sock"),
        dynamic=True,
    )
    config = workdir / f"envoy-{admin_port}.json"
    config.write_text(json.dumps(bootstrap, indent=2))
    argv = [envoy_binary(), "-c", str(config), "--use-dynamic-base-id", "--log-level", "info", "--concurrency", "1"]
    envoy = _spawn(Envoy, f"envoy sidecar {api_type}", argv, workdir / f"envoy-{admin_port}.log")
    envoy.admin_port = admin_port
    try:
        envoy.wait_ready(admin_port, "Envoy to get its first CDS and LDS and go LIVE", timeout=45)
        yield envoy
        assert envoy.alive(), f"Envoy died during the test\n{envoy.describe()}"
        envoy.assert_nothing_rejected()
    finally:
        envoy.stop()


# --- a relay that makes the reconnect ask EDS before CDS ------------------------------------------


class EdsFirstRelay:
    """An ADS relay (SotW and Delta; its own thread and event loop) between Envoy and pilotfish.
    Every stream after the first holds Envoy's first CDS request until an EDS response has gone
    down to Envoy (or ``RELEASE_AFTER`` seconds, if none comes), so the reconnect's clusters come
    after their endpoints. A broken upstream
    ends Envoy's stream (UNAVAILABLE), as pilot-agent does; Envoy then opens another."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream = f"127.0.0.1:{upstream_port}"
        self._streams = itertools.count(1)
        self.held: list[int] = []  # the streams whose first CDS request was held back
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="eds-first-relay", daemon=True)
        self._server: Any = None
        self.port = 0

    def __enter__(self) -> EdsFirstRelay:
        self._thread.start()
        self.port = self._call(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    async def _start(self) -> int:
        server = grpc.aio.server()
        methods = {}
        for name, req, resp in (
            ("StreamAggregatedResources", discovery_pb2.DiscoveryRequest, discovery_pb2.DiscoveryResponse),
            ("DeltaAggregatedResources", discovery_pb2.DeltaDiscoveryRequest, discovery_pb2.DeltaDiscoveryResponse),
        ):
            methods[name] = grpc.stream_stream_rpc_method_handler(
                self._handler(f"/{ADS}/{name}", req, resp),
                request_deserializer=req.FromString,
                response_serializer=resp.SerializeToString,
            )
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(ADS, methods)])
        port: int = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self._server = server
        return port

    async def _stop(self) -> None:
        if self._server is not None:
            await self._server.stop(0)

    def _handler(self, method: str, req_type: Any, resp_type: Any) -> Any:
        async def handle(requests: AsyncIterator[Any], context: Any) -> None:
            await self._relay(method, req_type, resp_type, requests, context)

        return handle

    async def _relay(
        self, method: str, req_type: Any, resp_type: Any, requests: AsyncIterator[Any], context: Any
    ) -> None:
        stream = next(self._streams)
        hold = stream > 1
        held: list[Any] = []
        up: asyncio.Queue[Any] = asyncio.Queue()
        async with grpc.aio.insecure_channel(self._upstream) as channel:
            call = channel.stream_stream(
                method, request_serializer=req_type.SerializeToString, response_deserializer=resp_type.FromString
            )()

            def release() -> None:
                if held:
                    up.put_nowait(held.pop())

            async def read_envoy() -> None:
                nonlocal hold
                node = None  # Envoy sends its node once, in the stream's first request
                async for req in requests:
                    if hold and req.type_url == CDS:
                        held.append(req)
                        self.held.append(stream)
                        hold = False
                        # no EDS answer at all (a server that sends nothing new): the clusters go anyway
                        asyncio.get_running_loop().call_later(RELEASE_AFTER, release)
                        node = req.node if req.HasField("node") else None
                    else:
                        if node is not None:  # the first request upstream carries it
                            req.node.CopyFrom(node)
                            node = None
                        up.put_nowait(req)

            async def write_upstream() -> None:
                with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                    while True:
                        await call.write(await up.get())

            tasks = [asyncio.create_task(read_envoy()), asyncio.create_task(write_upstream())]
            try:
                async for resp in call:
                    await context.write(resp)
                    if resp.type_url == EDS:
                        release()  # the clusters now come after their endpoints
            except grpc.aio.AioRpcError as e:
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"upstream: {e.code().name}")
            finally:
                for task in tasks:
                    task.cancel()
                call.cancel()


# --- the tests -----------------------------------------------------------------------------------


def restart_with_changed_rule(
    mesh: Mesh, server: Pilotfish, workdir: Path
) -> contextlib.AbstractContextManager[Pilotfish]:
    """Kill pilotfish, change the rule while it is down, and start it again on the same ports;
    the context is the new server."""
    crash(server)
    mesh.write_rule(max_connections=20)
    workdir.mkdir()
    return run_pilotfish(mesh.config, workdir, ports=(server.xds_port, server.http_port))


def test_a_rule_changed_while_pilotfish_was_down_is_in_force_after_the_restart(
    mesh: Mesh, api_type: str, tmp_path: Path
) -> None:
    with (
        run_pilotfish(mesh.config, tmp_path) as server,
        run_sidecar(server.xds_port, api_type, tmp_path) as envoy,
    ):
        wait_until(lambda: app_settled(envoy, mesh, 10), "app's clusters, warm")
        wait_until(routed_to(mesh.port, "v1", host=APP), "traffic to app")
        _, _, streams = envoy.xds_stream()
        with restart_with_changed_rule(mesh, server, tmp_path / "again"):
            converged_after_restart(envoy, mesh)
            assert envoy.xds_stream()[2] > streams, "Envoy did not reconnect"


def test_the_same_when_the_reconnect_asks_for_endpoints_before_clusters(
    mesh: Mesh, api_type: str, tmp_path: Path
) -> None:
    with (
        run_pilotfish(mesh.config, tmp_path) as server,
        EdsFirstRelay(server.xds_port) as relay,
        run_sidecar(relay.port, api_type, tmp_path) as envoy,
    ):
        wait_until(lambda: app_settled(envoy, mesh, 10), "app's clusters, warm")
        wait_until(routed_to(mesh.port, "v1", host=APP), "traffic to app")
        with restart_with_changed_rule(mesh, server, tmp_path / "again"):
            converged_after_restart(envoy, mesh)
            assert relay.held, "no reconnect had its CDS request held back: the order was not tested"


def test_the_same_through_pilotfish_agent(mesh: Mesh, tmp_path: Path) -> None:
    resolver = FakeResolver()
    try:
        with (
            run_pilotfish(mesh.config, tmp_path) as server,
            run_agent(server.xds_port, resolver, tmp_path / "pod") as agent,
        ):
            ready = f"http://127.0.0.1:{agent.status_port}/healthz/ready"
            wait_until(lambda: http_get(ready, timeout=2)[0] == 200, "the agent's /healthz/ready")
            wait_until(lambda: app_settled(agent, mesh, 10), "app's clusters, warm")
            wait_until(routed_to(mesh.port, "v1", host=APP), "traffic to app")
            stream = agent.xds_stream()
            crash(server)
            mesh.write_rule(max_connections=20)
            (tmp_path / "again").mkdir()
            with run_pilotfish(mesh.config, tmp_path / "again", ports=(server.xds_port, server.http_port)):
                converged_after_restart(agent, mesh)
                assert agent.xds_stream() == stream, "Envoy's stream to the agent was re-opened"
    finally:
        resolver.close()
