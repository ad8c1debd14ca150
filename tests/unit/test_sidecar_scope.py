"""PushContext.sidecar_scope: which Sidecar governs a proxy and what its scope imports.

Checked against istio/istio pilot/pkg/model/push_context.go (initSidecarScopes, getSidecarScope),
sidecar.go (DefaultSidecarScopeForGateway, convertToSidecarScope, convertIstioListenerToWrapper,
selectServices with PILOT_UNIFIED_SIDECAR_SCOPE=true, collectImportedServices,
serviceMatchingListenerPort, serviceMatchingVirtualServicePorts, appendSidecarServices,
selectDestinationRules, SidecarScope.DestinationRule) and virtualservice.go (SelectVirtualServices,
hostClassification.VSMatches).
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from app.config.loader import load_documents
from app.config.objects import ConfigEvent, EventType
from app.environment import Environment
from app.model.proxy import Proxy
from app.model.service import Service
from app.model.sidecar_scope import SidecarScope
from tests.support.mesh import config_doc, kube_service, mesh_config_map, push_context, router_proxy, sidecar_proxy

ROOT = "istio-system"
REVIEWS = "reviews.bookinfo.svc.cluster.local"
RATINGS = "ratings.bookinfo.svc.cluster.local"
DETAILS = "details.other.svc.cluster.local"
ECHO = "echo.shared.svc.cluster.local"
ISTIOD = "istiod.istio-system.svc.cluster.local"
CLIENT = "client.client.svc.cluster.local"
API = "api.example.com"
T0 = "2024-01-01T00:00:00Z"


def doc(kind: str, ns: str, name: str, spec: str, created: str = T0) -> str:
    return config_doc(kind, name, spec, namespace=ns, created=created)


def service(ns: str, name: str, ports: str, created: str) -> str:
    return kube_service(name, ports, namespace=ns, cluster_ip="10.96.0.1", created=created)


def sidecar(ns: str, name: str, spec: str, created: str = T0) -> str:
    return doc("Sidecar", ns, name, spec, created)


WORLD = (
    service("client", "client", "[{name: http, port: 8080}]", "2024-01-01T00:00:00Z"),
    service("bookinfo", "reviews", "[{name: http, port: 9080}, {name: grpc, port: 9090}]", "2024-01-01T00:00:01Z"),
    service("bookinfo", "ratings", "[{name: http, port: 9080}]", "2024-01-01T00:00:02Z"),
    service("other", "details", "[{name: http, port: 80}]", "2024-01-01T00:00:03Z"),
    service("shared", "echo", "[{name: http, port: 80}]", "2024-01-01T00:00:04Z"),
    service(ROOT, "istiod", "[{name: grpc-xds, port: 15010}]", "2024-01-01T00:00:05Z"),
    doc(
        "ServiceEntry",
        "ext",
        "api",
        "hosts: [api.example.com]\nports: [{number: 443, name: tls, protocol: TLS}]\nresolution: DNS",
        "2024-01-01T00:00:06Z",
    ),
)
ALL = [CLIENT, REVIEWS, RATINGS, DETAILS, ECHO, ISTIOD, API]


def proxy(ns: str, labels: Mapping[str, str] | None = None, kind: str = "sidecar") -> Proxy:
    build = router_proxy if kind == "router" else sidecar_proxy
    return build(f"pod-1.{ns}", "10.1.0.7", labels)


def hosts(services: tuple[Service, ...] | list[Service]) -> list[str]:
    return [s.hostname for s in services]


def ports(scope: SidecarScope, hostname: str) -> list[int]:
    (svc,) = [s for s in scope.services if s.hostname == hostname]
    return [p.port for p in svc.ports]


# --- which Sidecar ----------------------------------------------------------------------


SIDECARS = (
    sidecar(
        "bookinfo",
        "for-reviews",
        "workloadSelector: {labels: {app: reviews}}\negress: [{hosts: [./*]}]",
        "2024-02-01T00:00:00Z",
    ),
    sidecar("bookinfo", "namespace-wide", "egress: [{hosts: [./*, other/*]}]", "2023-01-01T00:00:00Z"),
    sidecar(ROOT, "mesh-default", "egress: [{hosts: [./*, istio-system/*]}]"),
    sidecar(ROOT, "root-selector", "workloadSelector: {labels: {app: shared}}\negress: [{hosts: [~/*]}]"),
    sidecar("shared", "only-for-x", "workloadSelector: {labels: {app: x}}\negress: [{hosts: [~/*]}]"),
)


def test_matching_workload_selector_sidecar_wins_over_namespace_sidecar() -> None:
    # the selector Sidecar is newer than the namespace one: selector Sidecars are tried first anyway
    scope = push_context(*WORLD, *SIDECARS).sidecar_scope(proxy("bookinfo", {"app": "reviews", "version": "v1"}))
    assert (scope.name, scope.namespace) == ("bookinfo/for-reviews", "bookinfo")
    assert hosts(scope.services) == [REVIEWS, RATINGS]


def test_namespace_sidecar_without_selector_for_other_workloads() -> None:
    scope = push_context(*WORLD, *SIDECARS).sidecar_scope(proxy("bookinfo", {"app": "ratings"}))
    assert scope.name == "bookinfo/namespace-wide"
    assert hosts(scope.services) == [REVIEWS, RATINGS, DETAILS]


def test_root_namespace_sidecar_without_selector_applies_to_other_namespaces() -> None:
    scope = push_context(*WORLD, *SIDECARS).sidecar_scope(proxy("other"))
    # "." in the root Sidecar means the proxy's namespace, not the root namespace
    assert (scope.name, scope.namespace) == ("istio-system/mesh-default", "other")
    assert hosts(scope.services) == [DETAILS, ISTIOD]


def test_root_selector_sidecars_do_not_apply_to_other_namespaces() -> None:
    # shared has only a Sidecar for app=x; the root selector Sidecar (app=shared) is not considered
    scope = push_context(*WORLD, *SIDECARS).sidecar_scope(proxy("shared", {"app": "shared"}))
    assert (scope.name, scope.namespace) == ("istio-system/mesh-default", "shared")
    assert hosts(scope.services) == [ECHO, ISTIOD]


def test_default_scope_without_any_sidecar() -> None:
    scope = push_context(*WORLD).sidecar_scope(proxy("other"))
    assert (scope.name, scope.sidecar, scope.namespace) == (None, None, "other")
    assert hosts(scope.services) == ALL
    assert len(scope.egress_listeners) == 1
    assert scope.egress_listeners[0].port is None
    assert dict(scope.egress_listeners[0].hosts) == {"*": ("*",)}


def test_gateways_always_get_the_default_scope() -> None:
    scope = push_context(*WORLD, *SIDECARS).sidecar_scope(proxy("bookinfo", {"app": "reviews"}, kind="router"))
    assert (scope.name, scope.namespace) == (None, "bookinfo")
    assert hosts(scope.services) == ALL


def test_oldest_matching_selector_sidecar_wins() -> None:
    push = push_context(
        *WORLD,
        sidecar(
            "client", "newer", "workloadSelector: {labels: {app: c}}\negress: [{hosts: [./*]}]", "2024-03-01T00:00:00Z"
        ),
        sidecar(
            "client", "older", "workloadSelector: {labels: {app: c}}\negress: [{hosts: [~/*]}]", "2024-02-01T00:00:00Z"
        ),
    )
    scope = push.sidecar_scope(proxy("client", {"app": "c"}))
    assert scope.name == "client/older"
    assert scope.services == ()


# --- egress hosts -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("egress_hosts", "want"),
    [
        (["./*"], [CLIENT]),
        (["bookinfo/*"], [REVIEWS, RATINGS]),
        ([f"*/{DETAILS}"], [DETAILS]),
        (["~/*"], []),
        (["*/*.example.com"], [API]),
        (["*/*.bookinfo.svc.cluster.local"], [REVIEWS, RATINGS]),
        ([f"bookinfo/{REVIEWS}"], [REVIEWS]),
        ([f"other/{REVIEWS}"], []),  # a namespace-qualified host only imports from that namespace
        ([f"bookinfo/{RATINGS}", "./*"], [CLIENT, RATINGS]),  # in visibility order, not egress order
        (["*/*"], ALL),
        # sidecar.go: "~" before the namespace excludes; "~/host" from every namespace
        (["*/*", "~bookinfo/*"], [CLIENT, DETAILS, ECHO, ISTIOD, API]),
        (["bookinfo/*", f"~bookinfo/{RATINGS}"], [REVIEWS]),
        (["*/*", "~/*.bookinfo.svc.cluster.local", "~/api.example.com"], [CLIENT, DETAILS, ECHO, ISTIOD]),
        (["bookinfo/*", f"~other/{REVIEWS}"], [REVIEWS, RATINGS]),  # excluded elsewhere only
        # an entry without exactly one "/" is skipped (and logged), the others still import
        (["reviews.bookinfo.svc.cluster.local", "./*"], [CLIENT]),
        (["a/b/c", "bookinfo/*"], [REVIEWS, RATINGS]),
    ],
)
def test_egress_hosts(egress_hosts: list[str], want: list[str]) -> None:
    spec = f"egress: [{{hosts: [{', '.join(repr(h) for h in egress_hosts)}]}}]"
    scope = push_context(*WORLD, sidecar("client", "sc", spec)).sidecar_scope(proxy("client"))
    assert hosts(scope.services) == want
    assert hosts(scope.egress_listeners[0].services) == want


def test_port_restricted_egress_listener_imports_only_that_port() -> None:
    spec = """
    egress:
    - port: {number: 9080, protocol: HTTP, name: http}
      hosts: [bookinfo/*]
    - port: {number: 7777, protocol: TCP, name: tcp}
      hosts: [bookinfo/*]
    - hosts: [other/*]
    """
    scope = push_context(*WORLD, sidecar("client", "sc", spec)).sidecar_scope(proxy("client"))
    first, second, third = scope.egress_listeners
    assert first.port is not None and first.port.number == 9080
    assert [(s.hostname, [p.port for p in s.ports]) for s in first.services] == [(REVIEWS, [9080]), (RATINGS, [9080])]
    assert second.services == ()  # no bookinfo service exposes 7777
    assert hosts(third.services) == [DETAILS]
    assert hosts(scope.services) == [REVIEWS, RATINGS, DETAILS]
    assert ports(scope, REVIEWS) == [9080]


def test_listeners_importing_different_ports_of_a_service_union_them() -> None:
    spec = f"""
    egress:
    - port: {{number: 9090, protocol: GRPC, name: grpc}}
      hosts: [bookinfo/*]
    - hosts: [bookinfo/{REVIEWS}]
    """
    scope = push_context(*WORLD, sidecar("client", "sc", spec)).sidecar_scope(proxy("client"))
    assert hosts(scope.services) == [REVIEWS]
    assert ports(scope, REVIEWS) == [9090, 9080]
    assert [p.port for p in scope.egress_listeners[0].services[0].ports] == [9090]


# --- services a VirtualService routes to ---------------------------------------------------


VS_ROUTES = doc(
    "VirtualService",
    "client",
    "client-routes",
    f"""
    hosts: [client]
    http:
    - route:
      - destination: {{host: {DETAILS}}}
        weight: 25
      - destination: {{host: {REVIEWS}, port: {{number: 9090}}}}
        weight: 25
      - destination: {{host: {RATINGS}, port: {{number: 1234}}}}
        weight: 25
      - destination: {{host: nowhere.example.com}}
        weight: 25
    """,
)
VS_ELSEWHERE = doc(
    "VirtualService",
    "shared",
    "echo-routes",
    f"hosts: [echo]\nhttp: [{{route: [{{destination: {{host: {API}}}}}]}}]",
)


def test_services_routed_to_by_a_selected_virtual_service_are_added() -> None:
    push = push_context(*WORLD, VS_ROUTES, VS_ELSEWHERE, sidecar("client", "sc", "egress: [{hosts: [./*]}]"))
    scope = push.sidecar_scope(proxy("client"))
    assert [v.namespaced_name for v in scope.virtual_services] == ["client/client-routes"]
    got = [(s.hostname, [p.port for p in s.ports]) for s in scope.services]
    # explicitly imported services come first; istiod adds route destinations in Go map order, so
    # only their set is fixed. details: no port named -> every port; reviews: only the port named;
    # ratings: the port named does not exist -> not added; the echo VirtualService is in a namespace
    # the Sidecar does not import, so api.example.com is not added
    assert got[0] == (CLIENT, [8080])
    assert sorted(got[1:]) == [(DETAILS, [80]), (REVIEWS, [9090])]
    # the listener itself lists only what its hosts imported
    assert hosts(scope.egress_listeners[0].services) == [CLIENT]


def test_virtual_service_destinations_on_a_port_listener_take_the_listener_port() -> None:
    spec = "egress: [{port: {number: 9080, protocol: HTTP, name: http}, hosts: [./*]}]"
    push = push_context(*WORLD, VS_ROUTES, sidecar("client", "sc", spec))
    scope = push.sidecar_scope(proxy("client"))
    # serviceMatchingListenerPort: the listener port decides, even over a port the route names
    # (ratings is routed to on 1234 but imported on 9080); details has no 9080 and is left out
    assert sorted((s.hostname, [p.port for p in s.ports]) for s in scope.services) == [
        (RATINGS, [9080]),
        (REVIEWS, [9080]),
    ]


def test_routes_for_another_source_namespace_add_no_services() -> None:
    routes = doc(
        "VirtualService",
        "client",
        "by-source",
        f"""
        hosts: [client]
        http:
        - match: [{{sourceNamespace: elsewhere}}]
          route: [{{destination: {{host: {ECHO}}}}}]
        - route: [{{destination: {{host: {DETAILS}}}}}]
        """,
    )
    push = push_context(*WORLD, routes, sidecar("client", "sc", "egress: [{hosts: [./*]}]"))
    scope = push.sidecar_scope(proxy("client"))
    assert hosts(scope.services) == [CLIENT, DETAILS]


def test_source_namespace_routes_are_filtered_per_scope_namespace() -> None:
    # istiod virtualServiceDestinationsFilteredBySourceNamespace: a route counts for a namespace
    # its matches name; a match without sourceNamespace does not rescue a route whose other
    # matches name only other namespaces; TCP routes are never filtered
    routes = doc(
        "VirtualService",
        "client",
        "by-source",
        f"""
        hosts: [client]
        http:
        - match: [{{sourceNamespace: elsewhere}}, {{sourceNamespace: client}}]
          route: [{{destination: {{host: {ECHO}}}}}]
        - match: [{{sourceNamespace: elsewhere}}, {{uri: {{prefix: /}}}}]
          route: [{{destination: {{host: {DETAILS}}}}}]
        tcp:
        - match: [{{sourceNamespace: elsewhere}}]
          route: [{{destination: {{host: {RATINGS}}}}}]
        """,
    )
    egress = "egress: [{hosts: [./*, client/*]}]"
    push = push_context(*WORLD, routes, sidecar("client", "sc", egress), sidecar("elsewhere", "sc", egress))
    assert hosts(push.sidecar_scope(proxy("client")).services) == [CLIENT, ECHO, RATINGS]
    assert hosts(push.sidecar_scope(proxy("elsewhere")).services) == [CLIENT, ECHO, DETAILS, RATINGS]


def test_virtual_service_in_an_imported_namespace_is_selected_by_host() -> None:
    vs_bookinfo = doc(
        "VirtualService",
        "bookinfo",
        "reviews",
        f"hosts: [reviews]\nhttp: [{{route: [{{destination: {{host: {DETAILS}}}}}]}}]",
    )
    spec_hit = f"egress: [{{hosts: [bookinfo/{REVIEWS}]}}]"
    spec_miss = f"egress: [{{hosts: [bookinfo/{RATINGS}]}}]"
    hit = push_context(*WORLD, vs_bookinfo, sidecar("client", "sc", spec_hit)).sidecar_scope(proxy("client"))
    miss = push_context(*WORLD, vs_bookinfo, sidecar("client", "sc", spec_miss)).sidecar_scope(proxy("client"))
    assert [v.namespaced_name for v in hit.virtual_services] == ["bookinfo/reviews"]
    assert hosts(hit.services) == [REVIEWS, DETAILS]
    assert miss.virtual_services == ()
    assert hosts(miss.services) == [RATINGS]


def test_wildcard_virtual_service_is_selected_by_an_exact_egress_host() -> None:
    vs_wild = doc(
        "VirtualService",
        "bookinfo",
        "all-bookinfo",
        f'hosts: ["*.bookinfo.svc.cluster.local"]\nhttp: [{{route: [{{destination: {{host: {DETAILS}}}}}]}}]',
    )
    scope = push_context(
        *WORLD, vs_wild, sidecar("client", "sc", f"egress: [{{hosts: [bookinfo/{REVIEWS}]}}]")
    ).sidecar_scope(proxy("client"))
    assert [v.namespaced_name for v in scope.virtual_services] == ["bookinfo/all-bookinfo"]
    assert hosts(scope.services) == [REVIEWS, DETAILS]


# --- one namespace per hostname -------------------------------------------------------------


def entry(ns: str, created: str, host: str = "shared.example.com", port: int = 80) -> str:
    spec = f"hosts: [{host}]\nports: [{{number: {port}, name: p{port}, protocol: HTTP}}]\nresolution: DNS"
    return doc("ServiceEntry", ns, f"entry-{port}", spec, created)


SAME_HOST = (
    entry("ns-a", "2024-01-01T00:00:01Z"),
    entry("client", "2024-01-01T00:00:02Z"),
    entry("ns-b", "2024-01-01T00:00:03Z"),
)


def test_one_namespace_per_hostname_prefers_the_scope_namespace() -> None:
    push = push_context(*SAME_HOST)
    assert [(s.hostname, s.namespace) for s in push.sidecar_scope(proxy("client")).services] == [
        ("shared.example.com", "client")
    ]
    # otherwise the first one in visibility order
    assert [(s.hostname, s.namespace) for s in push.sidecar_scope(proxy("ns-c")).services] == [
        ("shared.example.com", "ns-a")
    ]
    scope = push_context(*SAME_HOST, sidecar("ns-c", "sc", "egress: [{hosts: [ns-b/*, ns-a/*]}]")).sidecar_scope(
        proxy("ns-c")
    )
    assert [(s.hostname, s.namespace) for s in scope.services] == [("shared.example.com", "ns-a")]


def test_kubernetes_service_preferred_over_service_entry_from_another_namespace() -> None:
    squatter = doc(
        "ServiceEntry",
        "ext",
        "squat",
        f"hosts: [{REVIEWS}]\nports: [{{number: 9080, name: http, protocol: HTTP}}]\nresolution: DNS",
        "2020-01-01T00:00:00Z",
    )
    rule = doc("DestinationRule", "bookinfo", "reviews", "host: reviews\nsubsets: [{name: v1}]")
    scope = push_context(*WORLD, squatter, rule).sidecar_scope(proxy("other"))
    assert [(s.hostname, s.namespace) for s in scope.services if s.hostname == REVIEWS] == [(REVIEWS, "bookinfo")]
    assert [r.name for r in scope.destination_rules[REVIEWS]] == ["reviews"]


def test_same_host_service_entries_in_one_namespace_merge_ports() -> None:
    push = push_context(
        entry("ext", "2024-01-01T00:00:01Z", "multi.example.com", 7000),
        entry("ext", "2024-01-01T00:00:02Z", "multi.example.com", 8000),
    )
    assert ports(push.sidecar_scope(proxy("client")), "multi.example.com") == [7000, 8000]


# --- destination rules of the scope ---------------------------------------------------------


RULES = (
    doc("DestinationRule", "bookinfo", "reviews", "host: reviews\nsubsets: [{name: v1, labels: {version: v1}}]"),
    doc("DestinationRule", ROOT, "mesh-mtls", 'host: "*"\ntrafficPolicy: {tls: {mode: ISTIO_MUTUAL}}'),
    doc(
        "DestinationRule",
        "other",
        "details-all",
        f"host: {DETAILS}\ntrafficPolicy: {{loadBalancer: {{simple: RANDOM}}}}",
    ),
    doc(
        "DestinationRule",
        "other",
        "details-special",
        f"host: {DETAILS}\nworkloadSelector: {{matchLabels: {{app: special}}}}\n"
        "trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}",
    ),
)


def test_destination_rules_for_each_scope_service() -> None:
    scope = push_context(*WORLD, *RULES).sidecar_scope(proxy("client"))
    assert {h: [f"{r.namespace}/{r.name}" for r in rs] for h, rs in scope.destination_rules.items()} == {
        CLIENT: ["istio-system/mesh-mtls"],
        REVIEWS: ["bookinfo/reviews"],
        RATINGS: ["istio-system/mesh-mtls"],
        DETAILS: ["other/details-all"],  # the selector rule is private to "other"
        ECHO: ["istio-system/mesh-mtls"],
        ISTIOD: ["istio-system/mesh-mtls"],
        API: ["istio-system/mesh-mtls"],
    }


def test_destination_rule_for_a_proxy_honours_workload_selectors_in_its_namespace() -> None:
    push = push_context(*WORLD, *RULES)
    details = push.service_index.service(DETAILS, "other")
    assert details is not None

    def chosen(p: Proxy) -> str | None:
        cdr = push.sidecar_scope(p).destination_rule(p, details)
        return None if cdr is None else f"{cdr.namespace}/{cdr.name}"

    assert chosen(proxy("other", {"app": "special"})) == "other/details-special"
    assert chosen(proxy("other", {"app": "plain"})) == "other/details-all"
    assert chosen(proxy("client", {"app": "special"})) == "other/details-all"


def test_destination_rules_only_for_services_in_the_scope() -> None:
    push = push_context(*WORLD, *RULES, sidecar("bookinfo", "sc", "egress: [{hosts: [./*]}]"))
    scope = push.sidecar_scope(proxy("bookinfo"))
    assert sorted(scope.destination_rules) == [RATINGS, REVIEWS]


def test_mesh_default_destination_rule_export_to_reaches_the_index() -> None:
    private = push_context(mesh_config_map('defaultDestinationRuleExportTo: ["."]'), *WORLD, *RULES[:2])
    # both rules are now private to their namespaces: the client sees neither; a proxy in the root
    # namespace sees the root one; a bookinfo proxy sees its own
    assert private.sidecar_scope(proxy("client")).destination_rules == {}
    assert [r.name for r in private.sidecar_scope(proxy(ROOT)).destination_rules[REVIEWS]] == ["mesh-mtls"]
    assert [r.name for r in private.sidecar_scope(proxy("bookinfo")).destination_rules[REVIEWS]] == ["reviews"]


# --- outbound traffic policy, memoisation ------------------------------------------------------


def test_outbound_traffic_policy() -> None:
    registry_only = "outboundTrafficPolicy: {mode: REGISTRY_ONLY}\negress: [{hosts: [./*]}]"
    allow_any = "outboundTrafficPolicy: {mode: ALLOW_ANY}\negress: [{hosts: [./*]}]"
    assert push_context(*WORLD).sidecar_scope(proxy("client")).outbound_traffic_policy == "ALLOW_ANY"
    push = push_context(*WORLD, sidecar("client", "sc", registry_only))
    assert push.sidecar_scope(proxy("client")).outbound_traffic_policy == "REGISTRY_ONLY"
    strict_mesh = mesh_config_map("outboundTrafficPolicy: {mode: REGISTRY_ONLY}")
    assert push_context(strict_mesh, *WORLD).sidecar_scope(proxy("client")).outbound_traffic_policy == "REGISTRY_ONLY"
    assert (
        push_context(strict_mesh, *WORLD, sidecar("client", "sc", allow_any))
        .sidecar_scope(proxy("client"))
        .outbound_traffic_policy
        == "ALLOW_ANY"
    )


def test_mesh_root_namespace_setting_moves_the_root_sidecar() -> None:
    docs = (*WORLD, sidecar("mesh-root", "default", "egress: [{hosts: [./*]}]"))
    assert push_context(*docs).sidecar_scope(proxy("other")).name is None
    moved = push_context(mesh_config_map("rootNamespace: mesh-root"), *docs).sidecar_scope(proxy("other"))
    assert (moved.name, hosts(moved.services)) == ("mesh-root/default", [DETAILS])


def test_scope_is_shared_by_proxies_of_a_namespace() -> None:
    push = push_context(*WORLD, *SIDECARS)
    assert push.sidecar_scope(proxy("other", {"app": "a"})) is push.sidecar_scope(proxy("other", {"app": "b"}))
    assert push.sidecar_scope(proxy("bookinfo", {"app": "reviews"})) is not push.sidecar_scope(proxy("bookinfo"))


def test_scopes_are_reused_across_unrelated_changes_and_rebuilt_after_rule_changes() -> None:
    def events(*docs: str) -> list[ConfigEvent]:
        result = load_documents("".join(docs), "more.yaml")
        assert result.rejected == []
        return [ConfigEvent(EventType.ADD, o) for o in result.objects]

    env = Environment()
    env.apply(events(*WORLD))
    first = env.build_push_context(None)
    scope = first.sidecar_scope(proxy("client"))
    assert scope.destination_rules == {}

    gateway = doc(
        "Gateway",
        ROOT,
        "ingress",
        "servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}]",
    )
    second = env.build_push_context(first, env.apply(events(gateway)))
    assert second.version == first.version + 1
    assert second.sidecar_scope(proxy("client")) is scope

    third = env.build_push_context(second, env.apply(events(RULES[0])))
    rebuilt = third.sidecar_scope(proxy("client"))
    assert rebuilt is not scope
    assert {h: [r.name for r in rs] for h, rs in rebuilt.destination_rules.items()} == {REVIEWS: ["reviews"]}


WILDCARD_SE = doc(
    "ServiceEntry",
    "ext",
    "wiki",
    "hosts: ['*.wiki.example']\nports: [{number: 443, name: tls, protocol: TLS}]\nresolution: NONE",
)


@pytest.mark.parametrize(
    ("egress_host", "imported"),
    [
        ("*/*.example", True),  # hostClassification.Matches: the service host is a SubsetOf the import
        ("ext/*.wiki.example", True),
        ("*/a.wiki.example", False),  # an exact import of one host does not pull in the wildcard service
        ("*/wiki.example", False),  # nor does the bare parent domain
    ],
)
def test_wildcard_service_hosts_are_imported_by_subset_of(egress_host: str, imported: bool) -> None:
    spec = f"egress: [{{hosts: ['{egress_host}']}}]"
    scope = push_context(WILDCARD_SE, sidecar("client", "sc", spec)).sidecar_scope(proxy("client"))
    assert hosts(scope.services) == (["*.wiki.example"] if imported else [])


def test_an_ill_formed_egress_host_is_logged_with_the_sidecar_and_the_rest_loads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = "egress: [{hosts: [reviews.bookinfo.svc.cluster.local, './*']}]"
    result = load_documents(sidecar("client", "sc", spec), "sc.yaml")
    assert result.rejected == []  # not the whole Sidecar
    scope = push_context(*WORLD, sidecar("client", "sc", spec)).sidecar_scope(proxy("client"))
    assert hosts(scope.services) == [CLIENT]
    assert "client/sc egress[0].hosts" in caplog.text and "namespace/dnsName" in caplog.text


def test_an_excluded_host_does_not_select_a_virtual_service_but_another_host_may() -> None:
    vs = doc(
        "VirtualService",
        "bookinfo",
        "both",
        f"hosts: [{REVIEWS}, {RATINGS}]\nhttp: [{{route: [{{destination: {{host: {REVIEWS}}}}}]}}]",
    )
    only_reviews = sidecar("client", "sc", f"egress: [{{hosts: ['bookinfo/*', '~bookinfo/{RATINGS}']}}]")
    scope = push_context(*WORLD, vs, only_reviews).sidecar_scope(proxy("client"))
    assert [v.obj.meta.name for v in scope.virtual_services] == ["both"]
    neither = sidecar("client", "sc", f"egress: [{{hosts: ['bookinfo/{REVIEWS}', '~bookinfo/{REVIEWS}']}}]")
    scope = push_context(*WORLD, vs, neither).sidecar_scope(proxy("client"))
    assert scope.virtual_services == ()
