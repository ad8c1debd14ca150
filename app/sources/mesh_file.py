"""``--mesh-config FILE``: the MeshConfig from one file (Istio's MeshConfig YAML), followed as it
changes; it overrides the mesh ConfigMap, as istiod's ``--meshConfig`` does. A file that does not
load is reported and the last good mesh config stays in force."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from watchfiles import awatch

from app.config.objects import ConfigEvent, ConfigObject, EventType
from app.errors import ConfigError, SettingsError
from app.sources.files import load_config_file

logger = logging.getLogger(__name__)


class MeshFileSource:
    def __init__(self, path: Path, *, debounce_ms: int = 10) -> None:
        self._path = path
        self._debounce_ms = debounce_ms
        self._current: ConfigObject | None = None
        self._rejection: ConfigError | None = None

    def objects(self) -> list[ConfigObject]:
        return [self._current] if self._current is not None else []

    def rejections(self) -> list[ConfigError]:
        return [self._rejection] if self._rejection is not None else []

    async def start(self) -> list[ConfigEvent]:
        if not self._path.is_file():
            raise SettingsError(f"--mesh-config {self._path}: no such file")
        return self._load()

    async def watch(self) -> AsyncIterator[list[ConfigEvent]]:
        """The file's changes; it is read once more when the watcher is up, so a change made
        before that is not lost."""
        # the directories, not the file: editors and ConfigMap mounts replace files. The one the
        # path names, as istiod's pkg/filewatcher: a mounted ConfigMap's file resolves into a
        # timestamped directory the kubelet removes at the next update, and a watch of that one
        # would see the first update and nothing after; and the one it resolves to when that lies
        # elsewhere (a link to a file kept in another directory)
        folder = self._path.absolute().parent
        target = self._path.resolve()
        folders = [folder] if target.parent.is_relative_to(folder.resolve()) else [folder, target.parent]
        changes = awatch(*folders, debounce=self._debounce_ms, step=self._debounce_ms)
        pending = asyncio.ensure_future(anext(changes, None))
        try:
            await asyncio.sleep(0)  # awatch starts its watcher on the first step of that task
            if events := self._load():
                yield events
            while (batch := await pending) is not None:
                pending = asyncio.ensure_future(anext(changes, None))
                target = self._path.resolve()  # moved with the last swap of a mount's ``..data``
                touched = any(Path(p).resolve() == target or Path(p).name.startswith("..") for _, p in batch)
                if touched and (events := self._load()):
                    yield events
        finally:
            pending.cancel()
            await changes.aclose()

    async def close(self) -> None:
        """Nothing to release: ``watch()`` stops with the task iterating it."""

    def _load(self) -> list[ConfigEvent]:
        result = load_config_file(self._path, mesh=True)
        if result is None:
            self._reject(ConfigError(str(self._path), "MeshConfig", "", "", "cannot read file: no such file"))
            return []
        if result.rejected:
            self._reject(result.rejected[0].error)
            return []
        self._rejection = None
        [obj] = result.objects
        old, self._current = self._current, obj
        if old is not None and old.spec == obj.spec:
            return []
        return [ConfigEvent(EventType.ADD if old is None else EventType.UPDATE, obj, old)]

    def _reject(self, error: ConfigError) -> None:
        if self._rejection != error:
            logger.warning("%s (the last good mesh config stays in force)", error)
        self._rejection = error
