"""Small HTTP backends on distinct 127.0.0.0/8 addresses that answer with their own name.

All of them listen on one common port (so a Kubernetes Service's single targetPort reaches
every pod) and run in one background thread with its own event loop: the tests and the
Envoy fixtures may block without stopping the backends from answering.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web


def _bind_common_port(addresses: list[str], attempts: int = 50) -> tuple[int, list[socket.socket]]:
    """Listening sockets on every address with one port number, kept open so nobody takes it."""
    for _ in range(attempts):
        first = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        first.bind((addresses[0], 0))
        port = first.getsockname()[1]
        socks = [first]
        try:
            for address in addresses[1:]:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(sock)
                sock.bind((address, port))
        except OSError as e:
            for sock in socks:
                sock.close()
            if e.errno != errno.EADDRINUSE:
                raise
            continue
        for sock in socks:
            sock.listen(128)
        return port, socks
    raise RuntimeError(f"no common free port on {addresses} after {attempts} attempts")


class Backends:
    """name -> address; each server answers any request with JSON naming itself and what it got."""

    def __init__(
        self,
        addresses: Mapping[str, str],
        handler: Callable[[str], Callable[[web.Request], Awaitable[web.Response]]] | None = None,
    ) -> None:
        """``handler``: what answers for a name, instead of the JSON echo."""
        self._addresses = dict(addresses)
        self._handler = handler or self._echo
        self.hits: Counter[str] = Counter()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="e2e-backends", daemon=True)
        self._runners: list[web.AppRunner] = []
        self.port = 0

    def start(self, sockets: Mapping[str, socket.socket] | None = None) -> Backends:
        """Serve on one common port of every address, or on ``sockets`` already listening (in a
        pod's network namespace, say: then the names are the sockets')."""
        if sockets is None:
            names = list(self._addresses)
            self.port, socks = _bind_common_port([self._addresses[n] for n in names])
            sockets = dict(zip(names, socks, strict=True))
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(sockets), self._loop).result(30)
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    async def _serve(self, socks: Mapping[str, socket.socket]) -> None:
        for name, sock in socks.items():
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handler(name))
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.SockSite(runner, sock).start()
            self._runners.append(runner)

    async def _cleanup(self) -> None:
        for runner in self._runners:
            await runner.cleanup()

    def _echo(self, name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            self.hits[name] += 1
            body = {
                "backend": name,
                "method": request.method,
                "path": request.path_qs,
                "host": request.host,
                "headers": dict(request.headers),
            }
            return web.json_response(body, headers={"x-backend": name})

        return handle
