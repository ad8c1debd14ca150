"""sprig's numeric functions (numeric.go and the arithmetic of functions.go): int64 results,
arguments converted by spf13/cast's rules (a string parses, anything else unconvertible is 0)."""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any, Final

from app.gotemplate.errors import GoError
from app.gotemplate.printing import format_float, sprint_value
from app.gotemplate.signature import ANY, FLOAT64, INT, STRING, go_signature
from app.gotemplate.sprig_convert import to_float64, to_int64, wrap_int64
from app.gotemplate.values import Int64, IntSlice


@go_signature(STRING)
def atoi(s: str) -> int:
    body = s[1:] if s[:1] in "+-" else s
    if not body.isascii() or not body.isdigit():
        return 0
    n = int(s)
    return n if -(1 << 63) <= n < (1 << 63) else 0


@go_signature(ANY)
def to_int(v: Any) -> int:
    return to_int64(v)


@go_signature(ANY)
def to_int64_func(v: Any) -> Int64:
    return Int64(to_int64(v))


@go_signature(ANY)
def to_float64_func(v: Any) -> float:
    return to_float64(v)


@go_signature(variadic=ANY)
def add(*args: Any) -> Int64:
    return Int64(wrap_int64(sum(to_int64(a) for a in args)))


@go_signature(ANY)
def add1(v: Any) -> Int64:
    return Int64(wrap_int64(to_int64(v) + 1))


@go_signature(ANY, ANY)
def sub(a: Any, b: Any) -> Int64:
    return Int64(wrap_int64(to_int64(a) - to_int64(b)))


@go_signature(ANY, variadic=ANY)
def mul(a: Any, *rest: Any) -> Int64:
    v = to_int64(a)
    for b in rest:
        v = wrap_int64(v * to_int64(b))
    return Int64(v)


def _go_div(a: int, b: int) -> int:
    if b == 0:
        raise GoError("runtime error: integer divide by zero")
    q = abs(a) // abs(b)
    return wrap_int64(q if (a < 0) == (b < 0) else -q)


@go_signature(ANY, ANY)
def div(a: Any, b: Any) -> Int64:
    return Int64(_go_div(to_int64(a), to_int64(b)))


@go_signature(ANY, ANY)
def mod(a: Any, b: Any) -> Int64:
    x, y = to_int64(a), to_int64(b)
    if y == 0:
        raise GoError("runtime error: integer divide by zero")
    return Int64(x - _go_div(x, y) * y)


@go_signature(ANY, variadic=ANY)
def max_(a: Any, *rest: Any) -> Int64:
    return Int64(max([to_int64(a), *(to_int64(b) for b in rest)]))


@go_signature(ANY, variadic=ANY)
def min_(a: Any, *rest: Any) -> Int64:
    return Int64(min([to_int64(a), *(to_int64(b) for b in rest)]))


def _go_max(x: float, y: float) -> float:
    """math.Max: NaN wins, and +0 beats -0."""
    if math.inf in (x, y):
        return math.inf
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if x == 0 and x == y:
        return x if math.copysign(1, x) > 0 else y
    return x if x > y else y


def _go_min(x: float, y: float) -> float:
    """math.Min: NaN wins, and -0 beats +0."""
    if -math.inf in (x, y):
        return -math.inf
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if x == 0 and x == y:
        return x if math.copysign(1, x) < 0 else y
    return x if x < y else y


def go_floor(f: float) -> float:
    """math.Floor: a float, keeping -0, infinities and NaN."""
    return f if f == 0 or not math.isfinite(f) else float(math.floor(f))


def go_ceil(f: float) -> float:
    """math.Ceil: a float, -0 for a value in (-1, 0)."""
    if f == 0 or not math.isfinite(f):
        return f
    return math.copysign(float(math.ceil(f)), f)


@go_signature(ANY, variadic=ANY)
def maxf(a: Any, *rest: Any) -> float:
    v = to_float64(a)
    for b in rest:
        v = _go_max(v, to_float64(b))
    return v


@go_signature(ANY, variadic=ANY)
def minf(a: Any, *rest: Any) -> float:
    v = to_float64(a)
    for b in rest:
        v = _go_min(v, to_float64(b))
    return v


@go_signature(ANY)
def floor(a: Any) -> float:
    return go_floor(to_float64(a))


@go_signature(ANY)
def ceil(a: Any) -> float:
    return go_ceil(to_float64(a))


@go_signature(ANY, INT, variadic=FLOAT64)
def round_(a: Any, places: int, *round_on: float) -> float:
    on = round_on[0] if round_on else 0.5
    pow_ = math.pow(10, float(places))
    digit = pow_ * to_float64(a)
    frac = math.modf(digit)[0] if math.isfinite(digit) else (math.nan if math.isnan(digit) else 0.0)
    return (go_ceil(digit) if frac >= on else go_floor(digit)) / pow_


@go_signature(INT)
def until(count: int) -> IntSlice:
    return until_step(0, count, -1 if count < 0 else 1)


@go_signature(INT, INT, INT)
def until_step(start: int, stop: int, step: int) -> IntSlice:
    if stop < start:
        return IntSlice(range(start, stop, step)) if step < 0 else IntSlice()
    return IntSlice(range(start, stop, step)) if step > 0 else IntSlice()


@go_signature(variadic=INT)
def seq(*params: int) -> str:
    if len(params) == 1:
        start, end = 1, params[0]
        inc = -1 if end < start else 1
        values = until_step(start, end + inc, inc)
    elif len(params) == 2:
        start, end = params
        step = -1 if end < start else 1
        values = until_step(start, end + step, step)
    elif len(params) == 3:
        start, step, end = params
        inc = 1
        if end < start:
            inc = -1
            if step > 0:
                return ""
        values = until_step(start, end + inc, step)
    else:
        return ""
    return " ".join(str(v) for v in values)


@go_signature(ANY)
def to_decimal(v: Any) -> Int64:
    text = sprint_value(v)
    if text and text[0] in "+-":
        sign, body = text[0], text[1:]
    else:
        sign, body = "", text
    if body == "" or any(c not in "01234567" for c in body):
        return Int64(0)
    n = int(sign + body, 8)
    return Int64(n) if -(1 << 63) <= n < (1 << 63) else Int64(0)


def _decimal(f: float) -> Decimal:
    """decimal.NewFromFloat: the shortest decimal form of the float64."""
    if not math.isfinite(f):
        raise GoError(f"Cannot create a Decimal from {format_float(f)}")
    return Decimal(repr(f))


def _decimal_op(a: Any, rest: tuple[Any, ...], op: Callable[[Decimal, Decimal], Decimal]) -> float:
    """shopspring/decimal arithmetic over the arguments as float64s (sprig's execDecimalOp)."""
    with localcontext() as ctx:
        ctx.prec = 1000  # exact: a float64 has at most 767 significant decimal digits
        acc = _decimal(to_float64(a))
        for x in rest:
            acc = op(acc, _decimal(to_float64(x)))
        return float(acc) or 0.0  # a decimal has no negative zero


def _decimal_div(x: Decimal, y: Decimal) -> Decimal:
    """Decimal.Div: 16 places, the last rounded half away from zero."""
    if y == 0:
        raise GoError("decimal division by 0")
    return (x / y).quantize(Decimal("1e-16"), rounding=ROUND_HALF_UP)


@go_signature(variadic=ANY)
def addf(*args: Any) -> float:
    return _decimal_op(0.0, args, lambda x, y: x + y)


@go_signature(ANY)
def add1f(a: Any) -> float:
    return _decimal_op(a, (1,), lambda x, y: x + y)


@go_signature(ANY, variadic=ANY)
def subf(a: Any, *rest: Any) -> float:
    return _decimal_op(a, rest, lambda x, y: x - y)


@go_signature(ANY, variadic=ANY)
def mulf(a: Any, *rest: Any) -> float:
    return _decimal_op(a, rest, lambda x, y: x * y)


@go_signature(ANY, variadic=ANY)
def divf(a: Any, *rest: Any) -> float:
    return _decimal_op(a, rest, _decimal_div)


NUMBER_FUNCS: Final[dict[str, Callable[..., Any]]] = {
    "atoi": atoi,
    "int": to_int,
    "int64": to_int64_func,
    "float64": to_float64_func,
    "add": add,
    "add1": add1,
    "sub": sub,
    "mul": mul,
    "div": div,
    "mod": mod,
    "max": max_,
    "biggest": max_,
    "min": min_,
    "maxf": maxf,
    "minf": minf,
    "floor": floor,
    "ceil": ceil,
    "round": round_,
    "until": until,
    "untilStep": until_step,
    "seq": seq,
    "toDecimal": to_decimal,
    "addf": addf,
    "add1f": add1f,
    "subf": subf,
    "mulf": mulf,
    "divf": divf,
}
