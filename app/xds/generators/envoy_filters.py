"""EnvoyFilter patches on served resources: a class's patch set (``ProxyClass.patches``,
istiod PushContext.EnvoyFilters) applied to what the generators built, as istiod applies it to
what its builders return. A patched resource is remembered by its patch set, context and the
original's content, so an unchanged resource is not decoded and patched again by the next
snapshot or another class with the same patches."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar

from google.protobuf.message import Message

from app.model.envoy_filter import MergedPatches
from app.xds.resource import Resource, encode

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=Message)
_GENERATION = 10_000  # patched resources remembered per generation (two are kept)


class PatchMemo:
    """Patched resources by (patch set, context, extra key, name, original version), in two
    generations: when the newer one is full it becomes the older and the oldest goes, so what
    is still asked for survives (found in the older, it moves to the newer) and what no longer
    is does not pile up."""

    def __init__(self, generation: int = _GENERATION) -> None:
        self._found: dict[Hashable, Resource | None] = {}
        self._older: dict[Hashable, Resource | None] = {}
        self._generation = generation

    def patched(
        self,
        patches: MergedPatches,
        context: int,
        resource: Resource,
        decode: Callable[[bytes], M],
        patch: Callable[[M], M | None],
        extra: Hashable = None,
    ) -> Resource | None:
        """``resource`` with ``patch`` applied (None: removed); the same object when nothing
        changed, so its version, and what clients hold, stay as they were."""
        key = (patches.key, context, extra, resource.name, resource.version)
        if key in self._found:
            return self._found[key]
        if key in self._older:
            found = self._older.pop(key)
        else:
            try:
                out = patch(decode(resource.body.value))
            except Exception:  # as istiod's HandleCrash: the patches do not take effect
                logger.exception(
                    "EnvoyFilter patches (%s) failed on %s; it is served unpatched", patches.key, resource.name
                )
                out = decode(resource.body.value)
            if out is None:
                found = None
            else:
                body = out.SerializeToString(deterministic=True)
                same = body == resource.body.value and out.name == resource.name  # type: ignore[attr-defined]
                found = resource if same else encode(out.name, out)  # type: ignore[attr-defined]
        if len(self._found) >= self._generation:
            self._older, self._found = self._found, {}
        self._found[key] = found
        return found


def patch_all(
    memo: PatchMemo,
    patches: MergedPatches,
    context: int,
    resources: Iterable[Resource],
    decode: Callable[[bytes], M],
    patch: Callable[[M], M | None],
) -> list[Resource]:
    """Each resource patched, those removed left out."""
    out = []
    for r in resources:
        found = memo.patched(patches, context, r, decode, patch)
        if found is not None:
            out.append(found)
    return out


def encoded(messages: Sequence[Message]) -> list[Resource]:
    """Resources an ADD patch brought (encoded once per class and snapshot)."""
    return [encode(m.name, m) for m in messages]  # type: ignore[attr-defined]
