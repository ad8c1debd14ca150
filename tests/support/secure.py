"""A running pilotfish with its CA and secure port, on free loopback ports, for tests that need
real TLS to it (the bookinfo config; two trusted tokens)."""

from __future__ import annotations

import asyncio
import gc
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from app.runtime import Runtime
from app.settings import Settings
from tests.support.bookinfo import BOOKINFO

# bookinfo's productpage proxy may have its config; "shop/web" may not; istioctl's identity
# (istio-system/default, the root namespace) sees every proxy's debug status
TOKENS = "bookinfo-token bookinfo bookinfo-productpage\nother-token shop web\nistioctl-token istio-system default\n"


@asynccontextmanager
async def secure_runtime(tmp_path: Path, **settings: Any) -> AsyncIterator[Runtime]:
    config = tmp_path / "config"
    shutil.copytree(BOOKINFO, config)
    (tmp_path / "tokens").write_text(TOKENS)
    rt = Runtime(
        Settings(
            config_dir=config,
            xds_address="127.0.0.1:0",
            http_address="127.0.0.1:0",
            secure_xds_address="127.0.0.1:0",
            ca_dir=tmp_path / "ca",
            trusted_token_file=tmp_path / "tokens",
            debounce_after=0.01,
            file_debounce_ms=10,
            **settings,
        )
    )
    stop = asyncio.Event()
    task = asyncio.create_task(rt.run(stop))
    await asyncio.wait_for(rt.started.wait(), 30)
    try:
        yield rt
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
        gc.unfreeze()  # the runtime froze the test process's heap (app/heap.py)
