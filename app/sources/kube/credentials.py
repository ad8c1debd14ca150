"""What pilotfish shows the API server as its identity on each request: a fixed bearer token, a
token file read again as it rotates, or a token an exec plugin prints — the three a kubeconfig or
a pod's service account give, each refreshed as client-go refreshes it.

A client certificate is not here: it is part of the TLS connection (app/sources/kube/kubeconfig.py).
"""

from __future__ import annotations

import asyncio
import json
import os
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


class Credentials(Protocol):
    async def authorization(self) -> str | None:
        """The ``Authorization`` header's value, or None to send none."""

    def refused(self) -> None:
        """The API server answered 401: what was sent is not to be sent again."""


class NoToken:
    """A client certificate alone (or an anonymous request)."""

    async def authorization(self) -> str | None:
        return None

    def refused(self) -> None:
        pass


@dataclass(frozen=True)
class StaticToken:
    token: str

    async def authorization(self) -> str | None:
        return f"Bearer {self.token}"

    def refused(self) -> None:
        pass


@dataclass
class TokenFile:
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
    blocking the loop, for an ExecCredential; its token is kept until its
    ``expirationTimestamp`` (for good when it has none) or a 401."""

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    api_version: str = EXEC_API_VERSIONS[0]
    install_hint: str = ""
    cluster: Mapping[str, Any] | None = None  # spec.cluster, when provideClusterInfo
    _token: str = field(default="", init=False, repr=False, compare=False)
    _expires: float | None = field(default=None, init=False, repr=False, compare=False)  # epoch seconds
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False, compare=False)

    async def authorization(self) -> str | None:
        async with self._lock:  # concurrent requests wait for one run of the plugin
            if not self._token or (self._expires is not None and time.time() >= self._expires):
                self._token, self._expires = await self._run()
        return f"Bearer {self._token}"

    def refused(self) -> None:
        self._token = ""

    async def _run(self) -> tuple[str, float | None]:
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


def exec_credential(what: str, output: bytes, api_version: str) -> tuple[str, float | None]:
    """(token, expiry in epoch seconds or None) from an exec plugin's ExecCredential."""
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
    token = status.get("token")
    if not isinstance(token, str) or not token:
        if status.get("clientCertificateData"):
            raise CredentialsError(f"{what}: gave a client certificate; pilotfish takes a token from exec plugins")
        raise CredentialsError(f"{what}: the ExecCredential's status has no token")
    expiry = status.get("expirationTimestamp")
    if not expiry:
        return token, None
    try:
        return token, datetime.fromisoformat(str(expiry).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise CredentialsError(f"{what}: expirationTimestamp {expiry!r} is not RFC 3339") from None
