"""Go's string quoting and unquoting (strconv.Quote, strconv.Unquote, unicode.IsPrint).

A Go string is bytes; here it is a Python str, and a byte that is not valid UTF-8 is carried as
a lone surrogate (U+DC80..U+DCFF, Python's surrogateescape), so it round-trips.
"""

from __future__ import annotations

import unicodedata


def go_quote(s: str) -> str:
    """strconv.Quote (printable runes kept, the rest escaped as Go escapes them)."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\a":
            out.append("\\a")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\v":
            out.append("\\v")
        elif 0xDC80 <= o <= 0xDCFF:  # an invalid UTF-8 byte carried by surrogateescape
            out.append(f"\\x{o - 0xDC00:02x}")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif o < 0x80 or is_print(ch):
            out.append(ch)
        elif o < 0x10000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    out.append('"')
    return "".join(out)


def is_print(ch: str) -> bool:
    """unicode.IsPrint: letters, marks, numbers, punctuation, symbols and the ASCII space."""
    if ch == " ":
        return True
    return unicodedata.category(ch)[0] in "LMNPS"


_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


def unquote_char(s: str, i: int, quote: str) -> tuple[str, int]:
    """strconv.UnquoteChar: the character at s[i] (an escape sequence or a rune) and the index
    after it; ValueError("invalid syntax") as Go's ErrSyntax."""
    if i >= len(s):
        raise ValueError("invalid syntax")
    ch = s[i]
    if ch == quote and quote in "'\"":
        raise ValueError("invalid syntax")
    if ch != "\\":
        return ch, i + 1
    if i + 1 >= len(s):
        raise ValueError("invalid syntax")
    c = s[i + 1]
    i += 2
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c], i
    if c in "xuU":
        n = {"x": 2, "u": 4, "U": 8}[c]
        digits = s[i : i + n]
        if len(digits) < n or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise ValueError("invalid syntax")
        v = int(digits, 16)
        if c == "x":
            return (chr(v) if v < 0x80 else chr(0xDC00 + v)), i + n
        if v > 0x10FFFF or 0xD800 <= v <= 0xDFFF:
            raise ValueError("invalid syntax")
        return chr(v), i + n
    if c in "01234567":
        digits = s[i - 1 : i + 2]
        if len(digits) < 3 or any(d not in "01234567" for d in digits):
            raise ValueError("invalid syntax")
        v = int(digits, 8)
        if v > 255:
            raise ValueError("invalid syntax")
        return (chr(v) if v < 0x80 else chr(0xDC00 + v)), i + 2
    if c in "'\"":
        if c != quote:
            raise ValueError("invalid syntax")
        return c, i
    raise ValueError("invalid syntax")


def unquote(s: str) -> str:
    """strconv.Unquote for "interpreted" and `raw` strings; ValueError("invalid syntax")."""
    if len(s) < 2 or s[0] != s[-1] or s[0] not in '"`':
        raise ValueError("invalid syntax")
    body = s[1:-1]
    if s[0] == "`":
        if "`" in body:
            raise ValueError("invalid syntax")
        return body.replace("\r", "")
    if "\n" in body:
        raise ValueError("invalid syntax")
    if "\\" not in body and '"' not in body:
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        ch, i = unquote_char(body, i, '"')
        out.append(ch)
    return "".join(out)
