"""An object as a key part, by identity: the snapshot's objects are replaced on change, never
edited, so identity says "the same inputs" (cache keys, listener and route inputs)."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Ident(Generic[T]):
    """An object as a key part, compared and hashed by identity (for immutable objects that are
    replaced on change). Holding it keeps the object, and so its id, alive."""

    __slots__ = ("_hash", "obj")

    def __init__(self, obj: T) -> None:
        self.obj = obj
        self._hash = id(obj)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ident) and other.obj is self.obj

    def __repr__(self) -> str:
        return f"Ident({type(self.obj).__name__}@{self._hash:#x})"
