"""VirtualService delegation, pinned to istiod's pilot/pkg/model/virtualservice.go (MergeHTTPRoutes,
mergeHTTPMatchRequests, hasConflict, stringMatchConflict; the TestMergeHTTPRoutes cases) and
virtualservice_controller.go mergeVirtualServices (a missing or unexported delegate drops only its
root route), end to end through the routes a sidecar and a gateway are served."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from app.api import networking as net
from app.config.objects import ConfigKey, Kind
from app.model.delegation import merge_http_routes
from app.xds.generators.reference import generate_routes
from tests.support.mesh import config_doc, kube_service, push_context, sidecar_proxy


def route(doc: dict[str, Any]) -> net.HTTPRoute:
    return json_format.ParseDict(doc, net.HTTPRoute())


def as_dict(routes: list[net.HTTPRoute]) -> list[dict[str, Any]]:
    return [json_format.MessageToDict(r) for r in routes]


def test_leaf_matches_within_the_root_match_are_kept_and_take_what_the_root_sets() -> None:
    root = route({
        "name": "productpage",
        "match": [{"uri": {"prefix": "/productpage"}, "headers": {"version": {"exact": "v2"}}}],
        "timeout": "5s",
    })  # fmt: skip
    leaf = route({
        "name": "v1",
        "match": [{"uri": {"exact": "/productpage/v1"}}],
        "route": [{"destination": {"host": "productpage.default.svc.cluster.local"}}],
    })  # fmt: skip
    [merged] = as_dict(merge_http_routes(root, [leaf]))
    assert merged["name"] == "productpage-v1"
    assert merged["match"] == [{"uri": {"exact": "/productpage/v1"}, "headers": {"version": {"exact": "v2"}}}]
    assert merged["timeout"] == "5s"  # the root's, the leaf sets none


def test_a_leaf_route_whose_match_conflicts_with_every_root_match_is_dropped() -> None:
    root = route({"match": [{"uri": {"prefix": "/a"}}, {"uri": {"prefix": "/b"}}]})
    inside = route({"name": "in", "match": [{"uri": {"prefix": "/b/c"}}]})
    outside = route({"name": "out", "match": [{"uri": {"prefix": "/c"}}]})
    regex = route({"name": "re", "match": [{"uri": {"regex": "/a.*"}}]})  # regex beside a prefix conflicts
    assert [r["name"] for r in as_dict(merge_http_routes(root, [inside, outside, regex]))] == ["in"]
    # one merged match per root match the leaf fits in
    both = route({"name": "any", "match": [{"headers": {"x": {"exact": "1"}}}]})
    [merged] = as_dict(merge_http_routes(root, [both]))
    assert [m["uri"] for m in merged["match"]] == [{"prefix": "/a"}, {"prefix": "/b"}]


def test_without_matches_on_one_side_the_other_sides_are_used() -> None:
    root = route({"match": [{"uri": {"prefix": "/api"}}]})
    leaf = route({"route": [{"destination": {"host": "a"}}]})
    assert as_dict(merge_http_routes(root, [leaf]))[0]["match"] == [{"uri": {"prefix": "/api"}}]
    root = route({})
    leaf = route({"match": [{"uri": {"exact": "/x"}}]})
    assert as_dict(merge_http_routes(root, [leaf]))[0]["match"] == [{"uri": {"exact": "/x"}}]


def test_conflicting_ports_source_namespace_and_gateways() -> None:
    root = route({"match": [{"port": 80, "sourceNamespace": "a", "gateways": ["ns/gw"]}]})
    assert merge_http_routes(root, [route({"match": [{"port": 81}]})]) == []
    assert merge_http_routes(root, [route({"match": [{"sourceNamespace": "b"}]})]) == []
    assert merge_http_routes(root, [route({"match": [{"gateways": ["ns/other"]}]})]) == []
    # a root sourceNamespace must be the leaf's too (hasConflict compares them even when unset)
    assert merge_http_routes(root, [route({"match": [{"port": 80}]})]) == []
    [ok] = as_dict(merge_http_routes(root, [route({"match": [{"sourceNamespace": "a"}]})]))
    assert ok["match"] == [{"port": 80, "sourceNamespace": "a", "gateways": ["ns/gw"]}]


ROOT_VS = config_doc(
    "VirtualService",
    "root",
    """
    hosts: [web]
    http:
    - name: api
      match: [{uri: {prefix: /api}}]
      delegate: {name: api-routes, namespace: team}
    - name: rest
      route: [{destination: {host: web}}]
    """,
)
DELEGATE = config_doc(
    "VirtualService",
    "api-routes",
    """
    http:
    - name: v2
      match: [{uri: {prefix: /api/v2}}]
      route: [{destination: {host: api-v2}}]
    - name: other
      match: [{uri: {prefix: /other}}]
      route: [{destination: {host: api-v1}}]
    """,
    namespace="team",
)
SERVICES = (
    kube_service("web", "[{name: http, port: 80}]", cluster_ip="10.96.0.1")
    + kube_service("api-v2", "[{name: http, port: 80}]", cluster_ip="10.96.0.2", namespace="team")
    + kube_service("api-v1", "[{name: http, port: 80}]", cluster_ip="10.96.0.3", namespace="team")
)


def web_routes(*docs: str) -> list[tuple[str, list[str]]]:
    push = push_context(SERVICES, *docs)
    proxy = sidecar_proxy("client-0.default", "10.1.0.9")
    [config] = generate_routes(proxy, push, ["80"])
    [vhost] = [v for v in config.virtual_hosts if v.name == "web.default.svc.cluster.local:80"]
    return [(r.name, [r.route.cluster]) for r in vhost.routes]


def test_a_sidecar_is_served_the_root_with_its_delegate_merged() -> None:
    # the delegate's short hosts resolve in its own namespace; its /other route falls outside /api
    assert web_routes(ROOT_VS, DELEGATE) == [
        ("api-v2", ["outbound|80||api-v2.team.svc.cluster.local"]),
        ("rest", ["outbound|80||web.default.svc.cluster.local"]),
    ]


def test_a_missing_or_unexported_delegate_drops_only_its_root_route() -> None:
    assert web_routes(ROOT_VS) == [("rest", ["outbound|80||web.default.svc.cluster.local"])]
    private = DELEGATE.replace("http:\n", 'exportTo: ["."]\n  http:\n', 1)
    assert web_routes(ROOT_VS, private) == [("rest", ["outbound|80||web.default.svc.cluster.local"])]


def test_a_sidecar_scope_depends_on_the_delegates_of_its_roots() -> None:
    push = push_context(SERVICES, ROOT_VS, DELEGATE)
    scope = push.sidecar_scope(sidecar_proxy("client-0.default", "10.1.0.9"))
    assert scope.depends_on(ConfigKey(Kind.VIRTUAL_SERVICE, "team", "api-routes"))
