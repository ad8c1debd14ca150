"""The bounds Istio's CRDs put on a field's value (their OpenAPI schemas' minimum, maximum,
minLength, maxLength, pattern, minItems, maxItems, minProperties, maxProperties; ``items`` and
``values`` for each element of a list or value of a map), as the Kubernetes API server checks
them before istiod's webhook sees an object. The bounds themselves are data, generated from
Istio's CRDs (app/api/istio/crd_constraints.py); schema.py applies them while parsing.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from app.errors import FieldError

_INTEGER_TEXT = re.compile(r"-?\d+")


def _shown(value: Any) -> str:
    """A value as an error quotes it: a string cut to 40 characters, a number as written."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:36]}...'"


def check_bound(bound: Mapping[str, Any], value: Any, path: str) -> None:
    """Raise a FieldError when ``value`` is out of a CRD field's ``bound`` (its OpenAPI keywords,
    and ``items`` / ``values`` for each element of a list / value of a map)."""
    found = bound_violation(bound, value)
    if found is not None:
        raise FieldError(path + found[0], found[1])


def bound_violation(bound: Mapping[str, Any], value: Any) -> tuple[str, str] | None:
    """(the path below the field, the reason) of the first value out of ``bound``, or None. A
    value of the wrong JSON type is not judged here: the type check names it."""
    for keyword, limit in bound.items():
        if keyword == "items":
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is not None and (found := bound_violation(limit, item)) is not None:
                        return f"[{i}]{found[0]}", found[1]
        elif keyword == "values":
            if isinstance(value, Mapping):
                for k, item in value.items():
                    if item is not None and (found := bound_violation(limit, item)) is not None:
                        return f".{k}{found[0]}", found[1]
        elif (reason := _out_of_bound(keyword, limit, value)) is not None:
            return "", reason
    return None


def _out_of_bound(keyword: str, limit: Any, value: Any) -> str | None:
    if isinstance(value, str):
        if keyword == "minLength" and len(value) < limit:
            return "must not be empty" if limit == 1 else f"must be at least {limit} characters long"
        if keyword == "maxLength" and len(value) > limit:
            return f"must be at most {limit} characters long"
        if keyword == "pattern" and _crd_pattern(limit).search(value) is None:
            return f"{_shown(value)} does not match {limit}"
        if keyword in ("minimum", "maximum") and _INTEGER_TEXT.fullmatch(value):  # a 64-bit integer, quoted
            value = int(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        if keyword == "minimum" and value < limit:
            return f"must be at least {limit}, got {_shown(value)}"
        if keyword == "maximum" and value > limit:
            return f"must be at most {limit}, got {_shown(value)}"
    elif isinstance(value, list):
        if keyword == "minItems" and len(value) < limit:
            return "must not be empty" if limit == 1 else f"must hold at least {limit} items"
        if keyword == "maxItems" and len(value) > limit:
            return f"must hold at most {limit} items, got {len(value)}"
    elif isinstance(value, Mapping):
        if keyword == "minProperties" and len(value) < limit:
            return "must not be empty" if limit == 1 else f"must hold at least {limit} entries"
        if keyword == "maxProperties" and len(value) > limit:
            return f"must hold at most {limit} entries, got {len(value)}"
    return None


@functools.cache
def _crd_pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


_LENGTHS = frozenset({"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"})
_SIZED = (str, list, dict)


def within(bound: Mapping[str, Any]) -> Callable[[Any], bool]:
    """A quick test that a value is within a field's ``bound`` (a value of another type is not
    judged here: the fast path sends it to the slow one anyway)."""
    if _LENGTHS.issuperset(bound):  # nearly every bound: a length or a count
        low = max(bound.get(k, 0) for k in ("minLength", "minItems", "minProperties"))
        high = min(bound.get(k, math.inf) for k in ("maxLength", "maxItems", "maxProperties"))
        return lambda value: type(value) not in _SIZED or low <= len(value) <= high
    return lambda value: bound_violation(bound, value) is None
