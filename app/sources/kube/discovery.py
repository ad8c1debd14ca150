"""MeshConfig ``discoverySelectors``: which namespaces the Kubernetes source reads (pure).

As istiod's namespace filter (pkg/kube/namespace/filter.go): no selectors, every namespace; else
a namespace is read when its labels match any selector (Kubernetes LabelSelector semantics:
every ``matchLabels`` pair and every ``matchExpressions`` term). Istio config is scoped the same
way (istiod applies the filter to its CRD clients too). Cluster-scoped objects are always read,
and so is the mesh ConfigMap, which holds the selectors.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.config.labels import label_selector_matches

logger = logging.getLogger(__name__)

Selector = Mapping[str, Any]  # a LabelSelector as JSON: matchLabels, matchExpressions


def selects(selectors: Sequence[Selector], labels: Mapping[str, str]) -> bool:
    """Whether a namespace with ``labels`` is read; no selectors read every namespace."""
    return not selectors or any(_matches(s, labels) for s in selectors)


def selected(
    selectors: Sequence[Selector], namespaces: Iterable[tuple[str, Mapping[str, str]]]
) -> frozenset[str] | None:
    """The names of the namespaces read (None: all, there are no selectors)."""
    if not selectors:
        return None
    return frozenset(name for name, labels in namespaces if selects(selectors, labels))


def _matches(selector: Selector, labels: Mapping[str, str]) -> bool:
    try:
        return label_selector_matches(selector, labels)
    except ValueError as e:
        logger.warning("discoverySelectors: unknown %s selects nothing", e)
        return False
