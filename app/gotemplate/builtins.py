"""Go's builtin template functions (text/template/funcs.go): and, or, not, len, index, slice,
print, printf, println, eq, ne, lt, le, gt, ge, call, html, js, urlquery.

``and`` and ``or`` are evaluated by the executor (they short-circuit); their entries here carry
only their signatures.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any, Final

from app.gotemplate.errors import GoError
from app.gotemplate.printing import FormatSpec, format_value, sprint, sprint_value, sprintf, sprintln
from app.gotemplate.quoting import is_print
from app.gotemplate.signature import ANY, STRING, VALUE, go_signature, signature_of
from app.gotemplate.values import NIL, NilPointer, StringMap, Uint8, go_len, is_nil, is_struct, is_true, type_name


@go_signature(VALUE, variadic=VALUE)
def _and(*args: Any) -> Any:  # evaluated by the executor
    raise AssertionError("and is evaluated by the executor")


@go_signature(VALUE, variadic=VALUE)
def _or(*args: Any) -> Any:  # evaluated by the executor
    raise AssertionError("or is evaluated by the executor")


@go_signature(VALUE, variadic=VALUE)
def _call(name: str, fn: Any, *args: Any) -> Any:
    """``call FN ARGS...``: FN called with ARGS. The executor passes FN's name first (the
    signature is what the template sees: the function, then its arguments)."""
    if fn is None or fn is NIL:
        raise GoError("call of nil")
    args = tuple(None if a is NIL else a for a in args)
    if not callable(fn) or is_struct(fn):
        raise GoError(f"non-function {name} of type {type_name(fn)}")
    sig = signature_of(fn)
    if sig.variadic is not None:
        if len(args) < len(sig.params):
            raise GoError(f"wrong number of args for {name}: got {len(args)} want at least {len(sig.params)}")
    elif len(args) != len(sig.params):
        raise GoError(f"wrong number of args for {name}: got {len(args)} want {len(sig.params)}")
    return fn(*args)


@go_signature(VALUE)
def _not(arg: Any) -> bool:
    return not is_true(arg)


@go_signature(VALUE)
def _len(item: Any) -> int:
    if item is NIL or isinstance(item, NilPointer):
        raise GoError("len of nil pointer")
    if item is None:
        raise GoError("reflect: call of reflect.Value.Type on zero Value")
    if isinstance(item, (str, dict, list, tuple)):
        return go_len(item)
    raise GoError(f"len of type {type_name(item)}")


def _index_arg(index: Any, cap: int) -> int:
    if isinstance(index, int) and not isinstance(index, bool):
        if index < 0 or index > cap:
            raise GoError(f"index out of range: {index}")
        return int(index)
    if index is None:
        raise GoError("cannot index slice/array with nil")
    raise GoError(f"cannot index slice/array with type {type_name(index)}")


@go_signature(VALUE, variadic=VALUE)
def _index(item: Any, *indexes: Any) -> Any:
    if item is None or item is NIL:
        raise GoError("index of untyped nil")
    for index in indexes:
        index = None if index is NIL else index
        if is_nil(item):
            raise GoError("index of nil pointer")
        if isinstance(item, (list, tuple, str)):
            n = go_len(item)
            x = _index_arg(index, n)
            if x == n:  # indexArg allows len, reflect's Index then panics
                raise GoError(f"reflect: {'string' if isinstance(item, str) else 'slice'} index out of range")
            item = Uint8(item.encode("utf-8", "surrogateescape")[x]) if isinstance(item, str) else item[x]
        elif isinstance(item, dict):
            if index is None:
                raise GoError("value is nil; should be of type string")
            if not isinstance(index, str):
                raise GoError(f"value has type {type_name(index)}; should be string")
            if index in item:
                item = item[index]
                if item is None:
                    item = NIL
            else:
                item = "" if isinstance(item, StringMap) else NIL
        else:
            raise GoError(f"can't index item of type {type_name(item)}")
    return item


@go_signature(VALUE, variadic=VALUE)
def _slice(item: Any, *indexes: Any) -> Any:
    if item is None or item is NIL:
        raise GoError("slice of untyped nil")
    if isinstance(item, NilPointer):
        raise GoError("slice of nil pointer")
    indexes = tuple(None if i is NIL else i for i in indexes)
    if len(indexes) > 3:
        raise GoError(f"too many slice indexes: {len(indexes)}")
    if isinstance(item, str):
        if len(indexes) == 3:
            raise GoError("cannot 3-index slice a string")
        data = item.encode("utf-8", "surrogateescape")
        cap = len(data)
    elif isinstance(item, (list, tuple)):
        cap = len(item)
    else:
        raise GoError(f"can't slice item of type {type_name(item)}")
    idx = [0, go_len(item), 0]
    for i, index in enumerate(indexes):
        idx[i] = _index_arg(index, cap)
    if idx[0] > idx[1]:
        raise GoError(f"invalid slice index: {idx[0]} > {idx[1]}")
    if len(indexes) == 3 and idx[1] > idx[2]:
        raise GoError(f"invalid slice index: {idx[1]} > {idx[2]}")
    if isinstance(item, str):
        return data[idx[0] : idx[1]].decode("utf-8", "surrogateescape")
    return list(item[idx[0] : idx[1]])


_INT_KIND, _FLOAT_KIND, _STRING_KIND, _BOOL_KIND = "int", "float", "string", "bool"


def _basic_kind(v: Any) -> str | None:
    if isinstance(v, bool):
        return _BOOL_KIND
    if isinstance(v, int):
        return _INT_KIND
    if isinstance(v, float):
        return _FLOAT_KIND
    if isinstance(v, str):
        return _STRING_KIND
    return None


def _comparable(v: Any) -> bool:
    return not isinstance(v, (dict, list, tuple)) and not (callable(v) and not is_struct(v))


def _kind(v: Any) -> str:
    if isinstance(v, dict):
        return "map"
    if isinstance(v, (list, tuple)):
        return "slice"
    return "struct"


@go_signature(VALUE, variadic=VALUE)
def _eq(arg1: Any, *arg2: Any) -> bool:
    if not arg2:
        raise GoError("missing argument for comparison")
    arg1 = None if arg1 is NIL else arg1
    k1 = _basic_kind(arg1)
    for arg in arg2:
        arg = None if arg is NIL else arg
        k2 = _basic_kind(arg)
        if k1 != k2:
            if arg1 is not None and arg is not None:
                raise GoError(f"incompatible types for comparison: {type_name(arg1)} and {type_name(arg)}")
            truth = False
        elif k1 is not None:
            truth = arg1 == arg
        else:
            if arg1 is not None and arg is not None and _kind(arg1) != _kind(arg):
                raise GoError(
                    f"non-comparable types {format_value(arg1, 's', FormatSpec())}: {type_name(arg1)}, "
                    f"{type_name(arg)}: {sprint_value(arg)}"
                )
            if is_nil(arg1) or is_nil(arg):
                truth = is_nil(arg1) and is_nil(arg)
            else:
                if not _comparable(arg):
                    raise GoError(f"non-comparable type {format_value(arg, 's', FormatSpec())}: {type_name(arg)}")
                truth = arg1 is arg or arg1 == arg
        if truth:
            return True
    return False


@go_signature(VALUE, VALUE)
def _ne(arg1: Any, arg2: Any) -> bool:
    return not _eq(arg1, arg2)


@go_signature(VALUE, VALUE)
def _lt(arg1: Any, arg2: Any) -> bool:
    arg1 = None if arg1 is NIL else arg1
    arg2 = None if arg2 is NIL else arg2
    k1 = _basic_kind(arg1)
    if k1 is None:
        raise GoError("invalid type for comparison")
    k2 = _basic_kind(arg2)
    if k2 is None:
        raise GoError("invalid type for comparison")
    if k1 != k2:
        raise GoError(f"incompatible types for comparison: {type_name(arg1)} and {type_name(arg2)}")
    if k1 == _BOOL_KIND:
        raise GoError("invalid type for comparison")
    if k1 == _STRING_KIND:
        return bool(arg1.encode("utf-8", "surrogateescape") < arg2.encode("utf-8", "surrogateescape"))
    return bool(arg1 < arg2)


@go_signature(VALUE, VALUE)
def _le(arg1: Any, arg2: Any) -> bool:
    return _lt(arg1, arg2) or _eq(arg1, arg2)


@go_signature(VALUE, VALUE)
def _gt(arg1: Any, arg2: Any) -> bool:
    return not _le(arg1, arg2)


@go_signature(VALUE, VALUE)
def _ge(arg1: Any, arg2: Any) -> bool:
    return not _lt(arg1, arg2)


def _eval_args(args: tuple[Any, ...]) -> str:
    """fmt.Sprint of the arguments, a nil one printed as <no value> (text/template's evalArgs)."""
    if len(args) == 1 and isinstance(args[0], str):
        return args[0]
    return sprint(*("<no value>" if a is None else a for a in args))


@go_signature(variadic=ANY)
def _print(*args: Any) -> str:
    return sprint(*args)


@go_signature(STRING, variadic=ANY)
def _printf(fmt: str, *args: Any) -> str:
    return sprintf(fmt, *args)


@go_signature(variadic=ANY)
def _println(*args: Any) -> str:
    return sprintln(*args)


_HTML = {"\0": "\ufffd", '"': "&#34;", "'": "&#39;", "&": "&amp;", "<": "&lt;", ">": "&gt;"}


@go_signature(variadic=ANY)
def _html(*args: Any) -> str:
    return "".join(_HTML.get(c, c) for c in _eval_args(args))


_JS = {"\\": "\\\\", "'": "\\'", '"': '\\"', "<": "\\u003C", ">": "\\u003E", "&": "\\u0026", "=": "\\u003D"}


@go_signature(variadic=ANY)
def _js(*args: Any) -> str:
    out = []
    for c in _eval_args(args):
        if c in _JS:
            out.append(_JS[c])
        elif c < " ":
            out.append(f"\\u00{ord(c):02X}")
        elif ord(c) >= 0x80 and not is_print(c):
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return "".join(out)


@go_signature(variadic=ANY)
def _urlquery(*args: Any) -> str:
    return urllib.parse.quote_plus(_eval_args(args).encode("utf-8", "surrogateescape"), safe="-_.~")


BUILTINS: Final[dict[str, Callable[..., Any]]] = {
    "and": _and,
    "call": _call,
    "html": _html,
    "index": _index,
    "slice": _slice,
    "js": _js,
    "len": _len,
    "not": _not,
    "or": _or,
    "print": _print,
    "printf": _printf,
    "println": _println,
    "urlquery": _urlquery,
    "eq": _eq,
    "ge": _ge,
    "gt": _gt,
    "le": _le,
    "lt": _lt,
    "ne": _ne,
}
