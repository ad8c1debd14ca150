"""The few API-server calls the controllers make (get, create, replace, patch), as JSON over
kubernetes-asyncio's ApiClient (its configuration, authentication and TLS), the way the
informers read (app/sources/kube/informer.py). Every failure is one ``ApiCallError``: an error
status with the server's reason and causes, or status 0 for a connection that failed."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from app.errors import PilotfishError

JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
_TIMEOUT = 15.0  # seconds one call may take


class ApiCallError(PilotfishError):
    def __init__(self, what: str, status: int, reason: str, message: str, causes: Sequence[str] = ()) -> None:
        super().__init__(f"{what}: HTTP {status} {reason}: {message}" if status else f"{what}: {message}")
        self.status = status
        self.reason = reason  # the Status's reason: NotFound, AlreadyExists, Conflict, Forbidden, ...
        self.causes = tuple(causes)  # the Status's details.causes[].reason (NamespaceTerminating, ...)


async def call(
    client: ApiClient,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = JSON,
    timeout: float = _TIMEOUT,
) -> dict[str, Any]:
    """One request; the JSON object answered, or ApiCallError."""
    what = f"{method} {path}"
    try:
        response: aiohttp.ClientResponse = await client.call_api(
            path,
            method,
            header_params={"Accept": JSON, "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=min(timeout, 10)),
        )
        async with response:
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError, OSError, ApiException) as e:
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
