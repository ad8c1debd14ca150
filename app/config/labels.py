"""Label selectors and the well-known topology labels (istio pkg/config/labels, api/label). Pure."""

from __future__ import annotations

from collections.abc import Mapping

NETWORK_LABEL = "topology.istio.io/network"
CLUSTER_LABEL = "topology.istio.io/cluster"
REGION_LABEL = "topology.kubernetes.io/region"
ZONE_LABEL = "topology.kubernetes.io/zone"
SUBZONE_LABEL = "topology.istio.io/subzone"


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """istiod labels.Instance.SubsetOf: every selector label is on ``labels`` with the same
    value, so an empty selector matches everything."""
    return all(labels.get(k) == v for k, v in selector.items())
