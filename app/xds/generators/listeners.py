"""LDS (istiod LdsGenerator): a class's scope-wide listeners, shared, and the proxy's own
workload listeners (``virtualInbound``, a gateway's listeners), built per proxy.

A scope-wide listener is built from its inputs value alone (``translate.listener.inputs``), so
the class reuses the listener an earlier snapshot of its lineage built from an equal value: a
change that adds one service rebuilds one listener, not a thousand. A sidecar's inbound
listeners are likewise built from a value (``InboundListenerInputs``, the proxy narrowed to what
they read): its stream keeps the last ones (``WatchedResource.synced``) and reuses them while the
value holds, so a push that does not touch the workload (a Sidecar narrowing egress, a
ServiceEntry) rebuilds none of them, and the replicas of a workload share one build per
snapshot. The note also holds the class set the client was last brought to: a push answers a
sidecar with the difference to the class's current set, computed once per class (as CDS does).
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from envoy.config.listener.v3 import listener_pb2

from app.model.envoy_filter import MergedPatches, PatchContext
from app.model.ident import Ident
from app.model.proxy import Proxy, ProxyType
from app.model.sidecar_scope import SidecarScope
from app.translate.envoy_filter.listeners import patch_inline_routes, patch_listeners, patches_listeners
from app.translate.envoy_filter.routes import patch_route_configuration, patches_routes
from app.translate.listener.builder import build_scope_listener
from app.translate.listener.for_proxy import inbound_listener_inputs, scope_listener_inputs, workload_listeners
from app.translate.listener.inbound import InboundListenerInputs, build_inbound_listeners
from app.translate.listener.inputs import ScopeListenerInputs
from app.xds.cache import ResourceCache
from app.xds.generators.base import check, class_difference
from app.xds.generators.envoy_filters import PatchMemo, encoded
from app.xds.generators.state import ProxyClass, SnapshotState
from app.xds.generators.traits import proxy_key
from app.xds.push_request import PushRequest
from app.xds.resource import Resource, encode
from app.xds.source import Partial
from app.xds.watch import WatchedResource

# a scope-wide listener and what it was built from: the inputs value a snapshot first built it
# from, kept as the key while later snapshots find an equal one (one value, not one per snapshot)
_Built = tuple[ScopeListenerInputs, Resource]


@dataclass(frozen=True, slots=True)
class _Earlier:
    """A lineage's scope-wide listeners as a snapshot built them: by what each is built from
    (for equal inputs later), by name, and that snapshot's version."""

    built: Mapping[ScopeListenerInputs, _Built]
    by_name: Mapping[str, Resource]
    version: int


_NONE = _Earlier({}, {}, -1)


@dataclass(frozen=True, slots=True)
class _OwnListeners:
    """A sidecar's inbound listeners, encoded, and what they were built from."""

    inputs: InboundListenerInputs
    resources: tuple[Resource, ...]


@dataclass(slots=True)
class _SharedInbound:
    """Per snapshot: the sidecars' inbound listeners built, by a coarse key of their inputs."""

    built: dict[Hashable, list[_OwnListeners]] = field(default_factory=dict)


def _inbound_key(inputs: InboundListenerInputs) -> Hashable:
    """What splits inbound inputs cheaply (they are compared, not hashed): the narrowed proxy
    and its targets' services and ports."""
    targets = tuple((Ident(service), port.port, endpoint.port) for service, port, endpoint in inputs.targets)
    return proxy_key(inputs.proxy), targets


@dataclass(frozen=True, slots=True)
class _Synced:
    """A stream's note: the class listeners (by name) and the sidecar's own inbound listeners
    the client was last brought to (own: None for a router, whose listeners are rebuilt)."""

    shared: Mapping[str, Resource]
    own: _OwnListeners | None
    sent: frozenset[str] = frozenset()  # the names of the own listeners served (patched: others)


@dataclass(slots=True)
class ClassListeners:
    """A class's scope-wide listeners in one snapshot, by name (sorted; a name built twice keeps
    the first), and the same by what each is built from."""

    earlier: _Earlier  # its lineage's in an earlier snapshot, until built
    by_name: Mapping[str, Resource] | None = None
    by_inputs: Mapping[ScopeListenerInputs, _Built] = field(default_factory=dict)
    version: int = -1  # the snapshot they were built in

    def reusable(self) -> _Earlier:
        if self.by_name is None:
            return self.earlier
        return _Earlier(self.by_inputs, self.by_name, self.version)


def _class_listeners(cls: ProxyClass) -> ClassListeners:
    earlier = cls.inherit(ClassListeners, _NONE)
    assert isinstance(earlier, _Earlier)
    return ClassListeners(earlier)


_by_name = operator.attrgetter("name")


def _beside(shared: Mapping[str, Resource], own: Sequence[Resource]) -> list[Resource]:
    """The proxy's own listeners served beside the class's, sorted: a name built twice keeps
    the class's, else the first."""
    unique: dict[str, Resource] = {}
    for r in own:
        if r.name not in shared:
            unique.setdefault(r.name, r)
    return sorted(unique.values(), key=_by_name)


@dataclass(slots=True)
class _PatchedListeners:
    """A class's scope-wide listeners with its EnvoyFilter patches applied, by name (sorted)."""

    by_name: dict[str, Resource] | None = None


class ListenerGenerator:
    def __init__(self, cache: ResourceCache) -> None:
        self.cache = cache
        self.patched = PatchMemo()

    def generate(self, state: SnapshotState, proxy: Proxy, watch: WatchedResource) -> list[Resource] | None:
        shared, extra = self._bring(state, proxy, watch)
        # two sorted runs: the sort merges them in linear time
        merged = sorted((*shared.values(), *extra), key=_by_name) if extra else list(shared.values())
        return merged if watch.wildcard else [r for r in merged if watch.wants(r.name)]

    def changes(
        self,
        state: SnapshotState,
        proxy: Proxy,
        watch: WatchedResource,
        request: PushRequest,
        previous: SidecarScope | None,
        also: Collection[str],
    ) -> Partial | None:
        """The class listeners' difference to what the client was last brought to (one diff per
        class), and the sidecar's own listeners in full (a handful)."""
        synced = watch.synced
        if not isinstance(synced, _Synced) or not watch.wildcard:
            return None
        shared, extra = self._bring(state, proxy, watch)
        changed, removed = class_difference(state, synced.shared, shared)
        was_own = () if synced.own is None else (r.name for r in synced.own.resources)
        considered = frozenset((*(r.name for r in changed), *removed, *(r.name for r in extra), *was_own, *synced.sent))
        return Partial([*changed, *extra], considered)

    def _bring(
        self, state: SnapshotState, proxy: Proxy, watch: WatchedResource
    ) -> tuple[Mapping[str, Resource], Sequence[Resource]]:
        """The class listeners and the proxy's own beside them, noted on the watch as what the
        client is brought to."""
        shared = self._shared(state, proxy)
        own, note = self._own(state, proxy, watch.synced)
        patches = state.proxy_class(proxy).patches
        if patches is not None and (patches_listeners(patches) or patches_routes(patches)):
            shared = self._patched_shared(state, proxy, patches, shared)
            own = self._patched_own(proxy, patches, own)
        extra = _beside(shared, own)
        watch.synced = _Synced(shared, note, frozenset(r.name for r in extra) if patches is not None else frozenset())
        return shared, extra

    def _patched_shared(
        self, state: SnapshotState, proxy: Proxy, patches: MergedPatches, shared: Mapping[str, Resource]
    ) -> Mapping[str, Resource]:
        """The class's listeners patched in the outbound (gateway) context, and the listeners
        that context's patches add (istiod patchListeners)."""
        found = state.proxy_class(proxy).part(_PatchedListeners, _PatchedListeners)
        if found.by_name is None:
            context = PatchContext.GATEWAY if proxy.type is ProxyType.ROUTER else PatchContext.SIDECAR_OUTBOUND
            by_name = {r.name: r for r in self._patch(context, patches, shared.values())}
            for r in encoded(patch_listeners(context, patches, ())):
                by_name.setdefault(r.name, r)
            found.by_name = {name: by_name[name] for name in sorted(by_name)}
        return found.by_name

    def _patched_own(self, proxy: Proxy, patches: MergedPatches, own: Sequence[Resource]) -> list[Resource]:
        """A sidecar's own listeners patched in the inbound context (their inline route
        configurations first), a gateway's in the gateway context; then the listeners the
        context's patches add."""
        context = PatchContext.GATEWAY if proxy.type is ProxyType.ROUTER else PatchContext.SIDECAR_INBOUND
        out = self._patch(context, patches, own)
        out.extend(encoded(patch_listeners(context, patches, ())))
        return out

    def _patch(self, context: int, patches: MergedPatches, resources: Iterable[Resource]) -> list[Resource]:
        inline = context == PatchContext.SIDECAR_INBOUND and patches_routes(patches)

        def patch(listener: listener_pb2.Listener) -> listener_pb2.Listener | None:
            if inline:
                listener = patch_inline_routes(listener, lambda rc: patch_route_configuration(context, patches, rc))
            found = patch_listeners(context, patches, (listener,), skip_adds=True)
            return found[0] if found else None

        out = []
        for r in resources:
            patched = self.patched.patched(patches, context, r, listener_pb2.Listener.FromString, patch)
            if patched is not None:
                out.append(patched)
        return out

    def _shared(self, state: SnapshotState, proxy: Proxy) -> Mapping[str, Resource]:
        push = state.push
        cls = state.proxy_class(proxy)
        sets = cls.part(ClassListeners, lambda: _class_listeners(cls))
        if sets.by_name is None:
            earlier = sets.earlier
            if earlier.version == push.version - 1 and state.unchanged_since_parent(cls):
                sets.by_inputs, sets.by_name = earlier.built, earlier.by_name  # nothing planned again
            else:
                by_inputs: dict[ScopeListenerInputs, _Built] = {}
                built: dict[str, Resource] = {}
                for inputs in scope_listener_inputs(cls.traits.scope_proxy, push, cls.scope):
                    found = earlier.built.get(inputs)
                    if found is None:
                        listener = build_scope_listener(inputs)
                        found = (inputs, encode(listener.name, listener))
                    by_inputs[found[0]] = found
                    built.setdefault(found[1].name, found[1])
                sets.by_inputs, sets.by_name = by_inputs, {name: built[name] for name in sorted(built)}
            sets.version = push.version
            # what is not reused now never will be: the mapping would hold a third generation
            # of inputs (a 1,000-service mesh's 50 classes: 50,000 values, ~50 MB) for nothing
            sets.earlier = _NONE
        if self.cache.verify:
            reference = [build_scope_listener(i) for i in scope_listener_inputs(proxy, push, cls.scope)]
            unique = {m.name: m for m in reversed(reference)}  # the first of a name, as above
            check("scope listeners", list(sets.by_name.values()), [unique[n] for n in sorted(unique)])
        return sets.by_name

    def _own(
        self, state: SnapshotState, proxy: Proxy, synced: object
    ) -> tuple[Sequence[Resource], _OwnListeners | None]:
        """The proxy's own listeners and the note to keep of them: a sidecar's inbound ones are
        reused from the stream's note while what they are built from holds."""
        push = state.push
        scope = state.proxy_class(proxy).scope
        if proxy.type is ProxyType.ROUTER:  # a gateway's listeners: few proxies, many inputs
            return [encode(m.name, m) for m in workload_listeners(proxy, push, scope)], None
        inputs = inbound_listener_inputs(proxy, push, scope)
        kept = synced.own if isinstance(synced, _Synced) else None
        if kept is None or kept.inputs != inputs:
            # the replicas of a workload have equal inputs: the first of them in a snapshot builds
            shared = state.part(_SharedInbound, _SharedInbound).built.setdefault(_inbound_key(inputs), [])
            kept = next((found for found in shared if found.inputs == inputs), None)
            if kept is None:
                kept = _OwnListeners(inputs, tuple(encode(m.name, m) for m in build_inbound_listeners(inputs)))
                shared.append(kept)
        if self.cache.verify:
            whole = build_inbound_listeners(inbound_listener_inputs(proxy, push, scope, whole=True))
            check("the proxy's inbound listeners", kept.resources, whole)
        return kept.resources, kept
