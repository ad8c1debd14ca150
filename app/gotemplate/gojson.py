"""encoding/json as Go marshals the values of values.py: sorted map keys, HTML-safe escaping,
float64 as ES6 prints numbers; and Unmarshal into interface{} (numbers become float64)."""

from __future__ import annotations

import json
import math
from typing import Any

from app.gotemplate.errors import GoError
from app.gotemplate.printing import format_float, sorted_items
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


def _no_constants(name: str) -> Any:
    raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")


def unmarshal(text: str) -> Any:
    """json.Unmarshal into an interface{}; ValueError when the text is no JSON."""
    return json.loads(text, parse_int=float, parse_constant=_no_constants)
