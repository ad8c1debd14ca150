"""Rendering charts with the real helm binary: pilotfish's chart, and Istio's own charts read from
the pinned istio.io/istio module (istiod's istio-discovery, base, gateway), never copied."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support.peers import istio_module_dir

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pilotfish"
KUBERNETES_VERSION = "1.31.0"


def tool(name: str) -> str:
    beside = Path(sys.executable).parent / name  # installed into the venv by make
    found = shutil.which(name) or (str(beside) if beside.exists() else None)
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail(f"{name} not found (CI requires it; make test installs it)")
    pytest.skip(f"{name} not found")


def helm(*args: str) -> str:
    done = subprocess.run([tool("helm"), *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def render_text(*values: str, chart: Path = CHART, release: str = "pilotfish", namespace: str = "istio-system") -> str:
    return helm("template", release, str(chart), "--namespace", namespace, *values)


def render(
    *values: str, chart: Path = CHART, release: str = "pilotfish", namespace: str = "istio-system"
) -> list[dict[str, Any]]:
    text = render_text(*values, chart=chart, release=release, namespace=namespace)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def istio_chart(name: str) -> Path:
    """One of Istio's charts in the pinned module: istio-control/istio-discovery, base, gateway."""
    return istio_module_dir() / "manifests" / "charts" / name


def render_istiod(*values: str) -> list[dict[str, Any]]:
    return render(*values, chart=istio_chart("istio-control/istio-discovery"), release="istiod")


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in docs}


def named(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == kind}


def assert_valid(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"{doc['kind']} {doc['metadata']['name']}: {e.message} at {list(e.path)}") from None
