"""NACKs with huge messages over real gRPC: what the server keeps of a NACK is bounded.

Envoy cuts its rejection message to 4,096 characters (Config::Utility::truncateGrpcStatusMessage)
before it sends it, but a client may send a 4 MiB one. Every NACK is logged, kept on its watch,
listed in /debug/rejections' latest NACKs and carried by push traces: uncut, 100 NACKs of 4 MiB
on one stream left the server holding 400 MiB after the stream had gone (the latest rejections
outlive their stream) and wrote 400 MiB of log. The message is cut as the request is parsed
(app/xds/limits.py ``cut_error_detail``), as Envoy cuts it, and each NACK is still logged once,
naming the proxy."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from envoy.service.discovery.v3 import discovery_pb2
from google.rpc import status_pb2

from app.runtime import Runtime
from app.xds.limits import MAX_ERROR_DETAIL
from app.xds.type_urls import CLUSTER
from tests.robustness.serving import Client, get_json, serving, with_node
from tests.support.bookinfo import BOOKINFO, NODE

BIG = [("grpc.max_send_message_length", 8 * 1024 * 1024)]
# what a kept NACK message may take: Envoy's bound and the "...(truncated)" it appends
KEPT = MAX_ERROR_DETAIL + len("...(truncated)")


@pytest_asyncio.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    shutil.copytree(BOOKINFO, tmp_path / "config")
    async with serving(tmp_path / "config") as rt:
        yield rt


def nack(nonce: str, message: str) -> discovery_pb2.DiscoveryRequest:
    return discovery_pb2.DiscoveryRequest(
        type_url=CLUSTER, response_nonce=nonce, error_detail=status_pb2.Status(code=13, message=message)
    )


async def test_nacks_of_mebibytes_are_kept_and_logged_cut_as_envoy_cuts_them(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}", options=BIG) as channel:
        client = Client(channel, delta=False)
        await client.send(with_node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER), NODE))
        first = await client.recv()
        envoy_sized = "e" * KEPT  # what a real Envoy sends at most: kept whole
        with caplog.at_level(logging.WARNING):
            await client.send(nack(first.nonce, envoy_sized))
            for i in range(20):
                await client.send(nack(first.nonce, f"{i}:" + "x" * (1024 * 1024)))
            await client.send(with_node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER), NODE))
            stream = next(s for s in runtime.xds.streams.values() if s.connection.client.id in NODE)
            watch = stream.connection.session.watches[CLUSTER]
            for _ in range(200):
                if watch.nacks == 21:
                    break
                await asyncio.sleep(0.05)
            assert watch.nacks == 21
            assert watch.last_error == "19:" + "x" * (MAX_ERROR_DETAIL - 3) + "...(truncated)"
        client.close()
    logged = [r.getMessage() for r in caplog.records if "NACK from" in r.getMessage()]
    assert len(logged) == 21  # each NACK once
    assert all(NODE.split("~")[2] in line and len(line) < KEPT + 500 for line in logged)
    assert logged[0].endswith(envoy_sized)
    latest = [r for r in await get_json(runtime, "/debug/rejections") if "NACK from" in r]
    assert len(latest) == 21 and all(len(r) < KEPT + 500 for r in latest)


async def test_the_latest_rejections_name_a_node_of_a_mebibyte_cut(runtime: Runtime) -> None:
    # a node id of the right form whose pod name is a MiB: the entry would keep it whole
    node = NODE.replace("productpage-v1-0", "p" * (1024 * 1024))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}", options=BIG) as channel:
        client = Client(channel, delta=False)
        await client.send(with_node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER), node))
        first = await client.recv()
        await client.send(nack(first.nonce, "rejected"))
        for _ in range(200):
            latest = [r for r in await get_json(runtime, "/debug/rejections") if "NACK from" in r]
            if latest:
                break
            await asyncio.sleep(0.05)
        client.close()
    [entry] = latest
    assert entry.endswith(": rejected") and f"({1024 * 1024 + len('.bookinfo')} characters)" in entry
    assert len(entry) < 500, len(entry)
