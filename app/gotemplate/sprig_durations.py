"""sprig's duration and durationRound, with Go's time.Duration: its String (1h2m3.5s, 300ms,
1µs) and ParseDuration ("1.5h", "-2m30s"), in nanoseconds held in Python ints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from app.gotemplate.signature import ANY, go_signature
from app.gotemplate.values import Int64

SECOND: Final = 1_000_000_000
_UNITS: Final = {
    "ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000, "s": SECOND, "m": 60 * SECOND,
    "h": 3600 * SECOND,
}  # fmt: skip
_INT64_MIN: Final = -(1 << 63)


def _wrap(n: int) -> int:
    n &= (1 << 64) - 1
    return n - (1 << 64) if n >= 1 << 63 else n


def _frac(v: int, prec: int) -> tuple[str, int]:
    """time's fmtFrac: v's last ``prec`` digits as a fraction without trailing zeros."""
    digits = ""
    printing = False
    for _ in range(prec):
        digit = v % 10
        printing = printing or digit != 0
        if printing:
            digits = str(digit) + digits
        v //= 10
    return ("." + digits if printing else ""), v


def duration_string(d: int) -> str:
    """time.Duration(d).String()."""
    u = -d if d < 0 else d  # the minimum int64 negates to itself as a uint64: 1<<63
    if u < SECOND:
        if u == 0:
            return "0s"
        if u < 1_000:
            out = f"{u}ns"
        elif u < 1_000_000:
            frac, rest = _frac(u, 3)
            out = f"{rest}{frac}\u00b5s"
        else:
            frac, rest = _frac(u, 6)
            out = f"{rest}{frac}ms"
    else:
        frac, u = _frac(u, 9)
        out = f"{u % 60}{frac}s"
        u //= 60
        if u > 0:
            out = f"{u % 60}m" + out
            u //= 60
            if u > 0:
                out = f"{u}h" + out
    return "-" + out if d < 0 else out


def parse_duration(s: str) -> int | None:
    """time.ParseDuration in nanoseconds; None where Go returns an error."""
    neg = False
    if s and s[0] in "+-":
        neg, s = s[0] == "-", s[1:]
    if s == "0":
        return 0
    if s == "":
        return None
    total = 0
    while s:
        if not (s[0] == "." or (s[0].isdigit() and s[0].isascii())):
            return None
        i = 0
        while i < len(s) and "0" <= s[i] <= "9":
            i += 1
        whole = int(s[:i]) if i else 0
        if whole > 1 << 63:
            return None
        pre, s = i > 0, s[i:]
        frac, scale, post = 0, 1.0, False
        if s.startswith("."):
            s = s[1:]
            j, overflow = 0, False
            while j < len(s) and "0" <= s[j] <= "9":
                if not overflow:
                    y = frac * 10 + int(s[j])
                    if frac > ((1 << 63) - 1) // 10 or y > 1 << 63:
                        overflow = True
                    else:
                        frac, scale = y, scale * 10
                j += 1
            post, s = j > 0, s[j:]
        if not pre and not post:
            return None
        k = 0
        while k < len(s) and s[k] != "." and not ("0" <= s[k] <= "9"):
            k += 1
        if k == 0 or s[:k] not in _UNITS:
            return None
        unit, s = _UNITS[s[:k]], s[k:]
        if whole > (1 << 63) // unit:
            return None
        v = whole * unit
        if frac > 0:
            v += int(float(frac) * (float(unit) / scale))
            if v > 1 << 63:
                return None
        total += v
        if total > 1 << 63:
            return None
    if neg:
        return _wrap(-total)
    return None if total > (1 << 63) - 1 else total


@go_signature(ANY)
def duration(sec: Any) -> str:
    """A number of seconds (an int64, or a string of one; anything else is 0) as a duration."""
    if isinstance(sec, Int64):
        n = int(sec)
    elif isinstance(sec, str):  # strconv.ParseInt, its error ignored: 0, or the bound out of range
        body = sec[1:] if sec[:1] in ("+", "-") else sec
        n = min(max(int(sec), _INT64_MIN), (1 << 63) - 1) if body.isascii() and body.isdigit() else 0
    else:
        n = 0
    return duration_string(_wrap(n * SECOND))


@go_signature(ANY)
def duration_round(value: Any) -> str:
    """A duration (a Go duration string, or int64 nanoseconds) to its largest whole unit."""
    if isinstance(value, str):
        d = parse_duration(value) or 0
    elif isinstance(value, Int64):
        d = int(value)
    else:
        d = 0
    u = -d if d < 0 else d
    hour = 3600 * SECOND
    for size, unit in ((hour * 24 * 365, "y"), (hour * 24 * 30, "mo"), (hour * 24, "d"), (hour, "h"),
                       (60 * SECOND, "m"), (SECOND, "s")):  # fmt: skip
        if u > size:
            return f"{u // size}{unit}"
    return "0s"


DURATION_FUNCS: Final[dict[str, Callable[..., Any]]] = {"duration": duration, "durationRound": duration_round}
