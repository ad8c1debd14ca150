"""The agent's SDS server: Envoy's ``sds-grpc`` cluster on a Unix socket asks it for the secrets
istiod's config names, ``default`` (the workload certificate and key) and ``ROOTCA`` (the mesh
root), as pilot-agent's SDS server answers them (security/pkg/nodeagent/sds). State of the
world, one stream per secret subscription; a rotation is pushed on the open streams, so Envoy
swaps certificates without reconnecting. Names it does not serve stay unanswered.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Set as AbstractSet
from typing import Any

from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse
from google.protobuf import any_pb2
from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError
from grpclib.server import Stream

from app.agent.certs import CertificateManager, WorkloadCertificate

logger = logging.getLogger("pilotfish.agent")

SDS = "/envoy.service.secret.v3.SecretDiscoveryService/"
SECRET_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
WORKLOAD = "default"
ROOT = "ROOTCA"


def secret(name: str, cert: WorkloadCertificate) -> secret_pb2.Secret | None:
    if name == WORKLOAD:
        out = secret_pb2.Secret(name=name)
        out.tls_certificate.certificate_chain.inline_bytes = cert.chain_pem.encode()
        out.tls_certificate.private_key.inline_bytes = cert.key_pem
        return out
    if name == ROOT:
        context = common_pb2.CertificateValidationContext()
        context.trusted_ca.inline_bytes = cert.root_pem.encode()
        return secret_pb2.Secret(name=name, validation_context=context)
    return None


def response(names: AbstractSet[str], cert: WorkloadCertificate, version: int, nonce: str) -> DiscoveryResponse:
    out = DiscoveryResponse(version_info=str(version), type_url=SECRET_TYPE, nonce=nonce)
    for name in sorted(names):
        found = secret(name, cert)
        if found is not None:
            packed = any_pb2.Any()
            packed.Pack(found)
            out.resources.append(packed)
    return out


class SdsServer:
    def __init__(self, certificates: CertificateManager) -> None:
        self._certs = certificates
        self._nonces = itertools.count(1)
        self.streams = 0  # open SDS streams
        self.pushes = 0  # responses sent because a certificate was renewed

    def __mapping__(self) -> dict[str, Handler]:
        return {
            SDS + "StreamSecrets": Handler(
                self._stream, Cardinality.STREAM_STREAM, DiscoveryRequest, DiscoveryResponse
            ),
        }

    async def _stream(self, stream: Stream[DiscoveryRequest, DiscoveryResponse]) -> None:
        self.streams += 1
        events: asyncio.Queue[DiscoveryRequest | None] = asyncio.Queue()
        reader = asyncio.create_task(_read(stream, events))
        try:
            await self._serve(stream, events)
        finally:
            self.streams -= 1
            reader.cancel()

    async def _serve(self, stream: Stream[Any, Any], events: asyncio.Queue[DiscoveryRequest | None]) -> None:
        names: frozenset[str] = frozenset()
        sent_version = 0
        while True:
            request_task = asyncio.ensure_future(events.get())
            renewed_task = asyncio.ensure_future(self._certs.wait_for(sent_version)) if names else None
            waiting = {request_task} if renewed_task is None else {request_task, renewed_task}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for task in waiting:
                if not task.done():
                    task.cancel()
            if request_task.done():
                request = request_task.result()
                if request is None:
                    return  # Envoy closed the stream
                if request.type_url and request.type_url != SECRET_TYPE:
                    raise GRPCError(Status.INVALID_ARGUMENT, f"type {request.type_url[:120]} is not served here")
                if request.HasField("error_detail"):
                    logger.warning("SDS: Envoy rejected %s: %s", sorted(names), request.error_detail.message)
                wanted = frozenset(request.resource_names)
                if wanted == names and sent_version:
                    continue  # an ACK or NACK; a renewal that came with it is seen next round
                names = wanted
                if not names:
                    continue
                cert = await self._certs.wait_for(0)
            else:
                assert renewed_task is not None
                cert = renewed_task.result()
                self.pushes += 1
            sent_version = self._certs.issued
            await stream.send_message(response(names, cert, sent_version, str(next(self._nonces))))


async def _read(stream: Stream[DiscoveryRequest, Any], events: asyncio.Queue[DiscoveryRequest | None]) -> None:
    try:
        while (request := await stream.recv_message()) is not None:
            events.put_nowait(request)
    finally:
        events.put_nowait(None)
