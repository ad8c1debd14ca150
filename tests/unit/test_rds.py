"""RDS: the route configurations a sidecar or gateway gets, against istiod's behaviour.

Checked against istio/istio pilot/pkg/networking/core/httproute.go (BuildHTTPRoutes,
buildSidecarOutboundHTTPRouteConfig, BuildSidecarOutboundVirtualHosts, generateVirtualHostDomains,
GenerateAltVirtualHosts, dedupeDomains, getVirtualHostsForSniffedServicePort,
buildCatchAllVirtualHost), route/route.go (BuildSidecarVirtualHostWrapper,
separateVSHostsAndServices), gateway.go (buildGatewayHTTPRouteConfig, collapseDuplicateRoutes)
and model/gateway.go (mergeGateways, resolvePorts, gatewayRDSRouteName). The last tests run a real
Envoy in validate mode over every route configuration built here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.config.route.v3 import route_pb2

from app.model.proxy import Proxy
from app.model.push_context import PushContext
from app.translate.listener.for_proxy import route_names
from app.translate.route.virtual_host import alt_hosts
from app.xds.generators.reference import generate_listeners, generate_routes
from tests.support.envoy import route_bootstrap, validate_bootstrap
from tests.support.mesh import config_doc, kube_service, mesh_config_map, push_context, router_proxy, sidecar_proxy

REVIEWS = "reviews.default.svc.cluster.local"
RATINGS = "ratings.other.svc.cluster.local"
CREATED = "2024-01-01T00:00:00Z"


def doc(kind: str, ns: str, name: str, spec: str, created: str = CREATED) -> str:
    return config_doc(kind, name, spec, namespace=ns, created=created)


def service(ns: str, name: str, ip: str, ports: str, created: str = CREATED) -> str:
    return kube_service(name, ports, namespace=ns, cluster_ip=ip, created=created)


SERVICES = (
    service("default", "reviews", "10.96.0.30", "[{name: http, port: 9080}, {name: grpc, port: 9090}]"),
    service("other", "ratings", "10.96.0.40", "[{name: http, port: 9080}]", "2024-01-01T00:00:01Z"),
    service("default", "db", "10.96.0.50", "[{name: tcp, port: 9080}]", "2024-01-01T00:00:02Z"),
)
HEADLESS = service("default", "web", "None", "[{name: http, port: 8000}]")
REGISTRY_ONLY = mesh_config_map("outboundTrafficPolicy: {mode: REGISTRY_ONLY}")
REVIEWS_VS = doc(
    "VirtualService",
    "default",
    "reviews",
    """
    hosts: [reviews]
    http:
    - match: [{headers: {end-user: {exact: jason}}}]
      route: [{destination: {host: reviews, subset: v2}}]
    - route: [{destination: {host: reviews, subset: v1}}]
    """,
)
API_ENTRY = doc(
    "ServiceEntry",
    "default",
    "api",
    """
    hosts: [api.example.com]
    location: MESH_EXTERNAL
    resolution: DNS
    ports: [{number: 80, name: http, protocol: HTTP}]
    """,
)


def sidecar(ns: str = "default", labels: Mapping[str, str] | None = None) -> Proxy:
    return sidecar_proxy(f"pod-1.{ns}", "10.1.0.7", labels)


GATEWAY = router_proxy("ingress-0.istio-system", "10.1.9.9", {"istio": "ingressgateway"})


def route(proxy: Proxy, push: PushContext, name: str) -> route_pb2.RouteConfiguration:
    (cfg,) = generate_routes(proxy, push, [name])
    assert cfg.name == name
    return cfg


def vhosts(cfg: route_pb2.RouteConfiguration) -> dict[str, rc.VirtualHost]:
    return {vh.name: vh for vh in cfg.virtual_hosts}


def clusters(vh: rc.VirtualHost) -> list[str]:
    return [r.route.cluster for r in vh.routes]


# --- sidecars ------------------------------------------------------------------------------


def test_default_route_per_service_port() -> None:
    push = push_context(*SERVICES)
    by_port = {p: vhosts(route(sidecar(), push, p)) for p in ("9080", "9090")}
    assert list(by_port["9080"]) == [f"{RATINGS}:9080", f"{REVIEWS}:9080", "allow_any"]  # db is TCP: none
    assert list(by_port["9090"]) == [f"{REVIEWS}:9090", "allow_any"]
    assert clusters(by_port["9080"][f"{REVIEWS}:9080"]) == [f"outbound|9080||{REVIEWS}"]
    assert clusters(by_port["9090"][f"{REVIEWS}:9090"]) == [f"outbound|9090||{REVIEWS}"]
    default = by_port["9080"][f"{RATINGS}:9080"].routes[0]
    assert (default.name, default.match.prefix, default.route.timeout.ToSeconds()) == ("default", "/", 0)


def test_route_configuration_flags() -> None:
    cfg = route(sidecar(), push_context(*SERVICES), "9080")
    assert cfg.validate_clusters.value is False and cfg.HasField("validate_clusters")
    assert cfg.ignore_port_in_host_matching is True
    assert cfg.max_direct_response_body_size_bytes.value == 1024 * 1024
    assert all(vh.include_request_attempt_count for vh in cfg.virtual_hosts)


def test_virtual_service_header_match_to_v2_else_v1() -> None:
    cfg = route(sidecar(), push_context(*SERVICES, REVIEWS_VS), "9080")
    vh = vhosts(cfg)[f"{REVIEWS}:9080"]
    assert clusters(vh) == [f"outbound|9080|v2|{REVIEWS}", f"outbound|9080|v1|{REVIEWS}"]
    (header,) = vh.routes[0].match.headers
    assert (header.name, header.string_match.exact) == ("end-user", "jason")
    assert not vh.routes[1].match.headers
    # the other service on the port keeps its default route
    assert clusters(vhosts(cfg)[f"{RATINGS}:9080"]) == [f"outbound|9080||{RATINGS}"]


def test_domains_in_proxy_namespace_and_another() -> None:
    cfg = route(sidecar(), push_context(*SERVICES), "9080")
    by_name = vhosts(cfg)
    # same namespace: the absolute FQDN (PILOT_ENABLE_ABSOLUTE_FQDN_VHOST_DOMAIN) and every short
    # form; no :PORT variants as ignore_port_in_host_matching is set
    assert list(by_name[f"{REVIEWS}:9080"].domains) == [
        REVIEWS,
        f"{REVIEWS}.",
        "reviews",
        "reviews.default.svc",
        "reviews.default",
        "10.96.0.30",
    ]
    assert list(by_name[f"{RATINGS}:9080"].domains) == [
        RATINGS,
        f"{RATINGS}.",
        "ratings.other",
        "ratings.other.svc",
        "10.96.0.40",
    ]
    assert list(by_name["allow_any"].domains) == ["*"]


def test_headless_service_also_matches_pod_names() -> None:
    vh = vhosts(route(sidecar(), push_context(HEADLESS), "8000"))["web.default.svc.cluster.local:8000"]
    short = ["web.default.svc.cluster.local", "web.default.svc.cluster.local.", "web", "web.default.svc", "web.default"]
    assert list(vh.domains) == short + [f"*.{d}" for d in short]


def test_a_domain_is_used_once_and_a_short_name_never_shadows_an_fqdn() -> None:
    # a ServiceEntry whose host is another service's short name, sharing its VIP
    entry = doc(
        "ServiceEntry",
        "default",
        "legacy",
        """
        hosts: [reviews.default]
        addresses: [10.96.0.30]
        resolution: STATIC
        endpoints: [{address: 10.2.0.1}]
        ports: [{number: 9080, name: http, protocol: HTTP}]
        """,
        created="2024-02-01T00:00:00Z",
    )
    by_name = vhosts(route(sidecar(), push_context(*SERVICES, entry), "9080"))
    want = [REVIEWS, f"{REVIEWS}.", "reviews", "reviews.default.svc", "10.96.0.30"]
    assert list(by_name[f"{REVIEWS}:9080"].domains) == want
    # the VIP went to the older service
    assert list(by_name["reviews.default:9080"].domains) == ["reviews.default", "reviews.default."]
    every = [d for vh in by_name.values() for d in vh.domains]
    assert len(every) == len(set(every))


def test_virtual_service_for_an_external_service_entry() -> None:
    vs = doc(
        "VirtualService",
        "default",
        "api",
        """
        hosts: [api.example.com]
        http:
        - match: [{uri: {prefix: /v2}}]
          route: [{destination: {host: api.example.com}, weight: 100}]
          timeout: 3s
        - route: [{destination: {host: api.example.com}}]
        """,
    )
    cfg = route(sidecar(), push_context(*SERVICES, API_ENTRY, vs), "80")
    vh = vhosts(cfg)["api.example.com:80"]
    assert list(vh.domains) == ["api.example.com", "api.example.com."]  # not a Kubernetes name: no short forms
    assert [r.match.prefix for r in vh.routes] == ["/v2", "/"]
    assert vh.routes[0].route.timeout.ToSeconds() == 3
    assert clusters(vh)[1] == "outbound|80||api.example.com"


def test_virtual_service_host_that_is_no_service_gets_its_own_virtual_host_on_port_80_only() -> None:
    vs = doc(
        "VirtualService",
        "default",
        "site",
        """
        hosts: [bookinfo.com, reviews]
        http:
        - route: [{destination: {host: reviews, port: {number: 9080}}}]
        """,
    )
    push = push_context(*SERVICES, vs)
    on_80 = vhosts(route(sidecar(), push, "80"))
    # reviews has no port 80, so on 80 its name is just another host (istiod does the same)
    assert list(on_80) == ["bookinfo.com:80", f"{REVIEWS}:80", "allow_any"]
    assert list(on_80["bookinfo.com:80"].domains) == ["bookinfo.com"]
    assert list(on_80[f"{REVIEWS}:80"].domains) == [REVIEWS]
    assert clusters(on_80["bookinfo.com:80"]) == [f"outbound|9080||{REVIEWS}"]
    # on the service's port the extra host rides along with the service's virtual host
    on_9080 = vhosts(route(sidecar(), push, "9080"))
    assert {"bookinfo.com:9080", f"{REVIEWS}:9080"} <= set(on_9080)


def test_a_service_matched_by_wildcard_virtual_services_takes_routes_from_the_most_specific() -> None:
    broad = doc(
        "VirtualService",
        "default",
        "broad",
        """
        hosts: ["*.svc.cluster.local"]
        http: [{route: [{destination: {host: ratings.other.svc.cluster.local, subset: broad}}]}]
        """,
    )
    narrow = doc(
        "VirtualService",
        "default",
        "narrow",
        """
        hosts: ["*.default.svc.cluster.local"]
        http: [{route: [{destination: {host: reviews, subset: narrow}}]}]
        """,
        created="2024-02-01T00:00:00Z",
    )
    by_name = vhosts(route(sidecar(), push_context(*SERVICES, broad, narrow), "9080"))
    # wildcard hosts that name services are no virtual hosts of their own
    assert list(by_name) == [f"{RATINGS}:9080", f"{REVIEWS}:9080", "allow_any"]
    assert clusters(by_name[f"{REVIEWS}:9080"]) == [f"outbound|9080|narrow|{REVIEWS}"]
    assert clusters(by_name[f"{RATINGS}:9080"]) == [f"outbound|9080|broad|{RATINGS}"]


def test_allow_any_and_registry_only_catch_all() -> None:
    allow = route(sidecar(), push_context(*SERVICES), "9080").virtual_hosts[-1]
    assert (allow.name, list(allow.domains)) == ("allow_any", ["*"])
    (r,) = allow.routes
    assert (r.name, r.match.prefix, r.route.cluster) == ("allow_any", "/", "PassthroughCluster")
    assert r.route.HasField("timeout") and r.route.timeout.ToSeconds() == 0
    assert r.route.HasField("max_grpc_timeout") and r.route.max_grpc_timeout.ToSeconds() == 0

    blocked = route(sidecar(), push_context(*SERVICES, REGISTRY_ONLY), "9080")
    block = blocked.virtual_hosts[-1]
    assert (block.name, list(block.domains)) == ("block_all", ["*"])
    (r,) = block.routes
    assert (r.name, r.direct_response.status) == ("block_all", 502)


def test_sidecar_egress_proxy_replaces_passthrough() -> None:
    sc = doc(
        "Sidecar",
        "default",
        "default",
        """
        outboundTrafficPolicy:
          mode: ALLOW_ANY
          egressProxy: {host: egress.istio-system.svc.cluster.local, subset: s1, port: {number: 443}}
        egress: [{hosts: ["*/*"]}]
        """,
    )
    catch_all = route(sidecar(), push_context(*SERVICES, sc), "9080").virtual_hosts[-1]
    assert clusters(catch_all) == ["outbound|443|s1|egress.istio-system.svc.cluster.local"]


def test_attempt_count_header_can_be_disabled_in_mesh_config() -> None:
    disabled = mesh_config_map("defaultConfig: {proxyHeaders: {attemptCount: {disabled: true}}}")
    cfg = route(sidecar(), push_context(*SERVICES, disabled), "9080")
    assert not any(vh.include_request_attempt_count for vh in cfg.virtual_hosts)


def test_sidecar_egress_listener_on_a_port_restricts_its_services() -> None:
    sc = doc(
        "Sidecar",
        "default",
        "default",
        """
        egress:
        - port: {number: 9080, protocol: HTTP, name: http}
          bind: 127.0.0.1
          hosts: [./reviews.default.svc.cluster.local]
        - hosts: ["*/*"]
        """,
    )
    push = push_context(*SERVICES, sc)
    assert list(vhosts(route(sidecar(), push, "9080"))) == [f"{REVIEWS}:9080", "allow_any"]
    # 9090 falls to the catch-all listener, which sees everything
    assert list(vhosts(route(sidecar(), push, "9090"))) == [f"{REVIEWS}:9090", "allow_any"]


def test_sniffed_route_holds_only_its_service_serving_every_host() -> None:
    push = push_context(*SERVICES, REVIEWS_VS)
    cfg = route(sidecar(), push, f"{REVIEWS}:9080")
    (vh,) = cfg.virtual_hosts  # no catch-all on a sniffed listener's route
    assert (vh.name, list(vh.domains)) == (f"{REVIEWS}:9080", ["*"])
    assert clusters(vh) == [f"outbound|9080|v2|{REVIEWS}", f"outbound|9080|v1|{REVIEWS}"]
    assert list(route(sidecar(), push, "nothing.example.com:9080").virtual_hosts) == []


def test_unknown_names_get_an_empty_configuration_and_names_come_back_sorted_once() -> None:
    push = push_context(*SERVICES)
    out = generate_routes(sidecar(), push, ["9090", "http.8080", "9080", "9090", "x:y"])
    assert [c.name for c in out] == ["9080", "9090", "http.8080", "x:y"]
    for empty in out[2:]:
        assert list(empty.virtual_hosts) == [] and empty.HasField("validate_clusters")
        assert not empty.validate_clusters.value and not empty.ignore_port_in_host_matching


@pytest.mark.parametrize(
    ("hostname", "domain", "want"),
    [
        (REVIEWS, "default.svc.cluster.local", [f"{REVIEWS}.", "reviews", "reviews.default.svc", "reviews.default"]),
        (REVIEWS, "other.svc.cluster.local", [f"{REVIEWS}.", "reviews.default", "reviews.default.svc"]),
        ("api.example.com", "default.svc.cluster.local", ["api.example.com."]),
        ("foo.local.campus.net", "local.campus.net", ["foo.local.campus.net.", "foo"]),
        ("foo.ns.campus.net", "other.campus.net", ["foo.ns.campus.net.", "foo.ns", "foo.ns.campus"]),
        ("foo.com", "bar.net", ["foo.com."]),
        ("10.0.0.1", "default.svc.cluster.local", []),  # an address has no absolute form
    ],
)
def test_alt_hosts(hostname: str, domain: str, want: list[str]) -> None:
    assert alt_hosts(hostname, domain) == want


# --- gateways ------------------------------------------------------------------------------


def gateway(name: str, selector: str, server: str, ns: str = "istio-system", created: str = CREATED) -> str:
    """A Gateway with one server (``server`` is its YAML body)."""
    item = "- " + server.replace("\n", "\n  ")
    return doc("Gateway", ns, name, f"selector: {{{selector}}}\nservers:\n{item}", created)


INGRESS = gateway("ingress", "istio: ingressgateway", "port: {number: 8080, name: http, protocol: HTTP}\nhosts: ['*']")
OTHER_GW = gateway("other", "istio: other", "port: {number: 8080, name: http, protocol: HTTP}\nhosts: ['*']")
BOUND_VS = doc(
    "VirtualService",
    "default",
    "front",
    """
    hosts: [shop.example.com]
    gateways: [istio-system/ingress]
    http:
    - match: [{headers: {x-beta: {exact: "1"}}}]
      route: [{destination: {host: reviews, subset: v2}}]
    - route: [{destination: {host: reviews.default.svc.cluster.local, subset: v1, port: {number: 9080}}}]
    """,
)


def test_gateway_http_route_from_bound_virtual_service() -> None:
    cfg = route(GATEWAY, push_context(*SERVICES, INGRESS, BOUND_VS), "http.8080")
    (vh,) = cfg.virtual_hosts
    assert (vh.name, list(vh.domains)) == ("shop.example.com:8080", ["shop.example.com"])
    # no port on the first destination and reviews has two: the server port is used
    assert clusters(vh) == [f"outbound|8080|v2|{REVIEWS}", f"outbound|9080|v1|{REVIEWS}"]
    assert vh.routes[0].match.headers[0].name == "x-beta"
    assert vh.include_request_attempt_count and not vh.require_tls
    assert cfg.ignore_port_in_host_matching and cfg.max_direct_response_body_size_bytes.value == 1024 * 1024


def test_virtual_service_of_another_gateway_or_the_mesh_is_not_included() -> None:
    elsewhere = doc(
        "VirtualService",
        "default",
        "elsewhere",
        """
        hosts: [other.example.com]
        gateways: [istio-system/other]
        http: [{route: [{destination: {host: reviews}}]}]
        """,
    )
    push = push_context(*SERVICES, INGRESS, OTHER_GW, BOUND_VS, elsewhere, REVIEWS_VS)
    assert [vh.name for vh in route(GATEWAY, push, "http.8080").virtual_hosts] == ["shop.example.com:8080"]


def test_gateway_with_nothing_bound_gets_a_404_virtual_host() -> None:
    cfg = route(GATEWAY, push_context(*SERVICES, INGRESS), "http.8080")
    (vh,) = cfg.virtual_hosts
    assert (vh.name, list(vh.domains), list(vh.routes)) == ("blackhole:8080", ["*"], [])


def test_unselected_or_unknown_gateway_routes_are_empty() -> None:
    push = push_context(*SERVICES, OTHER_GW)
    for name in ("http.8080", "9080"):
        cfg = route(GATEWAY, push, name)
        assert list(cfg.virtual_hosts) == [] and cfg.HasField("validate_clusters")


def test_https_redirect_requires_tls_even_for_hosts_without_routes() -> None:
    gw = gateway(
        "ingress",
        "istio: ingressgateway",
        "port: {number: 8080, name: http, protocol: HTTP}\nhosts: [shop.example.com, docs.example.com]\n"
        "tls: {httpsRedirect: true}",
    )
    cfg = route(GATEWAY, push_context(*SERVICES, gw, BOUND_VS), "http.8080")
    by_name = vhosts(cfg)
    assert list(by_name) == ["docs.example.com:8080", "shop.example.com:8080"]
    assert all(vh.require_tls == rc.VirtualHost.ALL for vh in by_name.values())
    assert list(by_name["docs.example.com:8080"].routes) == []
    assert len(by_name["shop.example.com:8080"].routes) == 2


def test_https_server_route_name_and_hosts_allowed_by_namespace() -> None:
    gw = gateway(
        "ingress",
        "istio: ingressgateway",
        "port: {number: 443, name: https, protocol: HTTPS}\nhosts: [default/shop.example.com, other/x.example.com]\n"
        "tls: {mode: SIMPLE, credentialName: shop-cert}",
    )
    cfg = route(GATEWAY, push_context(*SERVICES, gw, BOUND_VS), "https.443.https.ingress.istio-system")
    assert [vh.name for vh in cfg.virtual_hosts] == ["shop.example.com:443"]


def test_hosts_with_the_same_routes_share_one_virtual_host() -> None:
    vs = doc(
        "VirtualService",
        "default",
        "multi",
        """
        hosts: [b.example.com, a.example.com, "*.example.org"]
        gateways: [istio-system/ingress]
        http: [{route: [{destination: {host: reviews, port: {number: 9080}}}]}]
        """,
    )
    (vh,) = route(GATEWAY, push_context(*SERVICES, INGRESS, vs), "http.8080").virtual_hosts
    # the first host by istiod's order (exact, longest, alphabetical; wildcards last) names it
    assert (vh.name, list(vh.domains)) == ("a.example.com:8080", ["a.example.com", "b.example.com", "*.example.org"])


def test_gateway_port_is_translated_to_the_target_port_of_the_gateway_service() -> None:
    workload = """
---
apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-system, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  clusterIP: 10.96.9.9
  selector: {istio: ingressgateway}
  ports: [{name: http2, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: ingress-0, namespace: istio-system, labels: {istio: ingressgateway}}
spec:
  containers: [{name: istio-proxy, ports: [{containerPort: 8080, name: http2}]}]
status: {phase: Running, podIP: 10.1.9.9, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: istio-ingressgateway-abc
  namespace: istio-system
  labels: {kubernetes.io/service-name: istio-ingressgateway}
addressType: IPv4
ports: [{name: http2, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.1.9.9]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: ingress-0, namespace: istio-system}
"""
    gw = gateway("ingress", "istio: ingressgateway", "port: {number: 80, name: http, protocol: HTTP}\nhosts: ['*']")
    push = push_context(*SERVICES, workload, gw, BOUND_VS)
    out = generate_routes(GATEWAY, push, ["http.80", "http.8080"])
    assert list(out[0].virtual_hosts) == []
    # the virtual host keeps the port the Gateway names
    assert [vh.name for vh in out[1].virtual_hosts] == ["shop.example.com:80"]


def test_http_servers_of_two_gateways_on_one_port_merge() -> None:
    second = gateway(
        "second",
        "istio: ingressgateway",
        "port: {number: 8080, name: http-2, protocol: HTTP}\nhosts: [default/*]",
        created="2024-03-01T00:00:00Z",
    )
    vs = doc(
        "VirtualService",
        "default",
        "docs",
        """
        hosts: [docs.example.com]
        gateways: [istio-system/second]
        http: [{route: [{destination: {host: ratings.other.svc.cluster.local}}]}]
        """,
    )
    cfg = route(GATEWAY, push_context(*SERVICES, INGRESS, second, BOUND_VS, vs), "http.8080")
    by_name = vhosts(cfg)
    assert list(by_name) == ["docs.example.com:8080", "shop.example.com:8080"]
    assert clusters(by_name["docs.example.com:8080"]) == [f"outbound|9080||{RATINGS}"]


def test_listeners_ask_for_the_routes_rds_serves_when_gateways_tie_on_creation_time() -> None:
    """LDS and RDS read one merge (istiod MergedGateway): equal creation times order Gateways by
    name, then namespace, so "a" in "zoo" keeps the shared TLS host and "b" in "apps" is dropped."""
    server = "port: {number: 443, name: https, protocol: HTTPS}\nhosts: [shop.example.com]\n"
    server += "tls: {mode: SIMPLE, credentialName: shop-cert}"
    vs = doc(
        "VirtualService",
        "default",
        "shop",
        """
        hosts: [shop.example.com]
        gateways: [zoo/a, apps/b]
        http: [{route: [{destination: {host: reviews}}]}]
        """,
    )
    gateways = [gateway(name, "istio: ingressgateway", server, ns) for name, ns in (("b", "apps"), ("a", "zoo"))]
    push = push_context(*SERVICES, *gateways, vs)
    names = route_names(generate_listeners(GATEWAY, push))
    assert names == ["https.443.https.a.zoo"]
    assert [vh.name for vh in route(GATEWAY, push, names[0]).virtual_hosts] == ["shop.example.com:443"]
    assert list(route(GATEWAY, push, "https.443.https.b.apps").virtual_hosts) == []


# --- a real Envoy --------------------------------------------------------------------------


def test_real_envoy_accepts_sidecar_and_gateway_routes(tmp_path: Path) -> None:
    sc_push = push_context(*SERVICES, REVIEWS_VS, API_ENTRY, HEADLESS)
    configs = generate_routes(sidecar(), sc_push, ["80", "8000", "9080", "9090", f"{REVIEWS}:9080", "http.8080"])
    blocked = push_context(*SERVICES, REGISTRY_ONLY)
    configs += generate_routes(sidecar(), blocked, ["9080"])
    redirect = gateway(
        "redirect",
        "istio: ingressgateway",
        "port: {number: 80, name: http, protocol: HTTP}\nhosts: [shop.example.com, ./docs.example.com]\n"
        "tls: {httpsRedirect: true}",
    )
    gw_push = push_context(*SERVICES, INGRESS, redirect, BOUND_VS)
    configs += generate_routes(GATEWAY, gw_push, ["http.8080", "http.80", "http.9999"])
    configs += generate_routes(GATEWAY, push_context(*SERVICES, INGRESS), ["http.8080"])
    for i, cfg in enumerate(configs):
        cfg.name = f"{cfg.name}#{i}"  # distinct names in one bootstrap
    assert sum(len(c.virtual_hosts) for c in configs) > 15
    validate_bootstrap(route_bootstrap(configs), tmp_path)
