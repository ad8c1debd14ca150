"""Two ``pilotfish serve`` replicas against one real kube-apiserver, sharing one CA (one root),
each with its POD_NAME: exactly one holds the Lease and writes ``istio-ca-root-cert``; killing
the leader's process (a pod deleted without a chance to release) hands the lease to the other
once it expires, and writes resume; the survivor stopping cleanly releases the lease."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from app.controllers.leader import NAMESPACE_CONTROLLER
from tests.support.cluster import Cluster, free_port
from tests.support.leader_lock import holder as lock_holder

LEASE_SECONDS = 2
T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 60.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return None


@contextmanager
def replica(
    kube: Cluster, name: str, system: str, ca_dir: Path, log: Path
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    http = free_port()
    argv = [
        sys.executable, "-m", "app.cli", "serve",
        "--kubeconfig", str(kube.admin_kubeconfig), "--system-namespace", system, "--ca-dir", str(ca_dir),
        "--xds-address", f"127.0.0.1:{free_port()}", "--secure-xds-address", f"127.0.0.1:{free_port()}",
        "--http-address", f"127.0.0.1:{http}",
    ]  # fmt: skip
    env = {
        **{k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
        "POD_NAME": name,
        "PILOTFISH_LEADER_LEASE_DURATION": f"{LEASE_SECONDS}s",
        "PYTHONUNBUFFERED": "1",
    }
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(f"{name} ready", lambda: process.poll() is None and get(f"http://127.0.0.1:{http}/ready") is not None)
        yield process, http
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(30)


def holder(kube: Cluster, system: str) -> str:
    return lock_holder(kube, system, NAMESPACE_CONTROLLER)


def root_cert(kube: Cluster, ns: str) -> Any:
    cm = kube.get("v1", "ConfigMap", ns, "istio-ca-root-cert")
    return None if cm is None else (cm.get("data") or {}).get("root-cert.pem")


def leader_gauge(http: int) -> str:
    text = get(f"http://127.0.0.1:{http}/metrics") or ""
    wanted = f'leader_election_master_status{{name="{NAMESPACE_CONTROLLER}"}}'
    return next((line.split()[-1] for line in text.splitlines() if line.startswith(wanted)), "")


def test_one_replica_writes_and_a_killed_leader_hands_the_lease_over(kube: Cluster, tmp_path: Path) -> None:
    team = secrets.token_hex(4)
    system = kube.namespace("sys", {"team": team})
    ns = kube.namespace("app", {"team": team})
    unselected = kube.namespace("other")
    kube.apply({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "istio", "namespace": system},
        "data": {"mesh": f"discoverySelectors: [{{matchLabels: {{team: '{team}'}}}}]\n"},
    })  # fmt: skip
    ca_dir = tmp_path / "ca"
    ca_dir.mkdir()
    with replica(kube, "replica-1", system, ca_dir, tmp_path / "replica-1.log") as (first, first_http):
        root = (ca_dir / "root-cert.pem").read_text()  # made by the first; the second reads it
        with replica(kube, "replica-2", system, ca_dir, tmp_path / "replica-2.log") as (_, second_http):
            assert wait_for("the ConfigMap", lambda: root_cert(kube, ns)) == root
            assert holder(kube, system) == "replica-1"
            assert leader_gauge(first_http) == "1" and leader_gauge(second_http) == ""
            assert kube.get("v1", "ConfigMap", unselected, "istio-ca-root-cert") is None  # not selected

            first.kill()  # no release: the lease must expire first
            first.wait(10)
            killed = time.monotonic()
            wait_for("replica-2 holding the lease", lambda: holder(kube, system) == "replica-2", timeout=30)
            assert time.monotonic() - killed <= 4 * LEASE_SECONDS
            assert wait_for("replica-2 leading", lambda: leader_gauge(second_http) == "1")
            kube.delete("v1", "ConfigMap", ns, "istio-ca-root-cert")
            assert wait_for("writes resumed", lambda: root_cert(kube, ns)) == root
        assert holder(kube, system) == ""  # replica-2 stopped by SIGTERM: released
