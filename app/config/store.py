"""ConfigStore: the current version of every config object, by kind. Pure and synchronous;
sources feed it ConfigEvents, the PushContext builder reads snapshots of it."""

from __future__ import annotations

from dataclasses import replace

from app.config.mesh import MeshConfig, default_mesh_config
from app.config.objects import ConfigEvent, ConfigObject, EventType, Kind, ObjectMeta


class ConfigStore:
    def __init__(self) -> None:
        self._by_kind: dict[Kind, dict[tuple[str, str], ConfigObject]] = {}
        self._lists: dict[Kind, tuple[ConfigObject, ...]] = {}
        self._mesh: MeshConfig = default_mesh_config()

    def apply(self, event: ConfigEvent) -> bool:
        """Record one event; False when it changed nothing (same content re-added)."""
        obj = event.obj
        if obj.kind is Kind.MESH_CONFIG:
            new_mesh = default_mesh_config() if event.type is EventType.DELETE else obj.spec
            if new_mesh == self._mesh:
                return False
            self._mesh = new_mesh
            return True
        objects = self._by_kind.setdefault(obj.kind, {})
        key = (obj.meta.namespace, obj.meta.name)
        if event.type is EventType.DELETE:
            if objects.pop(key, None) is None:
                return False
        else:
            old = objects.get(key)
            if old is not None and old.spec == obj.spec and _meaning(old.meta) == _meaning(obj.meta):
                return False  # the same config (a new resourceVersion alone is a controller's write)
            objects[key] = obj
        self._lists.pop(obj.kind, None)
        return True

    def get(self, kind: Kind, namespace: str, name: str) -> ConfigObject | None:
        return self._by_kind.get(kind, {}).get((namespace, name))

    @property
    def mesh(self) -> MeshConfig:
        return self._mesh

    def list(self, kind: Kind) -> tuple[ConfigObject, ...]:
        """Objects of one kind ordered by namespace/name; the tuple is reused until the kind changes."""
        cached = self._lists.get(kind)
        if cached is None:
            objects = self._by_kind.get(kind, {})
            cached = tuple(objects[k] for k in sorted(objects))
            self._lists[kind] = cached
        return cached


def _meaning(meta: ObjectMeta) -> ObjectMeta:
    """The metadata config depends on: all but the resourceVersion."""
    return replace(meta, resource_version="")
