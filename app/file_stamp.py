"""What tells a file's new version from the one last read: its inode, modification time and size.
A kubelet swaps a mounted Secret or ConfigMap in by renaming a new directory over the old (a new
inode, whatever the time and size); an overwrite changes the time or the size."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

Stamp = tuple[int, int, int]


def file_stamp(path: Path) -> Stamp:
    """The stamp of the file ``path`` resolves to now; raises OSError as ``os.stat`` does."""
    s = os.stat(path)
    return s.st_ino, s.st_mtime_ns, s.st_size


class FileSetStamp:
    """Whether any of a set of files changed since last asked; a file absent is a state of its own."""

    def __init__(self, paths: Iterable[Path]) -> None:
        self._paths = tuple(paths)
        self._seen = self._now()

    def _now(self) -> tuple[Stamp | None, ...]:
        stamps: list[Stamp | None] = []
        for path in self._paths:
            try:
                stamps.append(file_stamp(path))
            except OSError:
                stamps.append(None)
        return tuple(stamps)

    def changed(self) -> bool:
        """True once for each change seen (the first call after it)."""
        now = self._now()
        if now == self._seen:
            return False
        self._seen = now
        return True
