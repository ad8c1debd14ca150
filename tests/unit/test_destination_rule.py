"""DestinationRuleIndex: consolidation of same-host rules and istiod's lookup order.

Checked against istio/istio pilot/pkg/model/destination_rule.go (mergeDestinationRule with
ENABLE_ENHANCED_DESTINATIONRULE_MERGE=true), push_context.go (sortConfigBySelectorAndCreationTime,
setDestinationRules, destinationRule, getExportedDestinationRuleFromNamespace), sidecar.go
(SidecarScope.DestinationRule) and the cases of push_context_test.go TestSetDestinationRuleMerging,
TestSetDestinationRuleWithExportTo and TestSetDestinationRuleWithWorkloadSelector.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.config.loader import load_documents
from app.config.objects import Kind
from app.model.destination_rule import ConsolidatedDestinationRule, DestinationRuleIndex, select_for_proxy
from tests.support.mesh import config_doc

ROOT = "istio-system"
T0 = "2024-01-01T00:00:00Z"
REVIEWS = "reviews.bookinfo.svc.cluster.local"
RATINGS = "ratings.bookinfo.svc.cluster.local"


def dr(ns: str, name: str, spec: str, created: str = T0) -> str:
    """One DestinationRule document."""
    return config_doc("DestinationRule", name, spec, namespace=ns, created=created)


def build(*docs: str, default_export_to: frozenset[str] = frozenset({"*"})) -> DestinationRuleIndex:
    result = load_documents("".join(docs), "drs.yaml")
    assert result.rejected == []
    rules = [o for o in result.objects if o.kind is Kind.DESTINATION_RULE]
    return DestinationRuleIndex.build(rules, ROOT, default_export_to)


def summary(rules: Sequence[ConsolidatedDestinationRule]) -> list[tuple[str, tuple[str, ...], list[str]]]:
    """(ns/name, merged-from, subset names) of each candidate, in order."""
    return [(f"{r.namespace}/{r.name}", r.sources, [s.name for s in r.rule.subsets]) for r in rules]


def names(rules: Sequence[ConsolidatedDestinationRule]) -> list[str]:
    return [f"{r.namespace}/{r.name}" for r in rules]


# --- consolidation within a namespace -----------------------------------------------------


def test_same_host_same_export_to_merge_in_creation_order() -> None:
    index = build(
        dr(
            "bookinfo",
            "b-later",
            """
            host: reviews
            trafficPolicy: {loadBalancer: {simple: RANDOM}}
            subsets:
            - {name: v2, labels: {version: v2-from-b}}
            - {name: v3, labels: {version: v3}}
            """,
            created="2024-01-02T00:00:00Z",
        ),
        dr(
            "bookinfo",
            "a-first",
            """
            host: reviews.bookinfo.svc.cluster.local
            subsets:
            - {name: v1, labels: {version: v1}}
            - {name: v2, labels: {version: v2}}
            """,
            created="2024-01-01T00:00:00Z",
        ),
        dr(
            "bookinfo",
            "c-last",
            """
            host: reviews
            trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}
            subsets: [{name: v4, labels: {version: v4}}]
            """,
            created="2024-01-03T00:00:00Z",
        ),
    )
    found = index.rules_for("bookinfo", REVIEWS, "bookinfo")
    assert summary(found) == [
        (
            "bookinfo/a-first",
            ("bookinfo/a-first", "bookinfo/b-later", "bookinfo/c-last"),
            ["v1", "v2", "v3", "v4"],
        )
    ]
    merged = found[0].rule
    assert merged.host == REVIEWS
    assert dict(merged.subsets[1].labels) == {"version": "v2"}  # the duplicate "v2" of b-later is dropped
    # the first rule with a top-level traffic policy wins (a-first has none)
    assert merged.traffic_policy.load_balancer.simple == merged.traffic_policy.load_balancer.RANDOM
    # the same merge is what other namespaces see
    assert summary(index.rules_for("other", REVIEWS, "bookinfo")) == summary(found)


def test_equal_creation_time_merges_by_name() -> None:
    index = build(
        dr("bookinfo", "beta", "host: reviews\nsubsets: [{name: b}]"),
        dr("bookinfo", "alpha", "host: reviews\nsubsets: [{name: a}]"),
    )
    assert summary(index.rules_for("bookinfo", REVIEWS, "bookinfo")) == [
        ("bookinfo/alpha", ("bookinfo/alpha", "bookinfo/beta"), ["a", "b"])
    ]


def test_rules_with_different_export_to_stay_separate_and_last_catch_all_wins() -> None:
    index = build(
        dr("bookinfo", "to-a", 'host: reviews\nexportTo: [".", ns-a]\nsubsets: [{name: a}]'),
        dr("bookinfo", "to-b", 'host: reviews\nexportTo: [".", ns-b]\nsubsets: [{name: b}]', "2024-01-02T00:00:00Z"),
    )
    local = index.rules_for("bookinfo", REVIEWS, "bookinfo")
    assert summary(local) == [
        ("bookinfo/to-a", ("bookinfo/to-a",), ["a"]),
        ("bookinfo/to-b", ("bookinfo/to-b",), ["b"]),
    ]
    # SidecarScope.DestinationRule keeps the last rule without a selector
    chosen = select_for_proxy(local, "bookinfo", {"app": "x"})
    assert chosen is not None and chosen.name == "to-b"
    assert names(index.rules_for("ns-a", REVIEWS, "bookinfo")) == ["bookinfo/to-a"]
    assert names(index.rules_for("ns-b", REVIEWS, "bookinfo")) == ["bookinfo/to-b"]
    assert names(index.rules_for("ns-c", REVIEWS, "bookinfo")) == []


def test_export_to_superset_merges_with_the_rule_it_covers() -> None:
    # push_context_test.go TestSetDestinationRuleMerging: rule3 (exportTo istio-system) is not a
    # superset of the default-exported rules, so it stays separate among exported rules
    index = build(
        dr("test", "rule1", "host: httpbin.org\nsubsets: [{name: subset1}, {name: subset2}]"),
        dr("test", "rule2", "host: httpbin.org\nsubsets: [{name: subset3}, {name: subset4}]"),
        dr("test", "rule3", "host: httpbin.org\nexportTo: [istio-system]\nsubsets: [{name: subset5}, {name: subset6}]"),
    )
    assert summary(index.rules_for("test", "httpbin.org", "test")) == [
        ("test/rule1", ("test/rule1", "test/rule2"), ["subset1", "subset2", "subset3", "subset4"])
    ]
    assert summary(index.exported_by_namespace["test"].specific["httpbin.org"]) == [
        ("test/rule1", ("test/rule1", "test/rule2"), ["subset1", "subset2", "subset3", "subset4"]),
        ("test/rule3", ("test/rule3",), ["subset5", "subset6"]),
    ]
    assert index.exported_by_namespace["test"].specific["httpbin.org"][1].export_to == frozenset({"istio-system"})


# push_context_test.go TestSetDestinationRuleWithWorkloadSelector (selector rules need no exportTo:
# they are always private to their namespace)
def httpbin_rule(ns: str, name: str, max_connections: int, created: str, *, app: str = "", export_to: str = "") -> str:
    """A DestinationRule for httpbin.org with its own connection limit, selecting ``app`` or exported."""
    lines = ["host: httpbin.org"]
    if app:
        lines.append(f"workloadSelector: {{matchLabels: {{app: {app}}}}}")
    if export_to:
        lines.append(f"exportTo: {export_to}")
    lines.append(f"trafficPolicy: {{connectionPool: {{tcp: {{maxConnections: {max_connections}}}}}}}")
    return dr(ns, name, "\n".join(lines), created)


SEL_RULES = (
    httpbin_rule("test", "ns-rule1", 111, "2024-01-01T00:00:01Z", app="app1"),
    httpbin_rule("test", "ns-rule2", 222, "2024-01-01T00:00:02Z", app="app2"),
    httpbin_rule("test", "ns-rule3", 333, "2024-01-01T00:00:02Z", app="app2"),
)
NS_RULE5 = httpbin_rule("test", "ns-rule5", 555, "2023-12-31T23:59:59Z", export_to='[".", test2]')
APP4 = httpbin_rule("test2", "app4", 444, "2024-01-01T00:00:02Z", app="app2")
ROOT_RULE6 = httpbin_rule(ROOT, "ns-rule6", 666, "2023-12-31T23:59:59Z", export_to='["*"]')


def test_workload_selector_rules_sort_first_and_absorb_a_superset_exported_rule() -> None:
    index = build(*SEL_RULES, NS_RULE5, ROOT_RULE6)
    found = index.rules_for("test", "httpbin.org", "test")
    assert [(n, s) for n, s, _ in summary(found)] == [
        ("test/ns-rule1", ("test/ns-rule1", "test/ns-rule5")),
        ("test/ns-rule2", ("test/ns-rule2", "test/ns-rule3", "test/ns-rule5")),
        ("test/ns-rule5", ("test/ns-rule5",)),
    ]
    # the merged selector rule keeps its own (first) traffic policy
    assert [r.rule.traffic_policy.connection_pool.tcp.max_connections for r in found] == [111, 222, 555]
    assert found[1].export_to == frozenset({"."})


def test_workload_selector_rules_are_not_exported() -> None:
    index = build(*SEL_RULES, NS_RULE5, ROOT_RULE6)
    assert summary(index.rules_for("test2", "httpbin.org", "test")) == [("test/ns-rule5", ("test/ns-rule5",), [])]


def test_select_for_proxy_prefers_a_matching_selector_rule_in_the_scope_namespace() -> None:
    found = build(*SEL_RULES, NS_RULE5).rules_for("test", "httpbin.org", "test")

    def chosen(scope_ns: str, labels: dict[str, str]) -> str | None:
        cdr = select_for_proxy(found, scope_ns, labels)
        return None if cdr is None else cdr.name

    assert chosen("test", {"app": "app1"}) == "ns-rule1"
    assert chosen("test", {"app": "app2", "version": "v1"}) == "ns-rule2"  # selector is a subset of labels
    assert chosen("test", {"app": "app3"}) == "ns-rule5"
    assert chosen("test", {}) == "ns-rule5"
    # a selector rule is only for proxies whose scope is the rule's namespace
    assert chosen("elsewhere", {"app": "app1"}) == "ns-rule5"


def test_select_for_proxy_needs_every_selector_label() -> None:
    index = build(
        dr(
            "test",
            "both",
            "host: httpbin.org\nworkloadSelector: {matchLabels: {app: a, version: v1}}\nsubsets: [{name: s}]",
        )
    )
    found = index.rules_for("test", "httpbin.org", "test")
    assert select_for_proxy(found, "test", {"app": "a"}) is None  # no catch-all to fall back to
    chosen = select_for_proxy(found, "test", {"app": "a", "version": "v1"})
    assert chosen is not None and chosen.name == "both"


def test_only_selector_rules_and_no_catch_all_anywhere() -> None:
    index = build(*SEL_RULES, APP4)
    assert [(n, s) for n, s, _ in summary(index.rules_for("test", "httpbin.org", "test"))] == [
        ("test/ns-rule1", ("test/ns-rule1",)),
        ("test/ns-rule2", ("test/ns-rule2", "test/ns-rule3")),
    ]


def test_selector_only_proxy_namespace_still_gets_a_catch_all_from_service_or_root_namespace() -> None:
    assert names(build(APP4, NS_RULE5, ROOT_RULE6).rules_for("test2", "httpbin.org", "test")) == [
        "test2/app4",
        "test/ns-rule5",
    ]
    assert names(build(APP4, ROOT_RULE6).rules_for("test2", "httpbin.org", "test")) == [
        "test2/app4",
        "istio-system/ns-rule6",
    ]


def test_superset_export_to_between_selectorless_rules_merges_without_a_separate_entry() -> None:
    index = build(
        dr("bookinfo", "a", 'host: reviews\nexportTo: ["."]\nsubsets: [{name: v1}]'),
        dr("bookinfo", "b", 'host: reviews\nexportTo: [".", other]\nsubsets: [{name: v2}]', "2024-01-02T00:00:00Z"),
    )
    assert summary(index.rules_for("other", REVIEWS, "bookinfo")) == [("bookinfo/b", ("bookinfo/b",), ["v2"])]
    local = index.rules_for("bookinfo", REVIEWS, "bookinfo")
    assert summary(local) == [("bookinfo/a", ("bookinfo/a", "bookinfo/b"), ["v1", "v2"])]


# --- lookup order across namespaces -----------------------------------------------------


LOOKUP = (
    dr("client", "client-reviews", f"host: {REVIEWS}\nsubsets: [{{name: from-client}}]"),
    dr("bookinfo", "reviews", "host: reviews\nsubsets: [{name: from-bookinfo}]"),
    dr(ROOT, "root-reviews", f"host: {REVIEWS}\nsubsets: [{{name: from-root}}]"),
    dr(ROOT, "root-details", "host: details.bookinfo.svc.cluster.local\nsubsets: [{name: from-root}]"),
)


def test_proxy_namespace_rules_come_first() -> None:
    assert names(build(*LOOKUP).rules_for("client", REVIEWS, "bookinfo")) == ["client/client-reviews"]


def test_then_the_service_namespace_exported_rules() -> None:
    # a public rule in an unrelated namespace ("client") is not consulted for other proxies
    assert names(build(*LOOKUP).rules_for("other", REVIEWS, "bookinfo")) == ["bookinfo/reviews"]


def test_then_the_root_namespace_exported_rules() -> None:
    index = build(*LOOKUP)
    assert names(index.rules_for("other", "details.bookinfo.svc.cluster.local", "bookinfo")) == [
        "istio-system/root-details"
    ]
    assert names(index.rules_for("other", "productpage.bookinfo.svc.cluster.local", "bookinfo")) == []


def test_root_namespace_proxy_sees_root_private_rules_first() -> None:
    index = build(
        *LOOKUP,
        dr(ROOT, "root-private", f'host: {REVIEWS}\nexportTo: ["."]\nsubsets: [{{name: root-private}}]'),
    )
    assert names(index.rules_for(ROOT, REVIEWS, "bookinfo")) == ["istio-system/root-private"]
    assert names(index.rules_for("other", REVIEWS, "bookinfo")) == ["bookinfo/reviews"]


def test_root_namespace_proxy_prefers_the_service_namespace_over_root_public_rules() -> None:
    # istiod's "hack": for a proxy in the root namespace only root-private rules come first, so a
    # public rule in the root namespace loses to the service namespace's rule
    assert names(build(*LOOKUP).rules_for(ROOT, REVIEWS, "bookinfo")) == ["bookinfo/reviews"]


def test_service_namespace_rule_exported_to_the_root_namespace() -> None:
    # TestSetDestinationRuleWithExportTo: "dr in the svc ns takes effect on proxy in root ns"
    index = build(
        dr("test5", "rule5", "host: api.test.com\nexportTo: [istio-system]\nsubsets: [{name: subset5-0}]"),
        dr("test6", "rule6", "host: api.test.com\nexportTo: [istio-system]\nsubsets: [{name: subset6-0}]"),
    )
    assert names(index.rules_for(ROOT, "api.test.com", "test5")) == ["test5/rule5"]
    assert names(index.rules_for(ROOT, "api.test.com", "test6")) == ["test6/rule6"]
    assert names(index.rules_for(ROOT, "api.test.com", "test7")) == []
    assert names(index.rules_for("test5", "api.test.com", "test6")) == []  # not exported to test5


def test_export_to_dot_hides_a_rule_from_other_namespaces() -> None:
    index = build(
        dr("bookinfo", "private", 'host: reviews\nexportTo: ["."]\nsubsets: [{name: private}]'),
        dr(ROOT, "mesh-wide", 'host: "*"\nsubsets: [{name: mesh}]'),
    )
    assert names(index.rules_for("bookinfo", REVIEWS, "bookinfo")) == ["bookinfo/private"]
    assert names(index.rules_for("other", REVIEWS, "bookinfo")) == ["istio-system/mesh-wide"]


def test_export_to_own_namespace_name_is_private_too() -> None:
    index = build(dr("bookinfo", "own", "host: reviews\nexportTo: [bookinfo]"))
    assert names(index.rules_for("bookinfo", REVIEWS, "bookinfo")) == ["bookinfo/own"]
    assert names(index.rules_for("other", REVIEWS, "bookinfo")) == []
    assert "bookinfo" not in index.exported_by_namespace


def test_mesh_default_export_to_private() -> None:
    docs = (
        dr("bookinfo", "defaulted", "host: reviews"),
        dr("bookinfo", "public", 'host: ratings\nexportTo: ["*"]'),
        dr(ROOT, "root-defaulted", 'host: "*"'),
    )
    index = build(*docs, default_export_to=frozenset({"."}))
    assert names(index.rules_for("bookinfo", REVIEWS, "bookinfo")) == ["bookinfo/defaulted"]
    assert names(index.rules_for("other", REVIEWS, "bookinfo")) == []  # root's default-private "*" is hidden
    assert names(index.rules_for("other", RATINGS, "bookinfo")) == ["bookinfo/public"]
    assert names(index.rules_for(ROOT, REVIEWS, "bookinfo")) == ["istio-system/root-defaulted"]
    # with the default "*" the same rules are public
    public = build(*docs)
    assert names(public.rules_for("other", REVIEWS, "bookinfo")) == ["bookinfo/defaulted"]
    assert names(public.rules_for("other", "x.y.svc.cluster.local", "y")) == ["istio-system/root-defaulted"]


# --- host specificity -------------------------------------------------------------------


def test_exact_host_beats_wildcard_in_the_same_namespace() -> None:
    index = build(
        dr("bookinfo", "wild", 'host: "*.bookinfo.svc.cluster.local"'),
        dr("bookinfo", "exact", "host: reviews"),
    )
    assert names(index.rules_for("bookinfo", REVIEWS, "bookinfo")) == ["bookinfo/exact"]
    assert names(index.rules_for("bookinfo", RATINGS, "bookinfo")) == ["bookinfo/wild"]


def test_longer_wildcard_beats_shorter_and_star_is_last() -> None:
    index = build(
        dr(ROOT, "star", 'host: "*"'),
        dr(ROOT, "cluster", 'host: "*.cluster.local"'),
        dr(ROOT, "svc", 'host: "*.svc.cluster.local"'),
    )
    assert names(index.rules_for("other", "x.y.svc.cluster.local", "y")) == ["istio-system/svc"]
    assert names(index.rules_for("other", "node.cluster.local", "")) == ["istio-system/cluster"]
    assert names(index.rules_for("other", "api.example.com", "")) == ["istio-system/star"]


def test_wildcard_rules_for_the_same_host_merge() -> None:
    index = build(
        dr(ROOT, "star-a", 'host: "*"\nsubsets: [{name: a}]'),
        dr(ROOT, "star-b", 'host: "*"\nsubsets: [{name: b}]', "2024-01-02T00:00:00Z"),
    )
    assert summary(index.rules_for("other", "api.example.com", "")) == [
        ("istio-system/star-a", ("istio-system/star-a", "istio-system/star-b"), ["a", "b"])
    ]


def test_wildcard_service_host_matches_wildcard_rules() -> None:
    index = build(
        dr("ext", "exact-wild", 'host: "*.example.com"'),
        dr(ROOT, "com", 'host: "*.com"'),
    )
    assert names(index.rules_for("other", "*.example.com", "ext")) == ["ext/exact-wild"]
    assert names(index.rules_for("other", "*.api.example.com", "ext")) == ["ext/exact-wild"]
    assert names(index.rules_for("other", "*.example.org", "ext")) == []


def test_most_specific_host_not_exported_does_not_fall_back_to_a_less_specific_one() -> None:
    index = build(
        dr("bookinfo", "reviews-to-a", "host: reviews\nexportTo: [ns-a]"),
        dr("bookinfo", "bookinfo-wild", 'host: "*.bookinfo.svc.cluster.local"'),
        dr(ROOT, "star", 'host: "*"'),
    )
    assert names(index.rules_for("ns-a", REVIEWS, "bookinfo")) == ["bookinfo/reviews-to-a"]
    # for ns-b the most specific exported host (reviews) is not exported to it: the search moves on
    # to the root namespace, not to bookinfo's wildcard
    assert names(index.rules_for("ns-b", REVIEWS, "bookinfo")) == ["istio-system/star"]
    assert names(index.rules_for("ns-b", RATINGS, "bookinfo")) == ["bookinfo/bookinfo-wild"]


def test_short_host_is_resolved_in_the_rule_namespace_without_touching_the_object() -> None:
    result = load_documents(dr("bookinfo", "short", "host: reviews"), "drs.yaml")
    index = DestinationRuleIndex.build(result.objects, ROOT, frozenset({"*"}))
    assert list(index.namespace_local["bookinfo"].specific) == [REVIEWS]
    assert index.rules_for("bookinfo", REVIEWS, "bookinfo")[0].rule.host == REVIEWS
    assert result.objects[0].spec.host == "reviews"


def test_empty_index() -> None:
    assert DestinationRuleIndex.build([], ROOT, frozenset({"*"})).rules_for("bookinfo", REVIEWS, "bookinfo") == ()
