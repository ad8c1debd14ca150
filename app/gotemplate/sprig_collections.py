"""sprig's list and dict functions (list.go, dict.go)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any, Final

from app.gotemplate.errors import GoError
from app.gotemplate.signature import ANY, INT, MAP, STRING, go_signature
from app.gotemplate.sprig_convert import NIL_DEREFERENCE, as_list, deep_equal, empty, list_kind_error, strval, to_int64
from app.gotemplate.values import StringSlice, type_name


@go_signature(variadic=ANY)
def list_(*v: Any) -> list[Any]:
    return list(v)


@go_signature(ANY, ANY)
def push(lst: Any, v: Any) -> list[Any]:
    return [*as_list("Cannot push on type", lst), v]


@go_signature(ANY, ANY)
def prepend(lst: Any, v: Any) -> list[Any]:
    return [v, *as_list("Cannot prepend on type", lst)]


@go_signature(INT, ANY)
def chunk(size: int, lst: Any) -> list[Any]:
    items = as_list("Cannot chunk type", lst)
    if size <= 0:
        raise GoError("runtime error: integer divide by zero")
    count = math.floor((len(items) - 1) / size) + 1
    return [items[i * size : (i + 1) * size] for i in range(count)]


@go_signature(ANY)
def first(lst: Any) -> Any:
    items = as_list("Cannot find first on type", lst)
    return items[0] if items else None


@go_signature(ANY)
def last(lst: Any) -> Any:
    items = as_list("Cannot find last on type", lst)
    return items[-1] if items else None


@go_signature(ANY)
def rest(lst: Any) -> Any:
    return as_list("Cannot find rest on type", lst)[1:]  # a nil []interface{} prints [] too


@go_signature(ANY)
def initial(lst: Any) -> Any:
    return as_list("Cannot find initial on type", lst)[:-1]


@go_signature(ANY)
def reverse(lst: Any) -> list[Any]:
    return list(reversed(as_list("Cannot find reverse on type", lst)))


@go_signature(ANY)
def compact(lst: Any) -> list[Any]:
    return [x for x in as_list("Cannot compact on type", lst) if not empty(x)]


@go_signature(ANY)
def uniq(lst: Any) -> list[Any]:
    out: list[Any] = []
    for x in as_list("Cannot find uniq on type", lst):
        if not any(deep_equal(x, y) for y in out):
            out.append(x)
    return out


@go_signature(ANY, variadic=ANY)
def without(lst: Any, *omit: Any) -> list[Any]:
    return [x for x in as_list("Cannot find without on type", lst) if not any(deep_equal(x, o) for o in omit)]


@go_signature(ANY, ANY)
def has(needle: Any, haystack: Any) -> bool:
    if haystack is None:
        return False
    return any(deep_equal(needle, x) for x in as_list("Cannot find has on type", haystack))


@go_signature(ANY, variadic=ANY)
def slice_(lst: Any, *indices: Any) -> Any:
    items = as_list("list should be type of slice or array but", lst)
    if not items:
        return None
    start = to_int64(indices[0]) if indices else 0
    end = to_int64(indices[1]) if len(indices) > 1 else len(items)
    if not 0 <= start <= end <= len(items):
        raise GoError("reflect.Value.Slice: slice index out of bounds")
    return items[start:end]


@go_signature(variadic=ANY)
def concat(*lists: Any) -> Any:
    out: list[Any] = []
    for lst in lists:
        if lst is None:
            raise GoError(NIL_DEREFERENCE)
        if not isinstance(lst, (list, tuple)):
            raise GoError(f"{list_kind_error('Cannot concat type', lst)} as list")
        out.extend(as_list("", lst))
    return out


@go_signature(variadic=ANY)
def dict_(*v: Any) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for i in range(0, len(v), 2):
        d[strval(v[i])] = v[i + 1] if i + 1 < len(v) else ""
    return d


@go_signature(MAP, STRING)
def get(d: dict[str, Any] | None, key: str) -> Any:
    return d[key] if d is not None and key in d else ""


@go_signature(MAP, STRING, ANY)
def set_(d: dict[str, Any] | None, key: str, value: Any) -> Any:
    if d is None:
        raise GoError("assignment to entry in nil map")
    d[key] = value
    return d


@go_signature(MAP, STRING)
def unset(d: dict[str, Any] | None, key: str) -> Any:
    if d is not None:
        d.pop(key, None)
    return d


@go_signature(MAP, STRING)
def has_key(d: dict[str, Any] | None, key: str) -> bool:
    return d is not None and key in d


@go_signature(STRING, variadic=MAP)
def pluck(key: str, *dicts: dict[str, Any] | None) -> list[Any]:
    return [d[key] for d in dicts if d is not None and key in d]


@go_signature(variadic=MAP)
def keys(*dicts: dict[str, Any] | None) -> StringSlice:
    return StringSlice(k for d in dicts if d is not None for k in d)


@go_signature(MAP, variadic=STRING)
def pick(d: dict[str, Any] | None, *names: str) -> dict[str, Any]:
    return {k: d[k] for k in names if d is not None and k in d}


@go_signature(MAP, variadic=STRING)
def omit(d: dict[str, Any] | None, *names: str) -> dict[str, Any]:
    return {k: v for k, v in (d or {}).items() if k not in names}


@go_signature(MAP)
def values(d: dict[str, Any] | None) -> list[Any]:
    return list((d or {}).values())


def _merge(dst: dict[str, Any], src: dict[str, Any], overwrite: bool) -> None:
    """dario.cat/mergo's Merge (overwrite: MergeWithOverwrite) of map[string]interface{}: maps
    merge deeply; otherwise a source value replaces a missing or empty one, or any one when
    overwriting (an empty source value too; a nil one only then)."""
    for k, sv in src.items():
        if sv is None:
            if overwrite:
                dst[k] = None
            continue
        dv = dst.get(k)
        if isinstance(dv, dict) and isinstance(sv, dict):
            _merge(dv, sv, overwrite)
            if dv:
                continue
        if overwrite or k not in dst or empty(dv):
            dst[k] = sv


def _merge_all(dst: dict[str, Any] | None, srcs: tuple[dict[str, Any] | None, ...], overwrite: bool) -> Any:
    if dst is None:
        dst = {}
    for src in srcs:
        _merge(dst, src or {}, overwrite)
    return dst


@go_signature(MAP, variadic=MAP)
def merge(dst: dict[str, Any] | None, *srcs: dict[str, Any] | None) -> Any:
    return _merge_all(dst, srcs, overwrite=False)


@go_signature(MAP, variadic=MAP)
def merge_overwrite(dst: dict[str, Any] | None, *srcs: dict[str, Any] | None) -> Any:
    return _merge_all(dst, srcs, overwrite=True)


@go_signature(ANY)
def deep_copy(v: Any) -> Any:
    return copy.deepcopy(v)


@go_signature(variadic=ANY)
def dig(*ps: Any) -> Any:
    if len(ps) < 3:
        raise GoError("dig needs at least three arguments")
    d = ps[-1]
    if not isinstance(d, dict) or type_name(d) != "map[string]interface {}":
        raise GoError(f"interface conversion: interface {{}} is {type_name(d)}, not map[string]interface {{}}")
    default = ps[-2]
    names = ps[:-2]
    for i, k in enumerate(names):
        if not isinstance(k, str):
            raise GoError(f"interface conversion: interface {{}} is {type_name(k)}, not string")
        if k not in d:
            return default
        step = d[k]
        if i == len(names) - 1:
            return step
        if not isinstance(step, dict):
            raise GoError(f"interface conversion: interface {{}} is {type_name(step)}, not map[string]interface {{}}")
        d = step
    return default


# a must* twin returns its error where the plain one panics: both reach the template as
# "error calling NAME: ...", so they are the same function here
COLLECTION_FUNCS: Final[dict[str, Callable[..., Any]]] = {
    "tuple": list_,
    "list": list_,
    "dict": dict_,
    "get": get,
    "set": set_,
    "unset": unset,
    "hasKey": has_key,
    "pluck": pluck,
    "keys": keys,
    "pick": pick,
    "omit": omit,
    "merge": merge,
    "mergeOverwrite": merge_overwrite,
    "mustMerge": merge,
    "mustMergeOverwrite": merge_overwrite,
    "values": values,
    "append": push,
    "push": push,
    "mustAppend": push,
    "mustPush": push,
    "prepend": prepend,
    "mustPrepend": prepend,
    "first": first,
    "mustFirst": first,
    "rest": rest,
    "mustRest": rest,
    "last": last,
    "mustLast": last,
    "initial": initial,
    "mustInitial": initial,
    "reverse": reverse,
    "mustReverse": reverse,
    "uniq": uniq,
    "mustUniq": uniq,
    "without": without,
    "mustWithout": without,
    "has": has,
    "mustHas": has,
    "slice": slice_,
    "mustSlice": slice_,
    "concat": concat,
    "dig": dig,
    "chunk": chunk,
    "mustChunk": chunk,
    "compact": compact,
    "mustCompact": compact,
    "deepCopy": deep_copy,
    "mustDeepCopy": deep_copy,
}
