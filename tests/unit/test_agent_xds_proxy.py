"""The agent's xDS proxy over real streams: a grpclib client plays Envoy on the agent's Unix
socket, a real pilotfish runtime is the control plane, and it is restarted under the proxy."""

from __future__ import annotations

import asyncio
import gc
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from grpclib.client import Channel
from grpclib.const import Cardinality
from grpclib.server import Server

from app.agent.interest import DeltaInterest, SotwInterest
from app.agent.xds_proxy import DELTA_METHOD, SOTW_METHOD, XdsProxy
from app.api.nds import NameTable
from app.runtime import Runtime
from app.settings import Settings
from app.supervise import Backoff
from app.xds.type_urls import CLUSTER, ENDPOINT, NAME_TABLE
from tests.e2e.harness import free_port
from tests.support.bookinfo import BOOKINFO, NODE

WIKI = """
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: wiki, namespace: bookinfo}
spec:
  hosts: [wiki.corp.example]
  addresses: [192.0.2.44]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 192.0.2.44}]
"""


class ControlPlane:
    """A pilotfish runtime on a fixed port, which a test can stop and start again."""

    def __init__(self, config: Path) -> None:
        self.port = free_port()
        self.settings = Settings(
            config_dir=config,
            xds_address=f"127.0.0.1:{self.port}",
            http_address="127.0.0.1:0",
            debounce_after=0.01,
            file_debounce_ms=10,
        )
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        rt = Runtime(self.settings)
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(rt.run(self._stop))
        await asyncio.wait_for(rt.started.wait(), 30)

    async def stop(self) -> None:
        assert self._task is not None
        self._stop.set()
        await asyncio.wait_for(self._task, 15)
        gc.unfreeze()


@pytest.fixture
async def control_plane(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    config = tmp_path / "config"
    shutil.copytree(BOOKINFO, config)
    cp = ControlPlane(config)
    await cp.start()
    yield cp
    if cp._task is not None and not cp._task.done():
        await cp.stop()


async def serve_proxy(proxy: XdsProxy, socket: Path) -> Server:
    server = Server([proxy])
    await server.start(path=str(socket))
    return server


def quick_backoff() -> Backoff:
    return Backoff(initial=0.05, cap=0.2)


async def recv(stream: Any, timeout: float = 20) -> Any:
    return await asyncio.wait_for(stream.recv_message(), timeout)


async def test_delta_stream_survives_a_control_plane_restart_and_gets_what_changed(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    tables: list[NameTable] = []
    proxy = XdsProxy(("127.0.0.1", control_plane.port), on_name_table=tables.append, backoff=quick_backoff)
    server = await serve_proxy(proxy, tmp_path / "XDS")
    async with (
        Channel(path=str(tmp_path / "XDS")) as channel,
        channel.request(DELTA_METHOD, Cardinality.STREAM_STREAM, DeltaDiscoveryRequest, DeltaDiscoveryResponse) as s,
    ):
        first = DeltaDiscoveryRequest(type_url=CLUSTER)
        first.node.id = NODE
        await s.send_message(first)
        cds = await recv(s)
        assert cds.type_url == CLUSTER and cds.resources  # Envoy never sees the agent's NDS
        await s.send_message(DeltaDiscoveryRequest(type_url=CLUSTER, response_nonce=cds.nonce))
        for _ in range(100):
            if tables:
                break
            await asyncio.sleep(0.05)
        assert any(h.startswith("reviews.") for h in tables[-1].table)

        await control_plane.stop()
        (control_plane.settings.config_dir / "wiki.yaml").write_text(WIKI)  # changed while down
        await control_plane.start()
        # the reconnect told the new server what Envoy holds: only the new cluster comes
        pushed = await recv(s)
        assert pushed.type_url == CLUSTER
        assert [r.name for r in pushed.resources] == ["outbound|80||wiki.corp.example"]
        assert proxy.upstream_connects == 2
        for _ in range(100):
            if "wiki.corp.example" in tables[-1].table:
                break
            await asyncio.sleep(0.05)
        assert list(tables[-1].table["wiki.corp.example"].ips) == ["192.0.2.44"]
        # pilot-agent's metrics of the upstream: one stream ended by the restart, one open now
        metrics = proxy.metrics
        assert metrics.upstream_terminations.values == {(("type", "error"),): 1}
        assert metrics.upstream_connected.values == {(): 1}
        assert metrics.requests.values[()] >= 2 and metrics.responses.values[()] >= 3
        text = metrics.render()
        assert "istio_agent_istiod_connection_terminations{type=\"error\"} 1" in text
        await s.cancel()
    server.close()
    await server.wait_closed()


async def test_sotw_requests_and_acks_pass_through(control_plane: ControlPlane, tmp_path: Path) -> None:
    proxy = XdsProxy(("127.0.0.1", control_plane.port), backoff=quick_backoff)
    server = await serve_proxy(proxy, tmp_path / "XDS")
    async with (
        Channel(path=str(tmp_path / "XDS")) as channel,
        channel.request(SOTW_METHOD, Cardinality.STREAM_STREAM, DiscoveryRequest, DiscoveryResponse) as s,
    ):
        first = DiscoveryRequest(type_url=CLUSTER)
        first.node.id = NODE
        await s.send_message(first)
        cds = await recv(s)
        assert cds.type_url == CLUSTER and cds.resources
        ack = DiscoveryRequest(type_url=CLUSTER, version_info=cds.version_info, response_nonce=cds.nonce)
        await s.send_message(ack)
        reviews = "outbound|9080||reviews.bookinfo.svc.cluster.local"
        await s.send_message(DiscoveryRequest(type_url=ENDPOINT, resource_names=[reviews]))
        eds = await recv(s)
        assert eds.type_url == ENDPOINT and len(eds.resources) == 1
        await s.cancel()
    server.close()
    await server.wait_closed()


def test_delta_interest_replays_subscriptions_and_held_versions() -> None:
    interest = DeltaInterest()
    interest.on_request(DeltaDiscoveryRequest(type_url=CLUSTER))
    interest.on_request(DeltaDiscoveryRequest(type_url=ENDPOINT, resource_names_subscribe=["a", "b"]))
    interest.on_request(DeltaDiscoveryRequest(type_url=ENDPOINT, resource_names_unsubscribe=["b"]))
    resp = DeltaDiscoveryResponse(type_url=CLUSTER, removed_resources=["gone"])
    resp.resources.add(name="c1", version="v1")
    interest.on_response(resp)
    cds, eds = interest.replay()
    assert (cds.type_url, list(cds.resource_names_subscribe), dict(cds.initial_resource_versions)) == (
        CLUSTER,
        [],
        {"c1": "v1"},
    )
    assert (eds.type_url, list(eds.resource_names_subscribe)) == (ENDPOINT, ["a"])


def test_sotw_interest_replays_the_last_accepted_version_and_names() -> None:
    interest = SotwInterest()
    interest.on_request(DiscoveryRequest(type_url=ENDPOINT, resource_names=["a"]))
    ack = DiscoveryRequest(type_url=ENDPOINT, resource_names=["a", "b"], version_info="7", response_nonce="n")
    interest.on_request(ack)
    (eds,) = interest.replay()
    assert (list(eds.resource_names), eds.version_info, eds.response_nonce) == (["a", "b"], "7", "")
    assert NAME_TABLE not in {r.type_url for r in interest.replay()}
