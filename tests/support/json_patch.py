"""RFC 6902 ``add``, ``remove`` and ``replace``, applied as the API server applies a webhook's
patch: what tests need to see the pod pilotfish's JSONPatch makes."""

from __future__ import annotations

import copy
from typing import Any


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) else last
        if op["op"] == "remove":
            del node[key]
        elif isinstance(node, list) and op["op"] == "add":
            node.insert(key, op["value"])
        else:
            node[key] = op["value"]
    return doc
