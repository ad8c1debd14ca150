"""An informer's local store and the reflector's rules, without I/O (client-go's reflector and
DeltaFIFO, reduced to what a control plane needs).

The store holds the raw objects of one resource as the API server last showed them, by
namespace/name. A watch event or a relist is turned into the changes it means:

* a relist (after the first list, or after ``410 Gone``) is compared with the store: objects
  that appeared are adds, objects that are gone are deletes, the rest are updates when they
  changed. Nothing that happened in the gap is lost and nothing is reported twice;
* an update that changes only what no generator reads (``resourceVersion``, ``managedFields``,
  ``status`` beyond a Pod's IPs and readiness, a ServiceEntry's allocated addresses and a Node's
  kubelet version, the bookkeeping annotations controllers write) is no change: controllers and
  status writers touch objects all day, and each such write must not become a push.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.config.objects import EventType

Raw = Mapping[str, Any]

# metadata a controller or the API server writes without changing what the object means
_BOOKKEEPING_META = frozenset({"resourceVersion", "managedFields", "uid", "selfLink"})
_BOOKKEEPING_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})


@dataclass(frozen=True, slots=True)
class Delta:
    """One change of one object: the object now (for DELETE, the last version known), and the
    bytes of the watch event that brought it (0: from a list), a bound on the object's own."""

    change: EventType
    obj: Raw
    size: int = 0


def object_key(obj: Raw) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


def resource_version(obj: Raw) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _same_version(old: Raw, new: Raw) -> bool:
    """One resourceVersion is one write: the object did not change (a relist of 10,000 unchanged
    objects compared each one's meaning, 90 ms on the event loop)."""
    version = resource_version(new)
    return bool(version) and version == resource_version(old)


def without_managed_fields(obj: Raw) -> Raw:
    """``obj`` without ``metadata.managedFields``: read by nothing here, and large (40 % of the JSON
    of a Pod applied and run, which the store holds and the validation worker is sent). istiod's
    informers drop it too (kubeclient stripUnusedFields, their default transform)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _read_status(obj: Raw) -> Any:
    """The part of an object's status that the config model reads: a Pod's IPs, phase and
    readiness (its endpoints' address and health), a ServiceEntry's auto-allocated addresses, a
    Node's kubelet version (whether its pods may get native sidecars)."""
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return None
    kind = obj.get("kind")
    if kind == "Pod":
        conditions = status.get("conditions")
        ready = [c.get("status") for c in conditions or () if isinstance(c, Mapping) and c.get("type") == "Ready"]
        return (status.get("podIP"), status.get("podIPs"), status.get("phase"), ready)
    if kind == "ServiceEntry":
        return status.get("addresses")
    if kind == "Node":
        return (status.get("nodeInfo") or {}).get("kubeletVersion")
    return None


def meaning(obj: Raw) -> Any:
    """What generators can read of an object: everything but bookkeeping metadata, the API
    version it was served in (an Istio kind's versions share one schema) and the status a
    controller writes, save the few status fields the model reads (``_read_status``)."""
    body = {k: v for k, v in obj.items() if k not in ("status", "apiVersion")}
    body["status"] = _read_status(obj)
    meta = dict(obj.get("metadata") or {})
    for name in _BOOKKEEPING_META:
        meta.pop(name, None)
    annotations = meta.get("annotations")
    if annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k not in _BOOKKEEPING_ANNOTATIONS}
    body["metadata"] = meta
    return body


class Store:
    """The objects of one resource by key; ``relist`` and ``apply`` say what changed."""

    def __init__(self) -> None:
        self._objects: dict[str, Raw] = {}

    def __len__(self) -> int:
        return len(self._objects)

    def objects(self) -> list[Raw]:
        return list(self._objects.values())

    def get(self, key: str) -> Raw | None:
        return self._objects.get(key)

    def relist(self, items: Iterable[Raw]) -> list[Delta]:
        """Replace the contents with a complete list; the changes it makes, adds and updates in
        list order, then deletes."""
        fresh: dict[str, Raw] = {}
        out: list[Delta] = []
        for obj in items:
            key = object_key(obj)
            fresh[key] = obj
            old = self._objects.get(key)
            if old is None:
                out.append(Delta(EventType.ADD, obj))
            elif not _same_version(old, obj) and meaning(old) != meaning(obj):
                out.append(Delta(EventType.UPDATE, obj))
        out.extend(Delta(EventType.DELETE, old) for key, old in self._objects.items() if key not in fresh)
        self._objects = fresh
        return out

    def apply(self, change: EventType, obj: Raw, size: int = 0) -> Delta | None:
        """A watch event (of ``size`` bytes); None when it changes nothing generators read (or
        deletes what is not there)."""
        key = object_key(obj)
        old = self._objects.get(key)
        if change is EventType.DELETE:
            if old is None:
                return None
            del self._objects[key]
            return Delta(EventType.DELETE, obj, size)
        self._objects[key] = obj
        if old is None:
            return Delta(EventType.ADD, obj, size)
        if meaning(old) == meaning(obj):
            return None
        return Delta(EventType.UPDATE, obj, size)
