"""istiod (``pilot-discovery discovery``, built from the pinned istio module) outside a cluster,
against the tests' real kube-apiserver, as the reference the differential test compares with.

It reads the mesh from the ``istio`` ConfigMap of its namespace (``--meshConfig`` names a file
that does not exist, so istiod's getConfigurationSources falls back to the ConfigMap, the same
object pilotfish reads); it runs its own CA (a root in ``istio-ca-secret``, as in a cluster); its
webhook patching is off (no webhook configurations exist to patch); every port is a free one on
loopback. Ready when its ``/ready`` (istiodReadyHandler: caches synced) answers 200.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.cluster import Cluster, PeerProcess, _die_with_parent, free_port
from tests.support.peers import peer_binary

READY_TIMEOUT = 120.0  # a loaded 2-core machine; it is usually ready in a few seconds
# how often /ready is asked: the load benchmark's start to ready is a figure, and pilotfish's is
# asked as often (bench/processes.py)
READY_POLL = 0.02


@dataclass(frozen=True)
class Istiod:
    process: PeerProcess
    xds_address: str  # the plaintext ADS port (15010 in a cluster)
    http_address: str  # /ready, /debug (8080 in a cluster)


@contextmanager
def running_istiod(
    kube: Cluster, namespace: str, workdir: Path, extra_env: Mapping[str, str] | None = None
) -> Iterator[Istiod]:
    """istiod for root namespace ``namespace`` (its mesh ConfigMap must exist), ready; stopped
    after. ``extra_env``: more of istiod's settings (the load benchmark's PILOT_* tuning)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "cacerts").mkdir(exist_ok=True)
    xds, http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    argv = [
        str(peer_binary("pilot-discovery")), "discovery",
        "--kubeconfig", str(kube.admin_kubeconfig),
        "--namespace", namespace,
        "--meshConfig", str(workdir / "no-mesh-file"),  # absent: the istio ConfigMap is read
        "--grpcAddr", xds,
        "--secureGRPCAddr", f"127.0.0.1:{free_port()}",
        "--httpAddr", http,
        "--httpsAddr", f"127.0.0.1:{free_port()}",
        "--monitoringAddr", f"127.0.0.1:{free_port()}",
        "--ctrlz_port", str(free_port()),
        "--log_output_level", "default:info",
    ]  # fmt: skip
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "POD_NAMESPACE": namespace,
        "POD_NAME": "istiod-0",
        "ROOT_CA_DIR": str(workdir / "cacerts"),  # no plugged-in cacerts: istio-ca-secret
        "KUBECONFIG": "",
        "CLUSTER_ID": "Kubernetes",
        "REVISION": "default",
        "INJECTION_WEBHOOK_CONFIG_NAME": "",
        "VALIDATION_WEBHOOK_CONFIG_NAME": "",
        "ISTIOD_CUSTOM_HOST": "localhost",
        **(extra_env or {}),
    }
    log_path = workdir / "istiod.log"
    with log_path.open("wb") as log:
        popen = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=workdir,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )  # fmt: skip
    process = PeerProcess("istiod", log_path, popen)
    try:
        _wait_ready(process, f"http://{http}/ready")
        yield Istiod(process, xds, http)
    finally:
        process.stop()


def _wait_ready(process: PeerProcess, url: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    last: object = None
    while time.monotonic() < deadline:
        if not process.alive():
            raise RuntimeError(f"istiod exited with {process.popen.returncode}:\n{process.tail(80)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (OSError, urllib.error.URLError) as e:
            last = e
        time.sleep(READY_POLL)
    raise RuntimeError(f"istiod not ready after {READY_TIMEOUT:.0f}s (last: {last}):\n{process.tail(80)}")
