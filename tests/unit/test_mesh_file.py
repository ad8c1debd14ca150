"""``--mesh-config FILE`` followed where the chart puts it: a key of the ``istio`` ConfigMap mounted
as a volume, which the kubelet changes as its AtomicWriter does (pkg/volume/util/atomic_writer.go):
the new content in a new timestamped directory, the hidden ``..data`` link swapped to it, the old
directory removed. The file's path (``mesh -> ..data/mesh``) never changes; what it resolves to
does, and the directory it resolved to is gone after the first update. istiod's file watcher
(pkg/filewatcher) follows every update, not just the first."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
from pathlib import Path

from app.config.objects import ConfigEvent, EventType
from app.sources.mesh_file import MeshFileSource

TIMEOUT = 10.0


class ConfigMapVolume:
    """A directory the kubelet keeps one ConfigMap key in, written as its AtomicWriter writes."""

    def __init__(self, target: Path, key: str) -> None:
        self.target, self.key = target, key
        self._versions = itertools.count(1)
        target.mkdir()

    @property
    def path(self) -> Path:
        return self.target / self.key

    def write(self, text: str) -> None:
        data = self.target / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        stamped = self.target / f"..2026_11_28_10_00_00.{next(self._versions)}"
        stamped.mkdir()
        (stamped / self.key).write_text(text)
        os.symlink(stamped.name, self.target / "..data_tmp")
        os.rename(self.target / "..data_tmp", data)
        if not self.path.is_symlink():
            os.symlink(f"..data/{self.key}", self.path)
        if old is not None:
            shutil.rmtree(self.target / old)


async def test_every_update_of_a_mounted_configmap_is_followed(tmp_path: Path) -> None:
    volume = ConfigMapVolume(tmp_path / "config", "mesh")
    volume.write("connectTimeout: 1s\n")
    source = MeshFileSource(volume.path)
    [first] = await source.start()
    assert first.obj.spec.connect_timeout.seconds == 1
    batches: asyncio.Queue[list[ConfigEvent]] = asyncio.Queue()

    async def follow() -> None:
        async for batch in source.watch():
            await batches.put(batch)

    task = asyncio.create_task(follow())
    try:
        await asyncio.sleep(0.2)  # the watcher up: a change before it is read again anyway
        for seconds in (2, 3, 4):
            volume.write(f"connectTimeout: {seconds}s\n")
            try:
                [event] = await asyncio.wait_for(batches.get(), TIMEOUT)
            except TimeoutError:
                in_force = source.objects()[0].spec.connect_timeout.seconds
                raise AssertionError(f"the update to {seconds}s was not seen; {in_force}s in force") from None
            assert event.type is EventType.UPDATE
            assert event.obj.spec.connect_timeout.seconds == seconds, f"update to {seconds}s"
    finally:
        task.cancel()
