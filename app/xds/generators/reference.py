"""What a proxy is served of each type, decoded: the registry's generators themselves, run over
a snapshot (a fresh cache unless a source is given). ``config-dump``, the golden tests and the
unit tests read a proxy's configuration here, so what they check is the served path."""

from __future__ import annotations

from collections.abc import Iterable

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2

from app.api.nds import NameTable
from app.model.proxy import Proxy
from app.model.push_context import PushContext
from app.translate.endpoint.for_proxy import eds_cluster_names
from app.translate.listener.for_proxy import route_names
from app.xds.cache import ResourceCache
from app.xds.generators.source import XdsGenerator
from app.xds.resource import Resource
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, NAME_TABLE, ROUTE
from app.xds.watch import WatchedResource


def reference_source(push: PushContext, *, verify: bool = False) -> XdsGenerator:
    """A source serving ``push`` from a cache of its own (``verify``: in assertion mode)."""
    return XdsGenerator(ResourceCache(verify=verify), push)


def _served(proxy: Proxy, push: PushContext, source: XdsGenerator | None, watch: WatchedResource) -> list[Resource]:
    if source is None:
        source = reference_source(push)
    elif source.push_context() is not push:
        raise ValueError("the source given serves another snapshot")
    return source.generate(watch.type_url, proxy, watch) or []


def generate_clusters(proxy: Proxy, push: PushContext, source: XdsGenerator | None = None) -> list[cluster_pb2.Cluster]:
    """Every cluster (a CDS wildcard watch), sorted by name."""
    found = _served(proxy, push, source, WatchedResource(CLUSTER, True))
    return [cluster_pb2.Cluster.FromString(r.body.value) for r in found]


def generate_endpoints(
    proxy: Proxy,
    push: PushContext,
    cluster_names: Iterable[str] | None = None,
    source: XdsGenerator | None = None,
) -> list[endpoint_pb2.ClusterLoadAssignment]:
    """One assignment per distinct name, sorted by name; by default the proxy's EDS clusters'
    (what Envoy subscribes to)."""
    if cluster_names is None:
        cluster_names = eds_cluster_names(generate_clusters(proxy, push, source))
    found = _served(proxy, push, source, WatchedResource(ENDPOINT, False, frozenset(cluster_names)))
    return [endpoint_pb2.ClusterLoadAssignment.FromString(r.body.value) for r in found]


def generate_listeners(
    proxy: Proxy, push: PushContext, source: XdsGenerator | None = None
) -> list[listener_pb2.Listener]:
    """Every listener (an LDS wildcard watch), sorted by name."""
    found = _served(proxy, push, source, WatchedResource(LISTENER, True))
    return [listener_pb2.Listener.FromString(r.body.value) for r in found]


def generate_routes(
    proxy: Proxy,
    push: PushContext,
    names: Iterable[str] | None = None,
    source: XdsGenerator | None = None,
) -> list[route_pb2.RouteConfiguration]:
    """One route configuration per distinct name, sorted by name; by default those the proxy's
    listeners name (what Envoy subscribes to)."""
    if names is None:
        names = route_names(generate_listeners(proxy, push, source))
    found = _served(proxy, push, source, WatchedResource(ROUTE, False, frozenset(names)))
    return [route_pb2.RouteConfiguration.FromString(r.body.value) for r in found]


def generate_name_table(proxy: Proxy, push: PushContext, source: XdsGenerator | None = None) -> NameTable | None:
    """The DNS name table the proxy's agent is served (None for a router)."""
    found = _served(proxy, push, source, WatchedResource(NAME_TABLE, True))
    return NameTable.FromString(found[0].body.value) if found else None
