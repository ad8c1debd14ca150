"""pilotfish's Kubernetes API client: JSON over REST on one aiohttp session, with the TLS and
credentials of a kubeconfig or of the in-cluster service account (app/sources/kube/kubeconfig.py).

Every call pilotfish makes (informers' lists and watches, the controllers' writes, TokenReviews)
is a path and a JSON body, so it needs no generated models. kubernetes-asyncio, used before,
imports its 800-odd generated API and model modules with its client package: 0.2 s of start-up
and 38 MB of memory (``import app.runtime`` 0.52 → 0.32 s, 109 → 71 MB) for classes pilotfish
never built.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from app.errors import PilotfishError
from app.sources.kube.credentials import ClientCertificate, CredentialsError
from app.sources.kube.kubeconfig import ClusterAccess, from_kubeconfig, in_cluster

JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
TIMEOUT = 15.0  # seconds one call may take (a watch passes its own)
CONNECT_TIMEOUT = 10.0
# one connection per watch and per call in flight (HTTP/1.1): the informers hold a few dozen
POOL = 100
# a watch event carries a whole object: etcd's request limit (1.5 MiB) bounds what one line needs
READ_BUFFER = 2**21


class ApiCallError(PilotfishError):
    def __init__(self, what: str, status: int, reason: str, message: str, causes: Sequence[str] = ()) -> None:
        super().__init__(f"{what}: HTTP {status} {reason}: {message}" if status else f"{what}: {message}")
        self.status = status
        self.reason = reason  # the Status's reason: NotFound, AlreadyExists, Conflict, Forbidden, ...
        self.message = message  # the Status's message (or the failed connection's error)
        self.causes = tuple(causes)  # the Status's details.causes[].reason (NamespaceTerminating, ...)


class KubeClient:
    def __init__(self, access: ClusterAccess) -> None:
        self._access = access
        self._session: aiohttp.ClientSession | None = None
        self._certificate: ClientCertificate | None = None  # an exec plugin's, in the TLS context

    @property
    def server(self) -> str:
        return self._access.server

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = TIMEOUT,
    ) -> aiohttp.ClientResponse:
        """The server's response, its body not read yet (``async with`` it); whatever its status.
        A failed connection, a timeout or no credential to send raise aiohttp.ClientError,
        TimeoutError or OSError."""
        credentials = self._access.credentials
        headers = {"Accept": JSON}
        authorization = await credentials.authorization()
        if authorization is not None:
            headers["Authorization"] = authorization
        certificate = credentials.certificate()
        if self._session is None or certificate is not self._certificate:
            await self._connect(certificate)
        assert self._session is not None
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body, separators=(",", ":"))
        response = await self._session.request(
            method,
            self._access.server + path,
            params=query,
            data=data,
            headers=headers,
            proxy=self._access.proxy,
            server_hostname=self._access.tls_server_name,
            timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=min(timeout or CONNECT_TIMEOUT, CONNECT_TIMEOUT)),
        )
        if response.status == 401:
            credentials.refused()  # a rotated token or an expired credential: fetched anew next time
        return response

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = JSON,
        timeout: float = TIMEOUT,
    ) -> dict[str, Any]:
        """One request; the JSON object answered, or ApiCallError (status 0 for a connection,
        a timeout or credentials that failed)."""
        what = f"{method} {path}"
        try:
            response = await self.request(
                method, path, query=query, body=body, content_type=content_type, timeout=timeout
            )
            async with response:
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise ApiCallError(what, 0, "", str(e) or type(e).__name__) from e
        try:
            answer = json.loads(text) if text else {}
        except ValueError:
            answer = {}
        if not isinstance(answer, dict):
            answer = {}
        if 200 <= response.status < 300:
            return answer
        details = answer.get("details")
        found = details.get("causes") if isinstance(details, Mapping) else None
        causes = [str(c.get("reason", "")) for c in found or () if isinstance(c, Mapping)]
        message = str(answer.get("message") or text).strip()[:300]
        raise ApiCallError(what, response.status, str(answer.get("reason") or ""), message, causes)

    async def _connect(self, certificate: ClientCertificate | None) -> None:
        """A session whose connections present ``certificate`` (an exec plugin's), else the
        kubeconfig's. A new certificate closes every connection of the last session (watches
        too; their informers watch again), as client-go closes its connections when the
        certificate rotates."""
        try:
            context = self._access.trust.context(certificate)
        except (ssl.SSLError, ValueError) as e:  # only an exec plugin's pair can fail here
            where = certificate.source if certificate is not None else self._access.server
            raise CredentialsError(f"{where}: the client certificate and key do not load: {e}") from None
        connector = aiohttp.TCPConnector(limit=POOL, ssl=context)
        # trust_env: HTTPS_PROXY / NO_PROXY honoured, as client-go's ProxyFromEnvironment
        session = aiohttp.ClientSession(connector=connector, trust_env=True, read_bufsize=READ_BUFFER)
        last, self._session, self._certificate = self._session, session, certificate
        if last is not None:
            await last.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def api_client(kubeconfig: Path | None) -> KubeClient:
    """A client from ``kubeconfig``, or from the in-cluster service account when None; a
    KubeConfigError naming the file and field when it cannot be used."""
    return KubeClient(in_cluster() if kubeconfig is None else from_kubeconfig(kubeconfig))
