"""Go's values as Python values: the data model the engine executes on.

* None is Go's nil (an invalid reflect.Value once a pipeline has produced it); ``NIL`` is a nil
  *interface* still inside a container (a map's ``null``, a function's nil ``interface{}``
  result): it prints ``<no value>`` like nil, but ``.x`` on it is Go's "nil pointer evaluating".
  ``NilPointer(type)`` is a typed nil pointer (prints ``<nil>``).
* bool, int (Go int), ``Int64`` (sprig's int64 results), ``Uint8`` (a byte of a string), float
  (float64), str (string).
* dict is ``map[string]interface {}`` (``StringMap`` is ``map[string]string``: a missing key
  indexes to ""), list/tuple is ``[]interface {}`` (``StringSlice`` / ``IntSlice`` are
  ``[]string`` / ``[]int``: their elements' static type is not interface {}).
* An object with ``go_field(name)`` is a Go struct (see the package docstring).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final, Protocol


class _Nil:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NIL"


NIL: Final = _Nil()


class Int64(int):
    """A Go int64 (what sprig's arithmetic returns); prints and compares as int."""

    __slots__ = ()


class Uint8(int):
    """A Go byte (what indexing a string gives)."""

    __slots__ = ()


class StringSlice(list[str]):
    """A Go []string (what sprig's splitList, sortAlpha, toStrings... return): its elements'
    static type is string, not interface {}."""

    __slots__ = ()


class IntSlice(list[int]):
    """A Go []int (sprig's until, untilStep)."""

    __slots__ = ()


class StringMap(dict[str, str]):
    """A Go map[string]string (a Kubernetes object's labels and annotations)."""

    __slots__ = ()


class NilPointer:
    """A Go nil pointer of a named type (``NilPointer("*v1.ObjectMeta")``): what a struct's
    ``go_field`` returns for an unset pointer field. False, prints ``<nil>``, and ``.X`` on it is
    Go's "nil pointer evaluating *v1.ObjectMeta.X", or, when ``fields`` (the struct's field
    names) is given and lacks X, "can't evaluate field X"."""

    __slots__ = ("fields", "go_type")

    def __init__(self, go_type: str, fields: Collection[str] | None = None) -> None:
        self.go_type = go_type
        self.fields = fields

    def has_field(self, name: str) -> bool:
        return self.fields is None or name in self.fields

    def __repr__(self) -> str:
        return f"NilPointer({self.go_type!r})"

    def __str__(self) -> str:
        return "<nil>"


def is_nil(v: Any) -> bool:
    return v is None or v is NIL or isinstance(v, NilPointer)


class GoStruct(Protocol):
    """A Go struct or pointer to one (see the package docstring)."""

    def go_field(self, name: str) -> Any: ...


def is_struct(v: Any) -> bool:
    """Whether ``v`` is a GoStruct (a class attribute look-up: a runtime_checkable Protocol's
    isinstance costs tens of times more, and execution asks this at every field)."""
    return getattr(type(v), "go_field", None) is not None


def type_name(v: Any) -> str:
    """The Go type name errors and %T print."""
    if v is None or v is NIL:
        return "<nil>"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, Int64):
        return "int64"
    if isinstance(v, Uint8):
        return "uint8"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, StringMap):
        return "map[string]string"
    if isinstance(v, dict):
        return "map[string]interface {}"
    if isinstance(v, StringSlice):
        return "[]string"
    if isinstance(v, IntSlice):
        return "[]int"
    if isinstance(v, (list, tuple)):
        return "[]interface {}"
    name = getattr(v, "go_type", None)
    if isinstance(name, str):
        return name
    if callable(v) and not is_struct(v):
        return "func"
    return type(v).__name__


def kind_name(v: Any) -> str:
    """reflect.Kind's name (sprig's kindOf)."""
    if v is None or v is NIL:
        return "invalid"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, Int64):
        return "int64"
    if isinstance(v, Uint8):
        return "uint8"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, dict):
        return "map"
    if isinstance(v, (list, tuple)):
        return "slice"
    if callable(v) and not is_struct(v):
        return "func"
    return "ptr"


def is_true(v: Any) -> bool:
    """template.IsTrue: the zero value of a type (and nil) is false, a struct is true."""
    if is_nil(v):
        return False
    if isinstance(v, (bool, int, float, str, dict, list, tuple)):
        return bool(v)
    return True


def has_interface_elements(v: Any) -> bool:
    """Whether a collection's elements are interface {} to Go (not a []string, []int or
    map[string]string)."""
    return isinstance(v, (list, tuple, dict)) and not isinstance(v, (StringSlice, IntSlice, StringMap))


def go_len(v: Any) -> int:
    """len() of a string counts bytes, as Go's."""
    return len(v.encode("utf-8", "surrogateescape")) if isinstance(v, str) else len(v)
