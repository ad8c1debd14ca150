"""fmt's printing of the Go values in values.py: Sprint, Sprintln, Sprintf and %v.

As fmt prints them: a float64 in %v is strconv 'g' with the shortest digits, so the exponent
form starts at 1e+06 and below 1e-04 (15020.0 prints 15020, 1e6 prints 1e+06); maps print as
map[k:v] with sorted keys, slices as [a b], nil inside them as <nil>.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from app.gotemplate.quoting import go_quote
from app.gotemplate.values import NIL, NilPointer, is_struct, type_name


def shortest_digits(f: float) -> tuple[str, int]:
    """The shortest decimal digits that round-trip ``abs(f)`` and the decimal point position."""
    _, digits, exp = Decimal(repr(abs(f))).as_tuple()
    ds = "".join(map(str, digits)).lstrip("0")
    if not ds:
        return "0", 1
    dp = len("".join(map(str, digits))) + int(exp) - (len("".join(map(str, digits))) - len(ds))
    ds = ds.rstrip("0") or "0"
    return ds, dp


def _fmt_e(neg: bool, digits: str, dp: int, prec: int, e: str = "e") -> str:
    out = digits[0] if digits else "0"
    if prec > 0:
        frac = digits[1 : prec + 1]
        out += "." + frac + "0" * (prec - len(frac))
    exp = dp - 1 if digits != "0" else 0
    out += e + ("-" if exp < 0 else "+") + (f"{abs(exp):02d}")
    return ("-" if neg else "") + out


def _fmt_f(neg: bool, digits: str, dp: int, prec: int) -> str:
    out = digits[:dp] + "0" * max(0, dp - len(digits)) if dp > 0 else "0"
    if prec > 0:
        frac = ""
        for i in range(prec):
            j = dp + i
            frac += digits[j] if 0 <= j < len(digits) else "0"
        out += "." + frac
    return ("-" if neg else "") + out


def format_float(f: float, verb: str = "g", prec: int = -1) -> str:
    """strconv.FormatFloat(f, verb, prec, 64) for verbs e, E, f, g, G."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    neg = math.copysign(1.0, f) < 0
    if verb in "fF" and prec >= 0:
        return f"{f:.{prec}f}"
    if verb in "eE" and prec >= 0:
        s = f"{f:.{prec}e}"
        return s.upper() if verb == "E" else s
    shortest = prec < 0
    if shortest:
        digits, dp = shortest_digits(f)
    else:
        p = max(prec, 1)
        s = f"{abs(f):.{p - 1}e}"
        mant, _, ex = s.partition("e")
        digits = mant.replace(".", "").rstrip("0") or "0"
        dp = int(ex) + 1 if digits != "0" else 1
        prec = p
    nd = len(digits)
    if verb in "eE":
        return _fmt_e(neg, digits, dp, nd - 1, verb)
    if verb in "fF":
        return _fmt_f(neg, digits, dp, max(nd - dp, 0))
    eprec = prec if not shortest else 6
    if not shortest and eprec > nd and nd >= dp:
        eprec = nd
    if shortest:
        prec = nd
    exp = dp - 1
    if digits == "0":
        exp = 0
    if exp < -4 or exp >= eprec:
        p = min(prec, nd)
        return _fmt_e(neg, digits, dp, p - 1, "e" if verb == "g" else "E")
    p = nd if prec > dp else prec
    return _fmt_f(neg, digits, dp, max(p - dp, 0))


def sprint_value(v: Any) -> str:
    """%v of one value."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        return format_float(v)
    if v is None or v is NIL:
        return "<nil>"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{sprint_value(k)}:{sprint_value(x)}" for k, x in sorted_items(v)) + "]"
    if isinstance(v, (list, tuple)):
        return "[" + " ".join(sprint_value(x) for x in v) + "]"
    return str(v)


def sorted_items(m: dict[Any, Any]) -> list[tuple[Any, Any]]:
    """A map's entries in fmtsort order (numbers numerically, strings by bytes)."""
    try:
        return sorted(m.items(), key=lambda kv: kv[0])
    except TypeError:
        return sorted(m.items(), key=lambda kv: (type_name(kv[0]), str(kv[0])))


def sprint(*args: Any) -> str:
    """fmt.Sprint: a space between operands when neither is a string."""
    out: list[str] = []
    for i, a in enumerate(args):
        if i > 0 and not isinstance(a, str) and not isinstance(args[i - 1], str):
            out.append(" ")
        out.append(sprint_value(a))
    return "".join(out)


def sprintln(*args: Any) -> str:
    return " ".join(sprint_value(a) for a in args) + "\n"


class FormatSpec:
    """A verb's flags, width and precision."""

    __slots__ = ("minus", "plus", "prec", "sharp", "sharp_v", "space", "width", "zero")

    def __init__(self) -> None:
        self.minus = self.plus = self.sharp = self.sharp_v = self.space = self.zero = False
        self.width: int | None = None
        self.prec: int | None = None


def _pad(s: str, spec: FormatSpec, zeros: str = "text") -> str:
    """fmt's padding to the width: spaces, or with the 0 flag zeros (``zeros``: "text" puts them
    before everything, "number" after the sign, "none" never: an integer with a precision,
    Inf and NaN)."""
    if spec.width is None or len(s) >= spec.width:
        return s
    n = spec.width - len(s)
    if spec.minus:
        return s + " " * n
    if spec.zero and zeros == "number" and s and s[0] in "+- ":
        return s[0] + "0" * n + s[1:]
    if spec.zero and zeros != "none":
        return "0" * n + s
    return " " * n + s


def _bad(verb: str, v: Any, spec: FormatSpec) -> str:
    """fmt's report of a verb the operand's type does not take: the operand in %v, with the
    verb's width and flags."""
    if v is None or v is NIL:
        return f"%!{verb}(<nil>)"
    return f"%!{verb}({type_name(v)}={format_value(v, 'v', spec)})"


def _rune(v: int) -> str:
    """The rune an integer is to %c and %q: an invalid one is U+FFFD."""
    return chr(v) if 0 <= v <= 0x10FFFF and not 0xD800 <= v <= 0xDFFF else "\ufffd"


def _fmt_int(v: int, verb: str, spec: FormatSpec) -> str:
    """An integer (of whichever Go type: a bad verb reports it) in one of fmt's integer verbs."""
    neg = v < 0
    a = abs(int(v))
    if verb == "d" or verb == "v":
        body = str(a)
    elif verb == "x":
        body = format(a, "x")
    elif verb == "X":
        body = format(a, "X")
    elif verb == "o":
        body = format(a, "o")
    elif verb == "O":
        body = "0o" + format(a, "o")
    elif verb == "b":
        body = format(a, "b")
    elif verb == "c":
        return _pad(_rune(v), spec)
    elif verb == "q":
        return _pad("'" + go_quote(_rune(v))[1:-1].replace("'", "\\'").replace('\\"', '"') + "'", spec)
    elif verb == "U":
        return _pad(f"U+{int(v) & 0xFFFFFFFFFFFFFFFF:04X}", spec)
    else:
        return _bad(verb, v, spec)
    if spec.prec is not None:
        body = body.rjust(spec.prec, "0") if spec.prec > 0 or a != 0 else ""
    if spec.sharp:
        body = {"x": "0x", "X": "0X", "o": "0", "b": ""}.get(verb, "") + body
    sign = "-" if neg else ("+" if spec.plus else (" " if spec.space else ""))
    return _pad(sign + body, spec, "number" if spec.prec is None else "none")


def _hex_float(v: float, prec: int | None) -> str:
    """strconv's 'x' format: 0x1.e848p+19 (the shortest mantissa unless a precision is given)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, v) < 0 else ""
    if v == 0:
        mant, exp = "0", 0
    else:
        h = float.hex(abs(v))  # 0x1.xxxxxxxxxxxxxp+N (or 0x0.xxx p-1022 when subnormal)
        body, _, e = h[2:].partition("p")
        lead, _, frac = body.partition(".")
        exp = int(e)
        if lead == "0":  # normalize a subnormal to 1.xxx
            bits = int(frac, 16)
            shift = 52 - bits.bit_length() + 1
            bits = (bits << shift) & ((1 << 52) - 1)
            exp -= shift
            frac = f"{bits:013x}"
        mant = "1"
        if prec is not None:
            if prec < 13:
                bits = int(frac, 16)
                drop = (13 - prec) * 4
                q, r = divmod(bits, 1 << drop)
                half = 1 << (drop - 1)
                if r > half or (r == half and q & 1):
                    q += 1
                if q >> (prec * 4):
                    q = 0
                    exp += 1
                frac = f"{q:0{prec}x}" if prec else ""
            else:
                frac = frac + "0" * (prec - 13)
        else:
            frac = frac.rstrip("0")
        mant += "." + frac if frac else ""
    esign = "-" if exp < 0 else "+"
    return f"{sign}0x{mant}p{esign}{abs(exp):02d}"


def _sharp_float(num: str, verb: str, prec: int | None) -> str:
    """The # flag on a float: a decimal point always, and %g's trailing zeros kept (fmt's
    fmtFloat)."""
    digits = (prec if prec is not None else 6) if verb in "gGxX" else 0
    tail = ""
    cut = next((i for i, c in enumerate(num) if c in ("pP" if verb in "xX" else "eEpP")), -1)
    if cut >= 0:
        num, tail = num[:cut], num[cut:]
    saw_nonzero = False
    body = num[2:] if verb in "xX" else num
    for c in body.lstrip("-"):
        if c == ".":
            continue
        if c != "0":
            saw_nonzero = True
        if saw_nonzero:
            digits -= 1
    if "." not in num:
        if body.lstrip("-") == "0":
            digits -= 1
        num += "."
    return num + "0" * max(digits, 0) + tail


def _fmt_float(v: float, verb: str, spec: FormatSpec) -> str:
    if verb == "v":
        verb = "g"
    if verb in "xX":
        s = _hex_float(v, spec.prec)
        s = s.upper() if verb == "X" else s
    elif verb in "eEfFgG":
        s = format_float(v, verb, spec.prec if spec.prec is not None else (-1 if verb in "gG" else 6))
    else:
        return _bad(verb, v, spec)
    if spec.sharp and math.isfinite(v):
        s = _sharp_float(s, verb, spec.prec)
    if spec.plus and not s.startswith("-"):
        s = "+" + s
    elif spec.space and not s.startswith("-"):
        s = " " + s
    return _pad(s, spec, "none" if math.isinf(v) or math.isnan(v) else "number")


def _fmt_str(v: str, verb: str, spec: FormatSpec) -> str:
    if spec.prec is not None and verb in "sqv":
        v = v[: spec.prec]
    if verb in "sv":
        return _pad(v, spec)
    if verb == "q":
        return _pad("`" + v + "`" if spec.sharp and "`" not in v else go_quote(v), spec)
    if verb in "xX":
        data = v.encode("utf-8", "surrogateescape")
        prefix = "0x" if spec.sharp else ""
        pairs = [prefix + f"{b:02x}" for b in data] if spec.space else [prefix + data.hex()] if data else []
        h = " ".join(pairs)
        return _pad(h.upper() if verb == "X" else h, spec)
    return _bad(verb, v, spec)


def format_value(v: Any, verb: str, spec: FormatSpec, nested: bool = False) -> str:
    """One operand of Sprintf; inside a map or slice (``nested``) nil is <nil> whatever the verb."""
    if verb == "T":
        return _pad(type_name(v), spec)
    if v is None or v is NIL:
        return _pad("<nil>", spec) if verb == "v" or nested else _bad(verb, v, spec)
    if isinstance(v, bool):
        return _pad("true" if v else "false", spec) if verb in "tv" else _bad(verb, v, spec)
    if isinstance(v, NilPointer):  # fmt prints a pointer's address: 0 in the integer verbs
        if verb in "bodxX":
            return _fmt_int(0, verb, spec)
        return _pad("<nil>", spec) if verb == "v" else _bad(verb, v, spec)
    if isinstance(v, int):
        return _fmt_int(v, verb, spec)
    if isinstance(v, float):
        return _fmt_float(v, verb, spec)
    if isinstance(v, str):
        if verb == "v" and spec.sharp_v:
            return _pad(go_quote(v), spec)
        return _fmt_str(v, verb, spec)
    if isinstance(v, dict):
        inner = " ".join(
            f"{format_value(k, verb, spec, True)}:{format_value(x, verb, spec, True)}" for k, x in sorted_items(v)
        )
        return "map[" + inner + "]"
    if isinstance(v, (list, tuple)):
        return "[" + " ".join(format_value(x, verb, spec, True) for x in v) + "]"
    if is_struct(v) and nested:  # a pointer inside a collection: %v is its address, else a bad verb
        return str(v) if verb == "v" else _bad(verb, v, spec)
    if is_struct(v) or verb in "sv":
        return _pad(str(v), spec) if verb in "sv" else _bad(verb, v, spec)
    return _bad(verb, v, spec)


def sprintf(fmt: str, *args: Any) -> str:
    """fmt.Sprintf for the verbs templates use, with Go's %!verb(...) reports of bad calls."""
    out: list[str] = []
    argi = 0
    i = 0
    n = len(fmt)
    while i < n:
        j = fmt.find("%", i)
        if j < 0:
            out.append(fmt[i:])
            break
        out.append(fmt[i:j])
        i = j + 1
        spec = FormatSpec()
        while i < n and fmt[i] in "-+# 0":
            c = fmt[i]
            if c == "-":
                spec.minus = True
                spec.zero = False
            elif c == "+":
                spec.plus = True
            elif c == "#":
                spec.sharp = True
            elif c == " ":
                spec.space = True
            elif not spec.minus:
                spec.zero = True
            i += 1
        if i < n and fmt[i] == "*":
            i += 1
            if argi < len(args) and isinstance(args[argi], int) and not isinstance(args[argi], bool):
                spec.width = int(args[argi])
                if spec.width < 0:
                    spec.minus, spec.width = True, -spec.width
            else:
                out.append("%!(BADWIDTH)")
            argi += 1
        else:
            start = i
            while i < n and fmt[i].isdigit():
                i += 1
            if i > start:
                spec.width = int(fmt[start:i])
        if i < n and fmt[i] == ".":
            i += 1
            if i < n and fmt[i] == "*":
                i += 1
                if argi < len(args) and isinstance(args[argi], int) and not isinstance(args[argi], bool):
                    spec.prec = max(int(args[argi]), 0)
                else:
                    out.append("%!(BADPREC)")
                argi += 1
            else:
                start = i
                while i < n and fmt[i].isdigit():
                    i += 1
                spec.prec = int(fmt[start:i] or "0")
        if i >= n:
            out.append("%!(NOVERB)")
            break
        verb = fmt[i]
        i += 1
        if verb == "v" and spec.sharp:  # %#v: Go syntax (fmt's sharpV), not the # flag
            spec.sharp, spec.sharp_v = False, True
        if verb == "%":
            out.append("%")
            continue
        if argi >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        out.append(format_value(args[argi], verb, spec))
        argi += 1
    if argi < len(args):
        extra = ", ".join(
            "<nil>" if a is None or a is NIL else f"{type_name(a)}={sprint_value(a)}" for a in args[argi:]
        )
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)
