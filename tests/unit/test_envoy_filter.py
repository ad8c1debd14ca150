"""EnvoyFilter patches as istiod applies them (pilot/pkg/model/envoyfilter.go, push_context.go
EnvoyFilters; networking/core/envoyfilter/{cluster,listener,rc}_patch.go): which EnvoyFilters a
proxy gets (root namespace and its own, selectors, priority, proxy version and metadata), and
what each patch does to the clusters, listeners and route configurations served, in each context;
and the push: a change reaches the proxies it selects, splits a class by the labels it reads, and
the assertion mode (every class and partial push checked against a full generation) holds."""

from __future__ import annotations

import json
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from app.model.envoy_filter import ApplyTo, EnvoyFilters
from app.model.proxy import Proxy
from app.xds.generators.reference import generate_clusters, generate_listeners, generate_routes, reference_source
from app.xds.type_urls import CLUSTER, LISTENER
from tests.support.bookinfo_mesh import Mesh
from tests.support.mesh import endpoint_slice, push_context, sidecar_proxy, slice_endpoint
from tests.unit.test_telemetry_access_log import API, GATEWAY, HCM, ROOT, SCENE, WEB

ROUTER = "envoy.filters.http.router"
LUA_TYPE = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"
WEB_CLUSTER = "outbound|80||web.shop.svc.cluster.local"
# web-0 behind its Service: inbound clusters and chains of its own
SLICE = endpoint_slice(
    "web", "[{name: http, port: 8080}]", slice_endpoint("10.1.0.5", "web-0", namespace="shop"), namespace="shop"
)


def envoy_filter(name: str, namespace: str, *patches: dict[str, Any], **spec: Any) -> str:
    meta = {"name": name, "namespace": namespace, "creationTimestamp": spec.pop("created", "2026-01-01T00:00:00Z")}
    body = {"configPatches": list(patches), **spec}
    return json.dumps(
        {"apiVersion": "networking.istio.io/v1alpha3", "kind": "EnvoyFilter", "metadata": meta, "spec": body}
    )


def lua(name: str = "envoy.lua", code: str = "-- x") -> dict[str, Any]:
    return {"name": name, "typed_config": {"@type": LUA_TYPE, "inlineCode": code}}


def http_filter(context: str, operation: str, value: dict[str, Any] | None = None, sub: str = ROUTER) -> dict[str, Any]:
    match = {"context": context, "listener": {"filterChain": {"filter": {"name": HCM, "subFilter": {"name": sub}}}}}
    patch: dict[str, Any] = {"operation": operation}
    if value is not None:
        patch["value"] = value
    return {"applyTo": "HTTP_FILTER", "match": match, "patch": patch}


def cluster_patch(operation: str, value: dict[str, Any] | None = None, **match: Any) -> dict[str, Any]:
    context = match.pop("context", "SIDECAR_OUTBOUND")
    patch: dict[str, Any] = {"operation": operation, **({"value": value} if value is not None else {})}
    return {
        "applyTo": "CLUSTER",
        "match": {"context": context, **({"cluster": match} if match else {})},
        "patch": patch,
    }


def http_filters(listeners: list[Any]) -> dict[str, list[str]]:
    """The HTTP filter names of each listener's connection managers, by listener and chain."""
    out = {}
    for listener in listeners:
        chains = [*listener.filter_chains]
        if listener.HasField("default_filter_chain"):
            chains.append(listener.default_filter_chain)
        for i, chain in enumerate(chains):
            for f in chain.filters:
                if f.name == HCM:
                    manager = hcm_pb2.HttpConnectionManager.FromString(f.typed_config.value)
                    out[f"{listener.name}/{chain.name or i}"] = [h.name for h in manager.http_filters]
    return out


def clusters(proxy: Proxy, *docs: str) -> dict[str, cluster_pb2.Cluster]:
    push = push_context(SCENE, SLICE, *docs)
    return {c.name: c for c in generate_clusters(proxy, push, reference_source(push, verify=True))}


def listeners(proxy: Proxy, *docs: str) -> dict[str, list[str]]:
    push = push_context(SCENE, SLICE, *docs)
    return http_filters(generate_listeners(proxy, push, reference_source(push, verify=True)))


# --- which patches a proxy gets -------------------------------------------------------------


def test_a_proxy_gets_the_root_namespace_and_its_own_namespace_filters_that_select_it() -> None:
    docs = (
        envoy_filter("mesh", ROOT, cluster_patch("REMOVE", name="a"), priority=5),
        envoy_filter(
            "shop-early", "shop", cluster_patch("REMOVE", name="b"), priority=5, created="2025-01-01T00:00:00Z"
        ),
        envoy_filter("shop-first", "shop", cluster_patch("REMOVE", name="c"), priority=-1),
        envoy_filter(
            "api-only", "shop", cluster_patch("REMOVE", name="d"), workloadSelector={"labels": {"app": "api"}}
        ),
        envoy_filter("elsewhere", "other", cluster_patch("REMOVE", name="e")),
        envoy_filter(
            "targeted",
            "shop",
            cluster_patch("REMOVE", name="f"),
            targetRefs=[{"kind": "Gateway", "group": "gateway.networking.k8s.io", "name": "gw"}],
        ),
    )
    push = push_context(SCENE, *docs)
    found = push.envoy_filters.for_proxy(WEB)
    assert found is not None
    # priority first; on equal priority the root namespace's before the namespace's (even an
    # older one), then age
    assert [p.key for p in found.of(ApplyTo.CLUSTER)] == [
        "shop/shop-first",
        "istio-system/mesh",
        "shop/shop-early",
    ]
    api = push.envoy_filters.for_proxy(API)
    assert api is not None and "shop/api-only" in [p.key for p in api.of(ApplyTo.CLUSTER)]
    other = sidecar_proxy("x-0.other", "10.1.9.9")
    found = push.envoy_filters.for_proxy(other)
    assert found is not None and [p.key for p in found.of(ApplyTo.CLUSTER)] == ["other/elsewhere", "istio-system/mesh"]
    assert EnvoyFilters.build((), ROOT).for_proxy(WEB) is None


def test_proxy_version_and_metadata_matches() -> None:
    versioned = cluster_patch("REMOVE", name="a")
    versioned["match"]["proxy"] = {"proxyVersion": r"^1\.2[0-9].*"}
    prefixed = cluster_patch("REMOVE", name="b")
    prefixed["match"]["proxy"] = {"proxyVersion": r"^1\.20.*"}  # one of istiod's well-known prefixes
    tagged = cluster_patch("REMOVE", name="c")
    tagged["match"]["proxy"] = {"metadata": {"TEAM": "blue"}}
    push = push_context(SCENE, envoy_filter("f", "shop", versioned, prefixed, tagged))

    def names(proxy: Proxy) -> list[str]:
        found = push.envoy_filters.for_proxy(proxy)
        return [] if found is None else [p.match.cluster.name for p in found.of(ApplyTo.CLUSTER)]

    from dataclasses import replace

    assert names(WEB) == []  # no version, no metadata
    assert names(replace(WEB, istio_version="1.29.0")) == ["a"]
    assert names(replace(WEB, istio_version="1.20.3")) == ["a", "b"]
    assert names(replace(WEB, raw_metadata={"TEAM": "blue"})) == ["c"]


# --- clusters ----------------------------------------------------------------------------------


def test_cluster_merge_remove_and_add_in_their_contexts() -> None:
    merge = cluster_patch(
        "MERGE",
        {"connect_timeout": "7s", "per_connection_buffer_limit_bytes": 1024},
        service="web.shop.svc.cluster.local",
        portNumber=80,
    )
    remove = cluster_patch("REMOVE", name="BlackHoleCluster", context="ANY")
    added = {"name": "extra", "type": "STATIC", "connect_timeout": "1s"}
    add_any = cluster_patch("ADD", added, context="ANY")
    add_inbound = cluster_patch("ADD", {**added, "name": "extra-in"}, context="SIDECAR_INBOUND")
    inbound = cluster_patch(
        "MERGE",
        {"per_connection_buffer_limit_bytes": 2048},
        context="SIDECAR_INBOUND",
        service="web.shop.svc.cluster.local",
    )
    found = clusters(WEB, envoy_filter("f", "shop", merge, remove, add_any, add_inbound, inbound))
    web = found[WEB_CLUSTER]
    assert web.connect_timeout.seconds == 7 and web.connect_timeout.nanos == 0  # a Duration is replaced whole
    assert web.per_connection_buffer_limit_bytes.value == 1024
    assert "BlackHoleCluster" not in found
    assert {"extra", "extra-in"} <= set(found)  # ANY adds once, in the outbound context
    # an inbound cluster matches by the hosts of the services on its port
    assert found["inbound|8080||"].per_connection_buffer_limit_bytes.value == 2048
    # a gateway: the outbound patches of context SIDECAR_OUTBOUND are not its
    gateway = clusters(GATEWAY, envoy_filter("f", "shop", merge, remove, add_any))
    assert not gateway[WEB_CLUSTER].HasField("per_connection_buffer_limit_bytes")
    assert "BlackHoleCluster" not in gateway and "extra" in gateway


def test_a_cluster_merge_with_a_transport_socket_merges_into_the_socket_of_that_name() -> None:
    dr = """
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: shop}
spec: {host: web.shop.svc.cluster.local, trafficPolicy: {tls: {mode: SIMPLE, sni: web.example}}}
"""
    tls = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
    socket = {"name": "envoy.transport_sockets.tls", "typed_config": {"@type": tls, "max_session_keys": 7}}
    merge = cluster_patch("MERGE", {"transport_socket": socket, "per_connection_buffer_limit_bytes": 1}, portNumber=80)
    web = clusters(WEB, dr, envoy_filter("f", "shop", merge))[WEB_CLUSTER]
    from envoy.extensions.transport_sockets.tls.v3 import tls_pb2

    sockets = [m.transport_socket for m in web.transport_socket_matches] or [web.transport_socket]
    context = tls_pb2.UpstreamTlsContext.FromString(sockets[0].typed_config.value)
    assert context.sni == "web.example" and context.max_session_keys.value == 7
    assert not web.HasField("per_connection_buffer_limit_bytes")  # merged into the socket: the rest is not


# --- listeners ---------------------------------------------------------------------------------


def test_http_filters_inserted_replaced_and_removed_around_the_router() -> None:
    doc = envoy_filter(
        "lua",
        "shop",
        http_filter("SIDECAR_INBOUND", "INSERT_BEFORE", lua()),
        http_filter("SIDECAR_OUTBOUND", "INSERT_FIRST", lua("first")),
        http_filter("SIDECAR_OUTBOUND", "INSERT_AFTER", lua("after")),
    )
    found = listeners(WEB, doc)
    inbound = [chain for name, chain in found.items() if name.startswith("virtualInbound")]
    assert inbound and all(chain[-2:] == ["envoy.lua", ROUTER] for chain in inbound), found
    outbound = [chain for name, chain in found.items() if not name.startswith("virtualInbound")]
    assert outbound and all(chain[0] == "first" and chain[-2:] == [ROUTER, "after"] for chain in outbound), found
    removed = listeners(WEB, envoy_filter("rm", "shop", http_filter("ANY", "REMOVE", sub="envoy.lua")), doc)
    assert not any("envoy.lua" in chain for chain in removed.values())
    # the namespace's other workloads get it too; another namespace's do not
    assert any("envoy.lua" in chain for chain in listeners(API, doc).values())


def test_listener_and_network_filter_patches() -> None:
    remove_port = {
        "applyTo": "LISTENER",
        "match": {"context": "SIDECAR_OUTBOUND", "listener": {"portNumber": 5432}},
        "patch": {"operation": "REMOVE"},
    }
    buffer = {
        "applyTo": "LISTENER",
        "match": {"context": "SIDECAR_OUTBOUND", "listener": {"name": "virtualOutbound"}},
        "patch": {"operation": "MERGE", "value": {"per_connection_buffer_limit_bytes": 4096}},
    }
    hcm = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
    idle = {
        "applyTo": "NETWORK_FILTER",
        "match": {"context": "SIDECAR_INBOUND", "listener": {"filterChain": {"filter": {"name": HCM}}}},
        "patch": {
            "operation": "MERGE",
            "value": {"name": HCM, "typed_config": {"@type": hcm, "stream_idle_timeout": "42s"}},
        },
    }
    push = push_context(SCENE, envoy_filter("l", "shop", remove_port, buffer, idle))
    found = {listener.name: listener for listener in generate_listeners(WEB, push, reference_source(push, verify=True))}
    assert not any(name.endswith("_5432") for name in found), sorted(found)
    assert found["virtualOutbound"].per_connection_buffer_limit_bytes.value == 4096
    managers = [hcm_pb2.HttpConnectionManager.FromString(f.typed_config.value)
                for chain in found["virtualInbound"].filter_chains for f in chain.filters if f.name == HCM]  # fmt: skip
    assert managers and all(m.stream_idle_timeout.seconds == 42 and m.http_filters for m in managers)


# --- routes ------------------------------------------------------------------------------------


def test_route_configuration_virtual_host_and_route_patches() -> None:
    vhost = {
        "applyTo": "VIRTUAL_HOST",
        "match": {
            "context": "SIDECAR_OUTBOUND",
            "routeConfiguration": {"portNumber": 80, "vhost": {"name": "web.shop.svc.cluster.local:80"}},
        },
        "patch": {
            "operation": "MERGE",
            "value": {"request_headers_to_add": [{"header": {"key": "x-vh", "value": "1"}}]},
        },
    }
    added = {"name": "health", "match": {"prefix": "/healthz"}, "direct_response": {"status": 200}}
    route = {
        "applyTo": "HTTP_ROUTE",
        "match": {
            "context": "SIDECAR_OUTBOUND",
            "routeConfiguration": {"vhost": {"name": "web.shop.svc.cluster.local:80"}},
        },
        "patch": {"operation": "INSERT_FIRST", "value": added},
    }
    config = {
        "applyTo": "ROUTE_CONFIGURATION",
        "match": {"context": "SIDECAR_OUTBOUND"},
        "patch": {"operation": "MERGE", "value": {"max_direct_response_body_size_bytes": 2048}},
    }
    push = push_context(SCENE, envoy_filter("r", "shop", vhost, route, config))
    [rc] = generate_routes(WEB, push, ["80"], reference_source(push, verify=True))
    assert rc.max_direct_response_body_size_bytes.value == 2048
    [web] = [vh for vh in rc.virtual_hosts if vh.name == "web.shop.svc.cluster.local:80"]
    added = [h.header.key for h in web.request_headers_to_add]
    assert added[-1:] == ["x-vh"] and web.routes[0].name == "health"  # MERGE appends to a list
    others = [vh for vh in rc.virtual_hosts if vh.name != web.name]
    assert others and not any("x-vh" in str(vh) for vh in others)


# --- the push ----------------------------------------------------------------------------------


def _lua_in(out: list[Any]) -> bool:
    for resp in out:
        if resp.type_url != LISTENER:
            continue
        for r in resp.resources:
            from envoy.config.listener.v3 import listener_pb2

            if any(
                "envoy.lua" in chain
                for chain in http_filters([listener_pb2.Listener.FromString(r.body.value)]).values()
            ):
                return True
    return False


def test_an_envoy_filter_change_pushes_its_namespace_and_splits_a_class_by_the_labels_it_selects() -> None:
    mesh = Mesh()
    tool = "sidecar~10.1.0.77~tool-0.bookinfo~bookinfo.svc.cluster.local"
    selected, _ = mesh.connect(listeners=True, labels={"app": "productpage", "version": "v1"})
    plain, _ = mesh.connect(tool, listeners=True, labels={"app": "tool", "version": "v1"})
    other, _ = mesh.connect("sidecar~10.1.9.9~x-0.other~other.svc.cluster.local", listeners=True)
    patch = http_filter("SIDECAR_OUTBOUND", "INSERT_BEFORE", lua())
    request = mesh.apply(envoy_filter("lua", "bookinfo", patch, workloadSelector={"labels": {"app": "productpage"}}))
    assert _lua_in(selected.on_push(request))
    assert not _lua_in(plain.on_push(request))
    assert other.on_push(request) == []  # another namespace's: not even pushed
    # the patch changes: the same proxy gets the new one; deleted, the filter goes
    changed = envoy_filter(
        "lua", "bookinfo", http_filter("SIDECAR_OUTBOUND", "INSERT_BEFORE", lua(code="-- y")),
        workloadSelector={"labels": {"app": "productpage"}},
    )  # fmt: skip
    assert _lua_in(selected.on_push(mesh.apply(changed)))
    out = selected.on_push(mesh.delete(changed))
    assert any(resp.type_url == LISTENER for resp in out) and not _lua_in(out)
    # from the root namespace: every namespace's proxies
    out = other.on_push(
        mesh.apply(envoy_filter("mesh", ROOT, cluster_patch("REMOVE", name="BlackHoleCluster", context="ANY")))
    )
    assert any(resp.type_url == CLUSTER for resp in out)


def test_the_patch_memo_keeps_an_unchanged_resource_and_forgets_in_generations() -> None:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster

    from app.xds.generators.envoy_filters import PatchMemo
    from app.xds.resource import encode

    push = push_context(SCENE, envoy_filter("f", "shop", cluster_patch("REMOVE", name="gone")))
    patches = push.envoy_filters.for_proxy(WEB)
    assert patches is not None
    memo = PatchMemo(generation=2)
    calls: list[str] = []

    def patch(c: Cluster) -> Cluster | None:
        calls.append(c.name)
        if c.name == "gone":
            return None
        if c.name == "changed":
            c.per_connection_buffer_limit_bytes.value = 1
        return c

    kept, changed, gone = (encode(n, Cluster(name=n)) for n in ("kept", "changed", "gone"))
    assert memo.patched(patches, 1, kept, Cluster.FromString, patch) is kept  # the very object: same version
    assert memo.patched(patches, 1, changed, Cluster.FromString, patch).version != changed.version  # type: ignore[union-attr]
    assert memo.patched(patches, 1, gone, Cluster.FromString, patch) is None
    assert memo.patched(patches, 1, kept, Cluster.FromString, patch) is kept and calls == ["kept", "changed", "gone"]
    for n in ("a", "b", "c", "d"):  # two generations of two: the first three are forgotten
        memo.patched(patches, 1, encode(n, Cluster(name=n)), Cluster.FromString, patch)
    memo.patched(patches, 1, gone, Cluster.FromString, patch)
    assert calls[-1] == "gone"

    def broken(c: Cluster) -> Cluster | None:
        raise ValueError("a patcher's bug")

    # as istiod's HandleCrash: the resource is served unpatched, nothing raises into the push
    assert memo.patched(patches, 2, changed, Cluster.FromString, broken) is changed


def test_a_listener_an_envoy_filter_added_is_removed_with_it() -> None:
    # added in the inbound context, the listener is the proxy's own: deleting the EnvoyFilter
    # must remove it from the client too (Delta removed_resources), as one added outbound
    mesh = Mesh()
    conn, _ = mesh.connect(listeners=True)
    listener = {"name": "extra-in", "address": {"socket_address": {"address": "0.0.0.0", "port_value": 15999}}}
    added = {
        "applyTo": "LISTENER",
        "match": {"context": "SIDECAR_INBOUND"},
        "patch": {"operation": "ADD", "value": listener},
    }
    outbound = {**added, "match": {"context": "SIDECAR_OUTBOUND"},
                "patch": {"operation": "ADD", "value": {**listener, "name": "extra-out"}}}  # fmt: skip
    doc = envoy_filter("add", "bookinfo", added, outbound)
    out = conn.on_push(mesh.apply(doc))
    [lds] = [r for r in out if r.type_url == LISTENER]
    assert {"extra-in", "extra-out"} <= {r.name for r in lds.resources}
    out = conn.on_push(mesh.delete(doc))
    [lds] = [r for r in out if r.type_url == LISTENER]
    assert {"extra-in", "extra-out"} <= set(lds.removed_resources)


def test_a_changed_cluster_is_patched_again_and_the_others_stay_patched() -> None:
    # a DestinationRule change rebuilds one host's clusters: patched like the rest (assertion
    # mode checks each partial push against a full generation)
    mesh = Mesh()
    conn, _ = mesh.connect(listeners=True)
    merge = cluster_patch("MERGE", {"per_connection_buffer_limit_bytes": 4321})
    conn.on_push(mesh.apply(envoy_filter("buffers", "bookinfo", merge)))
    rule = """
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings, namespace: bookinfo}
spec: {host: ratings.bookinfo.svc.cluster.local, trafficPolicy: {connectionPool: {tcp: {maxConnections: 7}}}}
"""
    out = conn.on_push(mesh.apply(rule))
    [cds] = [r for r in out if r.type_url == CLUSTER]
    changed = {r.name: cluster_pb2.Cluster.FromString(r.body.value) for r in cds.resources}
    ratings = changed["outbound|9080||ratings.bookinfo.svc.cluster.local"]
    assert ratings.circuit_breakers.thresholds[0].max_connections.value == 7
    assert ratings.per_connection_buffer_limit_bytes.value == 4321
    served = generate_clusters(conn.client, mesh.discovery.generator.push_context(), mesh.discovery.generator)
    outbound = [c for c in served if c.name.startswith("outbound|")]
    assert outbound and all(c.per_connection_buffer_limit_bytes.value == 4321 for c in outbound)
