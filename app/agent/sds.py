"""The agent's SDS server: Envoy's ``sds-grpc`` cluster on a Unix socket asks it for the secrets
istiod's config names, ``default`` (the workload certificate and key) and ``ROOTCA`` (the mesh
root), as pilot-agent's SDS server answers them (security/pkg/nodeagent/sds). State of the
world, one stream per secret subscription; a rotation is pushed on the open streams, so Envoy
swaps certificates without reconnecting. Mounted files are served too, as pilot-agent does for
the names istiod gives a DestinationRule's own certificates (``file-cert:CERT~KEY``,
``file-root:PATH``, ``file-root:system``), read when asked for (not watched). Names it cannot
serve stay unanswered.

It serves on the xDS seam (app/xds/source.py, DESIGN §1) as pilotfish's server does: the
secrets are a ``ResourceSource`` (``AgentSecrets``), and each stream is the same ``Connection``
and ``SotwSession`` that serve Envoy's ADS, so requests, ACKs, NACKs and what is resent follow the
same rules; a renewal is a push. Only the edge is its own: grpclib on a Unix socket, one stream
coroutine that waits for the next request or the next certificate.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Collection, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse
from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError
from grpclib.server import Stream

from app.agent.certs import CertificateManager, WorkloadCertificate
from app.xds.cause import Cause
from app.xds.connection import Connection
from app.xds.errors import StreamError
from app.xds.resource import Resource, encode
from app.xds.response import SotwResponse
from app.xds.sotw import SotwSession
from app.xds.source import PushAnswer, TypePush
from app.xds.type_urls import SECRET
from app.xds.watch import WatchedResource, counter_nonces

logger = logging.getLogger("pilotfish.agent")

SDS = "/envoy.service.secret.v3.SecretDiscoveryService/"
SECRET_TYPE = SECRET
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


@dataclass(frozen=True, slots=True)
class Envoy:
    """The client of an SDS stream: the Envoy whose node id its first request carries."""

    id: str
    istio_version: str = ""


@dataclass(frozen=True, slots=True)
class Renewal:
    """A push: the workload certificate was renewed (``issued`` certificates so far)."""

    issued: int
    traces: tuple[Hashable, ...] = ()


_SECRET_ONLY = (TypePush(SECRET, False, None),)


@dataclass(frozen=True, slots=True)
class RenewalPlan:
    """What a renewal does to a stream: its watched secrets, answered again (sent if changed)."""

    source: AgentSecrets
    client: Envoy
    types: tuple[TypePush, ...]
    note: object = None

    def answer(
        self, step: TypePush, watch: WatchedResource, force_names: Collection[str], partial: bool
    ) -> PushAnswer | None:
        found = self.source.generate(step.type_url, self.client, watch)
        return None if found is None else PushAnswer(found, None, None)


class AgentSecrets:
    """The agent's secrets as a ResourceSource (app/xds/source.py): the workload certificate and
    root from ``certificates`` (None: none), mounted files by name."""

    def __init__(self, certificates: CertificateManager | None) -> None:
        self._certs = certificates

    def note(self, client: Envoy) -> object:
        return None  # nothing is kept per stream: a renewal re-answers what it watches

    def generate(self, type_url: str, client: Envoy, watch: WatchedResource) -> list[Resource] | None:
        """The watched secrets that can be served; None when none can (nothing is sent: an
        empty response would replace what Envoy has with nothing)."""
        if type_url != SECRET:
            return None
        current = self._certs.current if self._certs is not None else None
        found = ((name, secret(name, current)) for name in sorted(watch.names))
        served = [encode(name, message) for name, message in found if message is not None]
        return served or None

    def push(self, client: Envoy, note: object, request: Renewal, watched: Collection[str]) -> RenewalPlan:
        return RenewalPlan(self, client, _SECRET_ONLY if SECRET in watched else ())

    def rejected(self, client: Envoy, type_url: str, error: str, watch: WatchedResource) -> tuple[Cause, ...]:
        return ()  # the workload's own certificates: no config object made them


SdsConnection = Connection[Envoy, Renewal, DiscoveryRequest, SotwResponse]


class SdsServer:
    """``certificates`` None: no workload certificate (no mesh root), files only."""

    def __init__(self, certificates: CertificateManager | None) -> None:
        self._certs = certificates
        self._source = AgentSecrets(certificates)
        self._nonces = counter_nonces()
        self._ids = itertools.count(1)
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
        try:
            await self._answer(stream, events)
        except StreamError as e:
            raise GRPCError(Status[e.status.value], str(e)) from None

    async def _answer(self, stream: Stream[Any, Any], events: asyncio.Queue[DiscoveryRequest | None]) -> None:
        conn: SdsConnection | None = None
        seen = 0  # the certificates issued when the stream was last answered
        while True:
            request_task = asyncio.ensure_future(events.get())
            renewed_task = None
            if self._certs is not None and conn is not None and self._needs_certificate(conn):
                renewed_task = asyncio.ensure_future(self._certs.wait_for(seen))
            waiting = {request_task} if renewed_task is None else {request_task, renewed_task}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for task in waiting:
                if not task.done():
                    task.cancel()
            if request_task.done():
                request = request_task.result()
                if request is None:
                    return  # Envoy closed the stream
                if not request.type_url:
                    request.type_url = SECRET  # the SDS service serves one type
                if conn is None:
                    client = Envoy(request.node.id or f"sds-{next(self._ids)}")
                    conn = Connection(client.id, client, SotwSession(self._nonces, frozenset({SECRET})), self._source)
                if self._certs is not None and any(map(needs_workload_certificate, request.resource_names)):
                    await self._certs.wait_for(0)  # the first certificate, if none yet
                seen = self._certs.issued if self._certs is not None else 0
                responses = conn.on_request(request)
            else:
                assert self._certs is not None and conn is not None
                self.pushes += 1
                seen = self._certs.issued
                responses = conn.on_push(Renewal(seen))
            for resp in responses:
                await stream.send_message(resp.message())

    @staticmethod
    def _needs_certificate(conn: SdsConnection) -> bool:
        watch = conn.session.watches.get(SECRET)
        return watch is not None and any(map(needs_workload_certificate, watch.names))


async def _read(stream: Stream[DiscoveryRequest, Any], events: asyncio.Queue[DiscoveryRequest | None]) -> None:
    try:
        while (request := await stream.recv_message()) is not None:
            events.put_nowait(request)
    finally:
        events.put_nowait(None)
