"""The agent's SDS server: Envoy's ``sds-grpc`` cluster on a Unix socket asks it for the secrets
istiod's config names, ``default`` (the workload certificate and key) and ``ROOTCA`` (the mesh
root), as pilot-agent's SDS server answers them (security/pkg/nodeagent/sds). State of the
world, one stream per secret subscription; a rotation is pushed on the open streams, so Envoy
swaps certificates without reconnecting. Mounted files are served too, as pilot-agent does for
the names istiod gives a DestinationRule's own certificates (``file-cert:CERT~KEY``,
``file-root:PATH``, ``file-root:system``), read when asked for (not watched). Names it cannot
serve stay unanswered.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Set as AbstractSet
from pathlib import Path
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


FILE_CERT = "file-cert:"  # file-cert:CERT_PATH~KEY_PATH, a DestinationRule's client certificate
FILE_ROOT = "file-root:"  # file-root:PATH, or file-root:system for the host's trust bundle
# where pilot-agent looks for the system trust bundle (security/pkg/nodeagent/cache)
SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
)


def needs_workload_certificate(name: str) -> bool:
    return name in (WORKLOAD, ROOT)


def secret(name: str, cert: WorkloadCertificate | None) -> secret_pb2.Secret | None:
    """The secret ``name`` as pilot-agent serves it (inline bytes), else None (not served: a
    file that cannot be read is logged, the name stays unanswered)."""
    try:
        if name.startswith(FILE_CERT):
            chain_path, _, key_path = name.removeprefix(FILE_CERT).partition("~")
            return _certificate(name, Path(chain_path).read_bytes(), Path(key_path).read_bytes())
        if name.startswith(FILE_ROOT):
            path = name.removeprefix(FILE_ROOT)
            bundle = next((p for p in SYSTEM_BUNDLES if Path(p).is_file()), "") if path == "system" else path
            return _trust(name, Path(bundle).read_bytes()) if bundle else None
    except OSError as e:
        logger.warning("SDS: %s: %s", name, e.strerror or e)
        return None
    if cert is None:
        return None
    if name == WORKLOAD:
        return _certificate(name, cert.chain_pem.encode(), cert.key_pem)
    if name == ROOT:
        return _trust(name, cert.root_pem.encode())
    return None


def _certificate(name: str, chain: bytes, key: bytes) -> secret_pb2.Secret:
    out = secret_pb2.Secret(name=name)
    out.tls_certificate.certificate_chain.inline_bytes = chain
    out.tls_certificate.private_key.inline_bytes = key
    return out


def _trust(name: str, bundle: bytes) -> secret_pb2.Secret:
    context = common_pb2.CertificateValidationContext()
    context.trusted_ca.inline_bytes = bundle
    return secret_pb2.Secret(name=name, validation_context=context)


def response(
    names: AbstractSet[str], cert: WorkloadCertificate | None, version: int, nonce: str
) -> DiscoveryResponse | None:
    """The secrets of ``names`` that can be served; None when none can (nothing is sent)."""
    out = DiscoveryResponse(version_info=str(version), type_url=SECRET_TYPE, nonce=nonce)
    for name in sorted(names):
        found = secret(name, cert)
        if found is not None:
            packed = any_pb2.Any()
            packed.Pack(found)
            out.resources.append(packed)
    return out if out.resources else None


class SdsServer:
    """``certificates`` None: no workload certificate (no mesh root), files only."""

    def __init__(self, certificates: CertificateManager | None) -> None:
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
        sent_version = -1  # nothing sent yet
        while True:
            request_task = asyncio.ensure_future(events.get())
            renewed_task = None
            if self._certs is not None and any(map(needs_workload_certificate, names)):
                renewed_task = asyncio.ensure_future(self._certs.wait_for(max(sent_version, 0)))
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
                if wanted == names and sent_version >= 0:
                    continue  # an ACK or NACK; a renewal that came with it is seen next round
                names = wanted
                if self._certs is not None and any(map(needs_workload_certificate, names)):
                    await self._certs.wait_for(0)  # the first certificate, if none yet
            else:
                self.pushes += 1
            current = self._certs.current if self._certs is not None else None
            version = self._certs.issued if self._certs is not None else 0
            answer = response(names, current, version, str(next(self._nonces)))
            if answer is not None:
                sent_version = version
                await stream.send_message(answer)


async def _read(stream: Stream[DiscoveryRequest, Any], events: asyncio.Queue[DiscoveryRequest | None]) -> None:
    try:
        while (request := await stream.recv_message()) is not None:
            events.put_nowait(request)
    finally:
        events.put_nowait(None)
