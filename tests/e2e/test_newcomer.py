"""The README's newcomer path, run as written: ``make run``'s server on the bundled example mesh,
then the README's one ``pilotfish agent`` command. Its Envoy's clusters and listeners must all
become active (none left warming for a secret nothing serves) and a request through it must
reach an upstream. Ports are the defaults the README uses, so nothing else may hold them."""

from __future__ import annotations

import http.client
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from tests.e2e.harness import ConfigDir, wait_until
from tests.e2e.processes import REPO, Envoy, http_get, run_pilotfish
from tests.support.envoy import envoy_binary

SERVE = "$(BIN)/pilotfish serve --config-dir examples/bookinfo"


def readme_agent_command() -> str:
    """The README's agent command: the shell lines from ``POD_NAME=`` to the last continuation."""
    text = (REPO / "README.md").read_text()
    found = re.search(r"^(POD_NAME=(?:[^\n]*\\\n)+[^\n]*)$", text, re.MULTILINE)
    assert found and "pilotfish agent" in found.group(1), "the README gives no `POD_NAME=... pilotfish agent` command"
    return found.group(1)


def make_run_args(ca_dir: Path) -> tuple[str, ...]:
    """What ``make run`` adds after the config dir, its paths made absolute (the CA in ``ca_dir``)."""
    recipe = (REPO / "Makefile").read_text().replace("\\\n", " ")  # continuation lines joined
    line = next(line for line in recipe.splitlines() if SERVE in line)
    args = shlex.split(line.split(SERVE, 1)[1])
    absolute = {".pilotfish/ca": str(ca_dir)}
    return tuple(absolute.get(a) or (str(REPO / a) if a.startswith("examples/") else a) for a in args)


def test_readme_agent_command_on_the_example_mesh(tmp_path: Path) -> None:
    makefile = (REPO / "Makefile").read_text()
    assert SERVE in makefile, "make run no longer serves examples/bookinfo as this test does"
    config = ConfigDir(REPO / "examples" / "bookinfo")
    command = readme_agent_command().replace(".venv/bin/pilotfish", f"{sys.executable} -m app.cli")
    # the README runs from the repository: its relative paths, made absolute for the pod's directory
    command = command.replace(" .pilotfish/ca/", f" {tmp_path}/ca/").replace(" examples/", f" {REPO}/examples/")
    # the agent finds Envoy as it does for the README's command: beside its Python (make installs it)
    envoy_binary()  # with CI=true, no Envoy is a failure
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with run_pilotfish(config, tmp_path, ports=(15010, 15014), extra_args=make_run_args(tmp_path / "ca")):
        workdir = tmp_path / "pod"
        workdir.mkdir()
        with (workdir / "agent.log").open("wb") as log:
            process = subprocess.Popen(["bash", "-c", command], cwd=workdir, env=env, stdout=log, stderr=log)
        agent = Envoy("agent", process, workdir / "agent.log")
        agent.admin_port = 15000
        try:
            wait_until(lambda: http_get("http://127.0.0.1:15021/healthz/ready", timeout=2)[0] == 200, "agent ready")
            wait_until(lambda: agent.listeners().get("127.0.0.1_15100", {}).get("active_state"), "egress listener")
            dump = agent.config_dump()
            assert dump["ClustersConfigDump"].get("dynamic_warming_clusters", []) == []
            assert len(dump["ClustersConfigDump"]["dynamic_active_clusters"]) >= 1
            assert all("active_state" in listener for listener in agent.listeners().values())
            wait_until(lambda: _get_via_envoy() == (200, "ready"), "a request through Envoy to reach /ready")
            agent.assert_nothing_rejected()
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(20) == 0, agent.describe()


def _get_via_envoy() -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", 15100, timeout=5)
    try:
        conn.request("GET", "/ready", headers={"Host": "monitoring.pilotfish.local"})
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace").strip()
    finally:
        conn.close()

