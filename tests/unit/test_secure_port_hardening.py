"""Issue 24, items 8, 10 and 11: the secure port and the CA against clients that misbehave.

8. A client certificate counts only while it is valid: a TLS session saved while it was valid and
   resumed after it expired (TLS 1.2 and 1.3) proves nothing, and neither does a certificate that
   expired while its connection stayed open (istiod's Go TLS never resumes a session whose leaf
   has expired: crypto/tls checkForResumption).
10. The TLS relay bounds what a connection may hold: a handshake timeout (TLS and the HTTP/2
   preface), a cap on connections and one per peer address, refusals cheap (no TLS, no hop to the
   gRPC server) and counted; a well-behaved client keeps being served.
11. The CA refuses what it cannot or should not sign with INVALID_ARGUMENT and a clear reason,
   counted as istiod counts it (citadel_server_csr_sign_err_count): a lifetime too large for any
   clock, a key on a curve it does not know, keys weaker than RSA 2048 / P-256, SHA-1 signatures.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import select
import socket
import ssl
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from envoy.service.discovery.v3 import discovery_pb2

from app.api import ca as ca_api
from app.runtime import Runtime
from app.security import server as secure_server
from app.security.authn import TrustedTokenFile
from app.security.ca import CaError, CertificateAuthority
from app.security.server import Authenticator, CertificateService, SecurePort, memory_file
from app.xds.type_urls import CLUSTER
from tests.support.bookinfo import NODE
from tests.support.secure import secure_runtime

TD = "cluster.local"
SERVER_NAME = "pilotfish.istio-system.svc"
CSR_METHOD = "/istio.v1.auth.IstioCertificateService/CreateCertificate"
ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
PRODUCTPAGE = "spiffe://cluster.local/ns/bookinfo/sa/bookinfo-productpage"


def csr(key: Any, hash_algorithm: hashes.HashAlgorithm | None = None) -> str:
    san = x509.SubjectAlternativeName([x509.UniformResourceIdentifier("spiffe://evil/ns/x/sa/y")])
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).add_extension(san, critical=True)
    return builder.sign(key, hash_algorithm or hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode()


def key_pem(key: Any) -> bytes:
    encoding, form = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    return key.private_bytes(encoding, form, serialization.NoEncryption())


def uris(chain: list[str]) -> list[str]:
    cert = x509.load_pem_x509_certificate(chain[0].encode())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return list(san.get_values_for_type(x509.UniformResourceIdentifier))


async def create_certificate(
    ch: grpc.aio.Channel, token: str | None, *, request: ca_api.IstioCertificateRequest | None = None
) -> list[str]:
    call = ch.unary_unary(
        CSR_METHOD,
        request_serializer=ca_api.IstioCertificateRequest.SerializeToString,
        response_deserializer=ca_api.IstioCertificateResponse.FromString,
    )
    req = request or ca_api.IstioCertificateRequest(csr=csr(ec.generate_private_key(ec.SECP256R1())))
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    return list((await call(req, metadata=metadata, timeout=10)).cert_chain)


async def first_ads_response(ch: grpc.aio.Channel) -> discovery_pb2.DiscoveryResponse:
    call = ch.stream_stream(
        ADS,
        request_serializer=discovery_pb2.DiscoveryRequest.SerializeToString,
        response_deserializer=discovery_pb2.DiscoveryResponse.FromString,
    )()
    req = discovery_pb2.DiscoveryRequest(type_url=CLUSTER)
    req.node.id = NODE
    await call.write(req)
    try:
        response: discovery_pb2.DiscoveryResponse = await asyncio.wait_for(call.read(), 10)
        return response
    finally:
        call.cancel()


def tls_channel(root: str, port: int, cert: tuple[str, bytes] | None = None) -> grpc.aio.Channel:
    creds = grpc.ssl_channel_credentials(
        root.encode(), private_key=cert[1] if cert else None, certificate_chain=cert[0].encode() if cert else None
    )
    return grpc.aio.secure_channel(f"127.0.0.1:{port}", creds, options=[("grpc.ssl_target_name_override", SERVER_NAME)])


# --- 8: session resumption and expiry ------------------------------------------------------------


@dataclass
class ResumingTlsProxy:
    """A plaintext listener in front of the secure port that carries each connection over TLS
    from ``context`` and offers the session the previous connection ended with (gRPC's Python
    client cannot resume a TLS session by itself). One thread per connection; test use only."""

    target: int
    context: ssl.SSLContext
    session: ssl.SSLSession | None = None
    reused: list[bool] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._carry, args=(conn,), daemon=True).start()

    def _carry(self, conn: socket.socket) -> None:
        self.finished.clear()
        upstream = self.context.wrap_socket(
            socket.create_connection(("127.0.0.1", self.target), timeout=5),
            server_hostname=SERVER_NAME,
            session=self.session,
        )
        self.reused.append(upstream.session_reused)
        try:
            while True:
                readable = [upstream] if upstream.pending() else select.select([conn, upstream], [], [], 5)[0]
                if conn in readable:
                    data = conn.recv(65536)
                    if not data:
                        break
                    upstream.sendall(data)
                if upstream in readable:
                    data = upstream.recv(65536)
                    if not data:
                        break
                    conn.sendall(data)
        except OSError:
            pass
        finally:
            self.session = upstream.session  # a TLS 1.3 ticket has arrived by now
            with suppress(OSError, ValueError):
                upstream.unwrap()  # a clean close keeps the session resumable
            upstream.close()
            conn.close()
            self.finished.set()


def client_context(version: ssl.TLSVersion, root: str, chain: list[str], key: Any) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=root)
    context.minimum_version = context.maximum_version = version
    context.set_alpn_protocols(["h2"])
    with memory_file("".join(chain[:-1]).encode()) as cert_path, memory_file(key_pem(key)) as key_path:
        context.load_cert_chain(cert_path, key_path)
    return context


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    async with secure_runtime(tmp_path) as rt:
        yield rt


async def test_a_session_resumed_after_the_client_certificate_expired_proves_nothing(runtime: Runtime) -> None:
    assert runtime.ca is not None and runtime.secure is not None
    proxies: dict[str, ResumingTlsProxy] = {}
    chain: list[str] = []
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        key = ec.generate_private_key(ec.SECP256R1())
        chain = runtime.ca.sign_csr(csr(key), [PRODUCTPAGE], datetime.timedelta(hours=1))
        context = client_context(version, runtime.ca.root_pem, chain, key)
        proxy = proxies[version.name] = ResumingTlsProxy(runtime.secure.port, context)
        # while valid: the certificate alone gets ADS and a new certificate, no token
        async with grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as ch:
            assert (await first_ads_response(ch)).resources
            assert uris(await create_certificate(ch, None)) == [PRODUCTPAGE]
        assert await asyncio.to_thread(proxy.finished.wait, 10) and proxy.session is not None
    # past the certificates' notAfter for the port (a real 6 s lifetime, slept through, did not
    # always leave the valid phase's handshakes time enough on a loaded machine); the TLS
    # library's own check of a resumed session does not read that clock, and need not be fooled
    expiry = x509.load_pem_x509_certificate(chain[0].encode()).not_valid_after_utc
    runtime.secure.clock = lambda: expiry + datetime.timedelta(seconds=1)

    for version, proxy in proxies.items():
        async with grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as ch:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await create_certificate(ch, None)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, version
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await first_ads_response(ch)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, version
            # the expired certificate is no credential, a token still is
            assert uris(await create_certificate(ch, "bookinfo-token")) == [PRODUCTPAGE]
        # the scenario really was a resumption (the server keeps resuming valid sessions, as Go's)
        assert proxy.reused == [False, True], version
        proxy.close()


@asynccontextmanager
async def serving(
    ca: CertificateAuthority, tmp_path: Path, limits: Any = None, clock: Any = None
) -> AsyncIterator[tuple[SecurePort, list[str]]]:
    """The certificate service behind the TLS front, as the runtime wires them."""
    (tmp_path / "tokens").write_text("good-token shop web\n")
    kwargs: dict[str, Any] = {"limits": limits} if limits else {}
    if clock is not None:
        kwargs["clock"] = clock
    front = SecurePort(ca, (SERVER_NAME,), ("127.0.0.1",), **kwargs)
    issued: list[str] = []
    authenticator = Authenticator(front, TrustedTokenFile(tmp_path / "tokens"), lambda: TD)
    service = CertificateService(ca, authenticator, issued.append)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([service.handler()])
    inner = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await front.start(("127.0.0.1", 0), ("127.0.0.1", inner))
    try:
        yield front, issued
    finally:
        await front.stop()
        await server.stop(0)


async def test_a_certificate_that_expires_while_its_connection_is_open_stops_counting(tmp_path: Path) -> None:
    now = [datetime.datetime.now(datetime.UTC)]
    ca = CertificateAuthority.self_signed(TD)
    async with serving(ca, tmp_path, clock=lambda: now[0]) as (front, issued):
        key = ec.generate_private_key(ec.SECP256R1())
        chain = ca.sign_csr(csr(key), ["spiffe://cluster.local/ns/shop/sa/web"], datetime.timedelta(hours=1))
        async with tls_channel(ca.root_pem, front.port, ("".join(chain[:-1]), key_pem(key))) as ch:
            assert uris(await create_certificate(ch, None)) == ["spiffe://cluster.local/ns/shop/sa/web"]
            now[0] += datetime.timedelta(hours=2)  # the same connection, past the leaf's notAfter
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await create_certificate(ch, None)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert uris(await create_certificate(ch, "good-token")) == ["spiffe://cluster.local/ns/shop/sa/web"]
    assert issued == ["success", "authn_error", "success"]


# --- 10: what one connection may cost the relay --------------------------------------------------


async def connect_from(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    """The server closed (or reset) this connection within ``within`` seconds."""
    try:
        return await asyncio.wait_for(reader.read(1), within) == b""
    except TimeoutError:  # an OSError too: first
        return False
    except OSError:  # reset
        return True


async def served(ca: CertificateAuthority, port: int) -> bool:
    async with tls_channel(ca.root_pem, port) as ch:
        try:
            return uris(await create_certificate(ch, "good-token")) == ["spiffe://cluster.local/ns/shop/sa/web"]
        except grpc.aio.AioRpcError:
            return False


async def test_one_peer_holds_at_most_its_share_and_idle_connections_end_at_the_handshake_timeout(
    tmp_path: Path,
) -> None:
    ca = CertificateAuthority.self_signed(TD)
    limits = secure_server.RelayLimits(handshake_timeout=2.0, max_connections=16, max_per_peer=4)
    async with serving(ca, tmp_path, limits) as (front, _):
        idle = [await connect_from(front.port, "127.0.0.2") for _ in range(10)]
        closed = await asyncio.gather(*(closed_by_server(r, 0.5) for r, _ in idle))
        assert closed == [False] * 4 + [True] * 6  # refused at once, before any TLS
        assert front.refused["peer_cap"] == 6
        assert not front.peers  # nothing reached the gRPC server for them: one socket each
        assert await served(ca, front.port)  # another peer is served meanwhile

        # none of them ever handshook: each is closed at the handshake timeout
        assert all(await asyncio.gather(*(closed_by_server(r, 5.0) for r, _ in idle[:4])))
        assert front.refused["handshake_timeout"] == 4
        assert front.open_connections == 0
        for _, w in idle:
            w.close()


async def test_the_connection_cap_holds_and_the_port_serves_again_when_they_go(tmp_path: Path) -> None:
    ca = CertificateAuthority.self_signed(TD)
    limits = secure_server.RelayLimits(handshake_timeout=30.0, max_connections=8, max_per_peer=4)
    async with serving(ca, tmp_path, limits) as (front, _):
        idle = [await connect_from(front.port, f"127.0.0.{2 + i // 4}") for i in range(8)]
        extra = [await connect_from(front.port, "127.0.0.9") for _ in range(3)]
        assert all(await asyncio.gather(*(closed_by_server(r, 2.0) for r, _ in extra)))
        assert not any(await asyncio.gather(*(closed_by_server(r, 0.2) for r, _ in idle)))
        assert front.refused["connection_cap"] == 3 and front.open_connections == 8
        assert not await served(ca, front.port)  # full: refused cheaply, not queued
        for _, w in idle:
            w.close()
        for _ in range(50):
            if front.open_connections == 0:
                break
            await asyncio.sleep(0.1)
        assert await served(ca, front.port)


async def test_a_tls_connection_that_never_speaks_http2_never_reaches_the_grpc_server(tmp_path: Path) -> None:
    ca = CertificateAuthority.self_signed(TD)
    limits = secure_server.RelayLimits(handshake_timeout=2.0, max_connections=16, max_per_peer=8)
    async with serving(ca, tmp_path, limits) as (front, _):
        context = ssl.create_default_context(cadata=ca.root_pem)
        context.set_alpn_protocols(["h2"])
        silent = await asyncio.open_connection("127.0.0.1", front.port, ssl=context, server_hostname=SERVER_NAME)
        garbage = await asyncio.open_connection("127.0.0.1", front.port, ssl=context, server_hostname=SERVER_NAME)
        garbage[1].write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert await closed_by_server(garbage[0], 2.0)
        assert front.refused["not_http2"] == 1
        await asyncio.sleep(0.3)
        assert not front.peers  # the silent one holds no hop to the gRPC server
        assert await closed_by_server(silent[0], 5.0)
        assert front.refused["handshake_timeout"] == 1
        for _, w in (silent, garbage):
            w.close()


@pytest.mark.parametrize(
    ("nofile", "connections", "per_peer"),
    [(256, 64, 8), (1024, 256, 32), (20000, 5000, 625), (1 << 20, 20000, 2500)],
)
def test_default_limits_leave_descriptors_for_the_other_ports(nofile: int, connections: int, per_peer: int) -> None:
    limits = secure_server.relay_limits(nofile)
    assert (limits.max_connections, limits.max_per_peer) == (connections, per_peer)
    # each relayed connection holds three descriptors (the client's, the hop's two ends): at the
    # cap, at least a quarter of the process's limit is left for everything else
    assert 3 * limits.max_connections <= nofile * 3 // 4
    assert limits.handshake_timeout == 10.0


# --- 11: what the CA refuses ---------------------------------------------------------------------

# made with openssl (cryptography makes none of them): `openssl genrsa 512` and `openssl ecparam
# -name secp112r1 -genkey`, each then `openssl req -new -subj /`; a P-256 key with `openssl req
# -new -sha1 -subj /`; public keys only
RSA_512_CSR = """-----BEGIN CERTIFICATE REQUEST-----
MIG5MGUCAQAwADBcMA0GCSqGSIb3DQEBAQUAA0sAMEgCQQDDGxDxEF62fuIZEn2I
oAQtyTYeh2girRRUohPVg52JBxTQcbOjjGl07diXPyvvIiZxzm852Oto+Fo/51FN
sawhAgMBAAGgADANBgkqhkiG9w0BAQsFAANBAJaktnqwMmThj7qqa99EQvRbSB0R
ouP3RZhDvqQ26DVGQG4eeKTlqoMX/b+qUJ+lbMKeIFFhfsQHGDj/pSs8OrQ=
-----END CERTIFICATE REQUEST-----
"""
SECP112R1_CSR = """-----BEGIN CERTIFICATE REQUEST-----
MG8wOwIBADAAMDIwEAYHKoZIzj0CAQYFK4EEAAYDHgAE11rqz3JVTt/lz4REIa29
NBnaSAWPVS33tUCO7qAAMAoGCCqGSM49BAMCAyQAMCECDwCOidvMJNLPLVdm0U1x
0gIODJLaaNnFWjPfILQw4Rs=
-----END CERTIFICATE REQUEST-----
"""
SHA1_CSR = """-----BEGIN CERTIFICATE REQUEST-----
MIG5MGICAQAwADBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABMXGKfNLEhuoinds
Vmrs43dxOLFL4PogrsmjLCnas5Zr8rEly29Nd+jXsCaQllL92J6QCoRXbRYaPw8u
Fh3bjSugADAJBgcqhkjOPQQBA0gAMEUCIQChvsiNKg43/eviOOMWSSKpUqIcCHKa
Qbw3DZEXuFJzhwIgSG/f3hRwueokJ5+1PUCDIi5mHIAV0CVKnyQdCT2Wtx8=
-----END CERTIFICATE REQUEST-----
"""


def weak_or_unknown_csrs() -> Iterator[tuple[str, str, str]]:
    yield "rsa-512", RSA_512_CSR, r"CSR: RSA key of 512 bits is too small: at least 2048 bits"
    rsa_1024 = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    yield "rsa-1024", csr(rsa_1024), r"CSR: RSA key of 1024 bits is too small: at least 2048 bits"
    yield "p-192", csr(ec.generate_private_key(ec.SECP192R1())), r"CSR: elliptic curve secp192r1 is not accepted"
    yield "p-224", csr(ec.generate_private_key(ec.SECP224R1())), r"CSR: elliptic curve secp224r1 is not accepted"
    yield "secp256k1", csr(ec.generate_private_key(ec.SECP256K1())), r"CSR: elliptic curve secp256k1 is not accepted"
    yield "secp112r1", SECP112R1_CSR, r"CSR: unsupported public key: Curve 1\.3\.132\.0\.6 is not supported"
    yield "sha1", SHA1_CSR, r"CSR: signature hash sha1 is not accepted: want SHA-256, SHA-384 or SHA-512"


@contextmanager
def no_tracebacks(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    yield
    assert not [r for r in caplog.records if r.exc_info], "a refusal logged a traceback"


def test_keys_below_rsa_2048_or_p256_and_unknown_curves_are_refused() -> None:
    ca = CertificateAuthority.self_signed(TD)
    for name, text, reason in weak_or_unknown_csrs():
        with pytest.raises(CaError, match=reason) as refused:
            ca.sign_csr(text, ["spiffe://cluster.local/ns/a/sa/b"])
        assert refused.value.kind == "CSR_ERROR" and not refused.value.internal, name
    for key in (
        rsa.generate_private_key(public_exponent=65537, key_size=2048),
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP384R1()),
        ec.generate_private_key(ec.SECP521R1()),
    ):
        assert uris(ca.sign_csr(csr(key), ["spiffe://cluster.local/ns/a/sa/b"])) == ["spiffe://cluster.local/ns/a/sa/b"]


@pytest.mark.parametrize(
    ("seconds", "reason"),
    [
        (2**63 - 1, "requested TTL 2562047788015215h30m7s is greater than the max allowed TTL 2160h0m0s"),
        (10**12, "requested TTL 277777777h46m40s is greater than the max allowed TTL 2160h0m0s"),
        (90 * 86400 + 1, "requested TTL 2160h0m1s is greater than the max allowed TTL 2160h0m0s"),
    ],
)
async def test_a_huge_lifetime_is_invalid_argument_and_counted(
    tmp_path: Path, seconds: int, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    ca = CertificateAuthority.self_signed(TD)
    async with serving(ca, tmp_path) as (front, issued), tls_channel(ca.root_pem, front.port) as ch:
        req = ca_api.IstioCertificateRequest(
            csr=csr(ec.generate_private_key(ec.SECP256R1())), validity_duration=seconds
        )
        with no_tracebacks(caplog), pytest.raises(grpc.aio.AioRpcError) as refused:
            await create_certificate(ch, "good-token", request=req)
        # negative lifetimes are istiod's "none asked for": the default
        req.validity_duration = -(2**63)
        assert await create_certificate(ch, "good-token", request=req)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details() == f"CSR signing error ({reason})"
    assert issued == ["sign_error", "success"]  # citadel_server_csr_sign_err_count, as istiod


async def test_weak_keys_and_unknown_curves_are_invalid_argument_and_counted_over_the_port(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = CertificateAuthority.self_signed(TD)
    cases = list(weak_or_unknown_csrs())
    async with serving(ca, tmp_path) as (front, issued), tls_channel(ca.root_pem, front.port) as ch:
        for name, text, reason in cases:
            with no_tracebacks(caplog), pytest.raises(grpc.aio.AioRpcError) as refused:
                await create_certificate(ch, "good-token", request=ca_api.IstioCertificateRequest(csr=text))
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
            details = refused.value.details() or ""
            assert re.fullmatch(rf"CSR signing error \({reason}.*\)", details), details
    assert issued == ["sign_error"] * len(cases)
