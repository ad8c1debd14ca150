"""The JSON patch (RFC 6902) from the pod the API server sent to the injected one, as istiod's
createPatch answers with it. Objects are diffed key by key; a list is diffed item by item when
its length is unchanged and replaced whole otherwise (gomodules.xyz/jsonpatch writes finer
operations for lists; applied, both give the injected pod)."""

from __future__ import annotations

from typing import Any


def create_patch(original: Any, modified: Any) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    _diff(original, modified, "", ops)
    return ops


def _pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _diff(a: Any, b: Any, path: str, ops: list[dict[str, Any]]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a:
            if key not in b:
                ops.append({"op": "remove", "path": f"{path}/{_pointer(key)}"})
        for key, value in b.items():
            if key not in a:
                ops.append({"op": "add", "path": f"{path}/{_pointer(key)}", "value": value})
            else:
                _diff(a[key], value, f"{path}/{_pointer(key)}", ops)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{path}/{i}", ops)
    elif a != b or type(a) is not type(b):
        ops.append({"op": "replace", "path": path, "value": b})
