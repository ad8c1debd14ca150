"""``XdsGenerator``: the control plane's ResourceSource. It keeps the generation state of the
snapshot published last and answers each type through the registry's generator for it
(``registry.py``), from two layers of sharing (DESIGN §1 "Push cost model"):

* the ``ResourceCache`` (across pushes and proxies), for outbound clusters and assignments,
  keyed by exactly what their builders read;
* the per-snapshot class memo (``state.py``): proxies with the same SidecarScope and traits get
  the same CDS/EDS/LDS/RDS sets, assembled once per PushContext version; listeners and route
  configurations are reused across snapshots by the inputs value each is built from.

Assertion mode (``ResourceCache(verify=True)``) compares what every proxy is served, the first
of its class too, with what the builders make for that very proxy. What depends on the proxy's
own workload (inbound clusters, ``virtualInbound``, a gateway's listeners and routes) is built
per proxy. Generation is synchronous and pure.
"""

from __future__ import annotations

from collections.abc import Collection

from app.config.objects import Kind
from app.model.proxy import Proxy, ProxyType
from app.model.push_context import PushContext
from app.model.sidecar_scope import SidecarScope
from app.xds.cache import CacheAssertionError, Dep, ResourceCache
from app.xds.generators.attribution import resource_deps
from app.xds.generators.clusters import ClassClusters
from app.xds.generators.registry import generators
from app.xds.generators.state import SnapshotState, workload_only
from app.xds.push_request import PushRequest
from app.xds.resource import Resource
from app.xds.source import Partial
from app.xds.type_urls import ROUTE, SECRET
from app.xds.watch import WatchedResource

# kinds whose change may alter any cached entry: the cache is cleared and nothing is patched
_EVERYTHING_KINDS = frozenset({Kind.MESH_CONFIG, Kind.CONFIG_MAP, Kind.PEER_AUTHENTICATION})
# types generated for any name asked for (the others' names follow from the snapshot)
_BY_NAME = frozenset({ROUTE, SECRET})


class XdsGenerator:
    """The ResourceSource of the control plane: cached, shared generation over the snapshot
    published last (``publish``; ``push``, when given, is published at once)."""

    def __init__(self, cache: ResourceCache, push: PushContext | None = None) -> None:
        self.cache = cache
        self._generators = generators(cache)
        self._current = None if push is None else SnapshotState(push)

    def publish(self, push: PushContext, request: PushRequest | None = None) -> None:
        """Serve ``push`` from now on, with generation state of its own made now, and drop the
        cache entries built from the configs or endpoint shards ``request`` (the change from
        the snapshot served so far to ``push``; None for the first) changed. A push naming no
        keys, or a mesh config change, drops everything (every entry reads it); any other keeps
        the classes of the snapshot replaced, for ``push``'s to be patched from."""
        previous = self._current
        state = SnapshotState(push)
        if previous is not None:
            state.reusable = previous.next_reusable()
            state.earlier_traits = previous.traits
        self._current = state
        if request is None:
            return
        keys = list(request.configs_updated)
        if request.all_kinds or any(key.kind in _EVERYTHING_KINDS for key in keys):
            # every entry reads these (a PeerAuthentication: the mode auto mTLS follows, keyed by
            # value, so the entries it made stale would otherwise only linger)
            self.cache.clear()
            return
        deps: list[Dep] = list(keys)
        deps.extend(("endpoints", h, ns) for h, ns in request.endpoint_services)
        self.cache.invalidate(deps)
        if previous is not None and previous.push.version == push.version - 1:
            # built from the snapshot replaced: its classes are the parents of push's
            state.parents = {line: cls.parent(ClassClusters) for line, cls in previous.lineage.items()}
            state.parent_request = request
            state.parent_workload_only = workload_only(request)

    def push_context(self) -> PushContext:
        """The snapshot served."""
        return self._state().push

    def _state(self) -> SnapshotState:
        if self._current is None:
            raise RuntimeError("no PushContext before the first build")
        return self._current

    # --- ResourceSource -------------------------------------------------------------------

    def scope(self, proxy: Proxy) -> SidecarScope:
        return self._state().push.sidecar_scope(proxy)

    def generate(self, type_url: str, proxy: Proxy, watch: WatchedResource) -> list[Resource] | None:
        generator = self._generators.get(type_url)
        return None if generator is None else generator.generate(self._state(), proxy, watch)

    def changes(
        self,
        type_url: str,
        proxy: Proxy,
        watch: WatchedResource,
        request: PushRequest,
        previous: SidecarScope | None,
        also: Collection[str],
    ) -> Partial | None:
        generator = self._generators.get(type_url)
        if generator is None or proxy.type is not ProxyType.SIDECAR or request.forced or request.all_kinds:
            return None
        partial = generator.changes(self._state(), proxy, watch, request, previous, also)
        if partial is not None and self.cache.verify:
            self._check_partial(type_url, proxy, watch, partial)
        return partial

    def _check_partial(self, type_url: str, proxy: Proxy, watch: WatchedResource, partial: Partial) -> None:
        """Assertion mode: every resource a partial answer carries is the current one."""
        full = self.generate(type_url, proxy, watch) or []
        current = {r.name: r for r in full}
        for r in partial.resources:
            if current.get(r.name) != r:
                raise CacheAssertionError(f"{type_url} {r.name}: a partial push carries a stale or unknown resource")
        carried = {r.name for r in partial.resources}
        for name in partial.considered:
            if name in current and name not in carried:
                raise CacheAssertionError(f"{type_url} {name}: considered by a partial push but left out")

    def names(self, type_url: str, proxy: Proxy, wanted: Collection[str] = ()) -> list[str]:
        """The names of the type's resources the proxy is served now (of ``wanted`` for routes
        and secrets, which are served by whatever name is asked; every one for the others: the
        endpoints of its clusters), on a watch of its own, so no stream's note changes."""
        explicit = type_url in _BY_NAME and bool(wanted)
        watch = WatchedResource(type_url, not explicit, frozenset(wanted) if explicit else frozenset())
        return [r.name for r in self.generate(type_url, proxy, watch) or ()]

    def deps(self, type_url: str, proxy: Proxy, name: str) -> frozenset[Dep]:
        """The dependency keys the resource ``name`` the proxy is served was built from
        (``attribution.resource_deps``: the keys its cache entry records and the push filter
        tests)."""
        return resource_deps(self._state(), proxy, type_url, name)

    def forget(self, proxy: Proxy) -> None:
        """A proxy's stream ended: its class entry goes (a snapshot may outlive many proxies)."""
        if self._current is not None:
            self._current.forget(proxy)
