"""The monitoring and debug HTTP server (istiod's :15014): readiness and debug views.

``/ready``                       200 once the first PushContext is built and xDS serves
``/metrics``                     istiod's control-plane metrics, Prometheus text format
``/debug/syncz``                 every stream: proxy, protocol, per type nonce/version sent and
                                 acked, NACK count and the last NACK's message
``/debug/config_dump?proxyID=``  what a connected proxy is given now (clusters, endpoints,
                                 listeners, routes), as ``pilotfish config-dump`` prints it
``/debug/sidecarz?proxyID=``     that proxy's SidecarScope
``/debug/rejections``            config objects rejected, with the reason; then the latest NACKs,
                                 each naming the config objects the rejected resources came from
``/debug/explain?proxyID=&type=&name=``  the config objects, services and endpoint shards that
                                 made one resource a connected proxy is served (``pilotfish explain``)
``/debug/configz``               the Istio config in force in Kubernetes form, as istiod's, then every
                                 rejection as a Kubernetes Event (app/debug/configz.py)
``/debug/push_status``           the latest pushes (at most 100): trigger keys, times, proxies
                                 reached, resources sent by type
``/debug/connections``           every stream: proxy, protocol, types watched, pushes, pending push
``POST /debug/diff``             what a change would push to each connected proxy, nothing applied
                                 (app/debug/diff.py; ``pilotfish diff --server``)
aiohttp serves it; the handlers only read the runtime through ``DebugState``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from app.config.objects import ConfigObject
from app.debug.dump import dump_served, scope_json
from app.environment import Environment
from app.errors import ConfigError, PilotfishError, SettingsError, listening
from app.model.push_context import PushContext
from app.settings import split_address
from app.xds.explain import NotServed, type_url_of
from app.xds.mesh_source import MeshSource, MeshStream
from app.xds.type_urls import SHORT_NAMES

if TYPE_CHECKING:
    from app.preview.request import DiffRequest

logger = logging.getLogger(__name__)


class DebugState(Protocol):
    @property
    def ready(self) -> bool: ...

    def push_context(self) -> PushContext: ...

    def resource_source(self) -> MeshSource: ...

    def rejections(self) -> Sequence[ConfigError]: ...

    def rejected_pushes(self) -> Sequence[str]: ...

    def environment(self) -> Environment: ...

    def config_objects(self) -> Sequence[ConfigObject]: ...

    def streams(self) -> Sequence[MeshStream]: ...

    def metrics_text(self) -> str: ...

    def config_status(self) -> list[dict[str, Any]]: ...

    def push_status(self) -> dict[str, Any]: ...

    def pending_push(self, stream: MeshStream) -> bool: ...

    def refused_streams(self) -> Sequence[dict[str, str]]: ...

    def ca_root(self) -> str | None: ...


def sync_status(stream: MeshStream) -> dict[str, Any]:
    conn = stream.connection
    return {
        "connectionID": conn.id,
        "proxy": conn.client.id,
        "proxyType": str(conn.client.type),
        "namespace": conn.client.namespace,
        "identity": stream.identity,  # "" on the plaintext port
        "protocol": "delta" if conn.delta else "sotw",
        "pushes": conn.pushes,
        "pushesSkipped": conn.skipped,
        "nacks": sum(w.nacks for w in conn.watched()),
        "watches": {
            SHORT_NAMES.get(w.type_url, w.type_url): {
                "wildcard": w.wildcard,
                "names": len(w.names),
                "nonceSent": w.nonce_sent,
                "nonceAcked": w.nonce_acked,
                "versionSent": w.version_sent,
                "versionAcked": w.version_acked,
                "nacks": w.nacks,
                "lastError": w.last_error,
            }
            for w in conn.watched()
        },
    }


class DebugServer:
    def __init__(self, state: DebugState) -> None:
        self._state = state
        self._runner: web.AppRunner | None = None
        self.port = 0
        app = web.Application()
        app.router.add_get("/ready", self._ready)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/debug/syncz", self._syncz)
        app.router.add_get("/debug/config_dump", self._config_dump)
        app.router.add_get("/debug/sidecarz", self._sidecarz)
        app.router.add_get("/debug/rejections", self._rejections)
        app.router.add_get("/debug/explain", self._explain)
        app.router.add_get("/debug/configz", self._configz)
        app.router.add_get("/debug/push_status", self._push_status)
        app.router.add_get("/debug/connections", self._connections)
        app.router.add_get("/debug/istio-ca-root-cert", self._ca_root)
        app.router.add_post("/debug/diff", self._diff)
        self._previewing = asyncio.Lock()
        self.app = app

    async def start(self, address: str) -> None:
        host, port = split_address(address)
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        with listening("HTTP", address):
            await web.TCPSite(self._runner, host, port).start()
        self.port = self._runner.addresses[0][1]
        logger.info("HTTP serving on %s:%d", host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _ready(self, _request: web.Request) -> web.Response:
        if self._state.ready:
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready\n")

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = self._state.metrics_text().encode()
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def _syncz(self, _request: web.Request) -> web.Response:
        """Every connected proxy's sync state, then the latest streams the secure port refused."""
        return web.json_response([*(sync_status(s) for s in self._state.streams()), *self._state.refused_streams()])

    async def _ca_root(self, _request: web.Request) -> web.Response:
        """The ``istio-ca-root-cert`` ConfigMap istiod writes into every namespace, as it would be."""
        root = self._state.ca_root()
        if root is None:
            raise web.HTTPNotFound(text="no CA: pilotfish serve runs one with --ca-dir\n")
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "istio-ca-root-cert", "labels": {"istio.io/config": "true"}},
            "data": {"root-cert.pem": root},
        }
        return web.json_response(configmap)

    def _stream(self, request: web.Request) -> MeshStream:
        wanted = request.query.get("proxyID", "")
        for stream in self._state.streams():
            if wanted in (stream.connection.id, stream.connection.client.id):
                return stream
        raise web.HTTPNotFound(text=f"no connected proxy {wanted!r} (see /debug/syncz)\n")

    async def _configz(self, request: web.Request) -> web.Response:
        """istiod's configz (app/debug/configz.py); ``?pretty`` indents, as istiod's writeJSON."""
        indent = 4 if "pretty" in request.query else None
        return web.json_response(self._state.config_status(), dumps=functools.partial(json.dumps, indent=indent))

    async def _push_status(self, _request: web.Request) -> web.Response:
        return web.json_response(self._state.push_status())

    async def _connections(self, _request: web.Request) -> web.Response:
        out = [
            {
                "connectionID": s.connection.id,
                "proxy": s.connection.client.id,
                "proxyType": str(s.connection.client.type),
                "protocol": "delta" if s.connection.delta else "sotw",
                "types": sorted(SHORT_NAMES.get(w.type_url, w.type_url) for w in s.connection.watched()),
                "pushes": s.connection.pushes,
                "pendingPush": self._state.pending_push(s),
            }
            for s in self._state.streams()
        ]
        return web.json_response(out)

    async def _config_dump(self, request: web.Request) -> web.Response:
        proxy = self._stream(request).connection.client
        return web.json_response(dump_served(proxy, self._state.resource_source()))

    async def _sidecarz(self, request: web.Request) -> web.Response:
        proxy = self._stream(request).connection.client
        return web.json_response(scope_json(proxy, self._state.push_context().sidecar_scope(proxy)))

    async def _rejections(self, _request: web.Request) -> web.Response:
        return web.json_response([*(str(e) for e in self._state.rejections()), *self._state.rejected_pushes()])

    async def _explain(self, request: web.Request) -> web.Response:
        proxy = self._stream(request).connection.client
        try:
            type_url = type_url_of(request.query.get("type", ""))
            found = self._state.resource_source().explain(proxy, type_url, request.query.get("name", ""))
        except NotServed as e:
            raise web.HTTPNotFound(text=f"{e}\n") from None
        except PilotfishError as e:
            raise web.HTTPBadRequest(text=f"{e}\n") from None
        return web.json_response(found.json())

    async def _diff(self, request: web.Request) -> web.Response:
        """A change preview: a JSON body (app/preview/request.py ``diff_request``), or the YAML
        of the change with ``?delete=KIND/NS/NAME``, ``?proxy=ID`` and ``?showDiff=true``. The
        preview's modules are imported by the first request, not with the server."""
        from app.preview.request import diff_request

        try:
            if request.content_type == "application/json":
                body = await request.json()
                if not isinstance(body, dict):
                    raise SettingsError("the body must be a JSON object")
                wanted = diff_request(body)
            else:
                query = request.query
                wanted = diff_request(
                    {
                        "files": [{"name": "request", "text": await request.text()}],
                        "delete": query.getall("delete", []),
                        "proxy": query.getall("proxy", []),
                        "showDiff": query.get("showDiff", "") in ("1", "true"),
                    }
                )
        except (SettingsError, ValueError) as e:
            raise web.HTTPBadRequest(text=f"{e}\n") from None
        except RecursionError:  # JSON nested deeper than the decoder goes: the client's, not ours
            raise web.HTTPBadRequest(text="the body is nested deeper than JSON can be read\n") from None
        return web.json_response(await self._preview(wanted))

    async def _preview(self, wanted: DiffRequest) -> dict[str, Any]:
        from app.debug.diff import PreviewFailed, compute, connected, in_fork

        state = self._state
        work = functools.partial(
            compute,
            state.environment(),
            state.resource_source().generator,
            connected(state.streams(), wanted.proxies),
            state.config_objects(),
            wanted,
        )
        try:
            return await in_fork(work, self._previewing)
        except PreviewFailed as e:
            logger.warning("POST /debug/diff: %s", e)
            raise web.HTTPInternalServerError(text=f"{e}\n") from None
