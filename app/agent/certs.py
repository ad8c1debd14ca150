"""The agent's workload certificate, as pilot-agent's secret manager keeps it: a key made here
(ECDSA P-256, or RSA 2048), a CSR naming the pod's SPIFFE identity, signed by the control
plane's certificate service over TLS with the mesh root (the first time with the pod's token,
afterwards with the current certificate too), renewed at half its lifetime with a little jitter,
the lifetime counted from when the agent received it (secretcache.go rotateTime: the CA backdates
``notBefore``, so from there a short-lived certificate would be due before it arrived).
Subscribers (the SDS server, the upstream xDS TLS context) are told of every new certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import random
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from grpclib.client import Channel
from grpclib.const import Cardinality

from app.api import ca as ca_api
from app.errors import PilotfishError
from app.supervise import Backoff

logger = logging.getLogger("pilotfish.agent")

CREATE_CERTIFICATE = "/istio.v1.auth.IstioCertificateService/CreateCertificate"
ROTATION_RATIO = 0.5  # pilot-agent SECRET_GRACE_PERIOD_RATIO
ROTATION_JITTER = 0.01  # pilot-agent SECRET_GRACE_PERIOD_RATIO_JITTER
EXPIRY_MARGIN = datetime.timedelta(seconds=30)  # a certificate this close to its end is not shown

Clock = Callable[[], datetime.datetime]  # the current time, timezone-aware


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True, slots=True)
class WorkloadCertificate:
    key_pem: bytes
    chain_pem: str  # the leaf and its intermediates, not the root
    root_pem: str
    not_before: datetime.datetime
    not_after: datetime.datetime
    received: datetime.datetime  # when the agent got it (pilot-agent SecretItem.CreatedTime)


class Signer(Protocol):
    """What the certificate manager needs of the CA (``CaClient``)."""

    async def sign(self, csr_pem: str, ttl: datetime.timedelta, current: WorkloadCertificate | None) -> list[str]: ...


def new_key(key_type: str) -> ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey:
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def build_csr(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, identity: str) -> str:
    """A CSR naming ``identity`` as its URI SAN (the CA signs what the caller proves anyway)."""
    san = x509.SubjectAlternativeName([x509.UniformResourceIdentifier(identity)])
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).add_extension(san, critical=True)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode()


def read_root_certificates(path: Path) -> str:
    """The mesh root(s) the agent trusts, from the PEM file ``path``, as PEM certificates only
    (text around them dropped); one clear error, never a traceback, when the file cannot be
    read or holds no certificate (pilot-agent refuses to start then)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PilotfishError(f"agent: --root-cert {path}: {e.strerror or e}") from None
    try:
        roots = x509.load_pem_x509_certificates(data)
        text = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in roots)
        ssl.create_default_context(cadata=text)
    except (ValueError, ssl.SSLError):
        raise PilotfishError(f"agent: --root-cert {path}: not a PEM certificate") from None
    return text


def client_context(root_pem: str, cert: WorkloadCertificate | None, files: Path) -> ssl.SSLContext:
    """TLS to the control plane: trust only the mesh root; present ``cert`` when there is one
    (``ssl`` loads key pairs from files only: ``files`` is a private directory)."""
    context = ssl.create_default_context(cadata=root_pem)
    context.set_alpn_protocols(["h2"])
    if cert is not None:
        load_certificate(context, cert, files)
    return context


def load_certificate(context: ssl.SSLContext, cert: WorkloadCertificate, files: Path) -> None:
    """Present ``cert`` on the next handshakes of ``context``."""
    chain, key = files / "cert-chain.pem", files / "key.pem"
    chain.write_text(cert.chain_pem)
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(cert.key_pem)
    context.load_cert_chain(chain, key)


class CaClient:
    """One CreateCertificate call per renewal, each on a fresh TLS connection."""

    def __init__(self, address: tuple[str, int], root_pem: str, token_file: Path, files: Path) -> None:
        self._host, self._port = address
        self._root = root_pem
        self._token_file = token_file
        self._files = files

    def metadata(self) -> dict[str, str]:
        """The pod's token as pilot-agent sends it, when there is one."""
        with contextlib.suppress(OSError):
            token = self._token_file.read_text().strip()
            if token:
                return {"authorization": f"Bearer {token}"}
        return {}

    async def sign(self, csr_pem: str, ttl: datetime.timedelta, current: WorkloadCertificate | None) -> list[str]:
        """The chain for ``csr_pem``, presenting ``current`` while it is valid; if the CA turns
        it away (revoked, another root) the token alone is tried, so the agent never locks
        itself out once its certificate is no longer accepted."""
        now = datetime.datetime.now(datetime.UTC)
        present = current if current is not None and current.not_after > now + EXPIRY_MARGIN else None
        try:
            return await self._sign(csr_pem, ttl, present)
        except Exception as e:
            if present is None:
                raise
            logger.info("CA refused the current certificate (%s); trying the token alone", e)
            return await self._sign(csr_pem, ttl, None)

    async def _sign(self, csr_pem: str, ttl: datetime.timedelta, current: WorkloadCertificate | None) -> list[str]:
        context = client_context(self._root, current, self._files)
        channel = Channel(self._host, self._port, ssl=context)
        try:
            request = ca_api.IstioCertificateRequest(csr=csr_pem, validity_duration=int(ttl.total_seconds()))
            async with channel.request(
                CREATE_CERTIFICATE,
                Cardinality.UNARY_UNARY,
                ca_api.IstioCertificateRequest,
                ca_api.IstioCertificateResponse,
                metadata=self.metadata(),
                timeout=30,
            ) as stream:
                await stream.send_message(request, end=True)
                response = await stream.recv_message()
            if response is None or len(response.cert_chain) < 2:
                raise ValueError("the CA answered without a certificate chain")
            return list(response.cert_chain)
        finally:
            channel.close()


class CertificateManager:
    """Keeps a current workload certificate; ``run`` renews it until cancelled."""

    def __init__(
        self,
        ca: Signer,
        identity: str,
        *,
        key_type: str = "ec",
        ttl: datetime.timedelta = datetime.timedelta(hours=24),
        backoff: Callable[[], Backoff] = Backoff,
        clock: Clock = utc_now,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._ca = ca
        self._identity = identity
        self._key_type = key_type
        self._ttl = ttl
        self._backoff = backoff
        self._clock = clock
        self._sleep = sleep
        self.current: WorkloadCertificate | None = None
        self.issued = 0  # certificates obtained, rotations included
        self._changed = asyncio.Condition()
        self._subscribers: list[Callable[[WorkloadCertificate], None]] = []

    def subscribe(self, on_change: Callable[[WorkloadCertificate], None]) -> None:
        self._subscribers.append(on_change)

    async def wait_for(self, after: int = 0) -> WorkloadCertificate:
        """The current certificate once more than ``after`` have been issued."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.current is not None and self.issued > after)
        assert self.current is not None
        return self.current

    async def renew(self) -> WorkloadCertificate:
        key = new_key(self._key_type)
        chain = await self._ca.sign(build_csr(key, self._identity), self._ttl, self.current)
        leaf = x509.load_pem_x509_certificate(chain[0].encode())
        encoding, form = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
        cert = WorkloadCertificate(
            key_pem=key.private_bytes(encoding, form, serialization.NoEncryption()),
            chain_pem="".join(chain[:-1]),
            root_pem=chain[-1],
            not_before=leaf.not_valid_before_utc,
            not_after=leaf.not_valid_after_utc,
            received=self._clock(),
        )
        async with self._changed:
            self.current = cert
            self.issued += 1
            self._changed.notify_all()
        for on_change in self._subscribers:
            on_change(cert)
        logger.info("workload certificate for %s valid until %s", self._identity, cert.not_after.isoformat())
        return cert

    async def run(self) -> None:
        backoff = self._backoff()
        while True:
            try:
                cert = await self.renew()
            except Exception as e:  # unreachable CA, refused, a bad answer: retry, keep the old one
                logger.warning("workload certificate: %s; retrying", e)
                await self._sleep(backoff.delay())
                continue
            backoff.reset()
            await self._sleep(rotation_delay(cert, self._clock()))


def rotation_delay(
    cert: WorkloadCertificate,
    now: datetime.datetime,
    grace_ratio: float = ROTATION_RATIO,
    grace_ratio_jitter: float = ROTATION_JITTER,
) -> float:
    """Seconds until renewal, as pilot-agent's rotateTime (security/pkg/nodeagent/cache/
    secretcache.go): the grace period is ``grace_ratio`` (moved up or down by at most
    ``grace_ratio_jitter``, kept within 0..1) of the lifetime from when the agent received the
    certificate to its expiry; renew that long before it expires, at once if that has passed.
    Never from ``notBefore``: the CA backdates it (two minutes, as istiod), and a certificate
    living at most that long would be renewed as soon as it arrived, again and again."""
    jitter = random.random() * grace_ratio_jitter * random.choice((-1, 1))
    ratio = min(max(grace_ratio + jitter, 0.0), 1.0)
    grace = (cert.not_after - cert.received) * ratio
    return max((cert.not_after - grace - now).total_seconds(), 0.0)


def private_dir() -> Path:
    """A directory only this user can read, for the key files ``ssl`` wants."""
    return Path(tempfile.mkdtemp(prefix="pilotfish-agent-"))
