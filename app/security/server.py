"""The secure port (istiod :15012): TLS with the mesh CA, ADS and Istio's certificate service.

gRPC's Python server can require a client certificate or not ask for one, but not what istiod
does here: ask for one, verify it when given, and take a bearer token instead when not (a
workload's first certificate request has no certificate yet). So TLS ends in ``SecurePort``
(``ssl`` with CERT_OPTIONAL against the mesh root, over plain TCP: app/security/tls.py), which
hands each connection's bytes to the
gRPC server's loopback listener and records, by the local port of that hop, what the client
proved; ``Authenticator`` looks it up from the call's peer address. A connection to the
loopback listener that did not come through the secure port has no record: it is treated as
the plaintext port is (unauthenticated, as istiod's :15010).

A client certificate counts only while it is valid, checked on every call: OpenSSL checks it in
a full handshake only, and a resumed TLS session (a ticket, or a TLS 1.2 session id) brings the
certificate it was made with, expired or not. istiod's Go TLS does not resume such a session;
here the session is resumed and its certificate proves nothing (the token decides), as does one
that expired while its connection stayed open.

What one connection may hold is bounded (``RelayLimits``): the TLS handshake and the client's
HTTP/2 preface must come within the handshake timeout, and only then is the hop to the gRPC
server opened (a connection that has not spoken holds one descriptor, a relayed one three);
connections are capped in all and per peer address, refused at accept (closed, no TLS) and
counted in ``refused``, by reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import resource
import ssl
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from app.api import ca as ca_pb2
from app.errors import listening
from app.security.authn import Caller, TokenAuthenticator, bearer_token, uri_sans
from app.security.ca import CaError, CertificateAuthority, spiffe_id
from app.security.tls import TlsStream

logger = logging.getLogger("pilotfish.security")

CA_SERVICE = "istio.v1.auth.IstioCertificateService"
SERVER_CERT_TTL = datetime.timedelta(days=90)
_CHUNK = 256 * 1024
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # what every gRPC client sends first (RFC 9113 3.4)

HANDSHAKE_TIMEOUT = 10.0  # seconds for the TLS handshake and the HTTP/2 preface
MAX_CONNECTIONS = 20_000  # whatever the descriptor limit: 10,000 pilot-agents (xDS and CA each)
FDS_PER_CONNECTION = 3  # the client's socket and both ends of the hop, all in this process
_LOG_EVERY = 10.0  # seconds between two log lines about refusals of one reason

Clock = Callable[[], datetime.datetime]


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True, slots=True)
class RelayLimits:
    """What connections to the secure port may hold (``relay_limits`` derives them)."""

    handshake_timeout: float = HANDSHAKE_TIMEOUT
    max_connections: int = MAX_CONNECTIONS
    max_per_peer: int = MAX_CONNECTIONS // 8


def relay_limits(nofile: int | None = None) -> RelayLimits:
    """Limits for a process allowed ``nofile`` descriptors (RLIMIT_NOFILE's soft limit when not
    given): at the cap, relayed connections hold at most three quarters of them, so a quarter
    (at least 64) stays for the other ports, the config and the API server; one peer address may
    hold an eighth of the cap (at least 8), so one client cannot take the port from the others.
    Under a 256 limit that is 64 connections, 8 per peer; under 1,048,576, 20,000 and 2,500."""
    if nofile is None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        nofile = soft if soft != resource.RLIM_INFINITY else 1 << 30
    budget = nofile - max(64, nofile // 4)
    connections = max(1, min(MAX_CONNECTIONS, budget // FDS_PER_CONNECTION))
    return RelayLimits(HANDSHAKE_TIMEOUT, connections, min(connections, max(8, connections // 8)))


@dataclass(frozen=True, slots=True)
class Peer:
    """What a client of the secure port proved in its TLS handshake."""

    address: str
    certificate: Caller | None  # None: no client certificate (or one naming no identity)
    not_before: datetime.datetime | None = None  # the certificate's validity
    not_after: datetime.datetime | None = None
    resumed: bool = False  # a resumed TLS session: the certificate was checked when it was made


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
    """TLS on ``address``; each connection is relayed to the gRPC server at ``inner``.

    ``limits``: derived from the descriptor limit when not given; ``clock``: what "now" is for
    client certificates; ``on_refuse``: told the reason of each refused connection (the same
    counts are in ``refused``): ``connection_cap``, ``peer_cap``, ``handshake_timeout``,
    ``handshake_error`` (TLS failed: a bad or foreign certificate, not TLS at all), ``not_http2``.
    """

    def __init__(
        self,
        ca: CertificateAuthority,
        dns_names: tuple[str, ...],
        ips: tuple[str, ...],
        *,
        limits: RelayLimits | None = None,
        clock: Clock = _utcnow,
        on_refuse: Callable[[str], None] | None = None,
    ) -> None:
        self._ca = ca
        self._names = (dns_names, ips)
        self._context = self._server_context(ca)
        self.serving_certificate = ""  # the leaf presented now (PEM)
        self.renew_serving_certificate()
        self.limits = limits or relay_limits()
        self.clock = clock
        self._on_refuse = on_refuse
        # the relay hop's local (address, port), as the gRPC server sees it -> the client behind it
        self.peers: dict[tuple[str, int], Peer] = {}
        self.refused: Counter[str] = Counter()
        self.open_connections = 0  # admitted and not yet closed, in any state
        self._per_peer: Counter[str] = Counter()
        self._logged: dict[str, tuple[float, int]] = {}  # reason -> (when last logged, refusals since)
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
        context.options |= ssl.OP_NO_RENEGOTIATION  # as Go's TLS server: none
        if ca.crl_pem:  # revoked client certificates fail the handshake
            with memory_file(ca.crl_pem.encode()) as crl_path:
                context.load_verify_locations(cafile=crl_path)
            context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
        return context

    def use(self, ca: CertificateAuthority) -> None:
        """Serve with another CA from now on (a reloaded or rotated one): new handshakes verify
        client certificates against its root and CRL and get a serving certificate it issued;
        open connections keep what they were made with."""
        context = self._server_context(ca)
        self._ca, self._context = ca, context
        self.renew_serving_certificate()

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
        # plain TCP: TLS starts per connection, once it is admitted (a refusal costs no handshake)
        with listening("secure xDS", f"{address[0]}:{address[1]}"):
            self._server = await asyncio.start_server(self._accept, address[0], address[1], limit=_CHUNK)
        self.port = self._server.sockets[0].getsockname()[1]
        self._renewing = asyncio.create_task(self._renew_forever(), name="serving-cert-renewal")
        logger.info(
            "secure xDS and CA serving on %s:%d (TLS, mesh root; at most %d connections, %d per peer)",
            address[0], self.port, self.limits.max_connections, self.limits.max_per_peer,
        )  # fmt: skip

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

    def certificate_valid(self, peer: Peer) -> bool:
        """Whether the peer's client certificate is within its validity now."""
        if peer.not_before is None or peer.not_after is None:
            return False
        return peer.not_before <= self.clock() <= peer.not_after

    # --- admission --------------------------------------------------------------------------

    def _admit(self, host: str) -> str | None:
        """Take a place for a new connection from ``host``, or the reason there is none."""
        if self.open_connections >= self.limits.max_connections:
            return "connection_cap"
        if self._per_peer[host] >= self.limits.max_per_peer:
            return "peer_cap"
        self.open_connections += 1
        self._per_peer[host] += 1
        return None

    def _release(self, host: str) -> None:
        self.open_connections -= 1
        self._per_peer[host] -= 1
        if self._per_peer[host] <= 0:
            del self._per_peer[host]

    def _refuse(self, reason: str, address: str) -> None:
        self.refused[reason] += 1
        if self._on_refuse is not None:
            self._on_refuse(reason)
        # under a flood, one line per reason every few seconds, with the count since
        now = time.monotonic()
        last, since = self._logged.get(reason, (-_LOG_EVERY, 0))
        if now - last < _LOG_EVERY:
            self._logged[reason] = (last, since + 1)
            return
        self._logged[reason] = (now, 0)
        more = f" (and {since} more since the last report)" if since else ""
        # the limits at work are worth a warning; failed handshakes (probes, scanners, clients
        # with a foreign or expired certificate) are everyday noise, as asyncio's TLS has them
        level = logging.DEBUG if reason in ("handshake_error", "not_http2") else logging.WARNING
        logger.log(
            level,
            "secure port: refused %s: %s%s (%d open, at most %d, %d per peer)",
            address, reason, more, self.open_connections, self.limits.max_connections, self.limits.max_per_peer,
        )  # fmt: skip

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = writer.get_extra_info("peername")
        host = str(client[0]) if client else "?"
        address = f"{client[0]}:{client[1]}" if client else "?"
        refusal = self._admit(host)
        if refusal is not None:
            writer.transport.abort()  # before any TLS: a socket closed, nothing else spent
            self._refuse(refusal, address)
            return
        task = asyncio.current_task()
        assert task is not None
        self._relays.add(task)
        try:
            tls = TlsStream(self._context, reader, writer)
            first = await self._handshake(tls, address)
            if first is not None:
                await self._relay(tls, first, address)
        except asyncio.CancelledError:
            writer.transport.abort()  # stop(); not raised: asyncio 3.11 reports a cancelled callback as an error
        finally:
            self._relays.discard(task)
            self._release(host)

    async def _handshake(self, tls: TlsStream, address: str) -> bytes | None:
        """TLS, then the client's HTTP/2 preface, within the handshake timeout: what the client
        sent so far (the preface first), else None (refused, counted)."""
        received = b""
        try:
            async with asyncio.timeout(self.limits.handshake_timeout):
                await tls.handshake()
                while len(received) < len(H2_PREFACE) and H2_PREFACE.startswith(received):
                    if not (data := await tls.read()):
                        raise ConnectionResetError("the client left before its HTTP/2 preface")
                    received += data
        except TimeoutError:
            tls.writer.transport.abort()
            self._refuse("handshake_timeout", address)
            return None
        except OSError as e:  # ssl.SSLError is one
            logger.debug("secure port: TLS with %s failed: %s", address, e)
            tls.writer.close()  # after the TLS alert, if there is one
            self._refuse("handshake_error", address)
            return None
        if not received.startswith(H2_PREFACE):
            tls.close()
            self._refuse("not_http2", address)
            return None
        return received

    def _peer(self, tls: TlsStream, address: str) -> Peer:
        der = tls.ssl.getpeercert(binary_form=True)
        resumed = tls.ssl.session_reused
        if not der:
            return Peer(address, None, resumed=resumed)
        cert = x509.load_der_x509_certificate(der)
        identities = uri_sans(cert)
        # a verified certificate naming no identity proves nothing: the token decides (istiod)
        caller = Caller(identities, "certificate") if identities else None
        peer = Peer(address, caller, cert.not_valid_before_utc, cert.not_valid_after_utc, resumed)
        if caller is not None and not self.certificate_valid(peer):
            logger.info(
                "secure port: %s brought a client certificate (%s) outside its validity (%s to %s)%s: "
                "it proves nothing", address, ", ".join(identities), peer.not_before, peer.not_after,
                " by resuming a TLS session" if resumed else "",
            )  # fmt: skip
        return peer

    async def _relay(self, tls: TlsStream, first: bytes, address: str) -> None:
        peer = self._peer(tls, address)
        try:
            inner_reader, inner_writer = await asyncio.open_connection(*self._inner)
        except OSError as e:
            logger.warning("secure port: cannot reach the gRPC server: %s", e)
            tls.close()
            return
        host, port = inner_writer.get_extra_info("sockname")[:2]
        hop = (str(host), int(port))
        self.peers[hop] = peer
        try:
            inner_writer.write(first)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(_from_client(tls, inner_writer))
                tg.create_task(_to_client(inner_reader, tls))
        except* OSError:  # ssl.SSLError is one
            pass  # either side went away: both are closed below
        finally:
            self.peers.pop(hop, None)
            tls.close()
            inner_writer.close()
            for w in (inner_writer, tls.writer):
                with contextlib.suppress(Exception):
                    await w.wait_closed()


async def _from_client(tls: TlsStream, writer: asyncio.StreamWriter) -> None:
    while data := await tls.read():
        writer.write(data)
        await writer.drain()
    with contextlib.suppress(OSError, RuntimeError):
        writer.write_eof()


async def _to_client(reader: asyncio.StreamReader, tls: TlsStream) -> None:
    while data := await reader.read(_CHUNK):
        tls.write(data)
        await tls.drain()
    tls.close()  # the gRPC server closed: close_notify


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
        """The caller's certificate identities while that certificate is valid (checked on
        every call: a resumed TLS session, or a long-lived connection, may hold one that has
        expired since its handshake), else what its bearer token proves."""
        peer = self.peer(context)
        if peer is not None and peer.certificate is not None and self._port.certificate_valid(peer):
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
        self.ca = ca  # replaced whole when the CA is reloaded: a call signs with the one in force
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
        try:
            chain = self.ca.sign_csr(request.csr, caller.identities, request.validity_duration)
        except CaError as e:
            # istiod: logged, counted in citadel_server_csr_sign_err_count (error=e.kind), refused
            self._on_issue("sign_error")
            logger.warning("CSR signing error for %s: %s (%s)", ", ".join(caller.identities), e, e.kind)
            code = grpc.StatusCode.INTERNAL if e.internal else grpc.StatusCode.INVALID_ARGUMENT
            await context.abort(code, f"CSR signing error ({e})")
        except Exception:  # a bug of ours, not the caller's fault: Internal, without the details
            self._on_issue("sign_error")
            logger.exception("CSR signing failed for %s", ", ".join(caller.identities))
            await context.abort(grpc.StatusCode.INTERNAL, "CSR signing error (certificate generation failed)")
        self._on_issue("success")
        logger.info("issued a certificate for %s (%s)", ", ".join(caller.identities), caller.method)
        return ca_pb2.IstioCertificateResponse(cert_chain=chain)
