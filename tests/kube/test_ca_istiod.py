"""istiod and pilotfish on one ``istio-ca-secret``, on the real kube-apiserver: Istio's own
pilot-discovery (built from the pinned module) signs with the root pilotfish wrote, and pilotfish
signs with the root istiod wrote, so replicas of both can run side by side with one root."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.security.ca import CertificateAuthority
from app.security.ca_store import KubeCaStore
from app.sources.kube.client import api_client
from tests.support.cluster import Cluster, free_port
from tests.support.peers import peer_binary
from tests.support.rbac import grant_istiod_ca_rules

TD = "cluster.local"
# istiod's log lines (security/pkg/pki/ca/ca.go NewSelfSignedIstioCAOptions, loadSelfSignedCaSecret)
USED = re.compile(
    r"Using (existing|self-generated) public key: (-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----)", re.S
)


@contextmanager
def istiod(kube: Cluster, namespace: str, workdir: Path) -> Iterator[Path]:
    """pilot-discovery for ``namespace`` with the admin's kubeconfig, on loopback ports and an
    empty ROOT_CA_DIR (no mounted cacerts); yields its log file, and stops it."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "mesh").write_text(f"trustDomain: {TD}\n")
    (workdir / "cacerts").mkdir(exist_ok=True)
    argv = [
        str(peer_binary("pilot-discovery")), "discovery",
        "--kubeconfig", str(kube.admin_kubeconfig),
        "--namespace", namespace,
        "--meshConfig", str(workdir / "mesh"),
        "--grpcAddr", f"127.0.0.1:{free_port()}",
        "--secureGRPCAddr", f"127.0.0.1:{free_port()}",
        "--httpAddr", f"127.0.0.1:{free_port()}",
        "--httpsAddr", f"127.0.0.1:{free_port()}",
        "--monitoringAddr", f"127.0.0.1:{free_port()}",
        "--ctrlz_port", str(free_port()),
    ]  # fmt: skip
    env = {**os.environ, "POD_NAMESPACE": namespace, "ROOT_CA_DIR": str(workdir / "cacerts"), "KUBECONFIG": ""}
    log = workdir / "istiod.log"
    with log.open("w") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    try:
        yield log
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def root_istiod_used(log: Path, timeout: float = 60.0) -> tuple[str, str]:
    """("existing" or "self-generated", the root PEM) from istiod's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = USED.search(log.read_text(errors="replace"))
        if found:
            return found.group(1), found.group(2) + "\n"
        time.sleep(0.2)
    raise AssertionError(f"istiod did not say which root it uses:\n{log.read_text(errors='replace')[-4000:]}")


async def test_istiod_signs_with_the_root_pilotfish_wrote(
    kube: Cluster, pilotfish_kubeconfig: Path, tmp_path: Path
) -> None:
    system = kube.namespace("system")
    grant_istiod_ca_rules(kube, system)
    client = api_client(pilotfish_kubeconfig)
    try:
        store = KubeCaStore(client, system, lambda: CertificateAuthority.self_signed(TD))
        ca = await store.load()
    finally:
        await client.close()
    assert store.created
    with istiod(kube, system, tmp_path / "istiod") as log:
        how, root = root_istiod_used(log)
    assert (how, root) == ("existing", ca.root_pem)


async def test_pilotfish_signs_with_the_root_istiod_wrote(
    kube: Cluster, pilotfish_kubeconfig: Path, tmp_path: Path
) -> None:
    system = kube.namespace("system")
    grant_istiod_ca_rules(kube, system)
    with istiod(kube, system, tmp_path / "istiod") as log:
        how, root = root_istiod_used(log)
    assert how == "self-generated"
    client = api_client(pilotfish_kubeconfig)
    try:
        store = KubeCaStore(client, system, lambda: CertificateAuthority.self_signed(TD))
        ca = await store.load()
    finally:
        await client.close()
    assert not store.created and ca.root_pem == root
