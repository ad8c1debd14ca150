"""LDS (istiod LdsGenerator): a class's scope-wide listeners, shared, and the proxy's own
workload listeners (``virtualInbound``, a gateway's listeners), built per proxy.

A scope-wide listener is built from its inputs value alone (``translate.listener.inputs``), so
the class reuses the listener an earlier snapshot of its lineage built from an equal value: a
change that adds one service rebuilds one listener, not a thousand. A sidecar's inbound
listeners are likewise built from a value (``InboundListenerInputs``); its stream keeps the last
ones (``WatchedResource.synced``) and reuses them while the value holds, so a push that does not
touch the workload (a Sidecar narrowing egress, a ServiceEntry) rebuilds none of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from app.model.proxy import Proxy, ProxyType
from app.model.push_context import PushContext
from app.model.sidecar_scope import SidecarScope
from app.translate.listener.builder import build_scope_listener
from app.translate.listener.for_proxy import inbound_listener_inputs, scope_listener_inputs, workload_listeners
from app.translate.listener.inbound import InboundListenerInputs, build_inbound_listeners
from app.translate.listener.inputs import ScopeListenerInputs
from app.xds.cache import ResourceCache
from app.xds.generators.base import WholeTypeOnly, check
from app.xds.generators.state import ProxyClass, SnapshotState
from app.xds.resource import Resource, encode
from app.xds.watch import WatchedResource

_NONE: Mapping[ScopeListenerInputs, Resource] = {}


@dataclass(frozen=True, slots=True)
class _OwnListeners:
    """A stream's note: the sidecar's inbound listeners, encoded, and what they were built from."""

    inputs: InboundListenerInputs
    resources: tuple[Resource, ...]


@dataclass(slots=True)
class ClassListeners:
    """A class's scope-wide listeners in one snapshot, and the same by what each is built from."""

    earlier: Mapping[ScopeListenerInputs, Resource]  # its lineage's in an earlier snapshot
    listeners: list[Resource] | None = None
    by_inputs: dict[ScopeListenerInputs, Resource] = field(default_factory=dict)

    def reusable(self) -> Mapping[ScopeListenerInputs, Resource]:
        return self.by_inputs or self.earlier


def _class_listeners(cls: ProxyClass) -> ClassListeners:
    earlier = cls.earlier.get(ClassListeners, _NONE)
    assert isinstance(earlier, Mapping)
    return ClassListeners(earlier)


class ListenerGenerator(WholeTypeOnly):
    def __init__(self, cache: ResourceCache) -> None:
        self.cache = cache

    def generate(self, state: SnapshotState, proxy: Proxy, watch: WatchedResource) -> list[Resource] | None:
        push = state.push
        cls = state.proxy_class(proxy)
        scope = cls.scope
        sets = cls.part(ClassListeners, lambda: _class_listeners(cls))
        if sets.listeners is None:
            built = []
            for inputs in scope_listener_inputs(cls.traits.scope_proxy, push, scope):
                found = sets.earlier.get(inputs)
                if found is None:
                    listener = build_scope_listener(inputs)
                    found = encode(listener.name, listener)
                sets.by_inputs[inputs] = found
                built.append(found)
            sets.listeners = built
        if self.cache.verify:
            reference = [build_scope_listener(i) for i in scope_listener_inputs(proxy, push, scope)]
            check("scope listeners", sets.listeners, reference)
        own = self._own(proxy, push, scope, watch)
        unique: dict[str, Resource] = {}
        for r in (*sets.listeners, *own):
            unique.setdefault(r.name, r)
        return [unique[name] for name in sorted(unique) if watch.wants(name)]

    def _own(self, proxy: Proxy, push: PushContext, scope: SidecarScope, watch: WatchedResource) -> Sequence[Resource]:
        if proxy.type is ProxyType.ROUTER:  # a gateway's listeners: few proxies, many inputs
            return [encode(m.name, m) for m in workload_listeners(proxy, push, scope)]
        inputs = inbound_listener_inputs(proxy, push, scope)
        kept = watch.synced
        if isinstance(kept, _OwnListeners) and kept.inputs == inputs:
            if self.cache.verify:
                check("the proxy's inbound listeners", kept.resources, build_inbound_listeners(inputs))
            return kept.resources
        built = tuple(encode(m.name, m) for m in build_inbound_listeners(inputs))
        watch.synced = _OwnListeners(inputs, built)
        return built
