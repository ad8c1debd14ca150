"""Numbers and booleans as Go's strconv reads them, for what istiod parses with Atoi, ParseUint
or ParseBool: config fields, annotations, flags, and the resource names a client asks for.
Python's ``int`` is no stand-in: it takes Unicode digits that ``str.isdigit`` lets through ('²'
passes isdigit, and int refuses it) and refuses a string of more than 4,300 digits, which a
hostile name or field may hold."""

from __future__ import annotations

import re

_ASCII_DIGITS = re.compile(r"[0-9]+")
_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})
_FALSE = frozenset({"0", "f", "F", "false", "FALSE", "False"})
# the digits of int64's largest: a number of more is out of range for Go, whatever they are
_INT64_DIGITS = 19


def go_int(text: str, *, signed: bool = True) -> int | None:
    """The number Go's strconv.Atoi (``signed``: an optional ``+`` or ``-``) or ParseUint reads
    from ``text``: ASCII digits, leading zeros and all; None where Go fails, for anything else
    (``str.isdigit`` takes '²', which ``int`` refuses) and past int64 (so a number of thousands
    of digits is never converted whole: Python refuses over 4,300)."""
    body = text[1:] if signed and text[:1] in ("+", "-") else text
    if not _ASCII_DIGITS.fullmatch(body):
        return None
    digits = body.lstrip("0") or "0"
    if len(digits) > _INT64_DIGITS or int(digits) >= 2**63:
        return None
    return -int(digits) if text.startswith("-") else int(digits)


def go_bool(text: str) -> bool | None:
    """strconv.ParseBool: 1, t, T, true, TRUE, True and their false forms; None for anything else."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None
