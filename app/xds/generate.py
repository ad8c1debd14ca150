"""The generator registry: type URL -> the resources of that type for one proxy, encoded.

Each generator is a pure function of (proxy, push context, what the stream watches); this
module only picks it and encodes its output (DESIGN §1 "Generators").
"""

from __future__ import annotations

from collections.abc import Callable

from app.model.proxy import Proxy
from app.model.push_context import PushContext
from app.xds.generators.cds import generate_clusters
from app.xds.generators.eds import eds_cluster_names, generate_endpoints
from app.xds.generators.lds import generate_listeners
from app.xds.generators.rds import generate_routes
from app.xds.resources import CLUSTER, ENDPOINT, LISTENER, ROUTE
from app.xds.watch import Resource, WatchedResource, encode

Generator = Callable[[Proxy, PushContext, WatchedResource], list[Resource]]


def _clusters(proxy: Proxy, push: PushContext, watch: WatchedResource) -> list[Resource]:
    return [encode(c.name, c) for c in generate_clusters(proxy, push) if watch.wants(c.name)]


def _endpoints(proxy: Proxy, push: PushContext, watch: WatchedResource) -> list[Resource]:
    names: list[str] = sorted(watch.names)
    if watch.wildcard:
        names = eds_cluster_names(generate_clusters(proxy, push))
    return [encode(a.cluster_name, a) for a in generate_endpoints(proxy, push, names)]


def _listeners(proxy: Proxy, push: PushContext, watch: WatchedResource) -> list[Resource]:
    return [
        encode(listener.name, listener) for listener in generate_listeners(proxy, push) if watch.wants(listener.name)
    ]


def _routes(proxy: Proxy, push: PushContext, watch: WatchedResource) -> list[Resource]:
    return [encode(r.name, r) for r in generate_routes(proxy, push, sorted(watch.names))]


GENERATORS: dict[str, Generator] = {CLUSTER: _clusters, ENDPOINT: _endpoints, LISTENER: _listeners, ROUTE: _routes}


def generator_for(type_url: str) -> Generator | None:
    """The generator of a type, or None for a type pilotfish does not serve."""
    return GENERATORS.get(type_url)
