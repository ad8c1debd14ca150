"""What pilotfish shows the API server as its identity on each request: a fixed bearer token, a
token file read again as it rotates, or what an exec plugin prints (a token, a client
certificate, or both) — what a kubeconfig or a pod's service account give, each refreshed as
client-go refreshes it.

A kubeconfig's own client certificate is part of the TLS context (app/sources/kube/kubeconfig.py);
an exec plugin's goes there when the client next connects (app/sources/kube/client.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import aiohttp

TOKEN_FILE_PERIOD = 60.0  # seconds: client-go's cached file token source reads the file again after a minute
EXEC_TIMEOUT = 60.0  # seconds an exec plugin may take to print its credential
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class CredentialsError(aiohttp.ClientError):
    """No credential to send (a token file gone, an exec plugin failing). An aiohttp.ClientError
    so that every caller takes it as it takes a failed connection: logged and tried again."""


@dataclass(frozen=True, eq=False)  # identity: a new one means new TLS connections
class ClientCertificate:
    cert: bytes  # PEM
    key: bytes
    source: str  # what gave it, for errors: "exec plugin tsh"


class Credentials(Protocol):
    async def authorization(self) -> str | None:
        """The ``Authorization`` header's value, or None to send none; the credential is
        refreshed here when it needs to be."""

    def certificate(self) -> ClientCertificate | None:
        """The client certificate of the credential ``authorization`` settled on, if it has one."""

    def refused(self) -> None:
        """The API server answered 401: what was sent is not to be sent again."""


class _NoCertificate:
    """Credentials that bring no client certificate of their own (a kubeconfig's is in the TLS
    context from the start)."""

    def certificate(self) -> ClientCertificate | None:
        return None

    def refused(self) -> None:
        pass


class NoToken(_NoCertificate):
    """A kubeconfig's client certificate alone (or an anonymous request)."""

    async def authorization(self) -> str | None:
        return None


@dataclass(frozen=True)
class StaticToken(_NoCertificate):
    token: str

    async def authorization(self) -> str | None:
        return f"Bearer {self.token}"


@dataclass
class TokenFile(_NoCertificate):
    """A token file that rotates under pilotfish (a projected service-account token, renewed by
    the kubelet at 80 % of its lifetime): read again once a minute, and at once after a 401."""

    path: Path
    clock: Callable[[], float] = time.monotonic
    _token: str = field(default="", init=False, repr=False, compare=False)
    _read_at: float | None = field(default=None, init=False, repr=False, compare=False)

    async def authorization(self) -> str | None:
        now = self.clock()
        if self._read_at is None or now - self._read_at >= TOKEN_FILE_PERIOD:
            try:
                token = self.path.read_text().strip()
            except OSError as e:
                if not self._token:
                    raise CredentialsError(f"token file {self.path}: {e.strerror or e}") from None
                token = self._token  # as client-go: the last token read stays until the file is back
            if not token:
                raise CredentialsError(f"token file {self.path} is empty")
            self._token, self._read_at = token, now
        return f"Bearer {self._token}"

    def refused(self) -> None:
        self._read_at = None


@dataclass
class ExecPlugin:
    """A kubeconfig ``exec`` plugin (client.authentication.k8s.io): the program is run, without
    blocking the loop, for an ExecCredential; its token and client certificate are kept until
    its ``expirationTimestamp`` (for good when it has none) or a 401."""

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    api_version: str = EXEC_API_VERSIONS[0]
    install_hint: str = ""
    cluster: Mapping[str, Any] | None = None  # spec.cluster, when provideClusterInfo
    _credential: ExecCredential | None = field(default=None, init=False, repr=False, compare=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False, compare=False)

    async def authorization(self) -> str | None:
        async with self._lock:  # concurrent requests wait for one run of the plugin
            found = self._credential
            if found is None or (found.expires is not None and time.time() >= found.expires):
                found = self._credential = await self._run()
        return f"Bearer {found.token}" if found.token else None

    def certificate(self) -> ClientCertificate | None:
        return self._credential.certificate if self._credential is not None else None

    def refused(self) -> None:
        self._credential = None

    async def _run(self) -> ExecCredential:
        spec: dict[str, Any] = {"interactive": False}
        if self.cluster is not None:
            spec["cluster"] = dict(self.cluster)
        info = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": json.dumps(info)}
        what = f"exec plugin {self.command}"
        try:
            process = await asyncio.create_subprocess_exec(
                self.command,
                *self.args,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as e:
            hint = f" ({self.install_hint.strip()})" if self.install_hint.strip() else ""
            raise CredentialsError(f"{what}: cannot run it: {e.strerror or e}{hint}") from None
        try:
            out, err = await asyncio.wait_for(process.communicate(), EXEC_TIMEOUT)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise CredentialsError(f"{what}: no credential after {EXEC_TIMEOUT:.0f} s") from None
        if process.returncode != 0:
            message = err.decode(errors="replace").strip()[-300:]
            raise CredentialsError(f"{what}: exited {process.returncode}: {message}")
        return exec_credential(what, out, self.api_version)


@dataclass(frozen=True)
class ExecCredential:
    token: str  # "" for a client certificate alone
    certificate: ClientCertificate | None
    expires: float | None  # epoch seconds


def exec_credential(what: str, output: bytes, api_version: str) -> ExecCredential:
    """What an exec plugin's ExecCredential gives (client-go: a token, a client certificate and
    key, or both)."""
    try:
        credential = json.loads(output)
    except ValueError as e:
        raise CredentialsError(f"{what}: its output is not an ExecCredential: {e}") from None
    if not isinstance(credential, dict) or credential.get("kind") != "ExecCredential":
        raise CredentialsError(f"{what}: its output is not an ExecCredential")
    if credential.get("apiVersion") != api_version:
        # client-go refuses a credential of another version than the one asked for
        raise CredentialsError(f"{what}: answered apiVersion {credential.get('apiVersion')!r}, asked {api_version}")
    status = credential.get("status")
    if not isinstance(status, dict):
        raise CredentialsError(f"{what}: the ExecCredential has no status")
    token = status.get("token") or ""
    cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
    if bool(cert) != bool(key):
        raise CredentialsError(f"{what}: clientCertificateData and clientKeyData go together")
    if not isinstance(token, str) or not (token or cert):
        raise CredentialsError(f"{what}: the ExecCredential's status has no token and no client certificate")
    # whether the pair loads is found where the connection's TLS context is made (client.py)
    certificate = ClientCertificate(str(cert).encode(), str(key).encode(), what) if cert and key else None
    expiry = status.get("expirationTimestamp")
    expires = None
    if expiry:
        try:
            expires = datetime.fromisoformat(str(expiry).replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise CredentialsError(f"{what}: expirationTimestamp {expiry!r} is not RFC 3339") from None
    return ExecCredential(token, certificate, expires)


def load_client_certificate(context: ssl.SSLContext, certificate: ClientCertificate) -> None:
    """Present ``certificate`` on the context's next handshakes (ssl.SSLError, ValueError if the
    two do not make a pair). ssl loads a chain from files only: both go through a private
    temporary directory, gone at once."""
    with tempfile.TemporaryDirectory(prefix="pilotfish-kube-") as tmp:
        cert_file, key_file = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        cert_file.write_bytes(certificate.cert)
        key_file.touch(mode=0o600)
        key_file.write_bytes(certificate.key)
        context.load_cert_chain(cert_file, key_file)
