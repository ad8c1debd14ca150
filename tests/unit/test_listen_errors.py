"""An address the control plane is told to serve on and cannot have is a start-up error in one
line, as istiod's "address already in use": never a traceback, and never a port quietly shared
with another control plane (gRPC core binds with SO_REUSEPORT unless told not to, and a second
pilotfish on the same xDS address then took half of the new streams with its own config)."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from app.errors import ListenError
from app.runtime import Runtime
from app.settings import Settings
from tests.support.bookinfo import BOOKINFO
from tests.support.runtime import running_bookinfo

ROOT = Path(__file__).resolve().parents[2]


async def _start(settings: Settings) -> None:
    await asyncio.wait_for(Runtime(settings).run(asyncio.Event()), 30)


@pytest.mark.asyncio
async def test_a_taken_xds_or_http_address_stops_the_second_control_plane(tmp_path: Path) -> None:
    async with running_bookinfo(tmp_path) as first:
        base = Settings(config_dir=BOOKINFO, xds_address="127.0.0.1:0", http_address="127.0.0.1:0")
        xds = f"127.0.0.1:{first.xds.port}"
        with pytest.raises(ListenError, match=f"^xDS: cannot listen on {xds}: "):
            await _start(dataclasses.replace(base, xds_address=xds))
        http = f"127.0.0.1:{first.http.port}"
        with pytest.raises(ListenError, match=f"^HTTP: cannot listen on {http}: .*in use"):
            await _start(dataclasses.replace(base, http_address=http))
        # the first still serves
        reader, writer = await asyncio.open_connection("127.0.0.1", first.http.port)
        writer.write(b"GET /ready HTTP/1.0\r\n\r\n")
        assert b" 200 " in await reader.readline()
        writer.close()


@pytest.mark.asyncio
async def test_serve_says_which_address_it_cannot_listen_on_and_exits_2(tmp_path: Path) -> None:
    async with running_bookinfo(tmp_path) as first:
        xds = f"127.0.0.1:{first.xds.port}"
        command = [sys.executable, "-m", "app.cli", "serve", "--config-dir", str(BOOKINFO)]
        command += ["--xds-address", xds, "--http-address", "127.0.0.1:0"]
        done = await asyncio.to_thread(subprocess.run, command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == f"pilotfish: xDS: cannot listen on {xds}: the address is in use or not local"
    assert "Traceback" not in done.stderr
