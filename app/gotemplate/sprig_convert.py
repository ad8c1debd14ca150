"""The conversions sprig's functions share: strval (toString), spf13/cast's ToInt64/ToFloat64,
sprig's empty, reflect.DeepEqual, and the "panic" errors Go's reflection raises."""

from __future__ import annotations

import re
from typing import Any

from app.gotemplate.errors import GoError
from app.gotemplate.numeric import INT64_MAX, INT64_MIN, parse_go_float, parse_go_int
from app.gotemplate.printing import sprint_value
from app.gotemplate.values import NIL, is_nil, is_struct, kind_name, type_name

NIL_DEREFERENCE = "runtime error: invalid memory address or nil pointer dereference"
_STRING_NUMBER = re.compile(r"([-+]?[0-9]*)(\.[0-9]*)?")


def strval(v: Any) -> str:
    """sprig's strval: a string as is, else fmt's %v."""
    return v if isinstance(v, str) else sprint_value(v)


def _trim_decimal(s: str) -> str:
    """cast's trimDecimal: "12.50" -> "12" (a number with a fraction loses it)."""
    if "." not in s:
        return s
    m = _STRING_NUMBER.fullmatch(s)
    if m is None:
        return s
    head = m.group(1)
    return head + "0" if head in ("-", "+") else (head or "0")


def to_int64(v: Any) -> int:
    """cast.ToInt64 as sprig calls it: errors are 0."""
    if v is None or v is NIL:
        return 0
    if isinstance(v, bool):
        return 1 if v else 0
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float_to_int64(v)
    if isinstance(v, str):
        if v == "":
            return 0
        n = parse_go_int(_trim_decimal(v))
        return n if n is not None and INT64_MIN <= n <= INT64_MAX else 0
    return 0


def float_to_int64(f: float) -> int:
    """Go's int64(f) on amd64: truncation, and for NaN, infinities and values out of range the
    CPU's "integer indefinite", the minimum int64 (istiod runs there; arm64 would saturate)."""
    if f != f or not -9223372036854775808.0 <= f < 9223372036854775808.0:
        return INT64_MIN
    return int(f)


def wrap_int64(n: int) -> int:
    """Two's-complement overflow, as Go's int64 arithmetic."""
    n &= (1 << 64) - 1
    return n - (1 << 64) if n >= 1 << 63 else n


def to_float64(v: Any) -> float:
    """cast.ToFloat64 as sprig calls it: errors are 0."""
    if v is None or v is NIL:
        return 0.0
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        if v == "":
            return 0.0
        lowered = v.lower().lstrip("+-")
        if lowered in ("inf", "infinity", "nan"):
            return float(v.lower().replace("infinity", "inf"))
        f = parse_go_float(v)
        return f if f is not None else 0.0
    return 0.0


def empty(v: Any) -> bool:
    """sprig's empty: nil and the zero value of a type (a struct is never empty)."""
    if is_nil(v):
        return True
    if isinstance(v, (bool, int, float, str, dict, list, tuple)):
        return not v
    return False


def deep_equal(a: Any, b: Any) -> bool:
    """reflect.DeepEqual on the values of values.py: the same Go type and equal contents."""
    if a is NIL:
        a = None
    if b is NIL:
        b = None
    if a is None or b is None:
        return a is None and b is None
    if type_name(a) != type_name(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(deep_equal(x, y) for x, y in zip(a, b, strict=True))
    if is_struct(a):
        return a is b or bool(a == b)
    return bool(a == b)


def list_kind_error(what: str, v: Any) -> GoError:
    """The error sprig's list functions return (or panic with) for a value that is no list."""
    if v is None or v is NIL:
        return GoError(NIL_DEREFERENCE)
    kind = "ptr" if is_struct(v) else kind_name(v)
    return GoError(f"{what} {kind}")


def as_list(what: str, v: Any) -> list[Any]:
    if isinstance(v, (list, tuple)):
        return [None if x is NIL else x for x in v]
    raise list_kind_error(what, v)


def to_strings(v: Any) -> list[str]:
    """sprig's strslice: the non-nil elements of a list as strings; a scalar as a one-list."""
    if isinstance(v, (list, tuple)):
        return [strval(x) for x in v if x is not None and x is not NIL]
    if v is None or v is NIL:
        return []
    return [strval(v)]
