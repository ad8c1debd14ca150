"""EndpointIndex: every endpoint, sharded by service (hostname, namespace), then by source.

This is the EDS fast path (istiod's EndpointIndex / EndpointShards). A shard holds one tuple
of endpoints per source ("Kubernetes", "External", "External/k8s-selected", ...), so one
controller can replace its part of a shard without touching the others. ``update`` says
whether the shard really changed, which is what lets an endpoint-only change become an
EDS-only push. The merged view of a shard is cached until the shard changes: the same tuple
until then, a new one after, so its identity is the shard's version (what cache keys name).

Plain dicts keyed by tuples, no locks: the index is owned by one registry on one thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from app.model.service import Endpoint

ServiceKey = tuple[str, str]  # (hostname, namespace)

_NO_ENDPOINTS: tuple[Endpoint, ...] = ()


class EndpointIndex:
    """Endpoints by (hostname, namespace) and source; merged view in stable source order."""

    __slots__ = ("_merged", "_shards")

    def __init__(self) -> None:
        self._shards: dict[ServiceKey, dict[str, tuple[Endpoint, ...]]] = {}
        # merged tuple per shard, dropped whenever the shard changes
        self._merged: dict[ServiceKey, tuple[Endpoint, ...]] = {}

    def update(self, hostname: str, namespace: str, source: str, endpoints: tuple[Endpoint, ...]) -> bool:
        """Replace one source's endpoints in a shard; an empty tuple removes the source.

        Returns True when the shard's content changed.
        """
        key = (hostname, namespace)
        shard = self._shards.get(key)
        if not endpoints:
            if shard is None or source not in shard:
                return False
            del shard[source]
            if not shard:
                del self._shards[key]
            self._merged.pop(key, None)
            return True
        if shard is None:
            self._shards[key] = {source: endpoints}
            self._merged.pop(key, None)
            return True
        old = shard.get(source)
        if old is endpoints or old == endpoints:
            return False
        shard[source] = endpoints
        self._merged.pop(key, None)
        return True

    def endpoints(self, hostname: str, namespace: str) -> tuple[Endpoint, ...]:
        """All endpoints of a service: sources in name order, each in the order it was given."""
        key = (hostname, namespace)
        merged = self._merged.get(key)
        if merged is not None:
            return merged
        shard = self._shards.get(key)
        if not shard:
            return _NO_ENDPOINTS
        if len(shard) == 1:
            merged = next(iter(shard.values()))
        else:
            merged = tuple(ep for source in sorted(shard) for ep in shard[source])
        self._merged[key] = merged
        return merged

    def snapshot(self) -> dict[ServiceKey, tuple[Endpoint, ...]]:
        """Every shard's merged endpoints, as a new dict the caller owns."""
        return {key: self.endpoints(*key) for key in self._shards}

    def source_endpoints(self, hostname: str, namespace: str, source: str) -> tuple[Endpoint, ...]:
        """One source's part of a shard."""
        shard = self._shards.get((hostname, namespace))
        if shard is None:
            return _NO_ENDPOINTS
        return shard.get(source, _NO_ENDPOINTS)

    def shard(self, hostname: str, namespace: str) -> Mapping[str, tuple[Endpoint, ...]]:
        """A read-only view of one shard, by source (for debug output)."""
        return MappingProxyType(self._shards.get((hostname, namespace), {}))

    def delete_service(self, hostname: str, namespace: str) -> bool:
        """Drop every source of a shard; True when it held anything."""
        key = (hostname, namespace)
        self._merged.pop(key, None)
        return self._shards.pop(key, None) is not None

    def __contains__(self, key: object) -> bool:
        return key in self._shards

    def __len__(self) -> int:
        return len(self._shards)
