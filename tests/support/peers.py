"""Where the real peers are: the binaries ``make peers`` builds into .peers/bin, and the source of
the pinned Go modules (Istio's CRDs, bootstrap template and protos are read from there, never
copied)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PEERS_BIN = REPO / ".peers" / "bin"
PEER_MODULES = REPO / "tools" / "peers"


def peer_binary(name: str) -> Path:
    """A binary ``make peers`` built; missing, the test fails (the real peers are never optional)."""
    path = PEERS_BIN / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: run `make peers` to build the real peers", pytrace=False)
    return path


@functools.cache
def module_dir(peer: str, module: str) -> Path:
    """The source of ``module`` at the version tools/peers/PEER pins (downloaded if needed)."""
    go = shutil.which("go")
    if go is None:
        pytest.fail(f"go is missing: {module} is read from the module tools/peers/{peer} pins", pytrace=False)
    done = subprocess.run(
        [go, "mod", "download", "-json", module],
        cwd=PEER_MODULES / peer, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"go mod download {module}: {done.stdout}{done.stderr}")
    return Path(json.loads(done.stdout)["Dir"])


def istio_module_dir() -> Path:
    return module_dir("istio", "istio.io/istio")


def istio_crds_file() -> Path:
    """Istio's CRDs, as its base chart installs them."""
    return istio_module_dir() / "manifests" / "charts" / "base" / "files" / "crd-all.gen.yaml"
