"""Kubernetes' strategic merge patch for a Pod (k8s.io/apimachinery strategicpatch, with the
options StrategicMergePatch uses: nulls the original lacks are dropped), which istiod uses to lay
its rendered template over the pod (applyOverlayYAML) and a user's container over the injected
one (applyContainer).

Lists of the Pod's types that carry ``patchStrategy:"merge"`` merge by their ``patchMergeKey``
(containers by name, env by name, volumeMounts by mountPath, ports by containerPort, volumes by
name, ...); other lists are replaced; maps merge key by key, a null deleting. The merged list's
order is strategicpatch's: the patch's items in the patch's order, the original's other items
slotted in where the original had them (normalizeElementOrder, mergeSortedSlice). The
``$patch: replace`` and ``$patch: delete`` directives are honoured; the other directives
(``$retainKeys``, ``$setElementOrder``, ``$deleteFromPrimitiveList``), which only diffs write, are not.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

DIRECTIVE = "$patch"
# Go type of each struct-valued field reached (others: a map or struct without list strategies)
_FIELD_TYPES: dict[str, dict[str, str]] = {
    "Pod": {"metadata": "ObjectMeta", "spec": "PodSpec"},
    "PodSpec": {"containers": "Container", "initContainers": "Container", "ephemeralContainers": "Container"},
}
# patchMergeKey of the lists with patchStrategy merge ("" for a merged list of scalars)
_MERGE_KEYS: dict[str, dict[str, str]] = {
    "ObjectMeta": {"ownerReferences": "uid", "finalizers": ""},
    "PodSpec": {
        "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "volumes": "name",
        "imagePullSecrets": "name", "hostAliases": "ip", "topologySpreadConstraints": "topologyKey",
        "schedulingGates": "name", "resourceClaims": "name",
    },
    "Container": {"ports": "containerPort", "env": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath"},
}  # fmt: skip


class MergeError(ValueError):
    pass


def strategic_merge_pod(original: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``patch`` laid over ``original`` (both Pods as dicts; neither is changed)."""
    return _merge_map(copy.deepcopy(dict(original)), copy.deepcopy(dict(patch)), "Pod")


def _merge_map(original: dict[str, Any], patch: dict[str, Any], kind: str) -> dict[str, Any]:
    directive = patch.pop(DIRECTIVE, None)
    if directive == "replace":
        replaced: dict[str, Any] = _discard_nulls(patch)
        return replaced
    if directive == "delete":
        return {}
    for key, value in patch.items():
        if value is None:
            original.pop(key, None)
            continue
        current: Any = original.get(key)
        if key not in original or _shape_of(current) != _shape_of(value):
            original[key] = _discard_nulls(value)
        elif isinstance(value, dict):
            original[key] = _merge_map(current, value, _FIELD_TYPES.get(kind, {}).get(key, ""))
        elif isinstance(value, list):
            merge_key = _MERGE_KEYS.get(kind, {}).get(key)
            if merge_key is None:
                original[key] = value
            else:
                item_kind = _FIELD_TYPES.get(kind, {}).get(key, "")
                original[key] = _merge_list(current, value, merge_key, item_kind, f"{kind}.{key}")
        else:
            original[key] = value
    return original


def _merge_list(original: list[Any], patch: list[Any], merge_key: str, kind: str, where: str) -> list[Any]:
    if not original and not patch:
        return original
    if not all(isinstance(v, dict) for v in [*original, *patch]):
        if any(isinstance(v, dict | list) for v in [*original, *patch]):
            raise MergeError(f"{where}: a list mixing objects and values cannot be merged")
        merged = list(dict.fromkeys([*original, *patch]))  # deduplicateScalars
        patch_items = [v for v in merged if v in patch]
        server_only = [v for v in merged if v not in patch]
        return _order(patch_items, server_only, patch, original, "")
    if not merge_key:
        raise MergeError(f"cannot merge lists without merge key for {where}")
    items: list[dict[str, Any]] = []
    for item in patch:
        directive = item.get(DIRECTIVE)
        if directive == "replace":
            return [_strip(v) for v in patch if v.get(DIRECTIVE) is None]
        if directive == "delete":
            if merge_key not in item:
                raise MergeError(f"{where}: map: {item} does not contain declared merge key: {merge_key}")
            original = [v for v in original if v.get(merge_key) != item[merge_key]]
        else:
            items.append(item)
    server_order = list(original)
    merged = list(original)
    for item in items:
        if merge_key not in item:
            raise MergeError(f"{where}: map: {item} does not contain declared merge key: {merge_key}")
        at = next((i for i, v in enumerate(merged) if v.get(merge_key) == item[merge_key]), None)
        if at is None:
            merged.append(item)
        else:
            merged[at] = _merge_map(merged[at], item, kind)
            server_order[at] = merged[at]
    keys = [v[merge_key] for v in items]
    patch_items = [v for v in merged if v.get(merge_key) in keys]
    server_only = [v for v in merged if v.get(merge_key) not in keys]
    return _order(patch_items, server_only, items, server_order, merge_key)


def _order(patch_items: list[Any], server_only: list[Any], patch_order: list[Any], server_order: list[Any],
           key: str) -> list[Any]:  # fmt: skip
    """normalizeElementOrder: each part sorted by its list's order, then merged by the server's."""

    def index(items: list[Any], item: Any) -> int:
        for i, v in enumerate(items):
            if (v.get(key) == item.get(key)) if key else (v == item):
                return i
        return -1

    patch_items = sorted(patch_items, key=lambda v: index(patch_order, v))
    server_only = sorted(server_only, key=lambda v: index(server_order, v))
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patch_items):
        if j >= len(patch_items):
            out.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            out.append(patch_items[j])
            j += 1
        else:
            left, right = index(server_order, server_only[i]), index(server_order, patch_items[j])
            if left >= 0 and right >= 0 and left < right:
                out.append(server_only[i])
                i += 1
            else:
                out.append(patch_items[j])
                j += 1
    return out


def _shape_of(value: Any) -> type:
    return dict if isinstance(value, dict) else list if isinstance(value, list) else object


def _discard_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _discard_nulls(v) for k, v in value.items() if v is not None and k != DIRECTIVE}
    if isinstance(value, list):
        return [_discard_nulls(v) for v in value]
    return value


def _strip(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k != DIRECTIVE}
