"""The encoded-resource cache every proxy shares (DESIGN §1 "Build once, share bytes").

An entry maps an explicit, hashable key to what a builder made from exactly that key: encoded
``Resource``s, so every proxy that needs the same thing gets the same bytes without building
or encoding them again. Keys hold plain values and ``Ident``s: an object that is replaced,
never edited (a Service, a merged DestinationRule, the mesh config), is named by its identity,
and the key keeps it alive so the identity cannot be reused while the entry exists.

Entries also record the config keys they were built from (``Dep``). ``invalidate`` drops every
entry that depends on a changed key, so stale entries die with their config and memory stays
bounded by what the mesh holds now, not by its history.

Assertion mode (``PILOTFISH_CACHE_ASSERT=1``) rebuilds on every hit from the full, unnarrowed
inputs and raises ``CacheAssertionError`` when the bytes differ: a key that misses an input
fails loudly instead of serving another proxy's config. Pure: no I/O, no asyncio.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import fields, is_dataclass
from typing import TypeVar

from app.config.objects import ConfigKey
from app.errors import PilotfishError
from app.xds.resource import Resource

T = TypeVar("T")
V = TypeVar("V")

# what an entry was built from: a config object's key, or ("endpoints", hostname, namespace)
Dep = ConfigKey | tuple[str, str, str]


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
                self._by_dep.setdefault(dep, set()).add(key)
            return value
        self.hits += 1
        cached: V = found[0]  # type: ignore[assignment]
        if self.verify:
            fresh = (reference or build)()
            if _comparable(fresh) != _comparable(cached):
                raise CacheAssertionError(f"cache entry {key!r} differs from a fresh build")
        return cached

    def invalidate(self, deps: Iterable[Dep]) -> int:
        """Drop every entry built from one of ``deps``; returns how many were dropped."""
        dropped = 0
        for dep in deps:
            for key in self._by_dep.pop(dep, ()):
                entry = self._entries.pop(key, None)
                if entry is None:
                    continue
                dropped += 1
                for other in entry[1]:
                    if other != dep and (keys := self._by_dep.get(other)) is not None:
                        keys.discard(key)
                        if not keys:
                            del self._by_dep[other]
        self.evictions += dropped
        return dropped

    def copy(self) -> ResourceCache:
        """A cache of its own holding the same entries (counters from zero): a push computed and
        never published (the change preview) invalidates and fills the copy, not the cache
        served from."""
        out = ResourceCache(verify=self.verify)
        out._entries = dict(self._entries)
        out._by_dep = {dep: set(keys) for dep, keys in self._by_dep.items()}
        return out

    def clear(self) -> None:
        self.evictions += len(self._entries)
        self._entries.clear()
        self._by_dep.clear()

    def __len__(self) -> int:
        return len(self._entries)
