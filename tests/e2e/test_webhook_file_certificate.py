"""``--webhook-cert`` / ``--webhook-key`` rotated under a running pilotfish. Without its CA the chart
serves the webhooks with a ``kubernetes.io/tls`` Secret mounted at /var/run/secrets/istiod/tls
(``webhook.certSecretName``), which cert-manager renews before it expires and the kubelet swaps
into the volume (tests/support/volume.py). istiod reloads those files when they change
(pilot/pkg/bootstrap/certcontroller.go initFileCertificateWatches), so the API server, which
checks the certificate at every call, never meets an expired one. A renewal whose key does not
match its certificate (a half-written rotation) is not taken: the pair in force keeps serving."""

from __future__ import annotations

import ssl
from pathlib import Path

import trustme

from tests.e2e.harness import ConfigDir, free_port, wait_until
from tests.e2e.processes import run_pilotfish
from tests.support.volume import AtomicVolume


def tls_secret(cert: trustme.LeafCert) -> dict[str, bytes]:
    return {"tls.crt": cert.cert_chain_pems[0].bytes(), "tls.key": cert.private_key_pem.bytes()}


def served(port: int) -> str:
    """The certificate a TLS client is shown on ``port`` (PEM, as ``ssl`` writes it)."""
    return ssl.get_server_certificate(("127.0.0.1", port), timeout=5)


def same(pem: str, cert: trustme.LeafCert) -> bool:
    return ssl.PEM_cert_to_DER_cert(pem) == ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())


def test_a_renewed_certificate_is_served_without_a_restart(config_dir: ConfigDir, tmp_path: Path) -> None:
    ca = trustme.CA()
    first, renewed, other = (ca.issue_cert("127.0.0.1") for _ in range(3))
    volume = AtomicVolume(tmp_path / "tls")
    volume.write(tls_secret(first))
    port = free_port()
    args = (
        "--webhook-address", f"127.0.0.1:{port}",
        "--webhook-cert", str(volume.target / "tls.crt"),
        "--webhook-key", str(volume.target / "tls.key"),
    )  # fmt: skip
    with run_pilotfish(config_dir, tmp_path, extra_args=args) as server:
        assert same(served(port), first)

        volume.write(tls_secret(renewed))
        wait_until(lambda: same(served(port), renewed), "the renewed certificate to be served")

        # a certificate with another's key: refused, the renewed pair stays
        volume.write({"tls.crt": other.cert_chain_pems[0].bytes(), "tls.key": renewed.private_key_pem.bytes()})
        wait_until(lambda: "the certificate in force stays" in server.log(), "the mismatched pair refused")
        assert same(served(port), renewed)

        volume.write(tls_secret(other))  # and the next good one is taken
        wait_until(lambda: same(served(port), other), "the next certificate to be served")
