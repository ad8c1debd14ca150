"""``pilotfish agent --root-cert FILE`` with a file that holds no certificate: one clear line
naming the flag and the file, a non-zero exit, no traceback (as pilot-agent, which refuses to
start without a usable root); a real root is read and trusted as before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.agent.certs import read_root_certificates
from app.errors import PilotfishError
from app.security.ca import CertificateAuthority

BAD = {
    "text": b"not a certificate\n",
    "empty": b"",
    "binary": b"\xff\xfe\x00garbage",
    "key": b"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n",
    "truncated": b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
}


def run_agent(root: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    argv = [sys.executable, "-m", "app.cli", "agent", "--root-cert", str(root), "--bootstrap-only"]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("content", BAD.values(), ids=BAD.keys())
def test_a_file_that_is_not_a_certificate_is_one_clear_line(content: bytes, tmp_path: Path) -> None:
    root = tmp_path / "root-cert.pem"
    root.write_bytes(content)
    done = run_agent(root, tmp_path)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"pilotfish: agent: --root-cert {root}: not a PEM certificate"]


def test_a_directory_is_one_clear_line(tmp_path: Path) -> None:
    done = run_agent(tmp_path, tmp_path)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [f"pilotfish: agent: --root-cert {tmp_path}: Is a directory"]


def test_a_real_root_is_read_and_text_around_it_dropped(tmp_path: Path) -> None:
    ca = CertificateAuthority.self_signed("cluster.local")
    root = tmp_path / "root-cert.pem"
    root.write_text("# the mesh root, issued by pilotfish\n" + ca.root_pem)
    assert read_root_certificates(root) == ca.root_pem
    other = CertificateAuthority.self_signed("cluster.local")
    root.write_text(ca.root_pem + other.root_pem)  # a bundle: both trusted
    assert read_root_certificates(root) == ca.root_pem + other.root_pem
    root.write_text("junk")
    with pytest.raises(PilotfishError, match="not a PEM certificate"):
        read_root_certificates(root)
