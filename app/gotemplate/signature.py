"""What Go knows from a function's type and Python does not: its parameter types.

A template function may declare them with ``@go_signature("int", "string")`` (``variadic=`` for a
trailing ``...T``); the executor then converts and checks arguments as Go's reflection does
(``expected string; found 3``, ``wrong type for value; expected int; got float64``). A plain
Python callable takes ``interface {}`` parameters, counted from its Python signature.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from app.gotemplate.values import Int64, StringMap

ANY: Final = "interface {}"
VALUE: Final = "reflect.Value"  # Go builtins that take any value, nil included
STRING: Final = "string"
INT: Final = "int"
INT64: Final = "int64"
FLOAT64: Final = "float64"
BOOL: Final = "bool"
MAP: Final = "map[string]interface {}"
STRING_MAP: Final = "map[string]string"
SLICE: Final = "[]interface {}"

NILLABLE: Final = frozenset({ANY, VALUE, MAP, STRING_MAP, SLICE})

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Signature:
    params: tuple[str, ...]  # the fixed parameters' Go types
    variadic: str | None = None  # the element type of a final ...T


def go_signature(*params: str, variadic: str | None = None) -> Callable[[F], F]:
    """Declares a template function's Go parameter types."""

    def mark(fn: F) -> F:
        fn.__go_signature__ = Signature(tuple(params), variadic)  # type: ignore[attr-defined]
        return fn

    return mark


def signature_of(fn: Callable[..., Any]) -> Signature:
    declared = getattr(fn, "__go_signature__", None)
    if isinstance(declared, Signature):
        return declared
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return Signature((), ANY)
    fixed = 0
    variadic: str | None = None
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty:
            fixed += 1
        elif p.kind is p.VAR_POSITIONAL:
            variadic = ANY
    return Signature((ANY,) * fixed, variadic)


def assignable(value: Any, typ: str) -> bool:
    """Whether a non-nil value is of the Go parameter type (reflect's AssignableTo)."""
    if typ == STRING:
        return isinstance(value, str)
    if typ == INT:
        return isinstance(value, int) and not isinstance(value, (bool, Int64))
    if typ == INT64:
        return isinstance(value, Int64)
    if typ == FLOAT64:
        return isinstance(value, float)
    if typ == BOOL:
        return isinstance(value, bool)
    if typ == MAP:
        return isinstance(value, dict) and not isinstance(value, StringMap)
    if typ == STRING_MAP:
        return isinstance(value, StringMap)
    if typ == SLICE:
        return isinstance(value, (list, tuple))
    return False
