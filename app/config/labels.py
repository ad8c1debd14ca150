"""Label selectors and the well-known topology labels (istio pkg/config/labels, api/label). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NETWORK_LABEL = "topology.istio.io/network"
CLUSTER_LABEL = "topology.istio.io/cluster"
REGION_LABEL = "topology.kubernetes.io/region"
ZONE_LABEL = "topology.kubernetes.io/zone"
SUBZONE_LABEL = "topology.istio.io/subzone"
HOSTNAME_LABEL = "kubernetes.io/hostname"  # istiod label.LabelHostname: the workload's node
# a Node's region and zone before Kubernetes 1.17 (v1.LabelFailureDomainBeta*): istiod still
# reads them when the GA labels are absent
BETA_REGION_LABEL = "failure-domain.beta.kubernetes.io/region"
BETA_ZONE_LABEL = "failure-domain.beta.kubernetes.io/zone"
# a workload's whole locality in one label (api/label TopologyLocality), and its older name;
# '.' stands for '/', which a label value cannot hold
LOCALITY_LABEL = "topology.istio.io/locality"
LEGACY_LOCALITY_LABEL = "istio-locality"


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """istiod labels.Instance.SubsetOf: every selector label is on ``labels`` with the same
    value, so an empty selector matches everything."""
    return all(labels.get(k) == v for k, v in selector.items())


def label_selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelectorAsSelector(selector).Matches(labels) for a LabelSelector as JSON
    (``matchLabels``, ``matchExpressions``); raises ValueError naming an operator Kubernetes
    does not define (callers decide what such a selector selects)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for term in selector.get("matchExpressions") or ():
        key, operator, values = term.get("key", ""), term.get("operator", ""), term.get("values") or ()
        if operator == "In":
            ok = key in labels and labels[key] in values
        elif operator == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif operator == "Exists":
            ok = key in labels
        elif operator == "DoesNotExist":
            ok = key not in labels
        else:
            raise ValueError(f"operator {operator!r}")
        if not ok:
            return False
    return True
