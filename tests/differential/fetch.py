"""One ADS stream to a control plane, as Envoy opens it (bench/ads_client.py's SotW client: CDS
wildcard, EDS for the EDS clusters, LDS, RDS for the listeners' routes, every response ACKed),
until the proxy is initialised and the server has said nothing more for a quiet spell; what it
holds then, per type, by resource name."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import any_pb2

from bench.ads_client import SHORT, Inspector, SotwAdsClient
from tests.differential.normalize import decode

QUIET = 1.0  # seconds without a response after initialisation: the server has sent everything
TIMEOUT = 60.0

Resources = dict[str, dict[str, any_pb2.Any]]  # "cds" / "eds" / "lds" / "rds" / "nds" -> name -> resource


def _name(type_url: str, resource: any_pb2.Any) -> str:
    """A resource's name (a ClusterLoadAssignment's is its cluster_name)."""
    message: Any = decode(resource)
    short = SHORT[type_url]
    return "" if short == "nds" else str(message.cluster_name if short == "eds" else message.name)


async def fetch(address: str, node: base_pb2.Node, agent: bool = False) -> Resources:
    """CDS, EDS, LDS and RDS for ``node`` from the ADS server at ``address`` (plaintext), and NDS
    when it is an ``agent`` (pilot-agent with DNS capture asks for the name table)."""
    client = SotwAdsClient(node, Inspector(), agent)
    outbox: asyncio.Queue[discovery_pb2.DiscoveryRequest | None] = asyncio.Queue()
    held: Resources = {}

    async def requests() -> AsyncIterator[discovery_pb2.DiscoveryRequest]:
        while (request := await outbox.get()) is not None:
            yield request

    for request in client.start():
        outbox.put_nowait(request)
    async with grpc.aio.insecure_channel(address) as channel:
        stream = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources(requests())
        deadline = time.monotonic() + TIMEOUT
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{address}: no complete config in {TIMEOUT:.0f}s (has {sorted(held)})")
                wait = min(QUIET, left) if client.complete else left
                try:
                    response = await asyncio.wait_for(stream.read(), wait)
                except TimeoutError:
                    if client.complete:
                        return held
                    continue
                if response is grpc.aio.EOF:
                    raise AssertionError(f"{address} ended the stream")
                short = SHORT[response.type_url]
                held[short] = {_name(response.type_url, r): r for r in response.resources}
                for request in client.on_response(response)[1]:
                    outbox.put_nowait(request)
        finally:
            outbox.put_nowait(None)
            stream.cancel()
