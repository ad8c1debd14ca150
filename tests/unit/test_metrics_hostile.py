"""``/metrics`` cannot be grown without bound by what clients send: over real gRPC streams to a real
Runtime, clients that make up node ids, ISTIO_VERSIONs, type URLs and gRPC codes, NACK and send
stale nonces, then leave. istiod keeps a series for each (pilot_xds{version}, pilot_total_xds_rejects
and pilot_xds_expired_nonce by the client's type URL, pilot_xds_cds_reject by node); pilotfish
labels types it does not serve ``other`` and drops a client's series with its last stream."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import aiohttp
import grpc
from envoy.service.discovery.v3 import discovery_pb2
from google.rpc import status_pb2
from prometheus_client.parser import text_string_to_metric_families

from app.runtime import Runtime
from app.telemetry.pilot import MAX_IDLE_VERSIONS
from app.xds.type_urls import CLUSTER
from tests.robustness.serving import Client, serving, with_node
from tests.support.bookinfo import BOOKINFO, NODE

HOSTILE = 10


async def metrics(rt: Runtime) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{rt.http.port}/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


async def hostile_client(channel: grpc.aio.Channel, i: int, delta: bool, long: int = 0) -> Client:
    """A client under a made-up node id and version (``long`` characters longer): a made-up type, a
    stale nonce and a NACK for it, then CDS NACKed with a made-up gRPC code."""
    req_type = discovery_pb2.DeltaDiscoveryRequest if delta else discovery_pb2.DiscoveryRequest
    client = Client(channel, delta)
    made_up = f"type.googleapis.com/made.up.T{i}{delta}"
    pod = f"made-up-{i}-{delta}" + "x" * long
    first = with_node(req_type(type_url=made_up), NODE.replace("productpage-v1-0", pod))
    first.node.metadata.fields["ISTIO_VERSION"].string_value = f"9.{i}.{delta}-made-up" + "x" * long
    await client.send(first)
    await client.send(req_type(type_url=made_up, response_nonce="stale"))
    nack = status_pb2.Status(code=100 + i, message=f"made-up {i}")
    await client.send(req_type(type_url=made_up, response_nonce="never-sent", error_detail=nack))
    await client.send(req_type(type_url=CLUSTER))
    while (resp := await client.recv()).type_url != CLUSTER:
        pass
    await client.send(req_type(type_url=CLUSTER, response_nonce=resp.nonce, error_detail=nack))
    return client


def series(text: str) -> list[tuple[str, dict[str, str]]]:
    return [(s.name, s.labels) for f in text_string_to_metric_families(text) for s in f.samples]


async def test_what_clients_make_up_leaves_no_series_once_they_are_gone(tmp_path: Path) -> None:
    config = tmp_path / "config"
    shutil.copytree(BOOKINFO, config)
    async with serving(config) as rt:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{rt.xds.port}") as channel:
            clients = [await hostile_client(channel, i, delta) for i in range(HOSTILE) for delta in (False, True)]
            clients.append(await hostile_client(channel, HOSTILE, False, long=50_000))
            await asyncio.sleep(0.3)  # the last NACKs are processed
            while_connected = await metrics(rt)
            for client in clients:
                client.close()
            for _ in range(100):
                if not rt.xds.streams:
                    break
                await asyncio.sleep(0.05)
        after = await metrics(rt)
    # while they are connected, their rejections are there, by istiod's names and labels
    assert 'pilot_xds_cds_reject{err="Code(other)",node="made-up-0-False.bookinfo"} 1' in while_connected
    assert f'pilot_total_xds_rejects{{type="cds"}} {2 * HOSTILE + 1}' in while_connected
    assert f'pilot_total_xds_rejects{{type="other"}} {2 * HOSTILE + 1}' in while_connected
    assert f'pilot_xds_expired_nonce{{type="other"}} {2 * HOSTILE + 1}' in while_connected
    # text longer than a name can be is no label value: the long client's node and version
    assert 'pilot_xds_cds_reject{err="Code(other)",node="other"} 1' in while_connected
    assert 'pilot_xds{version="other"} 1' in while_connected
    assert max(len(line) for line in while_connected.splitlines()) < 1000
    # no label value anywhere is what a client made up
    for text in (while_connected, after):
        made_up = [(name, labels) for name, labels in series(text) if "made.up" in str(labels)]
        assert not made_up, made_up
    # once they are gone, nothing names their nodes, and of their versions at most the few
    # kept at 0 (as istiod keeps a version's series once its last stream ended)
    gone = [(name, labels) for name, labels in series(after) if "made-up" in str(labels)]
    assert {name for name, _ in gone} == {"pilot_xds"}, gone
    idle = [labels for name, labels in series(after) if name == "pilot_xds"]
    assert len(idle) == MAX_IDLE_VERSIONS < 2 * HOSTILE + 1, idle
