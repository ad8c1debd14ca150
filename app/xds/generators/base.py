"""What every per-type generator answers (istiod's XdsResourceGenerator), and the assertion
mode's comparison of a shared build with one made for the very proxy served."""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from google.protobuf.message import Message

from app.model.ident import Ident
from app.model.proxy import Proxy
from app.model.sidecar_scope import SidecarScope
from app.xds.cache import CacheAssertionError
from app.xds.generators.state import SnapshotState
from app.xds.push_request import PushRequest
from app.xds.resource import Resource, encode
from app.xds.source import Partial
from app.xds.watch import WatchedResource


class Generator(Protocol):
    """One xDS type's resources for a proxy, from the snapshot's state."""

    def generate(self, state: SnapshotState, proxy: Proxy, watch: WatchedResource) -> list[Resource] | None:
        """The type's current resources the proxy may watch (None: nothing to send)."""
        ...

    def changes(
        self,
        state: SnapshotState,
        proxy: Proxy,
        watch: WatchedResource,
        request: PushRequest,
        previous: SidecarScope | None,
        also: Collection[str],
    ) -> Partial | None:
        """What ``request`` changed of the type for a sidecar (see ``ResourceSource.changes``);
        None when that cannot be told without generating the whole type."""
        ...


class WholeTypeOnly:
    """A generator without partial answers: every push regenerates the type."""

    def changes(
        self,
        state: SnapshotState,
        proxy: Proxy,
        watch: WatchedResource,
        request: PushRequest,
        previous: SidecarScope | None,
        also: Collection[str],
    ) -> Partial | None:
        return None


def _name(msg: Message) -> str:
    return str(getattr(msg, "name", "") or getattr(msg, "cluster_name", ""))


def check(what: str, built: Sequence[Resource], reference: Sequence[Message]) -> None:
    """Assertion mode: a shared set must equal this proxy's own, built uncached."""
    fresh = [encode(_name(m), m) for m in reference]
    if [(r.name, r.body.value) for r in built] != [(r.name, r.body.value) for r in fresh]:
        raise CacheAssertionError(f"{what}: the shared set differs from this proxy's own")


@dataclass(slots=True)
class _Differences:
    """Per snapshot: the difference between two class sets, computed once for every proxy."""

    found: dict[Hashable, tuple[list[Resource], list[str]]] = field(default_factory=dict)


def class_difference(
    state: SnapshotState, old: Mapping[str, Resource], new: Mapping[str, Resource]
) -> tuple[list[Resource], list[str]]:
    """(resources of ``new`` that ``old`` lacks or has in another version, names only ``old``
    has): what a class's streams, brought to ``old``, lack of ``new``; computed once per pair of
    sets and shared by every proxy of the class."""
    if old is new:
        return [], []
    key = (Ident(old), Ident(new))
    differences = state.part(_Differences, _Differences).found
    found = differences.get(key)
    if found is None:
        changed = [r for name, r in new.items() if (was := old.get(name)) is None or was.version != r.version]
        removed = [name for name in old if name not in new]
        found = differences[key] = (changed, removed)
    return found


def shared_named(
    memo: dict[str, Resource],
    names: Iterable[str],
    build: Callable[[str], tuple[Resource, bool]],
    own: Callable[[str], Message] | None,
) -> list[Resource]:
    """Named resources from a class memo, built on first ask; ``build`` says whether the class
    keeps what it built: the answer for a name that names nothing (a client's to choose) is
    built each time it is asked, as istiod builds it, so made-up names cost no memory once
    their stream has dropped them. With ``own`` (assertion mode) every ask is compared with the
    resource built for this very proxy."""
    out = []
    for name in names:
        found = memo.get(name)
        if found is None:
            found, keep = build(name)
            if keep:
                memo[name] = found
        if own is not None:
            check(name, [found], [own(name)])
        out.append(found)
    return out
