"""The generator of each xDS type served, by type URL (istiod's ``Generators`` map in
pilot/pkg/xds/discovery.go)."""

from __future__ import annotations

from collections.abc import Mapping

from app.xds.cache import ResourceCache
from app.xds.generators.base import Generator
from app.xds.generators.clusters import ClusterGenerator
from app.xds.generators.endpoints import EndpointGenerator
from app.xds.generators.listeners import ListenerGenerator
from app.xds.generators.name_table import NameTableGenerator
from app.xds.generators.routes import RouteGenerator
from app.xds.generators.secrets import SecretGenerator
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, NAME_TABLE, ROUTE, SECRET


def generators(cache: ResourceCache) -> Mapping[str, Generator]:
    clusters = ClusterGenerator(cache)
    return {
        CLUSTER: clusters,
        ENDPOINT: EndpointGenerator(cache, clusters),
        LISTENER: ListenerGenerator(cache),
        ROUTE: RouteGenerator(cache),
        NAME_TABLE: NameTableGenerator(cache),
        SECRET: SecretGenerator(),
    }
