"""What every EnvoyFilter patcher shares: the patch context test and MERGE's two flavours."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from google.protobuf.message import Message

from app.model.envoy_filter import ConfigPatch, Operation, PatchContext
from app.translate.envoy_filter.merge import merge

T = TypeVar("T")
M = TypeVar("M", bound=Message)


def context_matches(context: int, patch: ConfigPatch) -> bool:
    """istiod commonConditionMatch: the patch's context is this one, or ANY."""
    return patch.match.context in (context, PatchContext.ANY)


def added(context: int, patches: Sequence[ConfigPatch]) -> list[Message]:
    """Copies of the values the ADD patches of this context add, for a list of top-level
    resources (clusters, listeners: istiod InsertedClusters, patchListeners): a patch of
    context ANY adds only in the outbound and gateway contexts, so it adds once."""
    out = []
    for patch in patches:
        if patch.operation != Operation.ADD or not context_matches(context, patch):
            continue
        if patch.match.context == PatchContext.ANY and context not in (
            PatchContext.SIDECAR_OUTBOUND,
            PatchContext.GATEWAY,
        ):
            continue
        out.append(copy_of(patch))
    return out


def is_merge(operation: int) -> bool:
    return operation in (Operation.MERGE, Operation.MERGE_AND_REPLACE_LIST)


def merge_value(patch: ConfigPatch, dst: Message) -> None:
    """mergePatchValue: MERGE appends the lists the value sets, MERGE_AND_REPLACE_LIST replaces them."""
    assert patch.value is not None
    merge(dst, patch.value, replace_list=patch.operation == Operation.MERGE_AND_REPLACE_LIST)


def copy_of(patch: ConfigPatch) -> Message:
    """A fresh copy of the patch's value (the value is shared by every proxy it applies to)."""
    assert patch.value is not None
    out = type(patch.value)()
    out.CopyFrom(patch.value)
    return out


def insert_before(items: list[T], found: Callable[[T], bool], make: Callable[[], T]) -> bool:
    """insertBeforeFunc: before the first item found; False when none is."""
    for i, item in enumerate(items):
        if found(item):
            items.insert(i, make())
            return True
    return False


def insert_after(items: list[T], found: Callable[[T], bool], make: Callable[[], T]) -> bool:
    """insertAfterFunc: after the first item found; False when none is."""
    for i, item in enumerate(items):
        if found(item):
            items.insert(i + 1, make())
            return True
    return False


def replace_first(items: list[T], found: Callable[[T], bool], make: Callable[[], T]) -> bool:
    """replaceFunc: the first item found is replaced."""
    for i, item in enumerate(items):
        if found(item):
            items[i] = make()
            return True
    return False


def replace_items(field: object, items: list[M]) -> None:
    """Set a repeated message field to copies of ``items`` (the field owns its elements, and
    some of ``items`` may be its own, about to be cleared)."""
    copies = []
    for item in items:
        copy = type(item)()
        copy.CopyFrom(item)
        copies.append(copy)
    del field[:]  # type: ignore[attr-defined]
    field.extend(copies)  # type: ignore[attr-defined]


def list_operation(
    items: list[T], operation: int, has_match: bool, found: Callable[[T], bool], make: Callable[[], T]
) -> list[T]:
    """What istiod does to a list of filters (listener, network, HTTP) for one patch: ADD appends,
    INSERT_FIRST prepends, INSERT_AFTER / INSERT_BEFORE put the value beside the first item found
    (with nothing to look for: last / first), REPLACE replaces the first found, REMOVE drops all
    found (those two do nothing with nothing to look for); MERGE is not a list operation."""
    if operation == Operation.ADD:
        items.append(make())
    elif operation == Operation.INSERT_FIRST:
        items.insert(0, make())
    elif operation == Operation.INSERT_AFTER:
        if has_match:
            insert_after(items, found, make)
        else:
            items.append(make())
    elif operation == Operation.INSERT_BEFORE:
        if has_match:
            insert_before(items, found, make)
        else:
            items.insert(0, make())
    elif operation == Operation.REPLACE and has_match:
        replace_first(items, found, make)
    elif operation == Operation.REMOVE and has_match:
        items = [item for item in items if not found(item)]
    return items
