"""The encoded-resource cache every proxy shares (DESIGN §1 "Build once, share bytes").

An entry maps an explicit, hashable key to what a builder made from exactly that key: encoded
``Resource``s, so every proxy that needs the same thing gets the same bytes without building
or encoding them again. Keys hold plain values and ``Ident``s: an object that is replaced,
never edited (a Service, a merged DestinationRule, the mesh config), is named by its identity,
and the key keeps it alive so the identity cannot be reused while the entry exists.

Entries also record the config keys they were built from (``Dep``). ``invalidate`` drops every
entry that depends on a changed key, so stale entries die with their config and memory stays
bounded by what the mesh holds now, not by its history. Keys many entries record together (the
objects merged into one DestinationRule) are one ``DepGroup``: an entry records the group, the
cache its members once, so recording costs per entry what the group is, not what it holds.

Assertion mode (``PILOTFISH_CACHE_ASSERT=1``) rebuilds on every hit from the full, unnarrowed
inputs and raises ``CacheAssertionError`` when the bytes differ: a key that misses an input
fails loudly instead of serving another proxy's config. Pure: no I/O, no asyncio.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import fields, is_dataclass
from typing import TypeVar

from app.config.objects import ConfigKey
from app.errors import PilotfishError
from app.xds.resource import Resource

T = TypeVar("T")
V = TypeVar("V")

# what an entry was built from: a config object's key, or ("endpoints", hostname, namespace)
Key = ConfigKey | tuple[str, str, str]
# keys recorded as one: changed when any of them is (800 DestinationRules of one host made every
# cluster and assignment of the host record 800 keys, 1 s for one proxy's EDS)
DepGroup = frozenset[Key]
Dep = Key | DepGroup


def expand(deps: Iterable[Dep]) -> Iterator[Key]:
    """The keys ``deps`` name, groups opened."""
    for dep in deps:
        if isinstance(dep, frozenset):
            yield from dep
        else:
            yield dep


class CacheAssertionError(PilotfishError):
    """A cached entry differs from a fresh build of the same request: its key misses an input."""


def _comparable(value: object) -> object:
    """A value with every encoded resource in it replaced by its name and bytes."""
    if isinstance(value, Resource):
        return (value.name, value.body.value)
    if isinstance(value, tuple):
        return tuple(_comparable(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        return tuple(_comparable(getattr(value, f.name)) for f in fields(value))
    return value


class ResourceCache:
    """Built values by key, with dependency invalidation and hit/miss counters."""

    def __init__(self, *, verify: bool = False) -> None:
        self.verify = verify
        self._entries: dict[Hashable, tuple[object, frozenset[Dep]]] = {}
        self._by_dep: dict[Dep, set[Hashable]] = {}
        self._groups: dict[Key, set[DepGroup]] = {}  # a key -> the recorded groups holding it
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def get(
        self,
        key: Hashable,
        build: Callable[[], V],
        deps: Iterable[Dep] = (),
        reference: Callable[[], V] | None = None,
    ) -> V:
        """The value for ``key``, built (from the key's parts only) on a miss.

        ``reference`` builds the same thing from the full inputs; in assertion mode every hit
        is compared with it, byte for byte."""
        found = self._entries.get(key)
        if found is None:
            self.misses += 1
            value = build()
            dep_set = frozenset(deps)
            self._entries[key] = (value, dep_set)
            for dep in dep_set:
                keys = self._by_dep.get(dep)
                if keys is None:
                    keys = self._by_dep[dep] = set()
                    if isinstance(dep, frozenset):
                        for member in dep:
                            self._groups.setdefault(member, set()).add(dep)
                keys.add(key)
            return value
        self.hits += 1
        cached: V = found[0]  # type: ignore[assignment]
        if self.verify:
            fresh = (reference or build)()
            if _comparable(fresh) != _comparable(cached):
                raise CacheAssertionError(f"cache entry {key!r} differs from a fresh build")
        return cached

    def invalidate(self, deps: Iterable[Dep]) -> int:
        """Drop every entry built from one of ``deps`` (or from a group holding one); returns how
        many were dropped."""
        dropped = 0
        named = list(deps)
        for dep in [*named, *{group for key in expand(named) for group in self._groups.get(key, ())}]:
            keys = self._by_dep.pop(dep, None)
            if keys is None:
                continue
            self._forget(dep)
            for key in keys:
                entry = self._entries.pop(key, None)
                if entry is None:
                    continue
                dropped += 1
                for other in entry[1]:
                    # an equal twin of ``dep`` finds nothing: its set was popped above
                    if other is not dep and (held := self._by_dep.get(other)) is not None:
                        held.discard(key)
                        if not held:
                            del self._by_dep[other]
                            self._forget(other)
        self.evictions += dropped
        return dropped

    def _forget(self, dep: Dep) -> None:
        """No entry records ``dep`` any more: a group is no longer found by its members."""
        if not isinstance(dep, frozenset):
            return
        for member in dep:
            groups = self._groups.get(member)
            if groups is not None:
                groups.discard(dep)
                if not groups:
                    del self._groups[member]

    def copy(self) -> ResourceCache:
        """A cache of its own holding the same entries (counters from zero): a push computed and
        never published (the change preview) invalidates and fills the copy, not the cache
        served from."""
        out = ResourceCache(verify=self.verify)
        out._entries = dict(self._entries)
        out._by_dep = {dep: set(keys) for dep, keys in self._by_dep.items()}
        out._groups = {key: set(groups) for key, groups in self._groups.items()}
        return out

    def clear(self) -> None:
        self.evictions += len(self._entries)
        self._entries.clear()
        self._by_dep.clear()
        self._groups.clear()

    def __len__(self) -> int:
        return len(self._entries)
