"""Who is calling the secure port, and whether it may have a proxy's config (istiod
security.Authenticate with its ClientCertAuthenticator and JWT authenticators,
pilot/pkg/xds/authentication.go checkConnectionIdentity). Pure, but for reading the token file.

A caller is authenticated by a client certificate issued by the mesh CA (its SPIFFE URI SANs)
or by a bearer token in the ``authorization`` metadata: without Kubernetes, a line
``TOKEN NAMESPACE SERVICEACCOUNT`` of the trusted-token file; with it, a TokenReview
(app/security/token_review.py).
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cryptography import x509

from app.errors import SettingsError
from app.file_stamp import Stamp, file_stamp

BEARER = "bearer "


@dataclass(frozen=True, slots=True)
class SpiffeId:
    trust_domain: str
    namespace: str
    service_account: str

    def __str__(self) -> str:
        return f"spiffe://{self.trust_domain}/ns/{self.namespace}/sa/{self.service_account}"


def parse_spiffe(uri: str) -> SpiffeId | None:
    """``spiffe://TD/ns/NS/sa/SA``, else None."""
    if not uri.startswith("spiffe://"):
        return None
    parts = uri[len("spiffe://") :].split("/")
    if len(parts) != 5 or parts[1] != "ns" or parts[3] != "sa" or not all(parts):
        return None
    return SpiffeId(parts[0], parts[2], parts[4])


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller: its identities (SPIFFE URIs) and how it proved them."""

    identities: tuple[str, ...]
    method: str  # "certificate" or "token"

    def spiffe_ids(self) -> list[SpiffeId]:
        return [s for s in map(parse_spiffe, self.identities) if s is not None]


def certificate_identities(der: bytes) -> tuple[str, ...]:
    """The URI SANs of a (verified) client certificate."""
    return uri_sans(x509.load_der_x509_certificate(der))


def uri_sans(cert: x509.Certificate) -> tuple[str, ...]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(san.get_values_for_type(x509.UniformResourceIdentifier))


def bearer_token(metadata: Iterable[tuple[str, str | bytes]]) -> str | None:
    """The token of an ``authorization: Bearer TOKEN`` header, as pilot-agent sends it."""
    for key, value in metadata:
        if key.lower() == "authorization":
            text = value.decode() if isinstance(value, bytes) else value
            if text.lower().startswith(BEARER):
                return text[len(BEARER) :].strip() or None
    return None


class TokenAuthenticator(Protocol):
    async def authenticate(self, token: str) -> tuple[str, str] | None:
        """(namespace, service account) the token stands for, else None."""
        ...


class SecretAccess(Protocol):
    async def authorize(self, namespace: str, service_account: str) -> str | None:
        """None when the service account may read its namespace's Secrets, else why not."""
        ...


class TrustedTokenFile:
    """``--trusted-token-file``: one ``TOKEN NAMESPACE SERVICEACCOUNT`` per line (``#`` starts a
    comment). Read again when the file changes; a bad file keeps the last good tokens."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stamp: Stamp | None = None
        self._tokens: Mapping[str, tuple[str, str]] = {}
        self.reload()  # a bad file at start is a settings error

    def reload(self) -> None:
        try:
            stamp = file_stamp(self._path)
            if stamp == self._stamp:
                return
            text = self._path.read_text()
        except OSError as e:
            raise SettingsError(f"trusted token file {self._path}: {e.strerror}") from e
        self._tokens = parse_token_lines(text.splitlines(), str(self._path))
        self._stamp = stamp

    async def authenticate(self, token: str) -> tuple[str, str] | None:
        with contextlib.suppress(SettingsError):  # keep the last good tokens
            self.reload()
        found = None
        for known, who in self._tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):  # no timing side channel
                found = who
        return found


def parse_token_lines(lines: Sequence[str], where: str) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        fields = text.split()
        if len(fields) != 3:
            raise SettingsError(f"{where}:{number}: want TOKEN NAMESPACE SERVICEACCOUNT, got {len(fields)} fields")
        token, namespace, account = fields
        out[token] = (namespace, account)
    return out


def verified_identity(caller: Caller, namespace: str, service_account: str) -> SpiffeId | str:
    """istiod checkConnectionIdentity: the first identity of the caller in the proxy's namespace
    (and of its service account, when the proxy names one), istiod's VerifiedIdentity; else the
    refusal, naming both."""
    for sid in caller.spiffe_ids():
        if namespace and sid.namespace != namespace:
            continue
        if service_account and sid.service_account != service_account:
            continue
        return sid
    return f"no identities ([{' '.join(caller.identities)}]) matched {namespace}/{service_account}"


def authorize_proxy(caller: Caller, namespace: str, service_account: str) -> str | None:
    """The refusal of ``verified_identity``, None when the caller may have the proxy's config."""
    found = verified_identity(caller, namespace, service_account)
    return found if isinstance(found, str) else None
