"""The shared, cached resource source: what proxies share, what they must not, and that its
output is what the plain generators build for each proxy (assertion mode on throughout)."""

from __future__ import annotations

from app.environment import Environment
from app.model.proxy import build_proxy
from app.sources.files import FileSource
from app.translate.endpoint.for_proxy import eds_cluster_names
from app.xds.cache import ResourceCache
from app.xds.generators.reference import generate_clusters
from app.xds.generators.source import XdsGenerator
from app.xds.type_urls import CLUSTER, ENDPOINT
from app.xds.watch import WatchedResource
from tests.support.bookinfo import BOOKINFO, NODE

OTHER_POD = NODE.replace("10.1.0.10", "10.1.0.99").replace("productpage-v1-0", "productpage-v1-1")


def source() -> tuple[XdsGenerator, Environment]:
    env = Environment()
    env.apply(FileSource(BOOKINFO).load())
    push = env.build_push_context(None)
    return XdsGenerator(ResourceCache(verify=True), push), env


def test_two_sidecars_of_one_scope_share_the_same_encoded_clusters() -> None:
    gen, _ = source()
    wildcard = WatchedResource(CLUSTER, True)
    first = {r.name: r for r in gen.generate(CLUSTER, build_proxy(NODE), wildcard) or []}
    second = {r.name: r for r in gen.generate(CLUSTER, build_proxy(OTHER_POD), wildcard) or []}
    outbound = [n for n in first if n.startswith("outbound|")]
    assert outbound and all(first[n] is second[n] for n in outbound)  # the same objects: built once


def test_a_router_does_not_share_a_sidecars_clusters() -> None:
    gen, _ = source()
    wildcard = WatchedResource(CLUSTER, True)
    sidecar = {r.name: r for r in gen.generate(CLUSTER, build_proxy(NODE), wildcard) or []}
    router_node = NODE.replace("sidecar~", "router~")
    router = {r.name: r for r in gen.generate(CLUSTER, build_proxy(router_node), wildcard) or []}
    shared = set(sidecar) & set(router)
    assert shared and not any(sidecar[n] is router[n] for n in shared if n.startswith("outbound|"))


def test_wildcard_endpoints_follow_the_eds_clusters() -> None:
    gen, env = source()
    proxy = build_proxy(NODE)
    got = [r.name for r in gen.generate(ENDPOINT, proxy, WatchedResource(ENDPOINT, True)) or []]
    assert got == eds_cluster_names(generate_clusters(proxy, env.build_push_context(None)))
