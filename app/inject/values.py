"""The injector's values (the ``values`` key of istiod's ``istio-sidecar-injector`` ConfigMap):
JSON (or YAML) decoded as Go's ``map[string]any`` holds it, every number a float64, since the
templates print and compare them as such (NewValuesConfig)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from app.errors import SettingsError

# what istiod's chart puts in the ConfigMap's values (istiod-injector-configmap.yaml): these
# top-level keys of the chart's values, ``pilot`` made of its ``cni`` and ``env``, ``gateways``
# of its ``securityContext`` and ``seccompProfile``
CONFIGMAP_KEYS = ("global", "sidecarInjectorWebhook", "revision")
PILOT_KEYS = ("cni", "env")
GATEWAY_KEYS = ("securityContext", "seccompProfile")


def as_go_values(value: Any) -> Any:
    """``value`` as encoding/json decodes it into ``any``: numbers become floats."""
    if isinstance(value, bool) or value is None or isinstance(value, str | float):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): as_go_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_go_values(v) for v in value]
    return str(value)  # a YAML date or timestamp: sigs.k8s.io/yaml reads it as its text


def parse_values(text: str, source: str = "values") -> dict[str, Any]:
    """The ConfigMap's ``values`` text (JSON, which YAML also reads) as the templates see it."""
    try:
        decoded = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise SettingsError(f"{source}: could not parse configuration values: {e}") from e
    if decoded is None:
        decoded = {}
    if not isinstance(decoded, Mapping):
        raise SettingsError(f"{source}: configuration values must be an object, got {type(decoded).__name__}")
    out: dict[str, Any] = as_go_values(decoded)
    return out


def configmap_values(chart_values: Mapping[str, Any]) -> dict[str, Any]:
    """What istiod's chart writes as the ConfigMap's values, from the chart's values
    (``_internal_defaults_do_not_set`` and the user's, merged)."""
    picked: dict[str, Any] = {k: chart_values[k] for k in CONFIGMAP_KEYS if k in chart_values}
    picked["pilot"] = {k: chart_values[k] for k in PILOT_KEYS if k in chart_values}
    gateways = chart_values.get("gateways") or {}
    picked["gateways"] = {k: gateways[k] for k in GATEWAY_KEYS if k in gateways}
    out: dict[str, Any] = as_go_values(picked)
    return out


def lookup(values: Mapping[str, Any], *path: str) -> Any:
    """values.a.b.c, or None where a step is missing (the opconfig.Values getters' nil)."""
    node: Any = values
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node
