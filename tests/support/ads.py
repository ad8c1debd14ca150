"""A Delta ADS stream over grpc.aio that subscribes and ACKs as Envoy does (app/xds/client.py's
DeltaAdsClient), for tests against a running server."""

from __future__ import annotations

import time
from typing import Any

import grpc
from envoy.service.discovery.v3 import discovery_pb2

from app.xds.client import DeltaAdsClient, Inspector

DELTA = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"


class DeltaStream:
    """One stream for ``ident`` (an xDS node); ``last`` is when it last got a response, and
    ``received`` hears of each response before it is answered."""

    def __init__(self, channel: grpc.aio.Channel, ident: Any) -> None:
        self.client = DeltaAdsClient(ident, Inspector())
        self.call = channel.stream_stream(
            DELTA,
            request_serializer=discovery_pb2.DeltaDiscoveryRequest.SerializeToString,
            response_deserializer=discovery_pb2.DeltaDiscoveryResponse.FromString,
        )()
        self.last = time.monotonic()

    def received(self, resp: discovery_pb2.DeltaDiscoveryResponse) -> None:
        """A response arrived (for subclasses to keep what they read)."""

    async def run(self) -> None:
        for request in self.client.start():
            await self.call.write(request)
        while True:
            resp: Any = await self.call.read()
            if resp is grpc.aio.EOF:
                return
            self.last = time.monotonic()
            self.received(resp)
            for request in self.client.on_response(resp)[1]:
                await self.call.write(request)
