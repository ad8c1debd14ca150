"""The chart's PodDisruptionBudget as istiod's (manifests/charts/istio-control/istio-discovery/
templates/poddisruptionbudget.yaml): made only when more than one replica runs (autoscaleMin > 1
with the autoscaler, replicaCount > 1 without), so a single replica never blocks a node drain;
``minAvailable`` or ``maxUnavailable`` and ``unhealthyPodEvictionPolicy`` from ``pilot.pdb``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helm.rendering import assert_valid, render


def budgets(*values: str) -> list[dict[str, Any]]:
    docs = render(*values)
    assert_valid(docs)
    return [doc for doc in docs if doc["kind"] == "PodDisruptionBudget"]


@pytest.mark.parametrize(
    "values",
    [
        (),  # autoscaler on, autoscaleMin 1
        ("--set", "pilot.autoscaleEnabled=false"),  # replicaCount 1
        ("--set", "pilot.autoscaleEnabled=false", "--set", "pilot.autoscaleMin=3"),
        ("--set", "pilot.replicaCount=3"),  # the autoscaler owns the replicas, from 1
        ("--set", "pilot.autoscaleMin=2", "--set", "global.defaultPodDisruptionBudget.enabled=false"),
    ],
    ids=["default", "one-replica", "fixed-one-replica", "autoscaled-from-one", "disabled"],
)
def test_no_budget_for_a_single_replica_or_when_disabled(values: tuple[str, ...]) -> None:
    assert budgets(*values) == []


@pytest.mark.parametrize(
    "values",
    [("--set", "pilot.autoscaleMin=2"), ("--set", "pilot.autoscaleEnabled=false", "--set", "pilot.replicaCount=2")],
    ids=["autoscaled-from-two", "two-replicas"],
)
def test_a_budget_of_one_available_pod_with_more_than_one_replica(values: tuple[str, ...]) -> None:
    [pdb] = budgets(*values)
    assert pdb["metadata"]["name"] == "pilotfish"
    assert pdb["spec"] == {
        "minAvailable": 1,
        "selector": {"matchLabels": {"app": "pilotfish", "istio.io/rev": "default"}},
    }


def test_max_unavailable_replaces_min_available_and_the_eviction_policy_is_passed_on() -> None:
    [pdb] = budgets(
        "--set", "pilot.autoscaleMin=2",
        "--set", "pilot.pdb.maxUnavailable=1",
        "--set", "pilot.pdb.unhealthyPodEvictionPolicy=AlwaysAllow",
    )  # fmt: skip
    assert "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
