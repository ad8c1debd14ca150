"""encoding/json as Go marshals the values of values.py: sorted map keys, HTML-safe escaping,
float64 as ES6 prints numbers; and Unmarshal into interface{} (numbers become float64), with Go's
syntax errors."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from app.gotemplate.errors import GoError
from app.gotemplate.printing import format_float, sorted_items
from app.gotemplate.quoting import go_quote
from app.gotemplate.values import is_nil, is_struct, type_name

_HTML_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}


def _string(s: str, escape_html: bool) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif o < 0x20:
            out.append({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch, f"\\u{o:04x}"))
        elif escape_html and ch in _HTML_ESCAPES:
            out.append(_HTML_ESCAPES[ch])
        elif ch in ("\u2028", "\u2029"):
            out.append(f"\\u{o:04x}")
        elif 0xD800 <= o <= 0xDFFF:  # an invalid UTF-8 byte
            out.append("\\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _float(f: float) -> str:
    if math.isnan(f) or math.isinf(f):
        raise GoError(f"json: unsupported value: {format_float(f)}")
    a = abs(f)
    if a != 0 and (a < 1e-6 or a >= 1e21):
        s = format_float(f, "e", -1)
        mant, _, exp = s.partition("e")
        sign, digits = exp[0], exp[1:].lstrip("0") or "0"
        return f"{mant}e{sign}{digits}"
    return format_float(f, "f", -1)


def marshal(v: Any, *, escape_html: bool = True, indent: str = "", _level: int = 0, struct: bool = False) -> str:
    """json.Marshal (``indent``: json.MarshalIndent with prefix ""). A GoStruct marshals as the
    dict its ``go_json()`` returns, keys in that dict's order (a struct's field order)."""
    if is_nil(v):
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, str):
        return _string(v, escape_html)
    nl = "\n" + indent * (_level + 1) if indent else ""
    end = "\n" + indent * _level if indent else ""
    colon = ": " if indent else ":"
    if isinstance(v, dict):
        if not v:
            return "{}"
        entries = v.items() if struct else sorted_items(v)  # a struct's fields stay in their order
        items = [
            _string(str(k), escape_html) + colon + marshal(x, escape_html=escape_html, indent=indent, _level=_level + 1)
            for k, x in entries
        ]
        return "{" + nl + ("," + nl).join(items) + end + "}"
    if isinstance(v, (list, tuple)):
        if not v:
            return "[]"
        elems = [marshal(x, escape_html=escape_html, indent=indent, _level=_level + 1) for x in v]
        return "[" + nl + ("," + nl).join(elems) + end + "]"
    go_json = getattr(v, "go_json", None)
    if is_struct(v) and callable(go_json):
        return marshal(go_json(), escape_html=escape_html, indent=indent, _level=_level, struct=True)
    raise GoError(f"json: unsupported type: {type_name(v)}")


def _quote_char(c: int) -> str:
    """encoding/json's quoteChar: a byte as a quoted rune (a byte >= 0x80 is that Latin-1 rune)."""
    if c == 0x27:
        return "'\\''"
    if c == 0x22:
        return "'\"'"
    return "'" + go_quote(chr(c))[1:-1] + "'"


_SPACE = b" \t\r\n"
_LITERALS = {ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}


class _Scanner:
    """encoding/json's scanner, only to find the first syntax error as Go words it."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.i = 0

    def error(self, context: str) -> GoError:
        c = self.data[self.i] if self.i < len(self.data) else 0x20  # at the end Go steps a space
        return GoError(f"invalid character {_quote_char(c)} {context}")

    def peek(self) -> int | None:
        return self.data[self.i] if self.i < len(self.data) else None

    def skip_space(self) -> None:
        while self.i < len(self.data) and self.data[self.i] in _SPACE:
            self.i += 1

    def eof(self) -> GoError:
        return GoError("unexpected end of JSON input")

    def value(self) -> None:
        self.skip_space()
        c = self.peek()
        if c is None:
            raise self.eof()
        if c == 0x7B:  # {
            self.i += 1
            self.skip_space()
            if self.peek() == 0x7D:
                self.i += 1
                return
            while True:
                self.skip_space()
                if self.peek() is None:
                    raise self.eof()
                if self.peek() != 0x22:
                    raise self.error("looking for beginning of object key string")
                self.string()
                self.skip_space()
                if self.peek() is None:
                    raise self.eof()
                if self.peek() != 0x3A:
                    raise self.error("after object key")
                self.i += 1
                self.value()
                self.skip_space()
                c = self.peek()
                if c is None:
                    raise self.eof()
                self.i += 1
                if c == 0x7D:
                    return
                if c != 0x2C:
                    self.i -= 1
                    raise self.error("after object key:value pair")
        elif c == 0x5B:  # [
            self.i += 1
            self.skip_space()
            if self.peek() == 0x5D:
                self.i += 1
                return
            while True:
                self.value()
                self.skip_space()
                c = self.peek()
                if c is None:
                    raise self.eof()
                self.i += 1
                if c == 0x5D:
                    return
                if c != 0x2C:
                    self.i -= 1
                    raise self.error("after array element")
        elif c == 0x22:
            self.string()
        elif c == 0x2D or 0x30 <= c <= 0x39:
            self.number()
        elif c in _LITERALS:
            word = _LITERALS[c]
            for expected in word[1:]:
                self.i += 1
                if self.peek() != expected:
                    raise self.error(f"in literal {word.decode()} (expecting {_quote_char(expected)})")
            self.i += 1
        else:
            raise self.error("looking for beginning of value")

    def string(self) -> None:
        self.i += 1
        while True:
            c = self.peek()
            if c is None:
                raise self.eof()
            if c == 0x22:
                self.i += 1
                return
            if c == 0x5C:
                self.i += 1
                e = self.peek()  # at the end, Go's scanner steps a space: an invalid escape
                if e == 0x75:  # u
                    for _ in range(4):
                        self.i += 1
                        h = self.peek()
                        if h is None or h not in b"0123456789abcdefABCDEF":
                            raise self.error("in \\u hexadecimal character escape")
                elif e is None or e not in b'bfnrt\\/"':
                    raise self.error("in string escape code")
            elif c < 0x20:
                raise self.error("in string literal")
            self.i += 1

    def digits(self) -> int:
        start = self.i
        while self.peek() is not None and 0x30 <= self.data[self.i] <= 0x39:
            self.i += 1
        return self.i - start

    def number(self) -> None:
        if self.peek() == 0x2D:
            self.i += 1
            c = self.peek()
            if c is None or not 0x30 <= c <= 0x39:
                raise self.error("in numeric literal")
        if self.peek() == 0x30:
            self.i += 1
        else:
            self.digits()
        if self.peek() == 0x2E:
            self.i += 1
            if not self.digits():
                raise self.error("after decimal point in numeric literal")
        if self.peek() in (0x65, 0x45):
            self.i += 1
            if self.peek() in (0x2B, 0x2D):
                self.i += 1
            if not self.digits():
                raise self.error("in exponent of numeric literal")


def check_valid(data: bytes) -> None:
    """encoding/json's checkValid: GoError with the first syntax error, worded as Go's."""
    scanner = _Scanner(data)
    scanner.value()
    scanner.skip_space()
    if scanner.peek() is not None:
        raise scanner.error("after top-level value")


def unmarshal(text: str) -> tuple[Any, GoError | None]:
    """json.Unmarshal into an interface{}: the value and the error Go returns with it (a number
    out of float64's range is an error, and nil where it stood; a syntax error, nothing)."""
    check_valid(text.encode("utf-8", "surrogateescape"))
    errors: list[GoError] = []

    def number(s: str) -> float | None:
        f = float(s)
        if math.isinf(f):
            errors.append(GoError(f"json: cannot unmarshal number {s} into Go value of type float64"))
            return None
        return f

    value = _replace_surrogates(json.loads(text, parse_int=number, parse_float=number, strict=True))
    return value, (errors[0] if errors else None)


_SURROGATES = re.compile("[\ud800-\udfff]")


def _replace_surrogates(v: Any) -> Any:
    """Go decodes invalid UTF-8 and unpaired \\uD800-style escapes to U+FFFD."""
    if isinstance(v, str):
        return _SURROGATES.sub("\ufffd", v)
    if isinstance(v, list):
        return [_replace_surrogates(x) for x in v]
    if isinstance(v, dict):
        return {_replace_surrogates(k): _replace_surrogates(x) for k, x in v.items()}
    return v
