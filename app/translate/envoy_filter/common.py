"""What every EnvoyFilter patcher shares: the patch context test and MERGE's two flavours."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from google.protobuf.message import Message

from app.model.envoy_filter import ConfigPatch, Operation, PatchContext
from app.translate.envoy_filter.merge import merge

T = TypeVar("T")


def context_matches(context: int, patch: ConfigPatch) -> bool:
    """istiod commonConditionMatch: the patch's context is this one, or ANY."""
    return patch.match.context in (context, PatchContext.ANY)


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


def patches_of(patches: Sequence[ConfigPatch], context: int) -> list[ConfigPatch]:
    return [p for p in patches if context_matches(context, p)]
