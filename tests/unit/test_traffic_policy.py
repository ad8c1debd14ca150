"""merge_traffic_policy: which DestinationRule policy one cluster gets.

Checked against istio/istio pilot/pkg/networking/core/cluster_builder.go (applyDestinationRule:
``util.GetPortLevelTrafficPolicy(dr.TrafficPolicy, port)`` for the default cluster;
buildSubsetCluster: ``util.MergeSubsetTrafficPolicy(opts.policy, subset.TrafficPolicy, port)``) and
pilot/pkg/networking/util/util.go (GetPortLevelTrafficPolicy, MergeSubsetTrafficPolicy,
mergeTrafficPolicy, shadowCopyPortTrafficPolicy). Call convention here: the default cluster is
``merge_traffic_policy(None, rule_policy, port)``, a subset cluster is
``merge_traffic_policy(rule_policy, subset_policy, port)``.
"""

from __future__ import annotations

import textwrap
from typing import Any

from google.protobuf import json_format

from app.api import networking as net
from app.config.loader import load_documents
from app.model.traffic_policy import merge_traffic_policy


def load_rule(spec: str) -> net.DestinationRule:
    """A DestinationRule spec parsed by the real loader."""
    text = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: r, namespace: ns}\n"
    text += "spec:\n" + textwrap.indent(textwrap.dedent(spec), "  ")
    result = load_documents(text, "dr.yaml")
    assert result.rejected == []
    rule = result.objects[0].spec
    assert isinstance(rule, net.DestinationRule)
    return rule


def parts(policy: net.TrafficPolicy | None) -> dict[str, Any] | None:
    """The parts a cluster builder reads, as proto3 JSON (portLevelSettings are not a part)."""
    if policy is None:
        return None
    return {
        fd.json_name: json_format.MessageToDict(value)
        for fd, value in policy.ListFields()
        if fd.name != "port_level_settings"
    }


RULE = load_rule(
    """
    host: reviews
    trafficPolicy:
      connectionPool: {tcp: {maxConnections: 100}}
      loadBalancer: {simple: RANDOM}
      outlierDetection: {consecutive5xxErrors: 7}
      tls: {mode: ISTIO_MUTUAL}
      portLevelSettings:
      - port: {number: 80}
        loadBalancer: {simple: LEAST_REQUEST}
      - port: {number: 8443}
        tls: {mode: SIMPLE, sni: b.example.com}
    subsets:
    - name: plain
    - name: lb
      trafficPolicy: {loadBalancer: {simple: ROUND_ROBIN}}
    - name: od
      trafficPolicy: {outlierDetection: {consecutive5xxErrors: 1}}
    - name: portly
      trafficPolicy:
        loadBalancer: {simple: ROUND_ROBIN}
        connectionPool: {http: {http1MaxPendingRequests: 5}}
        portLevelSettings:
        - port: {number: 9080}
          tls: {mode: SIMPLE, sni: portly.example.com}
    """
)
TP = RULE.traffic_policy
SUBSET = {s.name: s.traffic_policy if s.HasField("traffic_policy") else None for s in RULE.subsets}

TOP = {
    "connectionPool": {"tcp": {"maxConnections": 100}},
    "loadBalancer": {"simple": "RANDOM"},
    "outlierDetection": {"consecutive5xxErrors": 7},
    "tls": {"mode": "ISTIO_MUTUAL"},
}


# --- default cluster ------------------------------------------------------------------


def test_default_cluster_without_port_level_entry_gets_the_top_level_policy() -> None:
    assert parts(merge_traffic_policy(None, TP, 9080)) == TOP


def test_port_level_settings_replace_and_do_not_inherit() -> None:
    # port 80 sets only the load balancer: the top-level pool, outlier detection and TLS
    # are NOT inherited, they fall back to defaults (unset)
    assert parts(merge_traffic_policy(None, TP, 80)) == {"loadBalancer": {"simple": "LEAST_REQUEST"}}
    assert parts(merge_traffic_policy(None, TP, 8443)) == {"tls": {"mode": "SIMPLE", "sni": "b.example.com"}}


def test_without_a_port_no_port_level_entry_applies() -> None:
    assert parts(merge_traffic_policy(None, TP, None)) == TOP


def test_no_policy_at_all() -> None:
    assert merge_traffic_policy(None, None, 80) is None


# --- subset clusters ------------------------------------------------------------------


def test_subset_settings_override_the_rule_part_by_part() -> None:
    assert parts(merge_traffic_policy(TP, SUBSET["lb"], 9080)) == {**TOP, "loadBalancer": {"simple": "ROUND_ROBIN"}}
    assert parts(merge_traffic_policy(TP, SUBSET["od"], 9080)) == {
        **TOP,
        "outlierDetection": {"consecutive5xxErrors": 1},
    }


def test_subset_cluster_starts_from_the_rules_port_level_resolved_policy() -> None:
    # on port 80 the rule's own port-level entry (LB only) replaces the rule's top-level parts
    # before the subset's parts are laid over it
    assert parts(merge_traffic_policy(TP, SUBSET["od"], 80)) == {
        "loadBalancer": {"simple": "LEAST_REQUEST"},
        "outlierDetection": {"consecutive5xxErrors": 1},
    }
    assert parts(merge_traffic_policy(TP, SUBSET["lb"], 8443)) == {
        "loadBalancer": {"simple": "ROUND_ROBIN"},
        "tls": {"mode": "SIMPLE", "sni": "b.example.com"},
    }


def test_subset_port_level_entry_replaces_everything_without_inheriting() -> None:
    # the subset's own entry for 9080 replaces all four parts: the subset's top-level LB and
    # pool and the rule's pool/outlier detection are all dropped
    assert parts(merge_traffic_policy(TP, SUBSET["portly"], 9080)) == {
        "tls": {"mode": "SIMPLE", "sni": "portly.example.com"}
    }
    # on another port the subset's top-level parts apply over the rule's
    assert parts(merge_traffic_policy(TP, SUBSET["portly"], 7070)) == {
        "connectionPool": {"http": {"http1MaxPendingRequests": 5}},
        "loadBalancer": {"simple": "ROUND_ROBIN"},
        "outlierDetection": {"consecutive5xxErrors": 7},
        "tls": {"mode": "ISTIO_MUTUAL"},
    }


def test_subset_policy_over_no_rule_policy() -> None:
    assert parts(merge_traffic_policy(None, SUBSET["portly"], 9080)) == {
        "tls": {"mode": "SIMPLE", "sni": "portly.example.com"}
    }


def test_subset_without_policy_on_a_port_without_entries_gets_the_rule_policy() -> None:
    assert parts(merge_traffic_policy(TP, None, 9080)) == TOP


def test_subset_without_policy_still_gets_the_rules_port_level_entry() -> None:
    assert parts(merge_traffic_policy(TP, SUBSET["plain"], 80)) == {"loadBalancer": {"simple": "LEAST_REQUEST"}}


def test_inputs_are_not_mutated() -> None:
    before_rule = RULE.SerializeToString(deterministic=True)
    merge_traffic_policy(TP, SUBSET["portly"], 9080)
    merge_traffic_policy(TP, SUBSET["lb"], 80)
    merge_traffic_policy(None, TP, 80)
    assert RULE.SerializeToString(deterministic=True) == before_rule


# --- tunnel / proxyProtocol (not settable per port) -----------------------------------------


TUNNEL_RULE = load_rule(
    """
    host: egress
    trafficPolicy:
      loadBalancer: {simple: RANDOM}
      proxyProtocol: {version: V2}
      portLevelSettings:
      - port: {number: 80}
        loadBalancer: {simple: LEAST_REQUEST}
    subsets:
    - name: tunnelled
      trafficPolicy:
        tunnel: {protocol: CONNECT, targetHost: gw.example.com, targetPort: 8443}
    """
)


def test_subset_tunnel_is_laid_over_the_rule() -> None:
    tp = TUNNEL_RULE.traffic_policy
    subset = TUNNEL_RULE.subsets[0].traffic_policy
    assert parts(merge_traffic_policy(tp, subset, 9080)) == {
        "loadBalancer": {"simple": "RANDOM"},
        "proxyProtocol": {"version": "V2"},
        "tunnel": {"protocol": "CONNECT", "targetHost": "gw.example.com", "targetPort": 8443},
    }


def test_rule_proxy_protocol_applies_on_ports_without_an_entry() -> None:
    assert parts(merge_traffic_policy(None, TUNNEL_RULE.traffic_policy, 9080)) == {
        "loadBalancer": {"simple": "RANDOM"},
        "proxyProtocol": {"version": "V2"},
    }


def test_port_level_entry_drops_top_level_proxy_protocol() -> None:
    assert parts(merge_traffic_policy(None, TUNNEL_RULE.traffic_policy, 80)) == {
        "loadBalancer": {"simple": "LEAST_REQUEST"}
    }


# --- retry budget, tunnel, proxy protocol: what a port-level entry cannot carry ---------------

BUDGET = load_rule(
    """
    host: reviews
    trafficPolicy:
      retryBudget: {percent: 25, minRetryConcurrency: 3}
      connectionPool: {tcp: {maxConnections: 10}}
      portLevelSettings:
      - port: {number: 80}
        loadBalancer: {simple: LEAST_REQUEST}
    subsets:
    - name: v1
      trafficPolicy:
        retryBudget: {percent: 5}
        portLevelSettings:
        - port: {number: 9080}
          connectionPool: {tcp: {maxConnections: 2}}
    """
)
BUDGET_SUBSET = BUDGET.subsets[0].traffic_policy


def test_destination_retry_budget_survives_a_subsets_port_level_match() -> None:
    # util.MergeSubsetTrafficPolicy: the subset's port-level entry replaces the four blocks of a
    # copy of the destination's policy; Tunnel / ProxyProtocol / RetryBudget stay the destination's
    # (the subset's own top-level retryBudget is not read: its policy is the port entry alone)
    assert parts(merge_traffic_policy(BUDGET.traffic_policy, BUDGET_SUBSET, 9080)) == {
        "connectionPool": {"tcp": {"maxConnections": 2}},
        "retryBudget": {"percent": 25.0, "minRetryConcurrency": 3},
    }


def test_destination_retry_budget_is_dropped_by_its_own_port_level_match() -> None:
    # GetPortLevelTrafficPolicy(dr, port) is the port entry alone (shadowCopyPortTrafficPolicy)
    assert parts(merge_traffic_policy(None, BUDGET.traffic_policy, 80)) == {"loadBalancer": {"simple": "LEAST_REQUEST"}}
    # ... and a subset cluster on that port starts from it, then lays its own retry budget over
    assert parts(merge_traffic_policy(BUDGET.traffic_policy, BUDGET_SUBSET, 80)) == {
        "loadBalancer": {"simple": "LEAST_REQUEST"},
        "retryBudget": {"percent": 5.0},
    }


def test_subset_retry_budget_is_laid_over_the_destinations_without_a_port_match() -> None:
    assert parts(merge_traffic_policy(BUDGET.traffic_policy, BUDGET_SUBSET, 8080)) == {
        "connectionPool": {"tcp": {"maxConnections": 10}},
        "retryBudget": {"percent": 5.0},
    }
