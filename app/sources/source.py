"""What the runtime asks of a config source (files, Kubernetes): the initial state, then the
changes, as ConfigEvents; the objects in force and the current rejections."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from app.config.objects import ConfigEvent, ConfigObject
from app.errors import ConfigError


class Source(Protocol):
    async def start(self) -> list[ConfigEvent]:
        """Read everything there is now; the ADD events."""
        ...

    def watch(self) -> AsyncIterator[list[ConfigEvent]]:
        """The changes after ``start()``, in batches (never an empty one)."""
        ...

    def objects(self) -> list[ConfigObject]: ...

    def rejections(self) -> list[ConfigError]: ...

    async def close(self) -> None: ...
