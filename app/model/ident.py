"""An object as a key part, by identity: the snapshot's objects are replaced on change, never
edited, so identity says "the same inputs" (cache keys, listener and route inputs)."""

from __future__ import annotations

from collections.abc import Iterable
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


class Idents:
    """Objects in order as one key part, each by identity. Its hash is made once: a tuple of
    ``Ident``s is hashed again, element by element, every time it is, and a key holding the 500
    DestinationRules merged for one host was hashed for each of them at every cache entry (cubic:
    12 s for one proxy's EDS)."""

    __slots__ = ("_hash", "objs")

    def __init__(self, objs: Iterable[object]) -> None:
        self.objs = tuple(objs)
        self._hash = hash(tuple(map(id, self.objs)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Idents)
            and other._hash == self._hash
            and len(other.objs) == len(self.objs)
            and all(a is b for a, b in zip(self.objs, other.objs, strict=True))
        )

    def __repr__(self) -> str:
        return f"Idents({len(self.objs)}@{self._hash:#x})"
