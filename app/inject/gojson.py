"""JSON text as Go's encoding/json writes it: compact, keys in the order given (a Go struct's
field order; Go sorts a map's keys, so callers sort those), ``<``, ``>``, ``&``, U+2028 and
U+2029 escaped, and a float64 that is whole written without a fraction."""

from __future__ import annotations

import json
from typing import Any

_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def go_json(value: Any) -> str:
    text = json.dumps(_whole(value), ensure_ascii=False, separators=(",", ":"))
    for char, escaped in _ESCAPES.items():
        text = text.replace(char, escaped)
    return text


def sorted_map(value: dict[str, Any]) -> dict[str, Any]:
    """A Go map's entries in the order encoding/json writes them."""
    return dict(sorted(value.items()))


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value
