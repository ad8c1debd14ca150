"""A proposed change as the events the file source would emit for it: every object loaded from
the change's files is an add or an update of what is in force, every ``--delete`` a delete of
the object in force. What cannot be applied is rejected with the message ``pilotfish validate``
prints for it (the same loader, strict), and the rest still makes the change."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from app.config.loader import LoadResult
from app.config.objects import ConfigEvent, ConfigKey, ConfigObject, EventType, Kind
from app.errors import ConfigError, SettingsError


@dataclass(frozen=True, slots=True)
class ChangedObject:
    """One object of the change and what happens to it: ``add``, ``update`` or ``delete``."""

    kind: str
    namespace: str
    name: str
    op: str


@dataclass(frozen=True, slots=True)
class RejectedObject:
    """An object of the change left out, with ``message`` as ``pilotfish validate`` prints it."""

    kind: str
    namespace: str
    name: str
    field: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Proposal:
    events: tuple[ConfigEvent, ...]
    change: tuple[ChangedObject, ...]
    rejected: tuple[RejectedObject, ...]


def parse_delete(text: str) -> ConfigKey:
    """``KIND/NAMESPACE/NAME`` (``KIND/NAME`` for a cluster-scoped kind) as a ConfigKey."""
    parts = text.split("/")
    kinds = {kind.value.lower(): kind for kind in Kind}
    kind = kinds.get(parts[0].lower())
    if kind is None or len(parts) not in (2, 3) or not all(parts[1:]):
        raise SettingsError(f"--delete {text!r}: want KIND/NAMESPACE/NAME (KIND/NAME if cluster-scoped), KIND one of "
                            f"{', '.join(sorted(k.value for k in Kind))}")  # fmt: skip
    return ConfigKey(kind, parts[1], parts[2]) if len(parts) == 3 else ConfigKey(kind, "", parts[1])


def _rejected(key: ConfigKey | None, error: ConfigError) -> RejectedObject:
    if key is not None:
        kind, namespace, name = str(key.kind), key.namespace, key.name
    else:  # identity unreadable: what the error names of it ("NAMESPACE/NAME" or "NAME")
        kind = error.kind
        namespace, _, name = error.name.rpartition("/")
    return RejectedObject(kind, namespace, name, error.field, error.reason, str(error))


def propose(
    loaded: Iterable[LoadResult], deletes: Iterable[ConfigKey], current: Mapping[ConfigKey, ConfigObject]
) -> Proposal:
    """The change ``loaded`` (the change's files, read by ``load_config_file``) and ``deletes``
    make to the objects ``current`` holds. An object given twice is taken the first time (as
    the file source takes a key defined twice), a delete of an object not in force rejected."""
    events: list[ConfigEvent] = []
    change: list[ChangedObject] = []
    rejected: list[RejectedObject] = []
    seen: dict[ConfigKey, str] = {}

    def duplicate(key: ConfigKey, source: str) -> bool:
        first = seen.get(key)
        if first is None:
            seen[key] = source
            return False
        reason = f"given twice in the change (first in {first}): this one is left out"
        rejected.append(_rejected(key, ConfigError(source, str(key.kind), _display(key), "", reason)))
        return True

    for result in loaded:
        rejected.extend(_rejected(r.key, r.error) for r in result.rejected)
        for obj in result.objects:
            if duplicate(obj.key, obj.source):
                continue
            old = current.get(obj.key)
            op = EventType.ADD if old is None else EventType.UPDATE
            events.append(ConfigEvent(op, obj, old))
            change.append(ChangedObject(str(obj.kind), obj.meta.namespace, obj.meta.name, op.value))
    for key in deletes:
        if duplicate(key, "--delete"):
            continue
        old = current.get(key)
        if old is None:
            error = ConfigError("--delete", str(key.kind), _display(key), "", "no such object in force")
            rejected.append(_rejected(key, error))
            continue
        events.append(ConfigEvent(EventType.DELETE, old))
        change.append(ChangedObject(str(key.kind), key.namespace, key.name, EventType.DELETE.value))
    return Proposal(tuple(events), tuple(change), tuple(rejected))


def _display(key: ConfigKey) -> str:
    return f"{key.namespace}/{key.name}" if key.namespace else key.name
