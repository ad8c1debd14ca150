"""``--ca-dir`` holding a plugged-in CA (istiod's ``cacerts`` layout) followed as it changes, as
istiod follows its /etc/cacerts (pilot/pkg/bootstrap/istio_ca.go initCACertsAndCRLWatcher,
handleEvent): an intermediate rotated under the same root signs from then on, and the secure
port presents a certificate of it to new handshakes, without a restart; a root replaced outright
(without ISTIO_MULTIROOT_MESH) is refused and the CA in force stays. The files change as a
mounted ``cacerts`` Secret changes (tests/support/volume.py)."""

from __future__ import annotations

from pathlib import Path

from cryptography import x509

from tests.e2e.harness import ConfigDir, free_port, wait_until
from tests.e2e.processes import run_pilotfish
from tests.kube.test_ca_reload import serving_issuer
from tests.support.plugged_ca import KeyPair, intermediate, key_pem, new_root, pem
from tests.support.volume import AtomicVolume


def ca_files(signer: KeyPair, root: x509.Certificate) -> dict[str, str]:
    cert, key = signer
    return {
        "ca-cert.pem": pem(cert),
        "ca-key.pem": key_pem(key),
        "cert-chain.pem": pem(cert) + pem(root),
        "root-cert.pem": pem(root),
    }


def test_a_rotated_intermediate_signs_at_once_and_a_new_root_is_refused(config_dir: ConfigDir, tmp_path: Path) -> None:
    root = new_root("root")
    first, second = intermediate(root, "intermediate one"), intermediate(root, "intermediate two")
    volume = AtomicVolume(tmp_path / "cacerts")
    volume.write(ca_files(first, root[0]))
    secure = free_port()
    args = ("--ca-dir", str(volume.target), "--secure-xds-address", f"127.0.0.1:{secure}")
    with run_pilotfish(config_dir, tmp_path, extra_args=args) as server:
        assert serving_issuer(secure) == first[0].subject

        volume.write(ca_files(second, root[0]))
        wait_until(lambda: serving_issuer(secure) == second[0].subject, "the rotated intermediate to sign")

        other = new_root("another root")
        volume.write(ca_files(intermediate(other, "intermediate three"), other[0]))
        wait_until(lambda: "ROOT-CA not supported" in server.log(), "the new root refused")
        assert serving_issuer(secure) == second[0].subject
