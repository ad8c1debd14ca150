"""Whether a pod gets a sidecar (istiod webhook.go injectRequired): never with host networking
or in Kubernetes' own namespaces; else the ``sidecar.istio.io/inject`` label (or, without it,
the annotation) decides; else neverInjectSelector, then alwaysInjectSelector; else the policy."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from app.config.labels import label_selector_matches
from app.inject.config import InjectionConfig

logger = logging.getLogger(__name__)

SIDECAR_INJECT = "sidecar.istio.io/inject"
# inject.IgnoredNamespaces
IGNORED_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease", "local-path-storage"})


def inject_required(config: InjectionConfig, spec: Mapping[str, Any], meta: Mapping[str, Any]) -> bool:
    if spec.get("hostNetwork"):
        return False
    if meta.get("namespace", "") in IGNORED_NAMESPACES:
        return False
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    selector = labels.get(SIDECAR_INJECT, annotations.get(SIDECAR_INJECT, ""))
    use_default = selector not in ("true", "false")
    inject = selector == "true"
    if selector and use_default:
        logger.warning(
            "invalid value for %s: %r; only 'true' and 'false' are accepted, the default policy applies",
            SIDECAR_INJECT, selector,
        )  # fmt: skip
    if use_default:
        for never in config.never_inject_selector:
            if _matches(never, labels, "neverInjectSelector"):
                inject, use_default = False, False
                break
    if use_default:
        for always in config.always_inject_selector:
            if _matches(always, labels, "alwaysInjectSelector"):
                inject, use_default = True, False
                break
    if config.policy == "enabled":
        return True if use_default else inject
    if config.policy == "disabled":
        return False if use_default else inject
    logger.error("illegal injection policy %r, must be one of [disabled, enabled]: no injection", config.policy)
    return False


def _matches(selector: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    """metav1.LabelSelectorAsSelector(selector).Matches(labels), where an empty selector (which
    would match everything) matches nothing, as injectRequired treats it; an invalid one is
    logged and skipped."""
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        return False
    try:
        return label_selector_matches(selector, labels)
    except ValueError as e:
        logger.warning("invalid selector for %s: %s (%s)", name, selector, e)
        return False
