"""A running pilotfish with its CA and secure port, on free loopback ports, for tests that need
real TLS to it (the bookinfo config; two trusted tokens)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from app.runtime import Runtime
from app.settings import Settings
from tests.support.bookinfo import BOOKINFO
from tests.support.runtime import running

# bookinfo's productpage proxy may have its config; "shop/web" may not; istioctl's identity
# (istio-system/default, the root namespace) sees every proxy's debug status
TOKENS = "bookinfo-token bookinfo bookinfo-productpage\nother-token shop web\nistioctl-token istio-system default\n"


@asynccontextmanager
async def secure_runtime(tmp_path: Path, **overrides: Any) -> AsyncIterator[Runtime]:
    config = tmp_path / "config"
    shutil.copytree(BOOKINFO, config)
    (tmp_path / "tokens").write_text(TOKENS)
    settings = Settings(
        config_dir=config,
        xds_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        secure_xds_address="127.0.0.1:0",
        ca_dir=tmp_path / "ca",
        trusted_token_file=tmp_path / "tokens",
        debounce_after=0.01,
        file_debounce_ms=10,
        **overrides,
    )
    async with running(settings) as rt:
        yield rt
