"""Generation state, each part owned by the object of its lifetime (DESIGN §1 "Push cost model").

* ``SnapshotState``: one snapshot. Made when the snapshot is published and replaced with it, so
  none of it is ever read against another snapshot and nothing needs resetting. It holds the
  proxy classes, the parents they are patched from and what earlier snapshots left to reuse, and
  each generator's per-snapshot memo (``part``).
* ``ProxyClass``: one class (scope and traits, ``traits.py``) in one snapshot. Each generator
  keeps its share of the class's build in a part of its own type (``part``); a part that can be
  reused by a later snapshot says what (``Reusing``).
* What a stream was last brought to is the generator's note in ``WatchedResource.synced``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, cast, runtime_checkable

from app.config.mesh import MeshConfig
from app.config.objects import Kind
from app.model.envoy_filter import MergedPatches
from app.model.ident import Ident
from app.model.proxy import Proxy
from app.model.push_context import PushContext
from app.model.sidecar_scope import SidecarScope
from app.translate.listener.plan import per_endpoint_addresses
from app.xds.generators.traits import Traits, labels_read, lineage, traits
from app.xds.push_request import PushRequest

P = TypeVar("P")
# kinds no class-wide build reads: a workload's own policies (its inbound listeners and a
# gateway's carry them; rds.go's skip list holds them too) and what only injection reads
WORKLOAD_ONLY_KINDS = frozenset({Kind.AUTHORIZATION_POLICY, Kind.REQUEST_AUTHENTICATION, Kind.PROXY_CONFIG})
# what a proxy's traits are made of besides the proxy: whether its labels and its own IP are
# read, the label keys its namespace's selecting Telemetries read, and whether a tracing
# provider may read its node
_TraitsOf = tuple[bool, bool, frozenset[str], bool]
_TraitsMemo = dict[Ident[Proxy], dict[_TraitsOf, tuple[Traits, tuple[Hashable, Hashable]]]]


def workload_only(request: PushRequest) -> bool:
    """A push that changed only ``WORKLOAD_ONLY_KINDS``: no endpoint, proxy or forced part."""
    return (
        request.full
        and not (request.forced or request.all_kinds)
        and not (request.endpoint_services or request.proxy_ips or request.relabeled_pods)
        and all(key.kind in WORKLOAD_ONLY_KINDS for key in request.configs_updated)
    )


def _part(parts: dict[type, object], kind: type[P], make: Callable[[], P]) -> P:
    found = parts.get(kind)
    if found is None:
        found = parts[kind] = make()
    assert isinstance(found, kind)
    return found


@runtime_checkable
class Reusing(Protocol):
    """A class part that a later snapshot's class of the same lineage may reuse from."""

    def reusable(self) -> object:
        """What it leaves to the next snapshot (equal inputs build equal bytes)."""
        ...


@functools.cache
def _reuses(kind: type) -> bool:
    """Whether parts of type ``kind`` are ``Reusing``: once per type, as isinstance on a
    runtime-checkable Protocol looks its members up again on every call (about 20 µs on 3.11,
    for every part of every class at every snapshot's publish)."""
    return issubclass(kind, Reusing)


@dataclass(slots=True)
class ProxyClass:
    """Proxies with one SidecarScope and the same traits, in one snapshot: they get the same
    scope-wide resources, built once, as first asked for."""

    scope: SidecarScope
    mesh: MeshConfig
    traits: Traits
    lineage: Hashable
    # what the class's lineage left in earlier snapshots, by part type (see ``reusable``), until
    # the part of that type takes it over (``inherit``)
    earlier: dict[type, object] = field(default_factory=dict)
    parts: dict[type, object] = field(default_factory=dict)
    # the EnvoyFilter patches its proxies get (their key is part of the class's): the generators
    # apply them to what they build for it
    patches: MergedPatches | None = None

    def part(self, kind: type[P], make: Callable[[], P]) -> P:
        """The class's part of this type, made on first ask."""
        return _part(self.parts, kind, make)

    def inherit(self, kind: type, default: object) -> object:
        """What the lineage left for the part of type ``kind``, handed over to the part being
        made: the class keeps no reference of its own, so what the part lets go of once it has
        rebuilt it is freed (a rebuilt route configuration would otherwise stay alive as long as
        the class, a second generation of every one of them)."""
        return self.earlier.pop(kind, default)

    def parent(self, *kinds: type) -> ProxyClass:
        """The class as a later snapshot's class is patched from: its scope, mesh and the parts
        of ``kinds`` only (the rest, and what it inherited, would be a generation more of every
        built resource, alive until the next snapshot)."""
        kept = {kind: self.parts[kind] for kind in kinds if kind in self.parts}
        return ProxyClass(self.scope, self.mesh, self.traits, self.lineage, parts=kept, patches=self.patches)

    def reusable(self) -> dict[type, object]:
        """What the class's next snapshot may reuse: its parts' own, else what it inherited."""
        own = {kind: cast(Reusing, part).reusable() for kind, part in self.parts.items() if _reuses(kind)}
        return {**self.earlier, **own}


@dataclass(slots=True)
class SnapshotState:
    """Generation's state for one snapshot (``XdsGenerator`` holds one reference)."""

    push: PushContext
    # the classes of the snapshot this one replaced, by lineage, and the request between the
    # two: a class's clusters are patched from its parent's
    parents: Mapping[Hashable, ProxyClass] = field(default_factory=dict)
    parent_request: PushRequest | None = None
    parent_workload_only: bool = False  # ``workload_only(parent_request)``, once per snapshot
    # what classes may reuse, by lineage: not only from the snapshot just replaced (an
    # endpoint push between two config pushes generates no listeners or routes); a lineage's
    # goes to its class when the class is made
    reusable: dict[Hashable, dict[type, object]] = field(default_factory=dict)
    classes: dict[Hashable, ProxyClass] = field(default_factory=dict)  # by scope and traits
    lineage: dict[Hashable, ProxyClass] = field(default_factory=dict)  # the same, by lineage
    # each proxy's class: a push asks for it once per type and more
    proxy_classes: dict[Ident[Proxy], ProxyClass] = field(default_factory=dict)
    per_endpoint: dict[tuple[Ident[SidecarScope], str], frozenset[str]] = field(default_factory=dict)
    parts: dict[type, object] = field(default_factory=dict)
    # a proxy's traits and their key by what they are made of (the proxy, then ``_TraitsOf``),
    # which no snapshot changes: the ones this snapshot asked for, and the ones the snapshot
    # before it did (taken over when asked again, so a proxy gone or replaced drops out after
    # two snapshots); a push to every proxy would otherwise remake all of them
    traits: _TraitsMemo = field(default_factory=dict)
    earlier_traits: Mapping[Ident[Proxy], Mapping[_TraitsOf, tuple[Traits, tuple[Hashable, Hashable]]]] = field(
        default_factory=dict
    )

    def part(self, kind: type[P], make: Callable[[], P]) -> P:
        """A generator's per-snapshot memo of this type, made on first ask."""
        return _part(self.parts, kind, make)

    def next_reusable(self) -> dict[Hashable, dict[type, object]]:
        """What the classes of the next snapshot may reuse: this one's builds; when no proxy
        asked for anything in this snapshot, what it inherited."""
        if not self.lineage:
            return self.reusable
        return {key: found.reusable() for key, found in self.lineage.items()}

    def unchanged_since_parent(self, cls: ProxyClass) -> bool:
        """Whether a class-wide build its lineage made in the snapshot just replaced holds in
        this one as it is: same scope and mesh, and the push between the two changed only
        workload policies (``workload_only``). A mesh-wide AuthorizationPolicy otherwise made
        each of a 1,000-service mesh's 50 classes plan its listeners and route configurations
        again: 2 of its 3 ms per proxy."""
        parent = self.parents.get(cls.lineage)
        return (
            self.parent_workload_only and parent is not None and parent.scope is cls.scope and parent.mesh is cls.mesh
        )

    def proxy_class(self, proxy: Proxy) -> ProxyClass:
        found = self.proxy_classes.get(Ident(proxy))
        if found is None:
            found = self.proxy_classes[Ident(proxy)] = self._find_class(proxy)
        return found

    def forget(self, proxy: Proxy) -> None:
        """A proxy's stream ended: what this snapshot keeps of it goes (its traits too: a
        snapshot that no push replaces would otherwise keep every proxy that ever connected;
        the earlier snapshot's go with it at the next publish)."""
        key = Ident(proxy)
        self.proxy_classes.pop(key, None)
        self.traits.pop(key, None)

    def _traits(self, proxy: Ident[Proxy], of: _TraitsOf) -> tuple[Traits, tuple[Hashable, Hashable]]:
        mine = self.traits.setdefault(proxy, {})
        found = mine.get(of) or self.earlier_traits.get(proxy, {}).get(of)
        if found is None:
            made = traits(proxy.obj, *of)
            found = (made, made.key())
        mine[of] = found
        return found

    def _find_class(self, proxy: Proxy) -> ProxyClass:
        push = self.push
        scope = push.sidecar_scope(proxy)
        memo_key = (Ident(scope), proxy.interception_mode)
        addresses = self.per_endpoint.get(memo_key)
        if addresses is None:
            endpoints = push.endpoints
            addresses = self.per_endpoint[memo_key] = per_endpoint_addresses(
                scope.egress_listeners, proxy.interception_mode, lambda s: endpoints(s.hostname, s.namespace)
            )
        own_ip_read = bool(proxy.ip_addresses) and proxy.ip_addresses[0] in addresses
        keys, by_provider = push.telemetries.reads(proxy.namespace)
        found_traits, traits_key = self._traits(
            Ident(proxy), (labels_read(scope, push.mesh), own_ip_read, keys, by_provider)
        )
        # EnvoyFilters select by namespace, labels, version and node metadata: a class is of
        # proxies the same patches apply to (none, for nearly every mesh: no key then). Its
        # lineage leaves them out: what a lineage reuses is built before patching, so a changed
        # EnvoyFilter re-patches the class's resources but rebuilds none of them
        patches = push.envoy_filters.for_proxy(proxy)
        key = (Ident(scope), *traits_key, *(() if patches is None else (patches.key,)))
        found = self.classes.get(key)
        if found is None:
            line = lineage(scope, found_traits)
            found = ProxyClass(scope, push.mesh, found_traits, line, self.reusable.pop(line, {}), patches=patches)
            self.classes[key] = self.lineage[line] = found
        return found
