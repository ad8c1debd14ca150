"""The secure port (istiod :15012): TLS with the mesh CA, ADS and Istio's certificate service.

gRPC's Python server can require a client certificate or not ask for one, but not what istiod
does here: ask for one, verify it when given, and take a bearer token instead when not (a
workload's first certificate request has no certificate yet). So TLS ends in ``SecurePort``
(``ssl`` with CERT_OPTIONAL against the mesh root), which hands each connection's bytes to the
gRPC server's loopback listener and records, by the local port of that hop, what the client
proved; ``Authenticator`` looks it up from the call's peer address. A connection to the
loopback listener that did not come through the secure port has no record: it is treated as
the plaintext port is (unauthenticated, as istiod's :15010).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from app.api import ca as ca_pb2
from app.security.authn import Caller, TokenAuthenticator, bearer_token, certificate_identities
from app.security.ca import CaError, CertificateAuthority, spiffe_id

logger = logging.getLogger("pilotfish.security")

CA_SERVICE = "istio.v1.auth.IstioCertificateService"
SERVER_CERT_TTL = datetime.timedelta(days=90)
_CHUNK = 256 * 1024


@dataclass(frozen=True, slots=True)
class Peer:
    """What a client of the secure port proved in its TLS handshake."""

    address: str
    certificate: Caller | None  # None: no client certificate


@contextlib.contextmanager
def memory_file(data: bytes) -> Iterator[str]:
    """A path to ``data`` held in memory only (a memfd): ssl loads key pairs and CRLs from paths
    alone, and the chart runs pilotfish on a read-only root filesystem with no temporary
    directory, where a key must never be written anyway."""
    fd = os.memfd_create("pilotfish-tls", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


class SecurePort:
    """TLS on ``address``; each connection is relayed to the gRPC server at ``inner``."""

    def __init__(self, ca: CertificateAuthority, dns_names: tuple[str, ...], ips: tuple[str, ...]) -> None:
        self._ca = ca
        self._names = (dns_names, ips)
        self._context = self._server_context(ca)
        self.serving_certificate = ""  # the leaf presented now (PEM)
        self.renew_serving_certificate()
        # the relay hop's local (address, port), as the gRPC server sees it -> the client behind it
        self.peers: dict[tuple[str, int], Peer] = {}
        self._server: asyncio.Server | None = None
        self._inner: tuple[str, int] = ("127.0.0.1", 0)
        self._relays: set[asyncio.Task[None]] = set()
        self._renewing: asyncio.Task[None] | None = None
        self.port = 0

    @staticmethod
    def _server_context(ca: CertificateAuthority) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = ssl.CERT_OPTIONAL  # a certificate when the client has one
        context.load_verify_locations(cadata=ca.root_pem)
        context.set_alpn_protocols(["h2"])
        if ca.crl_pem:  # revoked client certificates fail the handshake
            with memory_file(ca.crl_pem.encode()) as crl_path:
                context.load_verify_locations(cafile=crl_path)
            context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
        return context

    def renew_serving_certificate(self) -> None:
        """A new key and certificate for the port (istiod's DNS certificate); handshakes from
        now on present it, open connections keep theirs."""
        key = ec.generate_private_key(ec.SECP256R1())
        chain = self._ca.server_certificate(key, *self._names, SERVER_CERT_TTL)
        encoding, form = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
        key_pem = key.private_bytes(encoding, form, serialization.NoEncryption())
        with memory_file("".join(chain).encode()) as cert_path, memory_file(key_pem) as key_path:
            self._context.load_cert_chain(cert_path, key_path)
        self.serving_certificate = chain[0]

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(SERVER_CERT_TTL.total_seconds() / 2)
            self.renew_serving_certificate()
            logger.info("secure port: serving certificate renewed")

    async def start(self, address: tuple[str, int], inner: tuple[str, int]) -> None:
        self._inner = inner
        self._server = await asyncio.start_server(self._accept, address[0], address[1], ssl=self._context)
        self.port = self._server.sockets[0].getsockname()[1]
        self._renewing = asyncio.create_task(self._renew_forever(), name="serving-cert-renewal")
        logger.info("secure xDS and CA serving on %s:%d (TLS, mesh root)", address[0], self.port)

    async def stop(self) -> None:
        if self._renewing is not None:
            self._renewing.cancel()
        if self._server is not None:
            self._server.close()
        for relay in list(self._relays):
            relay.cancel()
        if self._server is not None:
            await self._server.wait_closed()
        self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._relays.add(task)
        try:
            await self._relay(reader, writer)
        finally:
            self._relays.discard(task)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = writer.get_extra_info("peername")
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        identities = certificate_identities(der) if der else ()
        # a verified certificate naming no identity proves nothing: the token decides (istiod)
        caller = Caller(identities, "certificate") if identities else None
        address = f"{client[0]}:{client[1]}" if client else "?"
        try:
            inner_reader, inner_writer = await asyncio.open_connection(*self._inner)
        except OSError as e:
            logger.warning("secure port: cannot reach the gRPC server: %s", e)
            writer.close()
            return
        host, port = inner_writer.get_extra_info("sockname")[:2]
        hop = (str(host), int(port))
        self.peers[hop] = Peer(address, caller)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(_pump(reader, inner_writer))
                tg.create_task(_pump(inner_reader, writer))
        except* (OSError, ssl.SSLError):
            pass  # either side went away: both are closed below
        finally:
            self.peers.pop(hop, None)
            for w in (inner_writer, writer):
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(_CHUNK):
        writer.write(data)
        await writer.drain()
    with contextlib.suppress(OSError, RuntimeError):
        if writer.can_write_eof():
            writer.write_eof()


class Authenticator:
    """istiod security.Authenticate for one call: the client certificate its connection showed
    the secure port, else the bearer token in its metadata."""

    def __init__(self, port: SecurePort, tokens: TokenAuthenticator | None, trust_domain: Callable[[], str]) -> None:
        """``trust_domain``: the mesh's current one, for identities proved by a token."""
        self._port = port
        self.tokens = tokens  # set later when Kubernetes' TokenReview becomes available
        self._trust_domain = trust_domain

    def peer(self, context: grpc.aio.ServicerContext[Any, Any]) -> Peer | None:
        """The secure-port client behind a call on the relay's server (by the hop's source
        address and port, which the hop's open socket holds); None for a local process that
        connected to that server directly."""
        kind, _, rest = context.peer().partition(":")  # "ipv4:127.0.0.1:PORT"
        host, _, port = rest.rpartition(":")
        if kind not in ("ipv4", "ipv6") or not port.isdigit():
            return None
        return self._port.peers.get((host.strip("[]"), int(port)))

    async def authenticate(self, context: grpc.aio.ServicerContext[Any, Any]) -> Caller | None:
        peer = self.peer(context)
        if peer is not None and peer.certificate is not None:
            return peer.certificate
        token = bearer_token(context.invocation_metadata() or ())
        if token is None or self.tokens is None:
            return None
        who = await self.tokens.authenticate(token)
        if who is None:
            return None
        return Caller((spiffe_id(self._trust_domain(), *who),), "token")


class CertificateService:
    """``istio.v1.auth.IstioCertificateService``: signs a CSR for the identity the caller
    authenticated as (istiod security/pkg/server/ca/server.go CreateCertificate)."""

    def __init__(self, ca: CertificateAuthority, authenticator: Authenticator, on_issue: Callable[[str], None]) -> None:
        self._ca = ca
        self._authn = authenticator
        self._on_issue = on_issue

    def handler(self) -> grpc.GenericRpcHandler:
        method = grpc.unary_unary_rpc_method_handler(
            self._create,
            request_deserializer=ca_pb2.IstioCertificateRequest.FromString,
            response_serializer=ca_pb2.IstioCertificateResponse.SerializeToString,
        )
        return grpc.method_handlers_generic_handler(CA_SERVICE, {"CreateCertificate": method})

    async def _create(
        self, request: ca_pb2.IstioCertificateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> ca_pb2.IstioCertificateResponse:
        if self._authn.peer(context) is None:
            # certificates are only handed out over TLS, as istiod serves the CA on :15012 only
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "request authenticate failure: not over TLS")
        caller = await self._authn.authenticate(context)
        if caller is None:
            self._on_issue("authn_error")
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "request authenticate failure")
        assert caller is not None
        ttl = datetime.timedelta(seconds=max(request.validity_duration, 0))
        try:
            chain = self._ca.sign_csr(request.csr, caller.identities, ttl)
        except CaError as e:
            self._on_issue("sign_error")
            code = grpc.StatusCode.INTERNAL if e.internal else grpc.StatusCode.INVALID_ARGUMENT
            await context.abort(code, f"CSR signing error ({e})")
        self._on_issue("success")
        logger.info("issued a certificate for %s (%s)", ", ".join(caller.identities), caller.method)
        return ca_pb2.IstioCertificateResponse(cert_chain=chain)
