"""NDS: a sidecar's DNS name table (one unnamed resource; none for a router), built once per
snapshot for all proxies that read the same of it."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from app.model.proxy import Proxy, ProxyType, family_ips
from app.translate.allocated import consumes_allocated
from app.translate.name_table import build_name_table
from app.xds.cache import CacheAssertionError, ResourceCache
from app.xds.generators.base import WholeTypeOnly
from app.xds.generators.state import SnapshotState
from app.xds.resource import Resource, encode
from app.xds.watch import WatchedResource


@dataclass(slots=True)
class _Tables:
    """Per snapshot: the name tables built, by what they read."""

    found: dict[Hashable, Resource] = field(default_factory=dict)


class NameTableGenerator(WholeTypeOnly):
    def __init__(self, cache: ResourceCache) -> None:
        self.cache = cache

    def generate(self, state: SnapshotState, proxy: Proxy, watch: WatchedResource) -> list[Resource] | None:
        """Shared by the proxies that read the same: the services their scopes see (by
        identity: namespaces that import the same services share it, not only a class), the
        endpoints of those (fixed in a snapshot), the proxy's cluster, network and IP families
        and whether it uses auto-allocated addresses."""
        if proxy.type is not ProxyType.SIDECAR:
            return []
        push = state.push
        scope = state.proxy_class(proxy).scope
        key = (
            tuple(map(id, scope.services)),  # the snapshot holds them, so their ids are stable
            proxy.cluster_id,
            proxy.network,
            family_ips(proxy.ip_addresses),
            consumes_allocated(proxy, push.features),
        )
        tables = state.part(_Tables, _Tables).found
        found = tables.get(key)
        if found is None:
            table = build_name_table(proxy, push, scope.services)
            assert table is not None
            found = tables[key] = encode("", table)
        if self.cache.verify:
            own = build_name_table(proxy, push, scope.services)
            if own is None or found.body.value != encode("", own).body.value:
                raise CacheAssertionError("name table: the shared table differs from this proxy's own")
        return [found]
