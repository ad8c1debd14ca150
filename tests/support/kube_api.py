"""A Kubernetes API server emulator, faithful where informers depend on it (no API server binary
can be installed here, so the real kubernetes-asyncio client is tested against this).

Over real HTTPS (a trustme CA) with a bearer token. What it keeps as the API server does:

* one resourceVersion counter for every write; objects carry the version of their last write;
* list: items sorted by namespace/name, ``limit`` / ``continue`` (a token names the list's
  version and offset; a token whose version was compacted answers 410), ``labelSelector``
  (``k=v``, ``k!=v``, ``k``), ``fieldSelector`` (``metadata.name``, ``metadata.namespace``);
  the list's ``metadata.resourceVersion`` is the current version;
* watch: ``resourceVersion`` replays the events after it, then follows live ones; a version
  older than the compaction point is a 200 with one ERROR event carrying a 410 Status;
  ``allowWatchBookmarks`` sends BOOKMARK events with the current version; ``timeoutSeconds``
  ends the stream;
* the Istio CRDs are CustomResourceDefinition objects (``install_istio_crds``, on by default;
  ``delete`` one to uninstall it); discovery (``/api``, ``/apis``, ``/apis/GROUP``,
  ``/apis/GROUP/VERSION``) and the collections follow what is installed, 404 otherwise.

Faults for tests: ``compact()``, ``drop_watches()`` (connections cut mid-stream), ``fail(n,
status)`` (the next n requests answer an error), ``delay`` (seconds before each answer).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
import yaml
from aiohttp import ClientConnectionResetError, web

TOKEN = "pilotfish-test-token"

# (group, plural) -> (kind, versions, namespaced)
CORE: dict[tuple[str, str], tuple[str, tuple[str, ...], bool]] = {
    ("", "namespaces"): ("Namespace", ("v1",), False),
    ("", "services"): ("Service", ("v1",), True),
    ("", "pods"): ("Pod", ("v1",), True),
    ("", "configmaps"): ("ConfigMap", ("v1",), True),
    ("", "secrets"): ("Secret", ("v1",), True),
    ("discovery.k8s.io", "endpointslices"): ("EndpointSlice", ("v1",), True),
    ("apiextensions.k8s.io", "customresourcedefinitions"): ("CustomResourceDefinition", ("v1",), False),
}
ISTIO_GROUP = "networking.istio.io"
ISTIO: dict[tuple[str, str], tuple[str, tuple[str, ...], bool]] = {
    (ISTIO_GROUP, plural): (kind, ("v1", "v1beta1", "v1alpha3"), True)
    for kind, plural in (
        ("DestinationRule", "destinationrules"),
        ("VirtualService", "virtualservices"),
        ("ServiceEntry", "serviceentries"),
        ("WorkloadEntry", "workloadentries"),
        ("Sidecar", "sidecars"),
        ("Gateway", "gateways"),
    )
}
PLURALS = {kind: key for key, (kind, _, _) in {**CORE, **ISTIO}.items()}


@dataclass
class _Event:
    version: int
    resource: tuple[str, str]
    type: str
    obj: dict[str, Any]


@dataclass
class KubeApi:
    """The emulator's state and behaviour; ``serve()`` puts it on HTTPS."""

    istio_crds: bool = True
    bookmark_interval: float = 0.5
    delay: float = 0.0
    version: int = 1000
    objects: dict[tuple[str, str], dict[str, dict[str, Any]]] = field(default_factory=dict)
    events: list[_Event] = field(default_factory=list)
    compacted: int = 0  # events at or below this version are gone
    requests: list[str] = field(default_factory=list)  # "GET path?query" of every request
    # TokenReview: service-account token -> "system:serviceaccount:NS:SA"
    service_account_tokens: dict[str, str] = field(default_factory=dict)
    token_reviews: int = 0
    _failures: list[int] = field(default_factory=list)
    _watchers: set[asyncio.Queue[_Event | None]] = field(default_factory=set)
    _streams: set[web.StreamResponse] = field(default_factory=set)

    # --- writes ------------------------------------------------------------------------

    def apply(self, *docs: Mapping[str, Any] | str) -> list[dict[str, Any]]:
        """Create or replace objects (dicts, or YAML text of one or more documents)."""
        out = []
        for doc in _documents(docs):
            resource = self._resource_of(doc)
            store = self.objects.setdefault(resource, {})
            obj = copy.deepcopy(dict(doc))
            meta = obj.setdefault("metadata", {})
            if self._namespaced(resource):
                meta.setdefault("namespace", "default")
            key = _key(obj)
            old = store.get(key)
            self.version += 1
            meta["resourceVersion"] = str(self.version)
            meta.setdefault("uid", f"uid-{self.version}")
            meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
            if old is not None:
                meta["uid"] = old["metadata"]["uid"]
                meta["creationTimestamp"] = old["metadata"]["creationTimestamp"]
            store[key] = obj
            self._emit(resource, "MODIFIED" if old is not None else "ADDED", obj)
            out.append(obj)
        return out

    def set_status(self, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """What a status writer does: a new resourceVersion, the same spec."""
        resource = PLURALS[kind]
        obj = copy.deepcopy(self.objects[resource][f"{namespace}/{name}" if namespace else name])
        obj["status"] = dict(status)
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        obj["metadata"]["managedFields"] = [{"manager": "status-writer", "operation": "Update"}]
        self.objects[resource][_key(obj)] = obj
        self._emit(resource, "MODIFIED", obj)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        resource = PLURALS[kind]
        obj = self.objects[resource].pop(f"{namespace}/{name}" if namespace else name)
        self.version += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.version)
        self._emit(resource, "DELETED", obj)

    def _emit(self, resource: tuple[str, str], kind: str, obj: dict[str, Any]) -> None:
        event = _Event(self.version, resource, kind, copy.deepcopy(obj))
        self.events.append(event)
        for queue in self._watchers:
            queue.put_nowait(event)

    # --- faults ------------------------------------------------------------------------

    def compact(self) -> None:
        """Forget every event so far, as etcd compaction does: older versions answer 410."""
        self.compacted = self.version
        self.events.clear()

    def drop_watches(self) -> None:
        """Cut every open watch connection mid-stream."""
        for stream in list(self._streams):
            transport = stream._req.transport if stream._req is not None else None
            if transport is not None:
                transport.abort()
        for queue in self._watchers:
            queue.put_nowait(None)

    def fail(self, count: int, status: int = 500) -> None:
        """The next ``count`` requests answer ``status``."""
        self._failures.extend([status] * count)

    def state(self, kind: str) -> dict[str, dict[str, Any]]:
        return self.objects.get(PLURALS[kind], {})

    # --- HTTP --------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_get("/api", self._core_versions)
        app.router.add_get("/apis", self._groups)
        app.router.add_get("/apis/{group}", self._group)
        app.router.add_get("/api/{version}", self._resources)
        app.router.add_get("/apis/{group}/{version}", self._resources)
        app.router.add_get("/api/{version}/{plural}", self._collection)
        app.router.add_get("/api/{version}/namespaces/{namespace}/{plural}", self._collection)
        app.router.add_get("/apis/{group}/{version}/{plural}", self._collection)
        app.router.add_get("/apis/{group}/{version}/namespaces/{namespace}/{plural}", self._collection)
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self._token_review)
        return app

    async def _token_review(self, request: web.Request) -> web.Response:
        """TokenReview as the API server answers it: authenticated with the token's service
        account user and the audiences asked for, else not authenticated."""
        self.token_reviews += 1
        review = await request.json()
        spec = review.get("spec", {})
        user = self.service_account_tokens.get(spec.get("token", ""))
        status: dict[str, Any] = {"authenticated": user is not None}
        if user is not None:
            status["user"] = {"username": user, "groups": ["system:serviceaccounts"]}
            status["audiences"] = spec.get("audiences") or []
        else:
            status["error"] = "invalid bearer token"
        return web.json_response({**review, "status": status}, status=201)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append(f"{request.method} {request.path_qs}")
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized")
        if self.delay:
            await asyncio.sleep(self.delay)
        if self._failures:
            code = self._failures.pop(0)
            return _status(code, f"injected failure {code}")
        response: web.StreamResponse = await handler(request)
        return response

    def __post_init__(self) -> None:
        if self.istio_crds:
            self.install_istio_crds()

    def install_istio_crds(self, versions: tuple[str, ...] = ("v1", "v1beta1", "v1alpha3")) -> None:
        """The CRDs of the Istio networking kinds, serving ``versions``."""
        for (group, plural), (kind, _, _) in ISTIO.items():
            self.apply(
                {
                    "apiVersion": "apiextensions.k8s.io/v1",
                    "kind": "CustomResourceDefinition",
                    "metadata": {"name": f"{plural}.{group}"},
                    "spec": {
                        "group": group,
                        "names": {"kind": kind, "plural": plural},
                        "scope": "Namespaced",
                        "versions": [{"name": v, "served": True, "storage": v == versions[0]} for v in versions],
                    },
                }
            )

    def _served(self) -> dict[tuple[str, str], tuple[str, tuple[str, ...], bool]]:
        """The core resources and the Istio kinds whose CRD is installed (in the versions it serves)."""
        out = dict(CORE)
        for crd in self.objects.get(("apiextensions.k8s.io", "customresourcedefinitions"), {}).values():
            spec = crd["spec"]
            served = tuple(v["name"] for v in spec["versions"] if v.get("served"))
            out[(spec["group"], spec["names"]["plural"])] = (spec["names"]["kind"], served, True)
        return out

    async def _core_versions(self, request: web.Request) -> web.Response:
        return web.json_response({"kind": "APIVersions", "versions": ["v1"]})

    async def _groups(self, request: web.Request) -> web.Response:
        groups: dict[str, tuple[str, ...]] = {}
        for (group, _), (_, versions, _) in self._served().items():
            if group:
                groups[group] = versions
        return web.json_response(
            {
                "kind": "APIGroupList",
                "groups": [
                    {
                        "name": name,
                        "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions],
                        "preferredVersion": {"groupVersion": f"{name}/{versions[0]}", "version": versions[0]},
                    }
                    for name, versions in sorted(groups.items())
                ],
            }
        )

    async def _group(self, request: web.Request) -> web.Response:
        name = request.match_info["group"]
        versions = next((v for (g, _), (_, v, _) in self._served().items() if g == name), None)
        if versions is None:
            return _status(404, "the server could not find the requested resource")
        return web.json_response(
            {
                "kind": "APIGroup",
                "name": name,
                "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions],
                "preferredVersion": {"groupVersion": f"{name}/{versions[0]}", "version": versions[0]},
            }
        )

    async def _resources(self, request: web.Request) -> web.Response:
        group, version = request.match_info.get("group", ""), request.match_info["version"]
        found = [
            {"name": plural, "kind": kind, "namespaced": namespaced, "verbs": ["get", "list", "watch"]}
            for (g, plural), (kind, versions, namespaced) in self._served().items()
            if g == group and version in versions
        ]
        if not found:
            return _status(404, "the server could not find the requested resource")
        return web.json_response(
            {"kind": "APIResourceList", "groupVersion": f"{group}/{version}" if group else version, "resources": found}
        )

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        info = request.match_info
        resource = (info.get("group", ""), info["plural"])
        served = self._served().get(resource)
        if served is None or info["version"] not in served[1]:
            return _status(404, "the server could not find the requested resource")
        matches = _Selector(request.query, info.get("namespace", ""))
        if request.query.get("watch") in ("true", "1"):
            return await self._watch(request, resource, info["version"], matches)
        return self._list(request, resource, info["version"], matches)

    def _list(
        self, request: web.Request, resource: tuple[str, str], version: str, matches: _Selector
    ) -> web.Response:
        token = request.query.get("continue", "")
        if token:
            snapshot, offset = (int(x) for x in base64.b64decode(token).decode().split(":"))
            if snapshot < self.compacted:
                return _status(410, "The provided continue parameter is too old")
        else:
            snapshot, offset = self.version, 0
        items = sorted(
            (o for o in self.objects.get(resource, {}).values() if matches(o)),
            key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]),
        )
        # the emulator keeps no history of objects: a continued list reads the current state,
        # which is what a list at the snapshot would show unless writes came in between
        limit = int(request.query.get("limit") or 0)
        page = items[offset : offset + limit] if limit else items[offset:]
        meta: dict[str, Any] = {"resourceVersion": str(snapshot)}
        if limit and offset + limit < len(items):
            meta["continue"] = base64.b64encode(f"{snapshot}:{offset + limit}".encode()).decode()
            meta["remainingItemCount"] = len(items) - offset - limit
        kind = self._served()[resource][0]
        body = [{k: v for k, v in self._versioned(o, resource, version).items() if k not in ("kind", "apiVersion")}
                for o in page]
        return web.json_response(
            {"kind": f"{kind}List", "apiVersion": _group_version(resource[0], version), "metadata": meta, "items": body}
        )

    async def _watch(
        self, request: web.Request, resource: tuple[str, str], version: str, matches: _Selector
    ) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or self.version)
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        bookmarks = request.query.get("allowWatchBookmarks") in ("true", "1")
        stream = web.StreamResponse(headers={"Content-Type": "application/json"})
        await stream.prepare(request)
        self._streams.add(stream)
        queue: asyncio.Queue[_Event | None] = asyncio.Queue()
        self._watchers.add(queue)
        try:
            if since < self.compacted:
                gone = {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410,
                        "message": f"too old resource version: {since} ({self.compacted})"}
                await _send(stream, {"type": "ERROR", "object": gone})
                return stream
            for event in [e for e in self.events if e.version > since]:
                queue.put_nowait(event)
            deadline = asyncio.get_running_loop().time() + timeout
            while (left := deadline - asyncio.get_running_loop().time()) > 0:
                wait = min(left, self.bookmark_interval) if bookmarks else left
                try:
                    event = await asyncio.wait_for(queue.get(), wait)
                except TimeoutError:
                    if bookmarks and left > wait:
                        mark = {"kind": self._served()[resource][0], "apiVersion": _group_version(resource[0], version),
                                "metadata": {"resourceVersion": str(self.version)}}
                        await _send(stream, {"type": "BOOKMARK", "object": mark})
                    continue
                if event is None:
                    break  # dropped
                if event.resource == resource and event.version > since and matches(event.obj):
                    await _send(stream, {"type": event.type, "object": self._versioned(event.obj, resource, version)})
            return stream
        except (ConnectionError, RuntimeError, ClientConnectionResetError):
            return stream  # the client went away
        finally:
            self._watchers.discard(queue)
            self._streams.discard(stream)

    def _versioned(self, obj: Mapping[str, Any], resource: tuple[str, str], version: str) -> dict[str, Any]:
        """The object as served in the version asked for (the CRDs convert between Istio's)."""
        return {**obj, "apiVersion": _group_version(resource[0], version), "kind": self._served()[resource][0]}

    def _resource_of(self, doc: Mapping[str, Any]) -> tuple[str, str]:
        resource = PLURALS.get(str(doc.get("kind")))
        if resource is None:
            raise ValueError(f"the emulator serves no kind {doc.get('kind')!r}")
        return resource

    def _namespaced(self, resource: tuple[str, str]) -> bool:
        return {**CORE, **ISTIO}[resource][2]


    # --- serving -----------------------------------------------------------------------

    @asynccontextmanager
    async def serve(self, workdir: Path) -> AsyncIterator[Path]:
        """Serve on an ephemeral HTTPS port; yields a kubeconfig for it."""
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(context)
        runner = web.AppRunner(self.app(), handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        workdir.mkdir(parents=True, exist_ok=True)
        ca_file = workdir / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        kubeconfig = workdir / "kubeconfig"
        kubeconfig.write_text(kubeconfig_text(f"https://127.0.0.1:{port}", ca_file, TOKEN))
        try:
            yield kubeconfig
        finally:
            self.drop_watches()
            await runner.cleanup()


@contextmanager
def serve_in_thread(api: KubeApi, workdir: Path) -> Iterator[tuple[Path, Callable[[Callable[[], object]], None]]]:
    """Serve ``api`` from its own thread and event loop (for synchronous tests); yields the
    kubeconfig and a function that runs a change of the emulator on that loop."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="kube-api", daemon=True)
    thread.start()
    serving = api.serve(workdir)
    try:
        kubeconfig = asyncio.run_coroutine_threadsafe(serving.__aenter__(), loop).result(30)

        def change(fn: Callable[[], object]) -> None:
            async def run() -> None:
                fn()

            asyncio.run_coroutine_threadsafe(run(), loop).result(30)

        yield kubeconfig, change
    finally:
        asyncio.run_coroutine_threadsafe(serving.__aexit__(None, None, None), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def kubeconfig_text(server: str, ca_file: Path, token: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
            "users": [{"name": "pilotfish", "user": {"token": token}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "pilotfish"}}],
            "current-context": "emulator",
        }
    )


class _Selector:
    """``labelSelector`` / ``fieldSelector`` and the namespace of a request, as a predicate."""

    def __init__(self, query: Mapping[str, str], namespace: str) -> None:
        self._namespace = namespace
        self._labels = [_term(t) for t in query.get("labelSelector", "").split(",") if t]
        self._fields = [_term(t) for t in query.get("fieldSelector", "").split(",") if t]

    def __call__(self, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if self._namespace and meta.get("namespace") != self._namespace:
            return False
        labels = meta.get("labels") or {}
        for key, op, value in self._labels:
            if op == "exists" and key not in labels:
                return False
            if op == "=" and labels.get(key) != value:
                return False
            if op == "!=" and labels.get(key) == value:
                return False
        fields = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace", "")}
        for key, op, value in self._fields:
            if key not in fields:
                raise ValueError(f"field selector {key} is not supported")
            if (fields[key] == value) != (op == "="):
                return False
        return True


def _term(text: str) -> tuple[str, str, str]:
    for op in ("!=", "==", "="):
        if op in text:
            key, value = text.split(op, 1)
            return key.strip(), "!=" if op == "!=" else "=", value.strip()
    return text.strip(), "exists", ""


def _documents(docs: Iterable[Mapping[str, Any] | str]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for doc in docs:
        if isinstance(doc, str):
            out.extend(d for d in yaml.safe_load_all(doc) if d)
        else:
            out.append(doc)
    return out


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])


def _group_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def _status(code: int, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}
    return web.json_response(body, status=code)


async def _send(stream: web.StreamResponse, event: Mapping[str, Any]) -> None:
    await stream.write(json.dumps(event).encode() + b"\n")
