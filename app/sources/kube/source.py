"""The Kubernetes config source: informers on the API server, as ConfigEvents.

One informer per resource pilotfish reads (resources.py). Their deltas go through the same
loader and validation as a file's documents (``load_object``), so both sources feed the
Environment the same ConfigEvents, under the same bad-input rule: a rejected object is
reported (``rejections()``) and its last good version stays in force; a delete removes it.
The mesh ConfigMap (``istio`` in the system namespace, ``istio-REV`` for a revision as istiod's
getMeshConfigMapName; key ``mesh``) becomes the MeshConfig.

``start()`` checks the API server answers (an unreachable or refusing server is one clear
error; with ``wait_for_server``, in a cluster, an unreachable or failing one is tried again
until it answers, as istiod waits for its informers), starts the informers and returns once
every one has listed; ``watch()`` yields the changes after that, batched as they come. The
Istio kinds are read from the newest version their CRD serves, from when the CRD is there: a
CRD installed later starts its informer then (istiod's CRD watcher), one deleted takes its
objects away.

Validation does not stall the event loop: the objects of each batch (and those a rescoping
brings in) are validated in a worker process (app/workers.py), ``_LOAD_BATCH`` at a time,
before their events are made. One object whose validation fails there (its worker died, or it ran
past ``_LOAD_DEADLINE``) is rejected like an invalid one; its last good version stays in force.
Except the small ones a watch brings, of the kinds whose validation takes time in proportion to
their size: a worker's round trip (pickling, a pipe each way, a process woken at a lower
priority) costs ~1 ms on every config change, validating a 1 KiB DestinationRule 20-50 µs. Up to
``_INLINE_BYTES`` of watch events per batch are validated right here (at most ~1.5 ms, the
slowest kind per byte measured at the bound: bench/results/inline_validation.json); a
VirtualService never is (one RE2 compile of a 1 KiB pattern can take 50 ms), nor an object read
by a later list (its size is not known), nor the mesh config. The first lists are the exception:
before ``start()`` returns nothing is served yet, so their objects of those kinds (a mesh's
Pods, Services and EndpointSlices: 30 ms for 1,000) are validated here while the worker takes
the rest. Sent to a worker that starts at a lower priority beside a busy API server, they kept
the process waiting for 0.15 s of a 0.7 s start (bench/results/start-*.json).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiohttp
from google.protobuf import json_format

from app.config.loader import (
    UNSUPPORTED_KINDS,
    LoadResult,
    Rejection,
    load_object,
    load_objects,
    mesh_configmap_name,
)
from app.config.mesh import MeshConfig
from app.config.objects import ISTIO_KINDS, ConfigEvent, ConfigKey, ConfigObject, EventType, Kind
from app.errors import ConfigError, PilotfishError
from app.sources.kube.client import ApiCallError, KubeClient
from app.sources.kube.discovery import selected, selects
from app.sources.kube.informer import Informer
from app.sources.kube.pool import validation_pool
from app.sources.kube.resources import (
    CRDS,
    ISTIO_RESOURCES,
    KUBE_RESOURCES,
    NAMESPACES,
    REVISION_LABEL,
    UNSUPPORTED_RESOURCES,
    KubeResource,
    mesh_configmap,
)
from app.sources.kube.store import Delta, Raw, object_key, without_managed_fields
from app.supervise import Backoff
from app.workers import WorkerError, WorkerPool

logger = logging.getLogger(__name__)

# a batch that asks for re-scoping (the mesh config came from elsewhere and changed)
_RESCOPE: list[tuple[KubeResource, Delta]] = []
# objects validated per call of the worker, and how long one call may take
_LOAD_BATCH = 256
_LOAD_DEADLINE = 60.0
# events handed over at once by ``watch``
_EVENTS_PER_STEP = 256
# watch-event bytes per batch validated on the event loop, and the kinds that may be: none whose
# validation can take longer than its size says (VirtualService regexes, RequestAuthentication
# JWKS, the mesh config), nor AuthorizationPolicy (2.2 ms at the bound, bench/inline_validation.py)
_INLINE_BYTES = 8192
_INLINE_KINDS = frozenset(
    {
        Kind.DESTINATION_RULE,
        Kind.SERVICE_ENTRY,
        Kind.WORKLOAD_ENTRY,
        Kind.SIDECAR,
        Kind.GATEWAY,
        Kind.PEER_AUTHENTICATION,
        Kind.SERVICE,
        Kind.POD,
        Kind.ENDPOINT_SLICE,
        Kind.NAMESPACE,
    }
)


class KubeUnavailable(PilotfishError):
    """The API server cannot be reached or refuses pilotfish's credentials."""


class KubeSource:
    def __init__(
        self,
        client: KubeClient,
        *,
        system_namespace: str = "istio-system",
        mesh_from_configmap: bool = True,
        revision: str = "",
        page_size: int = 500,
        watch_timeout: int = 300,
        pool: WorkerPool | None = None,
        wait_for_server: bool = False,
    ) -> None:
        """``revision``: the control-plane revision whose mesh ConfigMap is read (``istio-REV``,
        unless ``mesh_from_configmap`` is off) and whose Istio config is (unlabelled, or labelled
        ``istio.io/rev`` with it; "": all); ``pool``:
        where objects are validated (by default, ``validation_pool()`` of its own; the caller
        closes one it gives);
        ``wait_for_server``: an API server that cannot be reached (or answers 5xx) at start is
        waited for (in a cluster: a restarting node or control plane), not an error."""
        self._client = client
        self._wait_for_server = wait_for_server
        self._system_namespace = system_namespace
        self._mesh_from_configmap = mesh_from_configmap
        self._mesh_configmap_name = mesh_configmap_name(revision)
        self._mesh_configmap = mesh_configmap(self._mesh_configmap_name)
        self._revision = revision
        self._selectors: list[Mapping[str, Any]] = []  # discoverySelectors in force
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        # informer deltas as they come; None: an informer's task ended (a bug; watch() raises)
        self._pending: asyncio.Queue[list[tuple[KubeResource, Delta]] | None] = asyncio.Queue()
        self._running: dict[KubeResource, tuple[Informer, asyncio.Task[None]]] = {}
        # the informers of UNSUPPORTED_RESOURCES, never waited for, and the generation of each
        # object last warned of
        self._warning_only: dict[KubeResource, tuple[Informer, asyncio.Task[None]]] = {}
        self._warned: dict[tuple[str, str, str], object] = {}
        self._current: dict[ConfigKey, ConfigObject] = {}
        self._keys: dict[tuple[KubeResource, str], ConfigKey] = {}  # raw object -> the key it loaded as
        self._rejected: dict[tuple[KubeResource, str], ConfigError] = {}
        self._selected: frozenset[str] | None = None  # namespaces read (discoverySelectors); None: all
        self._pool = pool or validation_pool()
        self._own_pool = pool is None
        self._closed = False
        # raw objects validated ahead of the events being made (id -> the object, its result)
        self._loaded: dict[int, tuple[Raw, LoadResult]] = {}

    @property
    def server(self) -> str:
        return self._client.server

    def objects(self) -> list[ConfigObject]:
        return list(self._current.values())

    def rejections(self) -> list[ConfigError]:
        return list(self._rejected.values())

    async def start(self) -> list[ConfigEvent]:
        """Reach the API server, start every informer, and return the ADD events of their first
        lists once all have listed. The Istio kinds' informers start from the CRD informer, for
        the CRDs installed now and, later, for those installed after (istiod's CRD watcher)."""
        self._pool.start()  # its process imports the loader while the lists are read
        await self._check_reachable()
        # the Kubernetes kinds list beside the CRDs, whose list starts the Istio kinds' informers
        self._start_informer(CRDS, "v1")
        for resource in KUBE_RESOURCES:
            self._start_informer(resource, resource.versions[0])
        if self._mesh_from_configmap:
            self._start_informer(self._mesh_configmap, "v1", self._system_namespace)
        await self._synced()
        if not any(r in self._running for r in ISTIO_RESOURCES):
            logger.warning("kubernetes: no Istio CRDs installed; Istio config is read once they are")
        await self._synced()  # the Istio kinds' first lists too
        if self._mesh_from_configmap:
            await self._preload([(self._mesh_configmap, obj, 0) for obj in self._store_objects(self._mesh_configmap)])
            self._selectors = self._configmap_selectors()
        self._selected = self._selection()  # every store has listed: filter the first lists already
        first = self._take_pending()
        # the EndpointSlices after the Pods they name, whichever list came first: the registry then
        # builds each slice once, against its pods, not again for every pod it names
        # (registry/kube.py _on_pod), which grows with the square of a Service's pods
        first.sort(key=lambda batch: bool(batch) and batch[0][0].kind is Kind.ENDPOINT_SLICE)
        return await self._drain(first, starting=True)

    def _start_informer(
        self, resource: KubeResource, version: str, namespace: str = "", held: Sequence[Raw] = ()
    ) -> None:
        """Run an informer; ``held``: what an earlier informer of the resource had (its first list
        then reports only what changed since)."""
        informer = Informer(
            self._client,
            resource,
            version,
            self._on_deltas,
            namespace=namespace,
            page_size=self._page_size,
            watch_timeout=self._watch_timeout,
            transform=resource.transform or without_managed_fields,  # a Node's keeps less still
        )
        informer.store.relist(held)
        task = asyncio.create_task(informer.run(), name=f"informer {resource}")
        # an informer runs until cancelled (closed, or its CRD deleted); ending otherwise is a bug
        task.add_done_callback(lambda t: None if t.cancelled() else self._pending.put_nowait(None))
        self._running[resource] = (informer, task)

    async def _synced(self) -> None:
        """Until every informer started so far has listed once."""
        running = list(self._running.values())
        synced = asyncio.gather(*(informer.synced.wait() for informer, _ in running))
        waiting: list[asyncio.Future[Any]] = [synced, *(task for _, task in running)]
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # an informer ended before its first list, or the caller stopped waiting (e.g. the
            # account may not list yet): the waits go too, or they would outlive the informers
            ended = not synced.done()
            if ended:
                synced.cancel()
        if ended:
            self._raise_ended()

    def _raise_ended(self) -> None:
        for _, task in self._running.values():
            if task.done() and not task.cancelled():
                error = task.exception()
                raise RuntimeError(f"kubernetes: {task.get_name()} stopped: {error!r}") from error

    async def watch(self) -> AsyncIterator[list[ConfigEvent]]:
        """The changes after ``start()``, a batch per wake-up (never an empty list), in steps of
        at most ``_EVENTS_PER_STEP`` with a turn of the event loop between: what the consumer
        does with one batch is done on the loop (a namespace relabelled into the
        discoverySelectors brought 3,000 ServiceEntries back in one 0.3 s step)."""
        while True:
            first = await self._pending.get()
            if first is None:
                self._raise_ended()
                continue
            events = await self._drain([first])
            for start in range(0, len(events), _EVENTS_PER_STEP):
                if start:
                    await asyncio.sleep(0)
                yield events[start : start + _EVENTS_PER_STEP]

    def use_mesh_config(self, mesh: MeshConfig) -> None:
        """The mesh config when it does not come from the ConfigMap (``--mesh-config``): its
        discoverySelectors scope what is read; a change re-scopes on the next ``watch()`` step."""
        self._selectors = _selectors_of(mesh)
        self._pending.put_nowait(_RESCOPE)

    async def close(self) -> None:
        """Stop the informers and close the API client."""
        tasks = [task for _, task in (*self._running.values(), *self._warning_only.values())]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._running.clear()
        self._warning_only.clear()
        self._closed = True
        if self._own_pool:
            self._pool.close()
        await self._client.close()

    # --- informer deltas -> ConfigEvents -------------------------------------------------

    def _on_deltas(self, resource: KubeResource, deltas: list[Delta]) -> None:
        if resource is CRDS:
            for delta in deltas:
                self._on_crd(delta)
        else:
            self._pending.put_nowait([(resource, d) for d in deltas])

    def _on_crd(self, delta: Delta) -> None:
        """An Istio kind's CRD appeared (start its informer, in the newest version it serves) or
        went away or stopped serving every version pilotfish reads (its objects go with it, as
        the API server deletes them). When the version read stops being served but another is,
        the informer moves to it, starting from what it holds, so only real changes follow."""
        spec = delta.obj.get("spec") or {}
        plural = (spec.get("names") or {}).get("plural")
        served = {v.get("name") for v in spec.get("versions") or () if v.get("served")}
        warned = next((r for r in UNSUPPORTED_RESOURCES if spec.get("group") == r.group and plural == r.plural), None)
        if warned is not None:
            self._on_unsupported_crd(warned, "" if delta.change is EventType.DELETE else _newest(warned, served))
            return
        resource = next((r for r in ISTIO_RESOURCES if spec.get("group") == r.group and plural == r.plural), None)
        if resource is None:
            return
        version = _newest(resource, served)
        if delta.change is EventType.DELETE:
            version = ""
        running = self._running.get(resource)
        if running is not None and running[0].version in served and version:
            return  # reading a version still served
        held: list[Raw] = []
        if running is not None:
            informer, task = self._running.pop(resource)
            task.cancel()
            held = informer.store.objects()
            if not version:
                self._pending.put_nowait([(resource, Delta(EventType.DELETE, obj)) for obj in held])
                logger.info("kubernetes: the %s CRD went away; its objects are removed", resource)
        if version:
            logger.info("kubernetes: reading %s/%s", resource, version)
            self._start_informer(resource, version, held=held)

    def _on_unsupported_crd(self, resource: KubeResource, version: str) -> None:
        """The CRD of a kind pilotfish does not apply came, changed or went: its objects are read
        from now on, only to be warned of."""
        running = self._warning_only.get(resource)
        if running is not None:
            if running[0].version == version:
                return  # its CRD's status, or versions not read, changed
            running[1].cancel()
            del self._warning_only[resource]
        if not version:
            self._warned = {k: g for k, g in self._warned.items() if k[0] != resource.kind}
            return
        informer = Informer(
            self._client,
            resource,
            version,
            self._on_unsupported,
            page_size=self._page_size,
            watch_timeout=self._watch_timeout,
            transform=resource.transform,
        )
        task = asyncio.create_task(self._read_if_allowed(informer), name=f"informer {resource}")
        self._warning_only[resource] = (informer, task)

    async def _read_if_allowed(self, informer: Informer) -> None:
        """Run the informer of a kind only warned of, unless the account may not list it: then one
        line says so, instead of a warning at every retry (a start waits for no such informer)."""
        resource = informer.resource
        try:
            async with await self._client.request(
                "GET", resource.path(informer.version), query={"limit": "1"}
            ) as answer:
                forbidden = answer.status == 403
        except (aiohttp.ClientError, TimeoutError, OSError):
            forbidden = False  # the informer retries, as every informer does
        if forbidden:
            logger.warning("kubernetes: may not list %s: objects of it (not applied) go unreported", resource)
            return
        await informer.run()

    def _on_unsupported(self, resource: KubeResource, deltas: list[Delta]) -> None:
        """Warn of each object of a kind pilotfish does not apply, once per generation of its spec."""
        reason = UNSUPPORTED_KINDS[(resource.group, resource.kind)]
        for delta in deltas:
            meta = delta.obj.get("metadata") or {}
            key = (resource.kind, meta.get("namespace", ""), meta.get("name", ""))
            if delta.change is EventType.DELETE:
                self._warned.pop(key, None)
                continue
            if self._revision and not _in_revision(delta.obj, self._revision):
                continue
            generation = meta.get("generation")
            if not self._visible(resource, delta.obj) or (key in self._warned and self._warned[key] == generation):
                continue
            self._warned[key] = generation
            logger.warning("kubernetes: %s '%s/%s': not applied (%s)", key[0], key[1], key[2], reason)

    async def _drain(
        self, batches: list[list[tuple[KubeResource, Delta]]] | None = None, *, starting: bool = False
    ) -> list[ConfigEvent]:
        """The events of ``batches`` and of every batch pending now, their objects validated first
        (``starting``: the first lists, see ``_preload``)."""
        batches = [*(batches or ()), *self._take_pending()]
        try:
            await self._preload([item for batch in batches for item in self._to_load(batch)], starting)
            events: list[ConfigEvent] = []
            for batch in batches:
                # a namespace change in an earlier batch may have made more visible
                await self._preload(self._to_load(batch), starting)
                events.extend(await self._events(batch))
            return events
        finally:
            self._loaded.clear()

    def _take_pending(self) -> list[list[tuple[KubeResource, Delta]]]:
        """Every batch pending now (an informer's task that ended raises, as in ``watch``)."""
        batches = []
        while not self._pending.empty():
            batch = self._pending.get_nowait()
            if batch is None:
                self._raise_ended()
                continue
            batches.append(batch)
        return batches

    def _to_load(self, batch: list[tuple[KubeResource, Delta]]) -> list[tuple[KubeResource, Raw, int]]:
        """The objects of ``batch`` its events will load, as far as visible now, with their sizes."""
        return [
            (resource, delta.obj, delta.size)
            for resource, delta in batch
            if delta.change is not EventType.DELETE and self._visible(resource, delta.obj)
        ]

    async def _events(self, batch: list[tuple[KubeResource, Delta]]) -> list[ConfigEvent]:
        events: list[ConfigEvent] = []
        if batch is _RESCOPE:
            events.extend((await self._rescope(self._selection()))[0])
        for resource, delta in batch:
            if resource is self._mesh_configmap:
                self._selectors = self._configmap_selectors()
                events.extend((await self._rescope(self._selection()))[0])
            elif resource is NAMESPACES:
                rescoped, changed = await self._rescope(self._with_namespace(delta))
                events.extend(rescoped)
                if _namespace_of(resource, delta.obj) in changed:
                    continue  # the rescoping brought it in or took it out already
            if delta.change is EventType.DELETE or self._visible(resource, delta.obj):
                event = self._event(resource, delta)
            else:  # in a namespace not read: gone if it was read before
                event = self._event(resource, Delta(EventType.DELETE, delta.obj))
            if event is not None:
                events.append(event)
        return events

    # --- discoverySelectors -----------------------------------------------------------------

    def _configmap_selectors(self) -> list[Mapping[str, Any]]:
        """The selectors of the mesh ConfigMap as its informer last saw it (none without one)."""
        mesh_map = self._store_objects(self._mesh_configmap)
        if mesh_map:
            loaded = self._load(self._mesh_configmap, mesh_map[0]).objects
            if loaded and loaded[0].kind is Kind.MESH_CONFIG:
                return _selectors_of(loaded[0].spec)
        return []

    def _selection(self) -> frozenset[str] | None:
        """The namespaces read (None: all) under the selectors in force, over every namespace's
        labels as the informer last saw them; for a selector change."""
        namespaces = self._store_objects(NAMESPACES)
        return selected(
            self._selectors, ((_meta(ns).get("name", ""), _meta(ns).get("labels") or {}) for ns in namespaces)
        )

    def _with_namespace(self, delta: Delta) -> frozenset[str] | None:
        """The namespaces read after one namespace changed: only its own membership can move."""
        if self._selected is None:
            return None  # no selectors: every namespace is read
        name = _namespace_of(NAMESPACES, delta.obj)
        labels = _meta(delta.obj).get("labels") or {}
        if delta.change is not EventType.DELETE and selects(self._selectors, labels):
            return self._selected | {name}
        return self._selected - {name}

    def _store_objects(self, resource: KubeResource) -> list[Raw]:
        running = self._running.get(resource)
        return running[0].store.objects() if running is not None else []

    def _visible(self, resource: KubeResource, obj: Raw) -> bool:
        if resource is self._mesh_configmap:
            return True
        if self._revision and resource.kind in ISTIO_KINDS and not _in_revision(obj, self._revision):
            return False
        if self._selected is None:
            return True
        namespace = _namespace_of(resource, obj)
        return not namespace or namespace in self._selected

    async def _rescope(self, after: frozenset[str] | None) -> tuple[list[ConfigEvent], frozenset[str]]:
        """Read ``after`` from now on: the objects of the namespaces that start being read come
        in, those of the namespaces no longer read go; and which namespaces those were."""
        before = self._selected
        if before == after:
            return [], frozenset()
        self._selected = after
        known = {_meta(ns).get("name", "") for ns in self._store_objects(NAMESPACES)}
        everything = known | {key[1].split("/", 1)[0] for key in self._keys if "/" in key[1]}
        changed = (before if before is not None else everything) ^ (after if after is not None else everything)
        deltas: list[tuple[KubeResource, Delta]] = []
        for resource, (informer, _) in list(self._running.items()):
            if resource in (CRDS, self._mesh_configmap):
                continue
            for obj in informer.store.objects():
                if _namespace_of(resource, obj) not in changed:
                    continue
                change = EventType.ADD if self._visible(resource, obj) else EventType.DELETE
                deltas.append((resource, Delta(change, obj)))
        await self._preload([(resource, delta.obj, 0) for resource, delta in deltas if delta.change is EventType.ADD])
        events: list[ConfigEvent] = []
        for resource, delta in deltas:
            event = self._event(resource, delta)
            if event is not None:
                events.append(event)
        read = "every namespace" if after is None else ", ".join(sorted(after))
        logger.info("kubernetes: discoverySelectors: reading %s", read)
        return events, frozenset(changed)

    def _event(self, resource: KubeResource, delta: Delta) -> ConfigEvent | None:
        raw_key = (resource, object_key(delta.obj))
        if delta.change is EventType.DELETE:
            self._rejected.pop(raw_key, None)
            key = self._keys.pop(raw_key, None)
            gone = self._current.pop(key, None) if key is not None else None
            return ConfigEvent(EventType.DELETE, gone) if gone is not None else None
        result = self._load(resource, delta.obj)
        if result.rejected:
            error = result.rejected[0].error
            if self._rejected.get(raw_key) != error:
                logger.warning("%s", error)
            self._rejected[raw_key] = error
            return None  # the last good version stays in force
        self._rejected.pop(raw_key, None)
        if not result.objects:
            return None  # a kind or object pilotfish does not read
        obj = result.objects[0]
        self._keys[raw_key] = obj.key
        old = self._current.get(obj.key)
        self._current[obj.key] = obj
        return ConfigEvent(EventType.ADD if old is None else EventType.UPDATE, obj, old)

    # --- validation, off the event loop but for small objects ----------------------------------

    def _load(self, resource: KubeResource, obj: Raw) -> LoadResult:
        """``obj`` loaded and validated: as ``_preload`` did it ahead, else here."""
        ahead = self._loaded.get(id(obj))
        if ahead is not None and ahead[0] is obj:
            return ahead[1]
        return self._validate(resource, obj)

    def _validate(self, resource: KubeResource, obj: Raw) -> LoadResult:
        return load_object(
            obj, f"kube:{resource}", system_namespace=self._system_namespace, mesh_configmap=self._mesh_configmap_name
        )

    async def _preload(self, items: Sequence[tuple[KubeResource, Raw, int]], starting: bool = False) -> None:
        """Validate these objects (each with the size of the watch event that brought it, 0 when
        unknown) for ``_load`` to find: here those ``_inline`` picks (``starting``: every one of
        the ``_INLINE_KINDS``), meanwhile the rest in a worker process."""
        pending = [(resource, obj, size) for resource, obj, size in items if id(obj) not in self._loaded]
        if not pending or self._closed:
            return
        here = [item for item in pending if item[0].kind in _INLINE_KINDS] if starting else _inline(pending)
        taken = {id(obj) for _, obj, _ in here}
        rest = [(resource, obj) for resource, obj, _ in pending if id(obj) not in taken]
        async with asyncio.TaskGroup() as tg:
            if rest:
                tg.create_task(self._preload_in_worker(rest))
            for n, (resource, obj, _) in enumerate(here, 1):
                self._loaded[id(obj)] = (obj, self._validate(resource, obj))
                if n % _LOAD_BATCH == 0:
                    await asyncio.sleep(0)  # the worker's answers, the health endpoints

    async def _preload_in_worker(self, items: Sequence[tuple[KubeResource, Raw]]) -> None:
        for start in range(0, len(items), _LOAD_BATCH):
            await self._preload_batch(self._pool, items[start : start + _LOAD_BATCH])

    async def _preload_batch(self, pool: WorkerPool, items: Sequence[tuple[KubeResource, Raw]]) -> None:
        docs = [(obj, f"kube:{resource}") for resource, obj in items]
        deadline = time.monotonic() + _LOAD_DEADLINE
        try:
            mesh = self._mesh_configmap_name
            results = await asyncio.wrap_future(
                pool.submit(load_objects, docs, self._system_namespace, True, mesh, deadline=deadline)
            )
        except WorkerError as e:
            if len(items) > 1:  # one of them failed it: each again, alone
                for item in items:
                    await self._preload_batch(pool, [item])
                return
            results = [_unvalidated(docs[0][0], docs[0][1], e)]
        for (_, obj), result in zip(items, results, strict=True):
            self._loaded[id(obj)] = (obj, result)

    # --- reachability -------------------------------------------------------------------

    async def _check_reachable(self) -> None:
        backoff = Backoff()
        while True:
            try:
                await self._client.call("GET", "/api", timeout=15)
                return
            except ApiCallError as e:
                if e.status in (401, 403):
                    raise KubeUnavailable(
                        f"kubernetes: the API server at {self.server} refused pilotfish (HTTP {e.status})"
                    ) from None
                if not e.status:
                    reason = f"kubernetes: cannot reach the API server at {self.server}: {e.message}"
                    again = self._wait_for_server
                else:
                    reason = f"kubernetes: the API server at {self.server} answered HTTP {e.status}: {e.message:.200}"
                    again = self._wait_for_server and e.status >= 500
                if not again:
                    raise KubeUnavailable(reason) from None
            delay = backoff.delay()
            logger.warning("%s; trying again in %.1fs", reason, delay)
            await asyncio.sleep(delay)


def _newest(resource: KubeResource, served: set[str]) -> str:
    """The newest version of ``resource`` pilotfish reads that its CRD serves ("": none)."""
    return next((v for v in resource.versions if v in served), "")


def _meta(obj: Raw) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _namespace_of(resource: KubeResource, obj: Raw) -> str:
    """The namespace an object is in ("" when cluster-scoped); a Namespace is in itself."""
    if resource is NAMESPACES:
        return str(_meta(obj).get("name", ""))
    return str(_meta(obj).get("namespace", "")) if resource.namespaced else ""


def _in_revision(obj: Raw, revision: str) -> bool:
    """istiod's config.LabelsInRevision: an object without ``istio.io/rev`` is every revision's."""
    labels = _meta(obj).get("labels")
    rev = labels.get(REVISION_LABEL) if isinstance(labels, Mapping) else None
    return rev is None or rev == revision


def _inline(items: Sequence[tuple[KubeResource, Raw, int]]) -> list[tuple[KubeResource, Raw, int]]:
    """The objects to validate on the event loop: of the ``_INLINE_KINDS``, brought by a watch
    event, taken in order as long as their sizes add up to at most ``_INLINE_BYTES``."""
    out = []
    left = _INLINE_BYTES
    for item in items:
        resource, _, size = item
        if 0 < size <= left and resource.kind in _INLINE_KINDS:
            out.append(item)
            left -= size
    return out


def _unvalidated(obj: Raw, source: str, error: WorkerError) -> LoadResult:
    """The rejection of an object whose validation could not finish."""
    kind, meta = obj.get("kind"), _meta(obj)
    name = "/".join(str(part) for part in (meta.get("namespace"), meta.get("name")) if part)
    reason = f"could not be validated: {error}"
    error_ = ConfigError(source, kind if isinstance(kind, str) else "", name, "", reason)
    return LoadResult(rejected=[Rejection(None, error_)])


def _selectors_of(mesh: MeshConfig) -> list[Mapping[str, Any]]:
    return [json_format.MessageToDict(s) for s in mesh.discovery_selectors]
