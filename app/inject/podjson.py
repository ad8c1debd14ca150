"""A pod as istiod holds it between its steps: each step decodes JSON into Go's corev1.Pod and
encodes it again, which drops what the Go types leave out (nulls, and the ``omitempty`` fields'
empty values: "", empty lists and maps, a plain bool's false, a plain int's 0) and writes
resource quantities in canonical form. ``go_pod`` does the same to a pod as a dict, so the
merge, the patch and kube-inject's output see what istiod's do. Fields Go's types do not
define are kept (the API server drops them, as istiod's decoding would)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.inject.quantity import QuantityError, canonical_quantity

# omitempty maps (map[string]string, ResourceList): empty, they are left out
_MAPS = frozenset({"labels", "annotations", "nodeSelector", "limits", "requests", "overhead"})
# slices without omitempty: empty, Go keeps them
_KEPT_LISTS = frozenset({"containers"})
# strings without omitempty
_KEPT_STRINGS = frozenset({"name"})
# plain (non-pointer) bools and ints with omitempty
_BOOLS = frozenset({"hostNetwork", "hostPID", "hostIPC", "stdin", "stdinOnce", "tty"})
_INTS = frozenset({"initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold",
                   "hostPort"})  # fmt: skip
_QUANTITIES = frozenset({"limits", "requests", "overhead"})


def go_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """``pod`` after a Go corev1.Pod JSON round trip (a new dict; ``pod`` is not changed)."""
    out: dict[str, Any] = _shape(pod, "")
    return out


def _shape(value: Any, key: str) -> Any:
    if isinstance(value, Mapping):
        if key in _QUANTITIES:
            return {k: _quantity(v) for k, v in value.items() if v is not None}
        if key in _MAPS:  # a map's entries are kept, empty strings too
            return dict(value)
        out: dict[str, Any] = {}
        for k, v in value.items():
            shaped = _shape(v, k)
            if not _omitted(k, shaped, key):
                out[k] = shaped
        return out
    if isinstance(value, list):
        return [_shape(v, "") for v in value]
    return value


def _omitted(key: str, value: Any, parent: str) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return value == "" and key not in _KEPT_STRINGS
    if isinstance(value, bool):
        return not value and (key in _BOOLS or (key == "readOnly" and parent == ""))
    if isinstance(value, int | float):
        return value == 0 and key in _INTS
    if isinstance(value, list):
        return not value and key not in _KEPT_LISTS
    if isinstance(value, Mapping):
        return not value and key in _MAPS
    return False


def _quantity(value: Any) -> Any:
    try:
        return canonical_quantity(str(value))
    except QuantityError:
        return value  # not a quantity: the API server will say so
