"""``--mesh-config FILE`` followed where the chart puts it: a key of the ``istio`` ConfigMap mounted
as a volume, which the kubelet changes as its AtomicWriter does (tests/support/volume.py). The
file's path never changes; the directory it resolved to is gone after the first update. istiod's
file watcher (pkg/filewatcher) follows every update, not just the first."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.config.objects import ConfigEvent, EventType
from app.sources.mesh_file import MeshFileSource
from tests.support.volume import AtomicVolume

TIMEOUT = 10.0


async def test_every_update_of_a_mounted_configmap_is_followed(tmp_path: Path) -> None:
    volume = AtomicVolume(tmp_path / "config")
    volume.write({"mesh": "connectTimeout: 1s\n"})
    source = MeshFileSource(volume.target / "mesh")
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
            volume.write({"mesh": f"connectTimeout: {seconds}s\n"})
            try:
                [event] = await asyncio.wait_for(batches.get(), TIMEOUT)
            except TimeoutError:
                in_force = source.objects()[0].spec.connect_timeout.seconds
                raise AssertionError(f"the update to {seconds}s was not seen; {in_force}s in force") from None
            assert event.type is EventType.UPDATE
            assert event.obj.spec.connect_timeout.seconds == seconds, f"update to {seconds}s"
    finally:
        task.cancel()
