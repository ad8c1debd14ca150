"""Mutual TLS between two sidecars, as a mesh run by istiod has it: ``pilotfish serve`` with its CA
and secure port, two ``pilotfish agent`` pods (client and server, each with a real Envoy) that get
their workload certificates from the CA by token and serve them to Envoy over SDS.

Auto mTLS is on. Without traffic capture (interception NONE) the server's inbound listener comes
from its Sidecar's ``ingress`` entry (istiod listener_inbound.go), the client's outbound one from
its Sidecar's egress listener. The server's PERMISSIVE chains take both mTLS (from the client's
Envoy) and plaintext; the backend sees the client's SPIFFE identity in the XFCC header
(APPEND_FORWARD with the URI, istiod's inbound default); a STRICT PeerAuthentication ends
plaintext while the mesh traffic goes on.
"""

from __future__ import annotations

import http.client
from pathlib import Path

from tests.e2e.backends import Backends
from tests.e2e.conftest import new_config_dir
from tests.e2e.harness import ConfigDir, free_port, send, wait_until
from tests.e2e.processes import SecureAgent, http_get, run_pilotfish, run_secure_agent
from tests.support.mesh import endpoint_slice, kube_pod, kube_service, sidecars_without_capture, slice_endpoint

NS = "demo"
CLIENT_IP, SERVER_IP = "127.0.0.51", "127.0.0.52"
SERVER_HOST = f"server.{NS}.svc.cluster.local"
TOKENS = {"client": "client-token", "server": "server-token"}

MESH = """rootNamespace: istio-system
enableAutoMtls: true
trustDomain: cluster.local
connectTimeout: 2s
outboundTrafficPolicy: {mode: ALLOW_ANY}
"""
STRICT = f"""
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {{name: default, namespace: {NS}}}
spec: {{mtls: {{mode: STRICT}}}}
"""


def workloads(egress_port: int, server_port: int) -> str:
    ports = f"[{{name: http, port: {server_port}, protocol: TCP}}]"
    return "".join(
        [
            kube_service("server", f"[{{name: http, port: {egress_port}, targetPort: {server_port}}}]",
                         namespace=NS, cluster_ip="10.96.7.2", selector="app: server"),
            kube_pod("server-0", SERVER_IP, "app: server", namespace=NS, service_account="server"),
            kube_pod("client-0", CLIENT_IP, "app: client", namespace=NS, service_account="client"),
            endpoint_slice("server", ports, slice_endpoint(SERVER_IP, "server-0", namespace=NS), namespace=NS),
        ]
    )  # fmt: skip


def plaintext_works(address: str, port: int) -> bool:
    """A plain HTTP request straight to the server sidecar's inbound listener is answered."""
    conn = http.client.HTTPConnection(address, port, timeout=5)
    try:
        conn.request("GET", "/plain")
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def test_sidecars_talk_mtls_with_certificates_from_the_ca_and_strict_ends_plaintext(tmp_path: Path) -> None:
    backends = Backends({"server-app": "127.0.0.1"}).start()
    egress_port, server_port, secure_port = free_port(), free_port(), free_port()
    config: ConfigDir = new_config_dir(tmp_path / "config")
    config.write("mesh.yaml", MESH)
    sidecars = sidecars_without_capture(
        NS, egress_port=egress_port, server_ip=SERVER_IP, server_port=server_port, app_port=backends.port
    )
    config.write("sidecars.yaml", sidecars)
    config.write("workloads.yaml", workloads(egress_port, server_port))
    (tmp_path / "tokens").write_text("".join(f"{token} {NS} {name}\n" for name, token in TOKENS.items()))
    serve_args = (
        "--ca-dir", str(tmp_path / "ca"),
        "--secure-xds-address", f"127.0.0.1:{secure_port}",
        "--trusted-token-file", str(tmp_path / "tokens"),
    )  # fmt: skip
    try:
        with run_pilotfish(config, tmp_path, extra_args=serve_args) as server:
            root = (tmp_path / "ca" / "root-cert.pem").read_text()
            with (
                run_secure_agent(
                    SecureAgent("server", NS, TOKENS["server"], SERVER_IP, {"app": "server"}),
                    secure_port, root, tmp_path / "server",
                ) as server_agent,
                run_secure_agent(
                    SecureAgent("client", NS, TOKENS["client"], CLIENT_IP, {"app": "client"}),
                    secure_port, root, tmp_path / "client",
                ) as client_agent,
            ):
                for agent in (server_agent, client_agent):
                    ready = f"http://127.0.0.1:{agent.status_port}/healthz/ready"
                    wait_until(lambda a=ready: http_get(a, timeout=2)[0] == 200, "the agents' /healthz/ready")

                # client Envoy -> (mTLS, certificates from the CA over SDS) -> server Envoy -> backend
                wait_until(lambda: send(egress_port, host=SERVER_HOST).status == 200, "mesh traffic to the server")
                reply = send(egress_port, "/mesh", host=SERVER_HOST)
                assert reply.backend == "server-app", reply.raw
                headers = {k.lower(): v for k, v in reply.body["headers"].items()}
                xfcc = headers.get("x-forwarded-client-cert", "")
                assert f"URI=spiffe://cluster.local/ns/{NS}/sa/client" in xfcc, xfcc
                assert f"By=spiffe://cluster.local/ns/{NS}/sa/server" in xfcc, xfcc

                # PERMISSIVE: plaintext to the server sidecar is accepted too, without an identity
                assert plaintext_works(SERVER_IP, server_port)

                # STRICT: plaintext is refused, the mesh traffic goes on
                config.write("strict.yaml", STRICT)
                wait_until(lambda: not plaintext_works(SERVER_IP, server_port), "STRICT to refuse plaintext")
                assert send(egress_port, "/after-strict", host=SERVER_HOST).backend == "server-app"
                for agent in (server_agent, client_agent):
                    assert agent.rejected_updates().get("listener_manager.lds.update_rejected") == 0
            assert server.alive()
    finally:
        backends.stop()
