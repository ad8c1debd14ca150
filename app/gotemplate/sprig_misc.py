"""sprig's defaults, JSON, reflection, regular expression, path and flow-control functions
(defaults.go, reflect.go, regex.go, functions.go). Regular expressions are RE2, as Go's.

The wording of a regular-expression syntax error (mustRegex*) is RE2's, not Go's; that such a
pattern is an error is as in Go.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import re2

from app.gotemplate import gojson
from app.gotemplate.errors import GoError
from app.gotemplate.printing import FormatSpec, format_value
from app.gotemplate.signature import ANY, BOOL, INT, STRING, go_signature
from app.gotemplate.sprig_convert import deep_equal, empty
from app.gotemplate.values import StringSlice, kind_name


@go_signature(ANY, variadic=ANY)
def default(d: Any, *given: Any) -> Any:
    if not given or empty(given[0]):
        return d
    return given[0]


@go_signature(ANY)
def empty_func(v: Any) -> bool:
    return empty(v)


@go_signature(variadic=ANY)
def coalesce(*v: Any) -> Any:
    return next((x for x in v if not empty(x)), None)


@go_signature(variadic=ANY)
def all_(*v: Any) -> bool:
    return all(not empty(x) for x in v)


@go_signature(variadic=ANY)
def any_(*v: Any) -> bool:
    return any(not empty(x) for x in v)


@go_signature(ANY, ANY, BOOL)
def ternary(vt: Any, vf: Any, v: bool) -> Any:
    return vt if v else vf


@go_signature(STRING)
def from_json(s: str) -> Any:
    try:
        return gojson.unmarshal(s)[0]
    except GoError:
        return None


@go_signature(STRING)
def must_from_json(s: str) -> Any:
    value, error = gojson.unmarshal(s)
    if error is not None:
        raise error
    return value


@go_signature(ANY)
def to_json(v: Any) -> str:
    try:
        return gojson.marshal(v)
    except GoError:
        return ""


@go_signature(ANY)
def must_to_json(v: Any) -> str:
    return gojson.marshal(v)


@go_signature(ANY)
def to_pretty_json(v: Any) -> str:
    try:
        return gojson.marshal(v, indent="  ")
    except GoError:
        return ""


@go_signature(ANY)
def must_to_pretty_json(v: Any) -> str:
    return gojson.marshal(v, indent="  ")


@go_signature(ANY)
def to_raw_json(v: Any) -> str:
    return gojson.marshal(v, escape_html=False)


@go_signature(ANY)
def type_of(v: Any) -> str:
    return format_value(v, "T", FormatSpec())


@go_signature(STRING, ANY)
def type_is(target: str, v: Any) -> bool:
    return target == type_of(v)


@go_signature(STRING, ANY)
def type_is_like(target: str, v: Any) -> bool:
    t = type_of(v)
    return target in (t, "*" + t) or "*" + target == t


@go_signature(ANY)
def kind_of(v: Any) -> str:
    return kind_name(v)


@go_signature(STRING, ANY)
def kind_is(target: str, v: Any) -> bool:
    return target == kind_name(v)


@go_signature(ANY, ANY)
def deep_equal_func(a: Any, b: Any) -> bool:
    return deep_equal(a, b)


@go_signature(STRING)
def fail(msg: str) -> str:
    raise GoError(msg)


# -- regular expressions ---------------------------------------------------------------------
def _compile(regex: str) -> Any:
    try:
        return re2.compile(regex)
    except re2.error as e:
        raise GoError(f"error parsing regexp: {e}: `{regex}`") from None


def _find_all(r: Any, s: str, n: int) -> list[Any]:
    """Regexp.FindAll*: an empty match right after the previous match is skipped, as Go's."""
    out: list[Any] = []
    prev_end = -1
    for m in r.finditer(s):
        if n >= 0 and len(out) >= n:
            break
        if m.start() == m.end() and m.start() == prev_end:
            continue
        out.append(m)
        prev_end = m.end()
    return out


@go_signature(STRING, STRING)
def regex_match(regex: str, s: str) -> bool:
    try:
        return _compile(regex).search(s) is not None
    except GoError:
        return False


@go_signature(STRING, STRING)
def must_regex_match(regex: str, s: str) -> bool:
    return _compile(regex).search(s) is not None


@go_signature(STRING, STRING, INT)
def regex_find_all(regex: str, s: str, n: int) -> StringSlice:
    return StringSlice(m.group(0) for m in _find_all(_compile(regex), s, n))


@go_signature(STRING, STRING)
def regex_find(regex: str, s: str) -> str:
    m = _compile(regex).search(s)
    return m.group(0) if m is not None else ""


def _expand(template: str, m: Any) -> str:
    """Regexp.Expand: $1, ${1}, $name, ${name}; $$ is a dollar; an unknown group is empty."""
    out: list[str] = []
    i = 0
    while i < len(template):
        ch = template[i]
        if ch != "$" or i + 1 >= len(template):
            out.append(ch)
            i += 1
            continue
        nxt = template[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
            continue
        if nxt == "{":
            close = template.find("}", i + 2)
            name = template[i + 2 : close] if close > 0 else ""
            if close < 0 or not name or not all(c.isalnum() or c == "_" for c in name):
                out.append(ch)
                i += 1
                continue
            i = close + 1
        else:
            j = i + 1
            while j < len(template) and (template[j].isalnum() or template[j] == "_"):
                j += 1
            name = template[i + 1 : j]
            if not name:
                out.append(ch)
                i += 1
                continue
            i = j
        out.append(_group(m, name))
    return "".join(out)


def _group(m: Any, name: str) -> str:
    try:
        value = m.group(int(name)) if name.isdigit() else m.group(name)
    except (IndexError, KeyError, ValueError):
        return ""
    return value or ""


def _replace_all(regex: str, s: str, repl: Callable[[Any], str]) -> str:
    r = _compile(regex)
    out: list[str] = []
    last = 0
    for m in _find_all(r, s, -1):
        out.append(s[last : m.start()])
        out.append(repl(m))
        last = m.end()
    out.append(s[last:])
    return "".join(out)


@go_signature(STRING, STRING, STRING)
def regex_replace_all(regex: str, s: str, repl: str) -> str:
    return _replace_all(regex, s, lambda m: _expand(repl, m))


@go_signature(STRING, STRING, STRING)
def regex_replace_all_literal(regex: str, s: str, repl: str) -> str:
    return _replace_all(regex, s, lambda m: repl)


@go_signature(STRING, STRING, INT)
def regex_split(regex: str, s: str, n: int) -> StringSlice:
    if n == 0:
        return StringSlice()  # a nil []string prints []
    r = _compile(regex)
    if regex and s == "":
        return StringSlice([""])
    parts = StringSlice()
    beg = end = 0
    for m in _find_all(r, s, n):
        if n > 0 and len(parts) == n - 1:
            break
        end = m.start()
        if m.end() != 0:
            parts.append(s[beg:end])
        beg = m.end()
    if end != len(s):
        parts.append(s[beg:])
    return parts


_META = set("\\.+*?()|[]{}^$")


@go_signature(STRING)
def regex_quote_meta(s: str) -> str:
    return "".join("\\" + c if c in _META else c for c in s)


# -- paths (Go's package path) ---------------------------------------------------------------
@go_signature(STRING)
def path_clean(p: str) -> str:
    if p == "":
        return "."
    rooted = p.startswith("/")
    stack: list[str] = []
    for part in p.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if stack and stack[-1] != "..":
                stack.pop()
            elif not rooted:
                stack.append("..")
            continue
        stack.append(part)
    out = ("/" if rooted else "") + "/".join(stack)
    return out or ("/" if rooted else ".")


@go_signature(STRING)
def path_base(p: str) -> str:
    if p == "":
        return "."
    p = p.rstrip("/")
    if p == "":
        return "/"
    return p[p.rfind("/") + 1 :]


@go_signature(STRING)
def path_dir(p: str) -> str:
    return path_clean(p[: p.rfind("/") + 1])


@go_signature(STRING)
def path_ext(p: str) -> str:
    for i in range(len(p) - 1, -1, -1):
        if p[i] == "/":
            break
        if p[i] == ".":
            return p[i:]
    return ""


@go_signature(STRING)
def path_is_abs(p: str) -> bool:
    return p.startswith("/")


MISC_FUNCS: Final[dict[str, Callable[..., Any]]] = {
    "default": default,
    "empty": empty_func,
    "coalesce": coalesce,
    "all": all_,
    "any": any_,
    "ternary": ternary,
    "fromJson": from_json,
    "mustFromJson": must_from_json,
    "toJson": to_json,
    "mustToJson": must_to_json,
    "toPrettyJson": to_pretty_json,
    "mustToPrettyJson": must_to_pretty_json,
    "toRawJson": to_raw_json,
    "mustToRawJson": to_raw_json,
    "typeOf": type_of,
    "typeIs": type_is,
    "typeIsLike": type_is_like,
    "kindOf": kind_of,
    "kindIs": kind_is,
    "deepEqual": deep_equal_func,
    "fail": fail,
    "regexMatch": regex_match,
    "mustRegexMatch": must_regex_match,
    "regexFindAll": regex_find_all,
    "mustRegexFindAll": regex_find_all,
    "regexFind": regex_find,
    "mustRegexFind": regex_find,
    "regexReplaceAll": regex_replace_all,
    "mustRegexReplaceAll": regex_replace_all,
    "regexReplaceAllLiteral": regex_replace_all_literal,
    "mustRegexReplaceAllLiteral": regex_replace_all_literal,
    "regexSplit": regex_split,
    "mustRegexSplit": regex_split,
    "regexQuoteMeta": regex_quote_meta,
    "base": path_base,
    "dir": path_dir,
    "clean": path_clean,
    "ext": path_ext,
    "isAbs": path_is_abs,
    "osBase": path_base,
    "osClean": path_clean,
    "osDir": path_dir,
    "osExt": path_ext,
    "osIsAbs": path_is_abs,
}
