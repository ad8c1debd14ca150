"""Where the real peers are: the binaries ``make peers`` builds into .peers/bin, and the source of
the pinned Go modules (Istio's CRDs, bootstrap template and protos are read from there, never
copied)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PEERS_BIN = REPO / ".peers" / "bin"
PEER_MODULES = REPO / "tools" / "peers"


def peer_binary(name: str) -> Path:
    """A binary ``make peers`` built; missing is a failure in CI, a skip elsewhere."""
    path = PEERS_BIN / name
    if path.exists():
        return path
    message = f"{path} is missing: run `make peers`"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@functools.cache
def module_dir(peer: str, module: str) -> Path:
    """The source of ``module`` at the version tools/peers/PEER pins (downloaded if needed)."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", module],
        cwd=PEER_MODULES / peer, capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    return Path(json.loads(out.stdout)["Dir"])


def istio_module_dir() -> Path:
    return module_dir("istio", "istio.io/istio")
