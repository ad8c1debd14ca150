"""An ingress gateway terminating TLS with a ``credentialName`` certificate, as istiod serves it:
``pilotfish serve`` with its CA and secure port, a gateway pod (``pilotfish agent --proxy-type
router`` with a real Envoy) authenticated by token, a Kubernetes TLS Secret in the gateway's
namespace read from the config dir and sent to Envoy over ADS as ``kubernetes://gw-cert``
(istiod pilot/pkg/xds/sds.go). An HTTPS request with the Secret's host reaches the backend; a
rewritten Secret reaches Envoy without a restart (the next handshake shows the new certificate).
"""

from __future__ import annotations

import base64
import datetime
import http.client
import socket
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.e2e.backends import Backends
from tests.e2e.conftest import new_config_dir
from tests.e2e.harness import ConfigDir, free_port, wait_until
from tests.e2e.processes import SecureAgent, http_get, run_pilotfish, run_secure_agent

NS = "gw"
HOST = "shop.example.com"
TOKEN = "gateway-token"


def self_signed(common_name: str) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for ``common_name``, valid for a day."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(common_name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert.public_bytes(pem), key_pem


def secret(cert: bytes, key: bytes) -> str:
    b64 = base64.b64encode
    return f"""apiVersion: v1
kind: Secret
metadata: {{name: gw-cert, namespace: {NS}}}
type: kubernetes.io/tls
data: {{tls.crt: {b64(cert).decode()}, tls.key: {b64(key).decode()}}}
"""


def gateway(gateway_port: int, backend_port: int) -> str:
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: ingress, namespace: {NS}}}
spec:
  selector: {{app: gateway}}
  servers:
  - port: {{number: {gateway_port}, name: https, protocol: HTTPS}}
    hosts: ["{HOST}"]
    tls: {{mode: SIMPLE, credentialName: gw-cert}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: shop, namespace: {NS}}}
spec:
  hosts: ["{HOST}"]
  gateways: [ingress]
  http:
  - route: [{{destination: {{host: shop.backend.internal, port: {{number: 80}}}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: shop-backend, namespace: {NS}}}
spec:
  hosts: [shop.backend.internal]
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  resolution: STATIC
  endpoints: [{{address: 127.0.0.1, ports: {{http: {backend_port}}}}}]
"""


def https_get(port: int, trusted: bytes) -> tuple[int, bytes]:
    """(status, the certificate the gateway presented, DER) of a GET with SNI and Host ``HOST``."""
    context = ssl.create_default_context(cadata=trusted.decode())
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
    conn.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname=HOST)
    try:
        conn.request("GET", "/shop", headers={"Host": HOST})
        status = conn.getresponse().status
        presented = conn.sock.getpeercert(binary_form=True) or b""
        return status, presented
    finally:
        conn.close()


def der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


def test_a_gateway_terminates_tls_with_its_credential_name_secret_and_follows_its_rotation(tmp_path: Path) -> None:
    backends = Backends({"shop": "127.0.0.1"}).start()
    gateway_port, secure_port = free_port(), free_port()
    first, rotated = self_signed(HOST), self_signed(HOST)
    config: ConfigDir = new_config_dir(tmp_path / "config")
    config.write("gateway.yaml", gateway(gateway_port, backends.port))
    config.write("secret.yaml", secret(*first))
    (tmp_path / "tokens").write_text(f"{TOKEN} {NS} gateway\n")
    serve_args = (
        "--ca-dir", str(tmp_path / "ca"),
        "--secure-xds-address", f"127.0.0.1:{secure_port}",
        "--trusted-token-file", str(tmp_path / "tokens"),
    )  # fmt: skip
    pod = SecureAgent("gateway", NS, TOKEN, "127.0.0.1", {"app": "gateway"}, proxy_type="router")

    def answered(trusted: bytes) -> tuple[int, bytes] | None:
        try:
            return https_get(gateway_port, trusted)
        except (OSError, ssl.SSLError, http.client.HTTPException):
            return None

    try:
        with run_pilotfish(config, tmp_path, extra_args=serve_args) as server:
            root = (tmp_path / "ca" / "root-cert.pem").read_text()
            with run_secure_agent(pod, secure_port, root, tmp_path / "gateway") as agent:
                ready = f"http://127.0.0.1:{agent.status_port}/healthz/ready"
                wait_until(lambda: http_get(ready, timeout=2)[0] == 200, "the gateway agent's /healthz/ready")
                status, presented = wait_until(lambda: answered(first[0]), "HTTPS through the gateway")
                assert (status, presented) == (200, der(first[0]))
                assert backends.hits["shop"] >= 1

                # the Secret rewritten: the next handshake presents the new certificate
                config.write("secret.yaml", secret(*rotated))

                def rotated_presented() -> int | None:
                    got = answered(rotated[0])
                    return got[0] if got is not None and got[1] == der(rotated[0]) else None

                assert wait_until(rotated_presented, "the rotated certificate") == 200
                assert agent.rejected_updates().get("listener_manager.lds.update_rejected") == 0
            assert server.alive()
    finally:
        backends.stop()
