"""One proxy's config fetched from a control plane (istiod or pilotfish) over one plaintext ADS
stream, as Envoy opens it (app/xds/client.py's SotW client: CDS wildcard, EDS for the EDS
clusters, LDS, RDS for the listeners' routes, NDS for an agent, every response ACKed), until the
proxy is initialised and the server has said nothing more for a quiet spell; what it holds then,
per type, by resource name. For ``pilotfish compare-istiod`` and the differential test."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import any_pb2

from app.errors import PilotfishError
from app.xds.client import SHORT, Inspector, SotwAdsClient
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, ROUTE

QUIET = 1.0  # seconds without a response after initialisation: the server has sent everything
TIMEOUT = 60.0

Resources = dict[str, dict[str, any_pb2.Any]]  # "cds" / "eds" / "lds" / "rds" / "nds" -> name -> resource


_NAMED: dict[str, Any] = {
    CLUSTER: cluster_pb2.Cluster,
    LISTENER: listener_pb2.Listener,
    ROUTE: route_pb2.RouteConfiguration,
}


class FetchError(PilotfishError):
    """The control plane ended the stream, or sent no complete config in time."""


def _name(type_url: str, resource: any_pb2.Any) -> str:
    """A resource's name (a ClusterLoadAssignment's is its cluster_name; the name table has none)."""
    if type_url == ENDPOINT:
        return str(endpoint_pb2.ClusterLoadAssignment.FromString(resource.value).cluster_name)
    named = _NAMED.get(type_url)
    return "" if named is None else str(named.FromString(resource.value).name)


async def fetch(address: str, node: base_pb2.Node, agent: bool = False, timeout: float = TIMEOUT) -> Resources:
    """CDS, EDS, LDS and RDS for ``node`` from the ADS server at ``address`` (plaintext), and NDS
    when it is an ``agent`` (pilot-agent with DNS capture asks for the name table). Raises
    FetchError when the server ends the stream or the config is not complete in ``timeout``."""
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
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise FetchError(f"{address}: no complete config in {timeout:.0f}s (has {sorted(held)})")
                wait = min(QUIET, left) if client.complete else left
                try:
                    response = await asyncio.wait_for(stream.read(), wait)
                except TimeoutError:
                    if client.complete:
                        return held
                    continue
                if response is grpc.aio.EOF:
                    raise FetchError(f"{address} ended the stream")
                short = SHORT[response.type_url]
                held[short] = {_name(response.type_url, r): r for r in response.resources}
                for request in client.on_response(response)[1]:
                    outbox.put_nowait(request)
        except grpc.aio.AioRpcError as e:
            raise FetchError(f"{address}: {e.code().name}: {e.details()}") from None
        finally:
            outbox.put_nowait(None)
            stream.cancel()
