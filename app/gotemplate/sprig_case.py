"""sprig's camelcase, snakecase and kebabcase: github.com/huandu/xstrings v1.5.0's ToPascalCase,
ToSnakeCase and ToKebabCase, rune by rune (words split at connectors - _ and spaces, at case
changes, "HTTPStatus" as HTTP + Status, numbers kept to their neighbours as xstrings keeps them)."""

from __future__ import annotations

import enum
import unicodedata
from collections.abc import Callable
from typing import Any, Final

from app.gotemplate.signature import STRING, go_signature
from app.gotemplate.sprig_strings import is_space, to_lower, to_upper


class _Word(enum.Enum):
    INVALID = 0
    NUMBER = 1
    UPPER = 2
    ALPHABET = 3
    CONNECTOR = 4
    PUNCT = 5
    OTHER = 6


def _is_connector(ch: str) -> bool:
    return ch in "-_" or is_space(ch)


def _is_upper(ch: str) -> bool:
    return unicodedata.category(ch) == "Lu"


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def _is_number(ch: str) -> bool:
    return unicodedata.category(ch).startswith("N")


def _is_alphabet(ch: str) -> bool:
    """A letter, not a CJK ideograph."""
    if not unicodedata.category(ch).startswith("L"):
        return False
    o = ord(ch)
    return not (0x4E00 <= o <= 0x9FCC or 0x3400 <= o <= 0x4D85 or 0x20000 <= o <= 0x2B81D)


def _run(s: str, i: int, keep: Callable[[str], bool]) -> int:
    while i < len(s) and keep(s[i]):
        i += 1
    return i


def _next_word(s: str) -> tuple[_Word, str, str]:
    """xstrings' nextWord: the first word of ``s``, its type, and the rest."""
    if not s:
        return _Word.INVALID, "", ""
    r = s[0]
    end = 1
    if _is_connector(r):
        wt, end = _Word.CONNECTOR, _run(s, 1, _is_connector)
    elif _is_punct(r):
        wt, end = _Word.PUNCT, _run(s, 1, _is_punct)
    elif _is_upper(r):
        wt = _Word.UPPER
        if len(s) > 1 and _is_upper(s[1]):
            end = _run(s, 2, _is_upper)
            if end < len(s) and _is_alphabet(s[end]):
                end -= 1  # "HTTPStatus": the S starts the next word
        elif len(s) > 1 and _is_alphabet(s[1]):
            end = _run(s, 2, lambda c: _is_alphabet(c) and not _is_upper(c))
    elif _is_alphabet(r):
        wt, end = _Word.ALPHABET, _run(s, 1, lambda c: _is_alphabet(c) and not _is_upper(c))
    elif _is_number(r):
        wt, end = _Word.NUMBER, _run(s, 1, _is_number)
    else:
        wt = _Word.OTHER
        end = _run(s, 1, lambda c: not (_is_connector(c) or _is_alphabet(c) or _is_number(c) or _is_punct(c)))
    return wt, s[:end], s[end:]


def _lower_word(out: list[str], wt: _Word, word: str, connector: str) -> None:
    if wt not in (_Word.UPPER, _Word.CONNECTOR):
        out.append(word)
        return
    for ch in word:
        out.append(connector if _is_connector(ch) else to_lower(ch) if _is_upper(ch) else ch)


def _camel_to_lower(s: str, connector: str) -> str:
    if not s:
        return ""
    out: list[str] = []
    wt, word, rest = _next_word(s)
    while rest:
        if wt is not _Word.CONNECTOR:
            _lower_word(out, wt, word, connector)
        prev, last = wt, word
        wt, word, rest = _next_word(rest)
        if prev is _Word.NUMBER:
            while wt in (_Word.ALPHABET, _Word.NUMBER):
                _lower_word(out, wt, word, connector)
                wt, word, rest = _next_word(rest)
            if wt not in (_Word.INVALID, _Word.PUNCT, _Word.CONNECTOR):
                out.append(connector)
        elif prev is _Word.CONNECTOR:
            _lower_word(out, prev, last, connector)
        elif prev is _Word.PUNCT:
            pass
        elif wt is not _Word.NUMBER:
            if wt not in (_Word.CONNECTOR, _Word.PUNCT):
                out.append(connector)
        elif rest:
            last = word
            wt, word, rest = _next_word(rest)
            if wt is not _Word.ALPHABET:
                _lower_word(out, _Word.NUMBER, last, connector)
                if wt not in (_Word.CONNECTOR, _Word.PUNCT):
                    out.append(connector)
            else:
                out.append(connector)
                _lower_word(out, _Word.NUMBER, last, connector)
                while wt in (_Word.ALPHABET, _Word.NUMBER):
                    _lower_word(out, wt, word, connector)
                    wt, word, rest = _next_word(rest)
                if wt not in (_Word.INVALID, _Word.CONNECTOR, _Word.PUNCT):
                    out.append(connector)
    _lower_word(out, wt, word, connector)
    return "".join(out)


def _to_pascal(s: str) -> str:
    """xstrings' toCamelCase(s, isBig=true)."""
    if not s:
        return ""
    out: list[str] = []
    i = 0
    r0 = ""
    first_upper = False
    while i < len(s):
        r0 = s[i]
        i += 1
        if not _is_connector(r0):
            first_upper = _is_upper(r0)
            r0 = to_upper(r0)
            break
        out.append(r0)
    if i >= len(s):
        out.append(r0)  # as xstrings: all connectors, and the last one is written twice
        return "".join(out)
    while i < len(s):
        r1, r0 = r0, s[i]
        i += 1
        if _is_connector(r0) and _is_connector(r1):
            out.append(r1)
            continue
        if _is_connector(r1):
            first_upper = _is_upper(r0)
            r0 = to_upper(r0)
        else:
            if first_upper:
                if _is_upper(r0):
                    r0 = to_lower(r0)
                else:
                    first_upper = False
            out.append(r1)
    out.append(r0)
    return "".join(out)


@go_signature(STRING)
def camelcase(s: str) -> str:
    return _to_pascal(s)


@go_signature(STRING)
def snakecase(s: str) -> str:
    return _camel_to_lower(s, "_")


@go_signature(STRING)
def kebabcase(s: str) -> str:
    return _camel_to_lower(s, "-")


CASE_FUNCS: Final[dict[str, Callable[..., Any]]] = {
    "camelcase": camelcase,
    "snakecase": snakecase,
    "kebabcase": kebabcase,
}
