"""The ``pilotfish`` command line lists every command, and building its parser (``--help``)
imports none of the modules the commands run on: each command's handler imports them when it
runs (app/cli/__init__.py), so ``serve`` starts without the agent's, the offline tools' and the
clients' modules and ``--help`` answers at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMMANDS = (
    "serve",
    "agent",
    "validate",
    "config-dump",
    "kube-inject",
    "proxy-status",
    "proxy-config",
    "compare-istiod",
    "explain",
    "diff",
    "version",
)
# what the commands run on: none of it is needed to list them
HEAVY = (
    "app.runtime",
    "app.agent.run",
    "app.environment",
    "app.debug.dump",
    "app.inject.injector",
    "app.preview.push",
    "app.xds.server",
    "app.xds.fetch",
    "aiohttp",
    "grpc",
    "uvloop",
)


def _python(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def test_building_the_parser_imports_no_command_s_modules() -> None:
    code = "import json, sys; from app.cli import parser; parser(); print(json.dumps(sorted(sys.modules)))"
    done = _python("-c", code)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert "app.cli.server" in loaded and "app.cli.agent" in loaded
    assert sorted(loaded & set(HEAVY)) == []


def test_help_lists_every_command() -> None:
    done = _python("-m", "app.cli", "--help")
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split("positional arguments:", 1)[1].split("{", 1)[1].split("}", 1)[0].split(",")
    assert sorted(listed) == sorted(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_s_help_answers(command: str) -> None:
    done = _python("-m", "app.cli", command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: pilotfish {command}")
