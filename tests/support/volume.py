"""A directory kept as the kubelet keeps a ConfigMap or Secret volume: its AtomicWriter
(k8s.io/kubernetes pkg/volume/util/atomic_writer.go) writes each version of the files into a new
timestamped directory, swaps the hidden ``..data`` link to it and removes the one before; the
visible names (``mesh -> ..data/mesh``) never change, what they resolve to does."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Mapping
from pathlib import Path


class AtomicVolume:
    def __init__(self, target: Path) -> None:
        self.target = target
        self._versions = itertools.count(1)
        target.mkdir(parents=True)

    def write(self, files: Mapping[str, str | bytes]) -> None:
        """The next version of the volume: ``files`` by name, in place at once."""
        data = self.target / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        stamped = self.target / f"..2026_11_28_10_00_00.{next(self._versions)}"
        stamped.mkdir()
        for name, content in files.items():
            (stamped / name).write_bytes(content.encode() if isinstance(content, str) else content)
        os.symlink(stamped.name, self.target / "..data_tmp")
        os.rename(self.target / "..data_tmp", data)
        for name in files:
            if not (self.target / name).is_symlink():
                os.symlink(f"..data/{name}", self.target / name)
        if old is not None:
            shutil.rmtree(self.target / old)
