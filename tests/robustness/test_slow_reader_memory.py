"""A client that stops reading and keeps sending: what the server holds of its requests is
bounded in bytes, not only in count.

The reader of a stream takes requests until the stream falls behind (app/xds/server.py
``read_requests``). Bounded by count alone (64), a client that never reads its answer (so the
stream waits on the write) and sends 4 MiB requests made the server hold 64 of them, parsed:
four such streams took a server from 80 MB to 3.4 GB within the send timeout. Now the reader also
stops once the requests it took since the stream last caught up reach MAX_QUEUED_BYTES (istiod's
request channel holds one request), and HTTP/2 flow control holds the client back."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest_asyncio
from envoy.service.discovery.v3 import discovery_pb2

from app.runtime import Runtime
from app.settings import Settings
from app.xds.server import MAX_QUEUED_BYTES
from app.xds.type_urls import ENDPOINT
from tests.robustness.serving import Client, with_node
from tests.support.bookinfo import BOOKINFO, NODE
from tests.support.runtime import running

# a client whose receive window stays at gRPC's 64 KiB (no BDP growth), sending up to 4 MiB
NEVER_READS = [("grpc.http2.bdp_probe", 0), ("grpc.max_send_message_length", 8 * 1024 * 1024)]


@pytest_asyncio.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    shutil.copytree(BOOKINFO, tmp_path / "config")
    settings = Settings(
        config_dir=tmp_path / "config",
        xds_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        xds_send_timeout=60.0,  # the stream stays while the test looks at it
        gc_freeze=False,
        shutdown_grace=1.0,
    )
    async with running(settings) as rt:
        yield rt


def queued(runtime: Runtime) -> int:
    """The requests the stream has taken and not handled yet (it has no push to write)."""
    [stream] = runtime.xds.streams.values()
    return stream.inbox.qsize()


async def test_a_client_that_never_reads_cannot_make_the_server_hold_its_requests(runtime: Runtime) -> None:
    node = NODE.replace("productpage", "never-reads")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}", options=NEVER_READS) as channel:
        client = Client(channel, delta=False)
        # 5,000 assignments: about 300 KB, far past the client's window: the stream waits on it
        names = [f"outbound|80||s{i}.nowhere.svc.cluster.local" for i in range(5_000)]
        await client.send(with_node(discovery_pb2.DiscoveryRequest(type_url=ENDPOINT, resource_names=names), node))
        # then requests of 3.5 MB each (a node the stream no longer reads, as every request may carry)
        labels = {f"k{i}": "v" * 30 for i in range(80_000)}
        big = with_node(discovery_pb2.DiscoveryRequest(type_url=ENDPOINT), node, labels)
        sent = 0

        async def flood() -> None:
            nonlocal sent
            for _ in range(20):
                await client.send(big)
                sent += 1

        sender = asyncio.create_task(flood())
        await asyncio.sleep(3)
        held = queued(runtime) * big.ByteSize()
        sender.cancel()
        client.close()
    assert sent >= 1  # the server took some: it is the reader that stopped
    assert held <= MAX_QUEUED_BYTES + big.ByteSize(), f"{held:,} bytes of requests queued"
    assert sent < 20  # flow control holds the client back
