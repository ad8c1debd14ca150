"""The differential test's judge, without control planes: what counts as a difference, how the
reviewed list covers one, and that anything it does not cover fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.debug.xds_diff.diff import ABSENT, Difference, Expected, diff_resources, judge, load_expected
from app.debug.xds_diff.normalize import substitute

HCM = "filters[name=envoy.filters.network.http_connection_manager].typed_config"


def test_lists_of_named_items_are_matched_by_name_and_their_order_is_a_difference() -> None:
    istiod = {"l": {"filters": [{"name": "a", "x": 1}, {"name": "b", "x": 2}, {"name": "c"}]}}
    pilotfish = {"l": {"filters": [{"name": "b", "x": 3}, {"name": "a", "x": 1}]}}
    found = {(d.path, str(d.istiod), str(d.pilotfish)) for d in diff_resources("lds", istiod, pilotfish)}
    assert found == {
        ("filters[<order>]", "['a', 'b']", "['b', 'a']"),
        ("filters[name=b].x", "2", "3"),
        ("filters[name=c]", "{'name': 'c'}", ABSENT),
    }


def test_a_resource_on_one_side_only_and_a_list_of_another_length_are_one_difference_each() -> None:
    found = diff_resources("rds", {"80": {"domains": ["a", "a."]}, "x": {}}, {"80": {"domains": ["a"]}, "y": {}})
    assert found == [
        Difference("rds", "80", "domains", ["a", "a."], ["a"]),
        Difference("rds", "x", "", "present", ABSENT),
        Difference("rds", "y", "", ABSENT, "present"),
    ]


def test_an_entry_covers_its_path_and_what_is_under_it_with_exactly_its_values() -> None:
    entry = Expected("lds", "virtual*", f"filter_chains[*].{HCM}.tracing", "why", values={"pilotfish": ABSENT})
    under = Difference("lds", "virtualInbound", f"filter_chains[3].{HCM}.tracing.client_sampling", 1, ABSENT)
    assert entry.covers(under)
    assert not entry.covers(Difference("lds", "virtualInbound", f"filter_chains[3].{HCM}.tracing", 1, 2))
    assert not entry.covers(Difference("lds", "0.0.0.0_80", f"filter_chains[3].{HCM}.tracing", 1, ABSENT))
    assert not entry.covers(Difference("lds", "virtualInbound", f"filter_chains[3].{HCM}.tracingx", 1, ABSENT))
    assert not entry.covers(Difference("cds", "virtualInbound", f"filter_chains[3].{HCM}.tracing", 1, ABSENT))


def test_a_difference_no_entry_covers_is_unlisted() -> None:
    entry = Expected("cds", "*", "circuit_breakers", "why", defect=True, values={"istiod": 1, "pilotfish": 2})
    istiod = {"c": {"circuit_breakers": 1, "lb_policy": "RANDOM"}, "same": {"a": 1}}
    pilotfish = {"c": {"circuit_breakers": 2}, "same": {"a": 1}}
    judged = judge("cds", istiod, pilotfish, [entry])
    assert (judged.compared, judged.identical, judged.intended_only, judged.defective) == (2, 1, 0, 1)
    assert judged.listed == [(Difference("cds", "c", "circuit_breakers", 1, 2), entry)] == judged.defects
    assert judged.unlisted == [Difference("cds", "c", "lb_policy", "RANDOM", ABSENT)]


def test_the_reviewed_list_loads_and_every_defect_gives_both_values() -> None:
    entries = load_expected()
    assert entries and all(e.reason for e in entries)
    assert all(set(e.values) == {"istiod", "pilotfish"} for e in entries if e.defect)


def test_a_defect_without_its_values_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "expected.yaml"
    bad.write_text("- {type: cds, resource: '*', path: a, reason: r, defect: true, istiod: 1}\n")
    with pytest.raises(ValueError, match="entry 0: a defect gives both values"):
        load_expected(bad)


def test_placeholders_replace_whole_names_and_addresses_only() -> None:
    swapped = substitute(
        {"outbound|80||a.ns-1a2b.svc": ["10.96.0.1", "10.96.0.10", "ns-1a2b-x", "a.ns-1a2b"]},
        {"ns-1a2b": "ns", "10.96.0.1": "CLUSTER_IP(ns/a)"},
    )
    assert swapped == {"outbound|80||a.ns.svc": ["CLUSTER_IP(ns/a)", "10.96.0.10", "ns-1a2b-x", "a.ns"]}


def test_filter_chains_are_matched_by_their_match_and_their_order_is_no_difference() -> None:
    """Envoy selects a filter chain by its match criteria, not by its place in the list."""
    a = {"filter_chain_match": {"server_names": ["a.example"]}, "stat_prefix": "x"}
    b = {"filter_chain_match": {"prefix_ranges": [{"address_prefix": "10.0.0.0"}]}, "stat_prefix": "y"}
    changed = {**b, "stat_prefix": "z"}
    assert diff_resources("lds", {"l": {"filter_chains": [a, b]}}, {"l": {"filter_chains": [b, a]}}) == []
    [found] = diff_resources("lds", {"l": {"filter_chains": [a, b]}}, {"l": {"filter_chains": [changed, a]}})
    assert found.path == 'filter_chains[match={"prefix_ranges":[{"address_prefix":"10.0.0.0"}]}].stat_prefix'
    assert (found.istiod, found.pilotfish) == ("y", "z")
