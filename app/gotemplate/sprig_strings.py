"""sprig's string functions (strings.go and the string entries of functions.go)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import unicodedata
import zlib
from collections.abc import Callable
from typing import Any, Final

from app.gotemplate.errors import GoError
from app.gotemplate.printing import sprint_value, sprintf
from app.gotemplate.signature import ANY, INT, STRING, go_signature
from app.gotemplate.sprig_convert import strval, to_strings
from app.gotemplate.values import NIL, StringMap, StringSlice

# unicode.IsSpace, which strings.TrimSpace and strings.Fields use
GO_SPACE: Final = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # noqa: E501


def _bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def _str(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


@go_signature(STRING)
def trim(s: str) -> str:
    return s.strip(GO_SPACE)


def to_upper(ch: str) -> str:
    """unicode.ToUpper: the simple mapping of one rune (Python's str.upper is the full one:
    "ß" -> "SS"; Go leaves ß)."""
    full = ch.upper()
    if len(full) == 1:
        return full
    title = ch.title()
    return title if len(title) == 1 else ch


def to_lower(ch: str) -> str:
    """unicode.ToLower: the simple mapping of one rune (U+0130 -> i; a capital sigma is always the
    medial small sigma)."""
    full = ch.lower()
    if len(full) == 1:
        return full
    return full[0] if ch == "\u0130" else ch


def to_title(ch: str) -> str:
    """unicode.ToTitle of one rune."""
    title = ch.title()
    return title if len(title) == 1 else ch


def is_space(ch: str) -> bool:
    """unicode.IsSpace."""
    return ch in GO_SPACE


@go_signature(STRING)
def upper(s: str) -> str:
    return "".join(map(to_upper, s))


@go_signature(STRING)
def lower(s: str) -> str:
    return "".join(map(to_lower, s))


def _is_separator(ch: str) -> bool:
    """strings.Title's isSeparator."""
    if ch <= "\x7f":
        return not (ch.isalnum() or ch == "_")
    if ch.isalpha() or unicodedata.category(ch) == "Nd":
        return False
    return is_space(ch)


@go_signature(STRING)
def title(s: str) -> str:
    """strings.Title: the first letter of each word upper-cased."""
    out = []
    prev = " "
    for ch in s:
        out.append(to_title(ch) if _is_separator(prev) else ch)
        prev = ch
    return "".join(out)


@go_signature(STRING)
def untitle(s: str) -> str:
    """goutils.Uncapitalize: the first rune of each space-separated word lower-cased."""
    out = []
    after_space = True
    for ch in s:
        if is_space(ch):
            after_space = True
        elif after_space:
            ch = to_lower(ch)
            after_space = False
        out.append(ch)
    return "".join(out)


@go_signature(STRING, STRING)
def trim_all(cutset: str, s: str) -> str:
    return s.strip(cutset) if cutset else s


@go_signature(STRING, STRING)
def trim_suffix(suffix: str, s: str) -> str:
    return s[: -len(suffix)] if suffix and s.endswith(suffix) else s


@go_signature(STRING, STRING)
def trim_prefix(prefix: str, s: str) -> str:
    return s[len(prefix) :] if s.startswith(prefix) else s


def _byte_runes(s: str) -> str:
    """The string's bytes each taken as a rune, as goutils' byte loops take them (rune(str[i]))."""
    return _bytes(s).decode("latin-1")


@go_signature(STRING)
def nospace(s: str) -> str:
    """goutils.DeleteWhiteSpace, byte by byte: a string with a multi-byte rune and a space comes
    back with that rune's bytes as Latin-1 runes, as in Go."""
    kept = "".join(ch for ch in _byte_runes(s) if not is_space(ch))
    return s if len(kept) == len(_bytes(s)) else kept


@go_signature(STRING, STRING)
def contains(substr: str, s: str) -> bool:
    return substr in s


@go_signature(STRING, STRING)
def has_prefix(prefix: str, s: str) -> bool:
    return s.startswith(prefix)


@go_signature(STRING, STRING)
def has_suffix(suffix: str, s: str) -> bool:
    return s.endswith(suffix)


@go_signature(variadic=ANY)
def quote(*args: Any) -> str:
    return " ".join(sprintf("%q", strval(a)) for a in args if a is not None and a is not NIL)


@go_signature(variadic=ANY)
def squote(*args: Any) -> str:
    return " ".join(f"'{sprint_value(a)}'" for a in args if a is not None and a is not NIL)


@go_signature(variadic=ANY)
def cat(*args: Any) -> str:
    vals = [a for a in args if a is not None and a is not NIL]
    return " ".join(sprint_value(a) for a in vals)


@go_signature(INT, STRING)
def indent(spaces: int, s: str) -> str:
    if spaces < 0:
        raise GoError("strings: negative Repeat count")
    pad = " " * spaces
    return pad + s.replace("\n", "\n" + pad)


@go_signature(INT, STRING)
def nindent(spaces: int, s: str) -> str:
    return "\n" + indent(spaces, s)


@go_signature(STRING, STRING, STRING)
def replace(old: str, new: str, src: str) -> str:
    if old == "":  # strings.Replace with an empty old inserts new around every rune
        return new + new.join(src) + new if src else new
    return src.replace(old, new)


@go_signature(STRING, STRING, INT)
def plural(one: str, many: str, count: int) -> str:
    return one if count == 1 else many


@go_signature(INT, STRING)
def repeat(count: int, s: str) -> str:
    if count < 0:
        raise GoError("strings: negative Repeat count")
    return s * count


@go_signature(INT, INT, STRING)
def substr(start: int, end: int, s: str) -> str:
    b = _bytes(s)
    if start < 0:
        return _str(_slice_bytes(b, 0, end))
    if end < 0 or end > len(b):
        return _str(_slice_bytes(b, start, len(b)))
    return _str(_slice_bytes(b, start, end))


def _slice_bytes(b: bytes, start: int, end: int) -> bytes:
    """b[start:end] with Go's runtime errors (the high bound is checked first)."""
    if end < 0:
        raise GoError(f"runtime error: slice bounds out of range [:{end}]")
    if end > len(b):
        raise GoError(f"runtime error: slice bounds out of range [:{end}] with length {len(b)}")
    if start < 0:
        raise GoError(f"runtime error: slice bounds out of range [{start}:]")
    if start > end:
        raise GoError(f"runtime error: slice bounds out of range [{start}:{end}]")
    return b[start:end]


@go_signature(INT, STRING)
def trunc(c: int, s: str) -> str:
    b = _bytes(s)
    if c < 0 and len(b) + c > 0:
        return _str(b[len(b) + c :])
    if c >= 0 and len(b) > c:
        return _str(b[:c])
    return s


def _abbreviate(s: str, offset: int, width: int) -> str:
    """goutils.AbbreviateFull over the string's bytes."""
    b = _bytes(s)
    if not b:
        return ""
    if width < 4 or len(b) <= width:
        return s if len(b) <= width else ""
    offset = min(offset, len(b))
    if len(b) - offset < width - 3:
        offset = len(b) - (width - 3)
    if offset <= 4:
        return _str(b[: width - 3]) + "..."
    if width < 7:
        return ""
    if offset + width - 3 < len(b):
        return "..." + _abbreviate(_str(b[offset:]), 0, width - 3)
    return "..." + _str(b[len(b) - (width - 3) :])


@go_signature(INT, STRING)
def abbrev(width: int, s: str) -> str:
    return s if width < 4 else _abbreviate(s, 0, width)


@go_signature(INT, INT, STRING)
def abbrevboth(left: int, right: int, s: str) -> str:
    if right < 4 or (left > 0 and right < 7):
        return s
    return _abbreviate(s, left, right)


def _wrap(s: str, width: int, newline: str, wrap_long_words: bool) -> str:
    """goutils.WrapCustom over the string's bytes: breaks at spaces, a line's leading spaces
    dropped; a word longer than the width is cut only when ``wrap_long_words``."""
    b = _bytes(s)
    if not b:
        return ""
    nl = _bytes(newline or "\n")
    width = max(width, 1)
    out = bytearray()
    offset = 0
    while len(b) - offset > width:
        if b[offset] == 0x20:
            offset += 1
            continue
        space = b.rfind(b" ", offset, width + offset + 1)
        if space >= offset:
            out += b[offset:space] + nl
            offset = space + 1
        elif wrap_long_words:
            out += b[offset : offset + width] + nl
            offset += width
        else:
            space = b.find(b" ", width + offset)
            if space == -1:
                out += b[offset:]
                offset = len(b)
            else:
                out += b[offset:space] + nl
                offset = space + 1
    out += b[offset:]
    return _str(bytes(out))


@go_signature(INT, STRING)
def wrap(width: int, s: str) -> str:
    return _wrap(s, width, "", False)


@go_signature(INT, STRING, STRING)
def wrap_with(width: int, sep: str, s: str) -> str:
    return _wrap(s, width, sep, True)


@go_signature(STRING)
def initials(s: str) -> str:
    """goutils.Initials, byte by byte as Go's loop goes."""
    out = []
    gap = True
    for ch in _byte_runes(s):
        if is_space(ch):
            gap = True
        elif gap:
            out.append(ch)
            gap = False
    return "".join(out)


@go_signature(STRING)
def swapcase(s: str) -> str:
    """goutils.SwapCase: upper and title case to lower; lower case to upper, or to title case
    after a space."""
    out = []
    after_space = True
    for ch in s:
        cat = unicodedata.category(ch)
        if cat in ("Lu", "Lt"):
            ch = to_lower(ch)
            after_space = False
        elif cat == "Ll":
            ch = to_title(ch) if after_space else to_upper(ch)
            after_space = False
        else:
            after_space = is_space(ch)
        out.append(ch)
    return "".join(out)


@go_signature(ANY)
def to_string(v: Any) -> str:
    return strval(v)


@go_signature(STRING)
def b64enc(s: str) -> str:
    return base64.b64encode(_bytes(s)).decode("ascii")


@go_signature(STRING)
def b64dec(s: str) -> str:
    try:
        return _str(base64.b64decode(s.encode("utf-8", "surrogateescape"), validate=True))
    except (binascii.Error, ValueError):
        return f"illegal base64 data at input byte {_bad_b64_byte(s)}"


def _bad_b64_byte(s: str) -> int:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    for i, ch in enumerate(s):
        if ch not in alphabet:
            return i
    return len(s) - len(s) % 4 if len(s) % 4 else len(s)


@go_signature(STRING)
def b32enc(s: str) -> str:
    return base64.b32encode(_bytes(s)).decode("ascii")


@go_signature(STRING)
def b32dec(s: str) -> str:
    try:
        return _str(base64.b32decode(s))
    except (binascii.Error, ValueError) as e:
        return str(e)


@go_signature(STRING)
def sha1sum(s: str) -> str:
    return hashlib.sha1(_bytes(s)).hexdigest()


@go_signature(STRING)
def sha256sum(s: str) -> str:
    return hashlib.sha256(_bytes(s)).hexdigest()


@go_signature(STRING)
def sha512sum(s: str) -> str:
    return hashlib.sha512(_bytes(s)).hexdigest()


@go_signature(STRING)
def adler32sum(s: str) -> str:
    return str(zlib.adler32(_bytes(s)))


@go_signature(ANY)
def to_strings_func(v: Any) -> StringSlice:
    return StringSlice(to_strings(v))


@go_signature(STRING, ANY)
def join(sep: str, v: Any) -> str:
    return sep.join(to_strings(v))


@go_signature(STRING, STRING)
def split(sep: str, s: str) -> StringMap:
    return StringMap({f"_{i}": part for i, part in enumerate(_go_split(s, sep, -1))})


@go_signature(STRING, INT, STRING)
def splitn(sep: str, n: int, s: str) -> StringMap:
    return StringMap({f"_{i}": part for i, part in enumerate(_go_split(s, sep, n))})


@go_signature(STRING, STRING)
def split_list(sep: str, s: str) -> StringSlice:
    return StringSlice(_go_split(s, sep, -1))


def _go_split(s: str, sep: str, n: int) -> list[str]:
    """strings.SplitN: an empty separator splits after each rune; n < 0 is all."""
    if n == 0:
        return []
    if sep == "":
        parts = list(s)
        if 0 < n < len(parts):
            parts = [*parts[: n - 1], "".join(parts[n - 1 :])]
        return parts
    return s.split(sep) if n < 0 else s.split(sep, n - 1)


@go_signature(ANY)
def sort_alpha(v: Any) -> StringSlice:
    if isinstance(v, (list, tuple)):
        return StringSlice(sorted(to_strings(v), key=_bytes))
    return StringSlice([strval(v)])


STRING_FUNCS: Final[dict[str, Callable[..., Any]]] = {
    "trim": trim,
    "upper": upper,
    "lower": lower,
    "title": title,
    "untitle": untitle,
    "substr": substr,
    "repeat": repeat,
    "trimall": trim_all,
    "trimAll": trim_all,
    "trimSuffix": trim_suffix,
    "trimPrefix": trim_prefix,
    "nospace": nospace,
    "initials": initials,
    "swapcase": swapcase,
    "abbrevboth": abbrevboth,
    "wrap": wrap,
    "wrapWith": wrap_with,
    "contains": contains,
    "hasPrefix": has_prefix,
    "hasSuffix": has_suffix,
    "quote": quote,
    "squote": squote,
    "cat": cat,
    "indent": indent,
    "nindent": nindent,
    "replace": replace,
    "plural": plural,
    "sha1sum": sha1sum,
    "sha256sum": sha256sum,
    "sha512sum": sha512sum,
    "adler32sum": adler32sum,
    "toString": to_string,
    "trunc": trunc,
    "abbrev": abbrev,
    "b64enc": b64enc,
    "b64dec": b64dec,
    "b32enc": b32enc,
    "b32dec": b32dec,
    "toStrings": to_strings_func,
    "join": join,
    "split": split,
    "splitn": splitn,
    "splitList": split_list,
    "sortAlpha": sort_alpha,
}
