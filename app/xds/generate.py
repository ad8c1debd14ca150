"""The seam between the transport and generation: what the transport asks (``ResourceSource``)
and a partial answer (``Partial``). The control plane's source is
``app.xds.generators.source.XdsGenerator``; go-control-plane's ConfigWatcher plays this role.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from app.model.proxy import Proxy
from app.model.sidecar_scope import SidecarScope
from app.xds.push_request import PushRequest
from app.xds.watch import Resource, WatchedResource


@dataclass(frozen=True, slots=True)
class Partial:
    """What a push changed of one type for one proxy: the current resources among the names it
    may have touched, and every name considered (one the client holds that is considered but
    not among the resources is gone)."""

    resources: list[Resource]
    considered: frozenset[str]


class ResourceSource(Protocol):
    """What the transport asks for: the current resources of a type for a proxy, and its scope."""

    def generate(self, type_url: str, proxy: Proxy, watch: WatchedResource) -> list[Resource] | None:
        """The type's current resources the proxy may watch (None: a type not served)."""
        ...

    def changes(
        self,
        type_url: str,
        proxy: Proxy,
        watch: WatchedResource,
        request: PushRequest,
        previous: SidecarScope | None,
        also: Collection[str],
    ) -> Partial | None:
        """What ``request`` changed of the type for this proxy since its last full or partial
        answer, plus the current versions of the names in ``also``; None when that cannot be
        told without generating the whole type (then call ``generate``). ``previous`` is the
        scope the proxy had before the change."""
        ...

    def scope(self, proxy: Proxy) -> SidecarScope:
        """The proxy's SidecarScope in the current snapshot (what the push filter reads)."""
        ...
