"""A Kubernetes API server emulator for the faults a real one cannot be made to produce on cue:
watch connections cut mid-stream (``drop_watches``), the next n requests answering an error
status (``fail``), a slow server (``delay``). Everything else runs against the real
kube-apiserver (tests/support/cluster.py); this serves only what those fault tests use.

Over real HTTPS (a trustme CA) with a bearer token, so pilotfish's own client talks
to it. What it keeps as the API server does:

* one resourceVersion counter for every write; objects carry the version of their last write;
* list: items sorted by namespace/name, ``limit`` / ``continue``, ``fieldSelector``
  (``metadata.name``, ``metadata.namespace``); the list's ``metadata.resourceVersion`` is the
  current version;
* watch: ``resourceVersion`` replays the events after it, then follows live ones;
  ``timeoutSeconds`` ends the stream;
* the Istio networking CRDs, as CustomResourceDefinition objects, and their collections;
* ``/api`` (the reachability check) and TokenReview for the service-account tokens it is given.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
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
    ("", "nodes"): ("Node", ("v1",), False),
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

    delay: float = 0.0
    version: int = 1000
    objects: dict[tuple[str, str], dict[str, dict[str, Any]]] = field(default_factory=dict)
    events: list[_Event] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # "GET path?query" of every request
    # TokenReview: service-account token -> "system:serviceaccount:NS:SA"
    service_account_tokens: dict[str, str] = field(default_factory=dict)
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
        app.router.add_get("/api/{version}/{plural}", self._collection)
        app.router.add_get("/api/{version}/namespaces/{namespace}/{plural}", self._collection)
        app.router.add_get("/apis/{group}/{version}/{plural}", self._collection)
        app.router.add_get("/apis/{group}/{version}/namespaces/{namespace}/{plural}", self._collection)
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self._token_review)
        return app

    async def _token_review(self, request: web.Request) -> web.Response:
        """TokenReview as the API server answers it: authenticated with the token's service
        account user and the audiences asked for, else not authenticated."""
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
        """The CRDs of the Istio networking kinds."""
        versions = ("v1", "v1beta1", "v1alpha3")
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
        return {**CORE, **ISTIO}

    async def _core_versions(self, request: web.Request) -> web.Response:
        return web.json_response({"kind": "APIVersions", "versions": ["v1"]})

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
        stream = web.StreamResponse(headers={"Content-Type": "application/json"})
        await stream.prepare(request)
        self._streams.add(stream)
        queue: asyncio.Queue[_Event | None] = asyncio.Queue()
        self._watchers.add(queue)
        try:
            for event in [e for e in self.events if e.version > since]:
                queue.put_nowait(event)
            async with asyncio.timeout(timeout):
                while (event := await queue.get()) is not None:  # None: dropped
                    if event.resource == resource and event.version > since and matches(event.obj):
                        obj = self._versioned(event.obj, resource, version)
                        await _send(stream, {"type": event.type, "object": obj})
            return stream
        except TimeoutError:
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
    """``fieldSelector`` and the namespace of a request, as a predicate."""

    def __init__(self, query: Mapping[str, str], namespace: str) -> None:
        self._namespace = namespace
        self._fields = [_term(t) for t in query.get("fieldSelector", "").split(",") if t]

    def __call__(self, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if self._namespace and meta.get("namespace") != self._namespace:
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
    raise ValueError(f"field selector {text!r} is not supported")


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
