"""The control plane's fetch of RequestAuthentication ``jwksUri`` keys (istiod's JwtKeyResolver,
pilot/pkg/model/jwks_resolver.go), for the policies app/model/jwks.py says it fetches.

Each uri is fetched when a policy first names it, then every ``refresh`` seconds (istiod's
PILOT_JWT_PUB_KEY_REFRESH_INTERVAL, 20 minutes); a failed fetch is retried every ``retry``
seconds and keeps the keys found last (none yet: the policy's provider verifies against a key no
one holds, so tokens are refused, never let through unverified). A response is taken only when it
is a JSON object with a ``keys`` list, at most ``MAX_BYTES``; a uri no policy names any more is
dropped. New or changed keys are reported to ``on_change`` with the uris they belong to, which
pushes the policies that name them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping

import aiohttp

logger = logging.getLogger(__name__)

MAX_BYTES = 1024 * 1024  # a JWKS is a few KB; more is not keys
FIRST_FETCH_WAIT = 5.0  # how long the first push waits for first fetches (istiod's fetch timeout)


class JwksResolver:
    def __init__(
        self, on_change: Callable[[frozenset[str]], None], *, refresh: float = 1200.0, retry: float = 30.0
    ) -> None:
        self.keys: dict[str, str] = {}
        self._on_change = on_change
        self._refresh = refresh
        self._retry = retry
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._first: dict[str, asyncio.Event] = {}  # set once a uri's first fetch ended, either way
        self._session: aiohttp.ClientSession | None = None

    def want(self, uris: Mapping[str, float]) -> None:
        """Keep fetching exactly these uris (each with its fetch timeout in seconds)."""
        for uri in [u for u in self._tasks if u not in uris]:
            self._tasks.pop(uri).cancel()
            self._first.pop(uri, None)
            self.keys.pop(uri, None)
        for uri, timeout in uris.items():
            if uri not in self._tasks:
                self._first[uri] = asyncio.Event()
                self._tasks[uri] = asyncio.create_task(self._keep(uri, timeout), name=f"jwks {uri}")

    async def fetched(self, timeout: float) -> None:
        """Wait, at most ``timeout`` seconds, until every wanted uri's first fetch has ended (as
        istiod fetches a uri the first time a push needs it)."""
        waits = [asyncio.create_task(event.wait()) for event in self._first.values()]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=timeout)
            for task in pending:
                task.cancel()

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
        if self._session is not None:
            await self._session.close()

    async def _keep(self, uri: str, timeout: float) -> None:
        while True:
            found = await self._fetch(uri, timeout)
            self._first[uri].set()
            if found is not None and self.keys.get(uri) != found:
                self.keys[uri] = found
                self._on_change(frozenset({uri}))
            await asyncio.sleep(self._refresh if found is not None else self._retry)

    async def _fetch(self, uri: str, timeout: float) -> str | None:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.get(uri, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
                body = await response.content.read(MAX_BYTES + 1)
                if response.status != 200:
                    raise ValueError(f"HTTP {response.status}")
            if len(body) > MAX_BYTES:
                raise ValueError(f"more than {MAX_BYTES} bytes")
            text = body.decode()
            keys = json.loads(text)
            if not isinstance(keys, dict) or not isinstance(keys.get("keys"), list):
                raise ValueError("not a JSON Web Key Set (an object with a keys list)")
        except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError) as e:
            reason = str(e) or type(e).__name__
            logger.warning("jwksUri %s: cannot fetch its keys: %s%s", uri, reason[:200],
                           "; keeping the last keys found" if uri in self.keys else "")  # fmt: skip
            return None
        return text
