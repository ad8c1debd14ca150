"""Go's number syntax: strconv.ParseInt / ParseFloat with base 0 (underscores between digits,
0x / 0o / 0b / 0 prefixes, hex floats) and the parser's constants (parse.newNumber), which hold
a number under every Go type that can represent it."""

from __future__ import annotations

import re

from app.gotemplate.lexer import Tok
from app.gotemplate.nodes import NumberNode
from app.gotemplate.quoting import go_quote, unquote_char

INT64_MIN, INT64_MAX, UINT64_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1

# Go's strconv.ParseInt/ParseFloat syntax with base 0 (underscores only between digits)
_INT_RE = re.compile(r"[+-]?(0[xX](_?[0-9a-fA-F])+|0[bB](_?[01])+|0[oO](_?[0-7])+|0(_?[0-7])*|[1-9](_?[0-9])*)")
_DEC_FLOAT_RE = re.compile(r"[+-]?(([0-9](_?[0-9])*)?\.?([0-9](_?[0-9])*)?)([eE][+-]?[0-9](_?[0-9])*)?")
_HEX_FLOAT_RE = re.compile(r"[+-]?0[xX](_?[0-9a-fA-F])*\.?([0-9a-fA-F](_?[0-9a-fA-F])*)?[pP][+-]?[0-9](_?[0-9])*")


def parse_go_int(text: str) -> int | None:
    """strconv.ParseInt(text, 0, 0) without the range check (None: not an integer)."""
    if not _INT_RE.fullmatch(text):
        return None
    body = text.lstrip("+-").replace("_", "")
    sign = -1 if text.startswith("-") else 1
    if len(body) > 1 and body[0] == "0" and body[1] in "01234567":
        return sign * int(body, 8)
    return sign * int(body, 0)


def parse_go_float(text: str) -> float | None:
    """strconv.ParseFloat(text, 64) (None: not a float, or out of range)."""
    if _HEX_FLOAT_RE.fullmatch(text):
        sign = -1.0 if text.startswith("-") else 1.0
        body = text.lstrip("+-").replace("_", "")
        try:
            return sign * float.fromhex(body)
        except OverflowError:
            return None
    m = _DEC_FLOAT_RE.fullmatch(text)
    if not m or not any(c.isdigit() for c in text.split("e")[0].split("E")[0]):
        return None
    f = float(text.replace("_", ""))
    return None if f in (float("inf"), float("-inf")) else f


def parse_number(pos: int, text: str, typ: Tok) -> NumberNode:
    """parse.newNumber: the constant under every type that can hold it."""
    n = NumberNode(pos, text)
    if typ is Tok.CHAR_CONSTANT:
        ch, end = unquote_char(text, 1, "'")
        if text[end:] != "'":
            raise ValueError(f"malformed character constant: {text}")
        r = ord(ch) if not 0xDC80 <= ord(ch) <= 0xDCFF else ord(ch) - 0xDC00
        n.is_int = n.is_uint = n.is_float = True
        n.int_value = n.uint_value = r
        n.float_value = float(r)
        return n
    if typ is Tok.COMPLEX:
        raise ValueError(f"complex constants are not supported: {text}")
    if text.endswith("i"):
        f = parse_go_float(text[:-1])
        if f is not None:
            raise ValueError(f"complex constants are not supported: {text}")
    i = parse_go_int(text)
    if i is not None:
        if 0 <= i <= UINT64_MAX and not text.startswith(("-", "+")):
            n.is_uint, n.uint_value = True, i
        if INT64_MIN <= i <= INT64_MAX:
            n.is_int, n.int_value = True, i
            if i == 0:
                n.is_uint, n.uint_value = True, 0
    if n.is_int:
        n.is_float, n.float_value = True, float(n.int_value)
    elif n.is_uint:
        n.is_float, n.float_value = True, float(n.uint_value)
    else:
        f = parse_go_float(text)
        if f is not None:
            if not any(c in text for c in ".eEpP"):
                raise ValueError(f"integer overflow: {go_quote(text)}")
            n.is_float, n.float_value = True, f
            if f.is_integer() and INT64_MIN <= f <= INT64_MAX:
                n.is_int, n.int_value = True, int(f)
            if f.is_integer() and 0 <= f <= UINT64_MAX:
                n.is_uint, n.uint_value = True, int(f)
    if not (n.is_int or n.is_uint or n.is_float):
        raise ValueError(f"illegal number syntax: {go_quote(text)}")
    return n
