"""VirtualService HTTP routes -> Envoy routes, field by field against istiod's route.go / retry.go.

Each test pins one translation istiod does (the istiod function is in the test name or
docstring); expected routes are written as Envoy proto3 JSON and parsed into protos, so a
misspelt field fails too. The last test runs a real Envoy in validate mode over every shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from envoy.config.route.v3 import route_components_pb2 as route_pb2
from envoy.config.route.v3 import route_pb2 as route_config_pb2
from envoy.extensions.filters.http.cors.v3 import cors_pb2
from envoy.extensions.filters.http.fault.v3 import fault_pb2
from google.protobuf import json_format

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.config.mesh import default_mesh_config
from app.config.objects import ConfigObject, Kind, ObjectMeta
from app.model.service import Protocol, Registry, Resolution, Service, ServicePort
from app.model.virtual_service import ResolvedVirtualService, resolve_virtual_service
from app.translate.route.builder import (
    RouteContext,
    build_default_route,
    build_vs_routes,
    destination_cluster,
    is_catch_all_route,
)
from tests.support.envoy import route_bootstrap, validate_bootstrap

HOST = "reviews.default.svc.cluster.local"
RATINGS = "ratings.default.svc.cluster.local"
MULTI = "multi.default.svc.cluster.local"
REVIEWS_SVC = Service(HOST, "default", (ServicePort("http", 80, Protocol.HTTP),), Registry.KUBERNETES, name="reviews")
RATINGS_SVC = Service(RATINGS, "default", (ServicePort("http", 9080, Protocol.HTTP),), Registry.KUBERNETES)
MULTI_SVC = Service(
    MULTI,
    "default",
    (ServicePort("http", 8080, Protocol.HTTP), ServicePort("grpc", 9090, Protocol.GRPC)),
    Registry.KUBERNETES,
)
SERVICES = {s.hostname: s for s in (REVIEWS_SVC, RATINGS_SVC, MULTI_SVC)}
CONFIG = "/apis/networking.istio.io/v1/namespaces/default/virtual-service/reviews"
PREVIOUS_HOSTS = {
    "name": "envoy.retry_host_predicates.previous_hosts",
    "typedConfig": {
        "@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"
    },
}
# retry.DefaultPolicy; no retriableStatusCodes since EXCLUDE_UNSAFE_503_FROM_DEFAULT_RETRY (1.24) defaults on
DEFAULT_RETRY: dict[str, Any] = {
    "retryOn": "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
    "numRetries": 2,
    "retryHostPredicate": [PREVIOUS_HOSTS],
    "hostSelectionRetryMaxAttempts": "5",
}
FAULT_TYPE = "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault"
CORS_TYPE = "type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy"


def ctx(
    port: int = 80,
    gateways: Iterable[str] = ("mesh",),
    labels: Mapping[str, str] | None = None,
    namespace: str = "default",
    mesh: MeshConfig | None = None,
    rules: Mapping[str, dict[str, Any]] | None = None,
    services: Mapping[str, Service] | None = None,
    tls: bool = False,
) -> RouteContext:
    return RouteContext(
        listener_port=port,
        gateways=frozenset(gateways),
        proxy_labels=labels or {"app": "productpage"},
        proxy_namespace=namespace,
        services=SERVICES if services is None else services,
        mesh=mesh or default_mesh_config(),
        destination_rules={h: json_format.ParseDict(r, net.DestinationRule()) for h, r in (rules or {}).items()},
        tls=tls,
    )


def vs(*http: dict[str, Any], name: str = "reviews", gateways: Iterable[str] = ()) -> ResolvedVirtualService:
    body = {"hosts": ["reviews"], "gateways": list(gateways), "http": list(http)}
    spec = json_format.ParseDict(body, net.VirtualService())
    return resolve_virtual_service(ConfigObject(Kind.VIRTUAL_SERVICE, ObjectMeta(name, "default"), spec))


def to_reviews(**extra: Any) -> dict[str, Any]:
    return {"route": [{"destination": {"host": "reviews"}}], **extra}


def expected(body: dict[str, Any]) -> dict[str, Any]:
    """Normalise expected proto3 JSON through the Route message (so unknown fields fail)."""
    return json_format.MessageToDict(json_format.ParseDict(body, route_pb2.Route()))


def as_dict(r: route_pb2.Route) -> dict[str, Any]:
    return json_format.MessageToDict(r)


def vs_route(
    action: dict[str, Any] | None = None,
    match: dict[str, Any] | None = None,
    operation: str = f"{HOST}:80/*",
    **fields: Any,
) -> dict[str, Any]:
    """A VirtualService route as istiod shapes it: config metadata, decorator, and (unless
    another action is given) a route action with the disabled timeout and default retries."""
    body: dict[str, Any] = {
        "match": match if match is not None else {"prefix": "/", "caseSensitive": True},
        "metadata": {"filterMetadata": {"istio": {"config": CONFIG}}},
        "decorator": {"operation": operation},
        **fields,
    }
    if action is not None:
        body["route"] = {"timeout": "0s", "maxGrpcTimeout": "0s", "retryPolicy": DEFAULT_RETRY, **action}
    return expected(body)


def one(routes: list[route_pb2.Route]) -> dict[str, Any]:
    assert len(routes) == 1, [r.name for r in routes]
    return as_dict(routes[0])


# --- default route (BuildDefaultHTTPOutboundRoute) -----------------------------------------


def test_default_route_matches_istiod() -> None:
    r = build_default_route(HOST, 80, ctx())
    assert as_dict(r) == expected(
        {
            "name": "default",
            "match": {"prefix": "/"},
            "decorator": {"operation": f"{HOST}:80/*"},
            "route": {
                "cluster": f"outbound|80||{HOST}",
                "timeout": "0s",
                "maxGrpcTimeout": "0s",
                "retryPolicy": DEFAULT_RETRY,
            },
        }
    )


def test_default_route_uses_mesh_retry_policy_and_service_consistent_hash() -> None:
    mesh = default_mesh_config()
    mesh.default_http_retry_policy.attempts = 0  # the mesh turns retries off
    rules = {
        HOST: {
            "host": HOST,
            "trafficPolicy": {
                "loadBalancer": {"consistentHash": {"httpHeaderName": "x-user"}},
                "portLevelSettings": [
                    {"port": {"number": 80}, "loadBalancer": {"consistentHash": {"useSourceIp": True}}}
                ],
            },
        }
    }
    r = build_default_route(HOST, 80, ctx(mesh=mesh, rules=rules))
    assert not r.route.HasField("retry_policy")
    assert as_dict(r)["route"]["hashPolicy"] == [{"connectionProperties": {"sourceIp": True}}]
    # the port without its own hash falls back to the service-wide one
    r = build_default_route(HOST, 9080, ctx(rules=rules))
    assert as_dict(r)["route"]["hashPolicy"] == [{"header": {"headerName": "x-user"}}]
    # hashing does not drop previous_hosts on the default route (istiod passes false)
    assert as_dict(r)["route"]["retryPolicy"] == DEFAULT_RETRY


# --- translateRoute basics -----------------------------------------------------------------


def test_single_destination_route_has_istiod_shape() -> None:
    routes = build_vs_routes(vs(to_reviews(name="all")), ctx())
    assert one(routes) == vs_route({"cluster": f"outbound|80||{HOST}"}, match={"prefix": "/"}, name="all")


def test_route_name_joins_http_and_match_names_and_keeps_stat_prefix() -> None:
    http = to_reviews(name="r1", match=[{"name": "m1", "uri": {"prefix": "/a"}, "statPrefix": "a-stats"}])
    r = one(build_vs_routes(vs(http), ctx()))
    assert r["name"] == "r1.m1"
    assert r["statPrefix"] == "a-stats"


def test_uri_and_header_matches_translate_like_translate_route_match() -> None:
    match = {
        "uri": {"regex": "/api/v[0-9]+/.*"},
        "ignoreUriCase": True,
        "headers": {
            "x-exact": {"exact": "a"},
            "x-any": {"regex": "*"},
            "x-present": {},
            "@request.auth.claims.group": {"exact": "admin"},
        },
        "withoutHeaders": {"x-debug": {"prefix": "on"}, "x-gone": {}},
        "method": {"exact": "GET"},
        "authority": {"prefix": "reviews"},
        "scheme": {"exact": "https"},
        "queryParams": {"v": {"regex": "^[0-9]+$"}, "debug": {"exact": ""}},
    }
    r = one(build_vs_routes(vs(to_reviews(match=[match])), ctx()))
    claim_value = {"stringMatch": {"exact": "admin"}}
    assert (
        r["match"]
        == expected(
            {
                "match": {
                    "safeRegex": {"regex": "/api/v[0-9]+/.*"},
                    "caseSensitive": False,
                    "headers": [
                        {"name": "x-any", "presentMatch": True},
                        {
                            "name": "x-debug",
                            "stringMatch": {"prefix": "on"},
                            "invertMatch": True,
                            "treatMissingHeaderAsEmpty": True,
                        },
                        {"name": "x-exact", "stringMatch": {"exact": "a"}},
                        {"name": "x-gone", "presentMatch": True, "invertMatch": True},
                        {"name": "x-present", "presentMatch": True},
                        {"name": ":method", "stringMatch": {"exact": "GET"}},
                        {"name": ":authority", "stringMatch": {"prefix": "reviews"}},
                        {"name": ":scheme", "stringMatch": {"exact": "https"}},
                    ],
                    "queryParameters": [
                        {"name": "debug", "stringMatch": {"exact": ""}},
                        {"name": "v", "stringMatch": {"safeRegex": {"regex": "^[0-9]+$"}}},
                    ],
                    "dynamicMetadata": [
                        {
                            "filter": "envoy.filters.http.jwt_authn",
                            "path": [{"key": "payload"}, {"key": "group"}],
                            "value": {
                                "orMatch": {"valueMatchers": [{"listMatch": {"oneOf": claim_value}}, claim_value]}
                            },
                        }
                    ],
                }
            }
        )["match"]
    )
    # the regex path names the route's operation
    assert r["decorator"]["operation"] == f"{HOST}:80/api/v[0-9]+/.*"


def test_jwt_claims_with_brackets_in_without_headers_invert_the_metadata_matcher() -> None:
    match = {"uri": {"exact": "/x"}, "withoutHeaders": {"@request.auth.claims[org][team]": {"prefix": "eng"}}}
    r = one(build_vs_routes(vs(to_reviews(match=[match])), ctx()))
    md = r["match"]["dynamicMetadata"][0]
    assert md["invert"] is True
    assert md["path"] == [{"key": "payload"}, {"key": "org"}, {"key": "team"}]
    assert r["match"]["path"] == "/x"
    assert r["decorator"]["operation"] == f"{HOST}:80/x"


# --- which matches apply (sourceMatchHTTP, port) -------------------------------------------


def test_match_gateways_filter_routes_by_the_proxy_gateways() -> None:
    service = vs(
        to_reviews(name="gw-only", match=[{"gateways": ["ingress"], "uri": {"prefix": "/gw"}}]),
        to_reviews(name="mesh-only", match=[{"gateways": ["mesh"], "uri": {"prefix": "/mesh"}}]),
        gateways=["ingress", "mesh"],
    )
    assert [r.name for r in build_vs_routes(service, ctx())] == ["mesh-only"]
    # short gateway names resolve in the VirtualService's namespace
    assert [r.name for r in build_vs_routes(service, ctx(gateways=["default/ingress"]))] == ["gw-only"]
    assert [r.name for r in build_vs_routes(service, ctx(gateways=["other/ingress"]))] == []


V2_LABELS = {"app": "productpage", "version": "v2"}
PP_LABELS = {"app": "productpage"}


def test_source_labels_and_namespace_select_the_client_proxy() -> None:
    service = vs(
        to_reviews(name="v2-clients", match=[{"sourceLabels": V2_LABELS, "uri": {"prefix": "/v"}}]),
        to_reviews(name="pp", match=[{"sourceLabels": PP_LABELS, "sourceNamespace": "shop", "uri": {"prefix": "/p"}}]),
        to_reviews(name="rest", match=[{"uri": {"prefix": "/r"}}]),
    )
    assert [r.name for r in build_vs_routes(service, ctx())] == ["rest"]
    got = build_vs_routes(service, ctx(labels=V2_LABELS, namespace="shop"))
    assert [r.name for r in got] == ["v2-clients", "pp", "rest"]


def test_match_port_must_equal_the_listener_port() -> None:
    service = vs(to_reviews(name="p", match=[{"port": 9080, "uri": {"prefix": "/p"}}]))
    assert build_vs_routes(service, ctx(port=80)) == []
    assert [r.name for r in build_vs_routes(service, ctx(port=9080))] == ["p"]


def test_catch_all_route_stops_further_routes() -> None:
    service = vs(
        to_reviews(name="hdr", match=[{"uri": {"prefix": "/"}, "headers": {"x": {"exact": "1"}}}]),
        to_reviews(name="all", match=[{"uri": {"prefix": "/a"}}, {"uri": {"prefix": "/"}}, {"uri": {"prefix": "/b"}}]),
        to_reviews(name="never"),
    )
    routes = build_vs_routes(service, ctx())
    assert [(r.name, r.match.prefix) for r in routes] == [("hdr", "/"), ("all", "/a"), ("all", "/")]
    assert not is_catch_all_route(routes[0]) and is_catch_all_route(routes[2])
    # an HTTPRoute without matches is a catch-all too
    service = vs(to_reviews(name="first"), to_reviews(name="never"))
    assert [r.name for r in build_vs_routes(service, ctx())] == ["first"]


# --- destinations (processDestination / processWeightedDestination) ------------------------


def test_weighted_subsets_become_weighted_clusters() -> None:
    http = {
        "route": [
            {"destination": {"host": "reviews", "subset": "v1"}, "weight": 75},
            {"destination": {"host": "reviews", "subset": "v2"}, "weight": 25},
            {"destination": {"host": "reviews", "subset": "v3"}, "weight": 0},
        ]
    }
    assert one(build_vs_routes(vs(http), ctx())) == vs_route(
        {
            "weightedClusters": {
                "clusters": [
                    {"name": f"outbound|80|v1|{HOST}", "weight": 75},
                    {"name": f"outbound|80|v2|{HOST}", "weight": 25},
                ]
            }
        },
        match={"prefix": "/"},
        operation="reviews:80/*",  # no single cluster: the VirtualService names the operation
    )


def test_a_single_weighted_destination_is_a_plain_cluster() -> None:
    http = {"route": [{"destination": {"host": "reviews", "subset": "v2"}, "weight": 100}]}
    r = one(build_vs_routes(vs(http), ctx()))
    assert r["route"]["cluster"] == f"outbound|80|v2|{HOST}"
    assert "weightedClusters" not in r["route"]


def test_destination_port_comes_from_destination_then_single_service_port_then_listener() -> None:
    c = ctx(port=8000)

    def cluster(**dest: Any) -> str:
        return destination_cluster(json_format.ParseDict(dest, net.Destination()), c)

    assert cluster(host=RATINGS) == f"outbound|9080||{RATINGS}"  # the service's only port
    assert cluster(host=MULTI) == f"outbound|8000||{MULTI}"  # several ports: the listener's
    assert cluster(host=MULTI, port={"number": 9090}, subset="v1") == f"outbound|9090|v1|{MULTI}"
    assert cluster(host="unknown.example.com") == "outbound|8000||unknown.example.com"
    assert cluster(host="") == "UnknownService"
    alias = Service(
        "old.default.svc.cluster.local",
        "default",
        (ServicePort("http", 80, Protocol.HTTP),),
        Registry.KUBERNETES,
        resolution=Resolution.ALIAS,
        external_name=RATINGS,
    )
    c = ctx(services={alias.hostname: alias})
    assert cluster(host=alias.hostname) == f"outbound|80||{RATINGS}"


# --- redirect / direct response ------------------------------------------------------------


def test_redirect_translates_uri_authority_code_and_scheme() -> None:
    http = {"redirect": {"uri": "/v2", "authority": "new.example.com", "redirectCode": 302, "scheme": "https"}}
    assert one(build_vs_routes(vs(http), ctx())) == vs_route(
        match={"prefix": "/"},
        operation="reviews:80/*",
        redirect={
            "pathRedirect": "/v2",
            "hostRedirect": "new.example.com",
            "responseCode": "FOUND",
            "schemeRedirect": "https",
        },
    )


def test_redirect_ports_follow_apply_redirect() -> None:
    def redirect(spec: dict[str, Any], **kw: Any) -> dict[str, Any]:
        got: dict[str, Any] = one(build_vs_routes(vs({"redirect": spec}), ctx(**kw)))["redirect"]
        return got

    assert redirect({"uri": "/x", "port": 8443}) == {"pathRedirect": "/x", "portRedirect": 8443}
    assert redirect({"uri": "/x", "derivePort": "FROM_REQUEST_PORT"}, port=8080)["portRedirect"] == 8080
    # the scheme's own default port is left out
    assert "portRedirect" not in redirect({"uri": "/x", "derivePort": "FROM_REQUEST_PORT"})
    assert "portRedirect" not in redirect({"uri": "/x", "port": 443}, tls=True)
    assert redirect({"uri": "/x", "port": 443})["portRedirect"] == 443
    assert redirect({"uri": "/x", "redirectCode": 308})["responseCode"] == "PERMANENT_REDIRECT"
    # a code Envoy cannot send: no route rather than one without an action
    assert build_vs_routes(vs({"redirect": {"uri": "/x", "redirectCode": 305}}), ctx()) == []
    # prefixRewrite replaces the matched prefix instead of the whole path (ApplyRedirect)
    assert redirect({"prefixRewrite": "/v2/"}) == {"prefixRewrite": "/v2/"}


def test_direct_response_with_string_and_bytes_bodies() -> None:
    service = vs(
        {"match": [{"uri": {"exact": "/s"}}], "directResponse": {"status": 418, "body": {"string": "teapot"}}},
        {"match": [{"uri": {"exact": "/b"}}], "directResponse": {"status": 200, "body": {"bytes": "aGk="}}},
        {"directResponse": {"status": 503}},
    )
    got = [as_dict(r)["directResponse"] for r in build_vs_routes(service, ctx())]
    assert got == [
        {"status": 418, "body": {"inlineString": "teapot"}},
        {"status": 200, "body": {"inlineBytes": "aGk="}},
        {"status": 503},
    ]


# --- rewrite, timeout, headers -------------------------------------------------------------


def test_rewrites_and_authority() -> None:
    r = one(build_vs_routes(vs(to_reviews(rewrite={"uri": "/v1", "authority": "ratings"})), ctx()))
    assert r["route"]["prefixRewrite"] == "/v1"
    assert r["route"]["hostRewriteLiteral"] == "ratings"
    regex_rewrite = {"uriRegexRewrite": {"match": "^/a/(.*)", "rewrite": "/\\1"}}
    r = one(build_vs_routes(vs(to_reviews(rewrite=regex_rewrite)), ctx()))
    assert r["route"]["regexRewrite"] == {"pattern": {"regex": "^/a/(.*)"}, "substitution": "/\\1"}
    # a Host / :authority header operation becomes a host rewrite, not a header
    headers = {"request": {"set": {"Host": "from-set"}, "add": {":authority": "from-add"}}}
    r = one(build_vs_routes(vs(to_reviews(headers=headers)), ctx()))
    assert r["route"]["hostRewriteLiteral"] == "from-set"
    assert "requestHeadersToAdd" not in r
    r = one(build_vs_routes(vs(to_reviews(headers=headers, rewrite={"authority": "rw"})), ctx()))
    assert r["route"]["hostRewriteLiteral"] == "rw"


def test_timeout_sets_timeout_and_max_grpc_timeout() -> None:
    r = one(build_vs_routes(vs(to_reviews(timeout="5s")), ctx()))
    assert (r["route"]["timeout"], r["route"]["maxGrpcTimeout"]) == ("5s", "5s")


def test_header_operations_set_add_remove_on_route_and_destinations() -> None:
    headers = {
        "request": {"set": {"x-b": "1", "x-a": "2"}, "add": {"x-c": "3"}, "remove": ["x-r", ":path"]},
        "response": {"set": {"x-s": "4"}, "add": {"x-t": "5"}, "remove": ["x-u"]},
    }
    dest_headers = {"request": {"set": {"x-dest": "d", "host": "dest-host"}}, "response": {"remove": ["x-v"]}}
    http = {"headers": headers, "route": [{"destination": {"host": "reviews"}, "headers": dest_headers}]}
    r = one(build_vs_routes(vs(http), ctx()))
    overwrite = "OVERWRITE_IF_EXISTS_OR_ADD"
    assert r["requestHeadersToAdd"] == [
        {"header": {"key": "x-a", "value": "2"}, "appendAction": overwrite},
        {"header": {"key": "x-b", "value": "1"}, "appendAction": overwrite},
        {"header": {"key": "x-c", "value": "3"}},  # APPEND_IF_EXISTS_OR_ADD is the zero value
        {"header": {"key": "x-dest", "value": "d"}, "appendAction": overwrite},
    ]
    assert r["requestHeadersToRemove"] == ["x-r"]
    assert r["responseHeadersToAdd"] == [
        {"header": {"key": "x-s", "value": "4"}, "appendAction": overwrite},
        {"header": {"key": "x-t", "value": "5"}},
    ]
    assert r["responseHeadersToRemove"] == ["x-u", "x-v"]
    assert r["route"]["hostRewriteLiteral"] == "dest-host"

    weighted = {
        "route": [
            {"destination": {"host": "reviews", "subset": "v1"}, "weight": 50, "headers": dest_headers},
            {"destination": {"host": "reviews", "subset": "v2"}, "weight": 50},
        ]
    }
    r = one(build_vs_routes(vs(weighted), ctx()))
    assert r["route"]["weightedClusters"]["clusters"][0] == {
        "name": f"outbound|80|v1|{HOST}",
        "weight": 50,
        "requestHeadersToAdd": [{"header": {"key": "x-dest", "value": "d"}, "appendAction": overwrite}],
        "responseHeadersToRemove": ["x-v"],
        "hostRewriteLiteral": "dest-host",
    }
    assert "hostRewriteLiteral" not in r["route"]


# --- retries (retry.ConvertPolicy) ---------------------------------------------------------


def test_retries_attempts_zero_disables_the_policy() -> None:
    r = build_vs_routes(vs(to_reviews(retries={"attempts": 0})), ctx())[0]
    assert not r.route.HasField("retry_policy")


def test_retries_override_the_default_policy() -> None:
    retries = {
        "attempts": 3,
        "perTryTimeout": "2s",
        "retryOn": "5xx, 503,gateway-error,429",
        "retryRemoteLocalities": True,
        "backoff": "0.250s",
    }
    r = one(build_vs_routes(vs(to_reviews(retries=retries)), ctx()))
    assert r["route"]["retryPolicy"] == {
        "retryOn": "5xx,gateway-error,retriable-status-codes",
        "numRetries": 3,
        "perTryTimeout": "2s",
        "retryHostPredicate": [PREVIOUS_HOSTS],
        "hostSelectionRetryMaxAttempts": "5",
        "retriableStatusCodes": [503, 429],
        "retryPriority": {
            "name": "envoy.retry_priorities.previous_priorities",
            "typedConfig": {
                "@type": "type.googleapis.com/envoy.extensions.retry.priority.previous_priorities.v3"
                ".PreviousPrioritiesConfig",
                "updateFrequency": 2,
            },
        },
        "retryBackOff": {"baseInterval": "0.250s"},
    }
    r = one(build_vs_routes(vs(to_reviews(retries={"attempts": 1, "retryIgnorePreviousHosts": False})), ctx()))
    without_predicate = {k: v for k, v in DEFAULT_RETRY.items() if k != "retryHostPredicate"}
    assert r["route"]["retryPolicy"] == {**without_predicate, "numRetries": 1}


def test_consistent_hash_destinations_add_hash_policies_and_keep_retries_on_host() -> None:
    rules = {
        HOST: {
            "host": HOST,
            "trafficPolicy": {"loadBalancer": {"consistentHash": {"httpHeaderName": "x-user"}}},
            "subsets": [
                {
                    "name": "v2",
                    "labels": {"version": "v2"},
                    "trafficPolicy": {
                        "loadBalancer": {"consistentHash": {"httpCookie": {"name": "c", "path": "/", "ttl": "10s"}}}
                    },
                }
            ],
        }
    }
    r = one(build_vs_routes(vs(to_reviews()), ctx(rules=rules)))
    assert r["route"]["hashPolicy"] == [{"header": {"headerName": "x-user"}}]
    assert "retryHostPredicate" not in r["route"]["retryPolicy"]
    http = {"route": [{"destination": {"host": "reviews", "subset": "v2"}}]}
    r = one(build_vs_routes(vs(http), ctx(rules=rules)))
    assert r["route"]["hashPolicy"] == [{"cookie": {"name": "c", "path": "/", "ttl": "10s"}}]
    # weighted destinations hash too, but keep previous_hosts (istiod only checks one destination)
    weighted = {
        "route": [
            {"destination": {"host": "reviews", "subset": "v2"}, "weight": 50},
            {"destination": {"host": "ratings"}, "weight": 50},
        ]
    }
    r = one(build_vs_routes(vs(weighted), ctx(rules=rules)))
    assert r["route"]["hashPolicy"] == [{"cookie": {"name": "c", "path": "/", "ttl": "10s"}}]
    assert r["route"]["retryPolicy"] == DEFAULT_RETRY


# --- fault, mirror, CORS -------------------------------------------------------------------


def test_fault_injection_becomes_per_route_fault_config() -> None:
    fault = {
        "delay": {"fixedDelay": "5s", "percentage": {"value": 10.5}},
        "abort": {"httpStatus": 503, "percentage": {"value": 50}},
    }
    r = one(build_vs_routes(vs(to_reviews(fault=fault)), ctx()))
    assert r["typedPerFilterConfig"] == {
        "envoy.filters.http.fault": {
            "@type": FAULT_TYPE,
            "delay": {"fixedDelay": "5s", "percentage": {"numerator": 105000, "denominator": "MILLION"}},
            "abort": {"httpStatus": 503, "percentage": {"numerator": 500000, "denominator": "MILLION"}},
        }
    }
    fault = {"delay": {"fixedDelay": "1s", "percent": 30}, "abort": {"grpcStatus": "UNAVAILABLE"}}
    r = one(build_vs_routes(vs(to_reviews(fault=fault)), ctx()))
    assert r["typedPerFilterConfig"]["envoy.filters.http.fault"] == {
        "@type": FAULT_TYPE,
        "delay": {"fixedDelay": "1s", "percentage": {"numerator": 30}},  # HUNDRED is the zero value
        "abort": {"grpcStatus": 14},
    }
    # exponential delays have no Envoy form: istiod leaves an empty fault config
    r = one(build_vs_routes(vs(to_reviews(fault={"delay": {"exponentialDelay": "1s"}})), ctx()))
    assert r["typedPerFilterConfig"]["envoy.filters.http.fault"] == {"@type": FAULT_TYPE}


def test_mirror_and_mirrors_become_request_mirror_policies() -> None:
    http = to_reviews(
        mirror={"host": "ratings"},
        mirrorPercentage={"value": 25.0},
        mirrors=[
            {"destination": {"host": "multi", "subset": "shadow"}},
            {"destination": {"host": "reviews"}, "percentage": {"value": 0}},
        ],
    )
    r = one(build_vs_routes(vs(http), ctx()))
    assert r["route"]["requestMirrorPolicies"] == [
        {
            "cluster": f"outbound|9080||{RATINGS}",
            "runtimeFraction": {"defaultValue": {"numerator": 250000, "denominator": "MILLION"}},
            "traceSampled": False,
        },
        {
            "cluster": f"outbound|80|shadow|{MULTI}",
            "runtimeFraction": {"defaultValue": {"numerator": 100}},
            "traceSampled": False,
        },
    ]
    r = one(build_vs_routes(vs(to_reviews(mirror={"host": "ratings"}, mirrorPercent=0)), ctx()))
    assert "requestMirrorPolicies" not in r["route"]


def test_cors_policy_becomes_per_route_cors_config() -> None:
    cors = {
        "allowOrigins": [{"exact": "https://a.example"}, {"prefix": "https://b."}, {"regex": ".*\\.c\\.example"}],
        "allowMethods": ["GET", "POST"],
        "allowHeaders": ["x-a", "x-b"],
        "exposeHeaders": ["x-c"],
        "maxAge": "86400s",
        "allowCredentials": True,
        "unmatchedPreflights": "IGNORE",
    }
    r = one(build_vs_routes(vs(to_reviews(corsPolicy=cors)), ctx()))
    assert r["typedPerFilterConfig"] == {
        "envoy.filters.http.cors": {
            "@type": CORS_TYPE,
            "allowOriginStringMatch": [
                {"exact": "https://a.example"},
                {"prefix": "https://b."},
                {"safeRegex": {"regex": ".*\\.c\\.example"}},
            ],
            "allowMethods": "GET,POST",
            "allowHeaders": "x-a,x-b",
            "exposeHeaders": "x-c",
            "maxAge": "86400",
            "allowCredentials": True,
            "filterEnabled": {"defaultValue": {"numerator": 100}},
            "forwardNotMatchingPreflights": False,
        }
    }
    r = one(build_vs_routes(vs(to_reviews(corsPolicy={"allowOrigin": ["https://old.example"]})), ctx()))
    assert r["typedPerFilterConfig"]["envoy.filters.http.cors"] == {
        "@type": CORS_TYPE,
        "allowOriginStringMatch": [{"exact": "https://old.example"}],
        "filterEnabled": {"defaultValue": {"numerator": 100}},
        "forwardNotMatchingPreflights": True,
    }


# --- real Envoy ----------------------------------------------------------------------------


def _every_shape() -> list[route_pb2.Route]:
    cookie = {"httpCookie": {"name": "c", "ttl": "5s"}}
    rules: dict[str, dict[str, Any]] = {
        HOST: {
            "host": HOST,
            "trafficPolicy": {"loadBalancer": {"consistentHash": {"httpQueryParameterName": "u"}}},
            "subsets": [
                {"name": "v1", "trafficPolicy": {"loadBalancer": {"consistentHash": cookie}}},
                {"name": "v2", "trafficPolicy": {"loadBalancer": {"consistentHash": {"useSourceIp": True}}}},
            ],
        },
        RATINGS: {"host": RATINGS, "trafficPolicy": {"loadBalancer": {"consistentHash": {"httpHeaderName": "x-u"}}}},
    }
    c = ctx(rules=rules)
    everything = {
        "name": "everything",
        "match": [
            {
                "name": "m",
                "uri": {"regex": "/r/[a-z]+"},
                "ignoreUriCase": True,
                "headers": {"x-a": {"exact": "1"}, "x-p": {"regex": "*"}, "@request.auth.claims.sub": {"prefix": "u"}},
                "withoutHeaders": {"x-b": {"regex": "b.*"}, "@request.auth.claims[grp][id]": {"exact": "x"}},
                "method": {"exact": "GET"},
                "authority": {"prefix": "reviews"},
                "scheme": {"exact": "http"},
                "queryParams": {"q": {"prefix": "a"}, "z": {}},
                "statPrefix": "everything",
            }
        ],
        "route": [
            {
                "destination": {"host": "reviews", "subset": "v1"},
                "weight": 60,
                "headers": {"request": {"set": {"x-d": "1", ":authority": "a"}}, "response": {"remove": ["x-e"]}},
            },
            {"destination": {"host": "reviews", "subset": "v2"}, "weight": 40},
        ],
        "headers": {"request": {"add": {"x-r": "1"}, "remove": ["x-s"]}, "response": {"set": {"x-t": "2"}}},
        "rewrite": {"uriRegexRewrite": {"match": "^/r/(.*)$", "rewrite": "/\\1"}},
        "timeout": "3s",
        "retries": {
            "attempts": 4,
            "perTryTimeout": "1s",
            "retryOn": "5xx,reset,502",
            "retryRemoteLocalities": True,
            "backoff": "0.1s",
        },
        "fault": {
            "delay": {"fixedDelay": "0.5s", "percentage": {"value": 1.5}},
            "abort": {"grpcStatus": "NOT_FOUND", "percentage": {"value": 0.1}},
        },
        "mirror": {"host": "ratings"},
        "mirrorPercentage": {"value": 12.5},
        "mirrors": [{"destination": {"host": "multi", "port": {"number": 9090}}, "percentage": {"value": 5}}],
        "corsPolicy": {
            "allowOrigins": [{"regex": "https://.*"}],
            "allowMethods": ["GET"],
            "maxAge": "3600s",
            "allowCredentials": False,
            "exposeHeaders": ["x-e"],
        },
    }
    service = vs(
        everything,
        {
            "match": [{"uri": {"exact": "/single"}}],
            "route": [{"destination": {"host": "ratings"}}],
            "rewrite": {"uri": "/s", "authority": "ratings"},
            "retries": {"attempts": 0},
        },
        {"match": [{"uri": {"prefix": "/hashed"}}], "route": [{"destination": {"host": "reviews", "subset": "v2"}}]},
        {
            "match": [{"uri": {"prefix": "/redirect"}}],
            "redirect": {"uri": "/new", "authority": "x.example", "port": 8443, "scheme": "https", "redirectCode": 307},
        },
        {"match": [{"uri": {"prefix": "/derive"}}], "redirect": {"authority": "y", "derivePort": "FROM_REQUEST_PORT"}},
        {"match": [{"uri": {"prefix": "/direct"}}], "directResponse": {"status": 200, "body": {"string": "ok"}}},
        {"match": [{"uri": {"prefix": "/bytes"}}], "directResponse": {"status": 204, "body": {"bytes": "AAE="}}},
        {
            "match": [{"uri": {"prefix": "/empty-fault"}}],
            "route": [{"destination": {"host": "reviews"}}],
            "fault": {"delay": {"exponentialDelay": "1s"}},
        },
        {"name": "rest", "route": [{"destination": {"host": "reviews"}}]},
    )
    routes = build_vs_routes(service, c)
    assert len(routes) == 9
    routes.append(build_default_route(HOST, 80, c))
    return routes


def test_real_envoy_accepts_every_route_shape(tmp_path: Path) -> None:
    routes = _every_shape()
    kinds = {r.WhichOneof("action") for r in routes}
    assert kinds == {"route", "redirect", "direct_response"}
    config = route_config_pb2.RouteConfiguration(name="80")
    config.virtual_hosts.add(name=f"{HOST}:80", domains=["*"]).routes.extend(routes)
    # the per-route configs need their filters in the chain, before the router
    filters = [("envoy.filters.http.cors", cors_pb2.Cors()), ("envoy.filters.http.fault", fault_pb2.HTTPFault())]
    validate_bootstrap(route_bootstrap([config], filters), tmp_path)
