"""Istio's own sidecar against pilotfish: pilot-agent (from the pinned istio module) and Envoy in
pods of their own, talking to ``pilotfish serve`` on its secure port only, as in a cluster.

Each pilot-agent gets its workload certificate from pilotfish's CA with its token, carries
Envoy's Delta ADS to the secure port through its local xDS proxy, serves Envoy the certificate
over SDS, and answers the pod's DNS from the mesh's name table (NDS). Two sidecars talk mTLS,
a gateway (``pilot-agent proxy router``) serves a Gateway, config changes reach every proxy,
and so does a change made while pilotfish was down, after it restarts.

Without traffic capture (interception NONE, no iptables in the test pods) the server's inbound
listener comes from its Sidecar's ``ingress`` entry and the client's outbound one from its
egress listener, as in test_mtls.py, which runs the same mesh with ``pilotfish agent``.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dns.message
import dns.query
import dns.rdatatype
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from app.agent.certs import build_csr
from app.security.ca import CertificateAuthority
from tests.e2e.backends import Backends
from tests.e2e.conftest import new_config_dir
from tests.e2e.harness import ConfigDir, free_port, send, wait_until
from tests.e2e.istio_proxy import IstioProxy, Workload, istio_version, run_istio_proxy
from tests.e2e.processes import Pilotfish, run_pilotfish
from tests.support.mesh import endpoint_slice, kube_pod, kube_service, slice_endpoint
from tests.support.peers import peer_binary
from tests.support.pods import Pod, PodNetwork, pod_network

NS = "demo"
SERVER_HOST = f"server.{NS}.svc.cluster.local"
SERVER_VIP = "10.96.7.2"
APP_PORT, SERVER_PORT, GATEWAY_PORT = 8080, 9080, 8088
# without capture the client reaches a service through an egress listener on its port (istiod
# builds that listener's routes from the services on that port)
EGRESS_PORT = SERVICE_PORT = 15100
CLIENT = Workload("client", NS, "client", {"app": "client"})
SERVER = Workload("server", NS, "server", {"app": "server"}, ports=(SERVER_PORT,))
GATEWAY = Workload(
    "istio-ingressgateway", "istio-system", "istio-ingressgateway",
    {"istio": "ingressgateway", "app": "istio-ingressgateway"}, ports=(GATEWAY_PORT,), proxy_type="router",
)  # fmt: skip
TOKENS = {"client": "client-token", "server": "server-token", "istio-ingressgateway": "gateway-token"}

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


def sidecars(server_ip: str) -> str:
    return f"""
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: client, namespace: {NS}}}
spec:
  workloadSelector: {{labels: {{app: client}}}}
  egress:
  - port: {{number: {EGRESS_PORT}, protocol: HTTP, name: http}}
    bind: 127.0.0.1
    captureMode: NONE
    hosts: ["./*"]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: server, namespace: {NS}}}
spec:
  workloadSelector: {{labels: {{app: server}}}}
  ingress:
  - port: {{number: {SERVER_PORT}, protocol: HTTP, name: http}}
    bind: {server_ip}
    defaultEndpoint: 127.0.0.1:{APP_PORT}
  egress:
  - hosts: ["istio-system/*"]
"""


def gateway(x_config: str | None = None) -> str:
    """A Gateway for web.example.com and its route to the server; ``x_config`` a request header it sets."""
    headers = f"\n      headers: {{request: {{set: {{x-config: {x_config}}}}}}}" if x_config else ""
    return f"""
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: web, namespace: istio-system}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {GATEWAY_PORT}, name: http, protocol: HTTP}}
    hosts: ["*/web.example.com"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: web, namespace: {NS}}}
spec:
  hosts: [web.example.com]
  gateways: [istio-system/web]
  http:
  - route:
    - destination: {{host: {SERVER_HOST}, port: {{number: {SERVICE_PORT}}}}}{headers}
"""


def workloads(pods: dict[str, Pod]) -> str:
    ports = f"[{{name: http, port: {SERVER_PORT}, protocol: TCP}}]"
    server, client, gw = pods["server"], pods["client"], pods["istio-ingressgateway"]
    return "".join(
        [
            kube_service("server", f"[{{name: http, port: {SERVICE_PORT}, targetPort: {SERVER_PORT}}}]",
                         namespace=NS, cluster_ip=SERVER_VIP, selector="app: server"),
            kube_pod(server.name, server.ip, "app: server", namespace=NS, service_account="server"),
            kube_pod(client.name, client.ip, "app: client", namespace=NS, service_account="client"),
            kube_pod(gw.name, gw.ip, "istio: ingressgateway, app: istio-ingressgateway",
                     namespace="istio-system", service_account="istio-ingressgateway"),
            endpoint_slice("server", ports, slice_endpoint(server.ip, server.name, namespace=NS), namespace=NS),
        ]
    )  # fmt: skip


@dataclass
class Mesh:
    network: PodNetwork
    pods: dict[str, Pod]
    config: ConfigDir
    tmp: Path
    secure_port: int
    http_port: int
    backends: Backends

    @property
    def discovery(self) -> str:
        return f"istiod.istio-system.svc:{self.secure_port}"

    def serve(self) -> Iterator[Pilotfish]:
        """``pilotfish serve`` on the node's bridge address, the same ports every time."""
        args = (
            "--ca-dir", str(self.tmp / "ca"),
            "--xds-address", "",
            "--secure-xds-address", f"{self.network.node_ip}:{self.secure_port}",
            "--trusted-token-file", str(self.tmp / "tokens"),
        )  # fmt: skip
        return run_pilotfish(self.config, self.tmp, ports=(0, self.http_port), extra_args=args)

    def proxy(self, workload: Workload) -> Iterator[IstioProxy]:
        root = (self.tmp / "ca" / "root-cert.pem").read_text()
        pod = self.pods[workload.name]
        return run_istio_proxy(pod, workload, discovery=self.discovery, root_cert=root, token=TOKENS[workload.name])

    def from_client(self, path: str, host: str = SERVER_HOST) -> object:
        return send(EGRESS_PORT, path, host=host, connect=self.pods["client"].connect)


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[Mesh]:
    with pod_network() as network:
        pods = {w.name: network.add_pod(w.pod_name, w.namespace, tmp_path / w.name) for w in (CLIENT, SERVER, GATEWAY)}
        config = new_config_dir(tmp_path / "config")
        config.write("mesh.yaml", MESH)
        config.write("sidecars.yaml", sidecars(pods["server"].ip))
        config.write("workloads.yaml", workloads(pods))
        config.write("gateway.yaml", gateway())
        tokens = {w.name: (w.namespace, w.service_account) for w in (CLIENT, SERVER, GATEWAY)}
        (tmp_path / "tokens").write_text("".join(f"{TOKENS[n]} {ns} {sa}\n" for n, (ns, sa) in tokens.items()))
        # the server app listens on its pod's loopback, where the sidecar's inbound listener sends
        app = Backends({}).start({"server-app": pods["server"].listen(APP_PORT)})
        try:
            yield Mesh(network, pods, config, tmp_path, free_port(), free_port(), app)
        finally:
            app.stop()


def resolve(pod: Pod, name: str) -> list[str]:
    """An A query to the pod's DNS proxy (pilot-agent, 127.0.0.1:15053), from the pod."""
    query = dns.message.make_query(name, dns.rdatatype.A)
    sock = pod.udp_socket()
    try:
        answer = dns.query.udp(query, "127.0.0.1", port=15053, timeout=5, sock=sock)
    finally:
        sock.close()
    return sorted(rr.to_text() for rrset in answer.answer for rr in rrset)


def istioctl_proxy_status(mesh: Mesh) -> dict[str, dict[str, str]]:
    """``istioctl proxy-status -v 1 --xds-address`` as an operator runs it with a certificate of
    the root namespace's ``default`` account (``--cert-dir``: no API server to get a token from):
    its table by proxy, then column."""
    ca = CertificateAuthority.load_or_create(mesh.tmp / "ca", "cluster.local")
    key = ec.generate_private_key(ec.SECP256R1())
    chain = ca.sign_csr(build_csr(key, "spiffe://cluster.local/ns/istio-system/sa/default"), ["spiffe://cluster.local/ns/istio-system/sa/default"])
    certs = mesh.tmp / "istioctl"
    certs.mkdir(exist_ok=True)
    (certs / "cert-chain.pem").write_text("".join(chain[:-1]))
    (certs / "root-cert.pem").write_text(ca.root_pem)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (certs / "key.pem").write_bytes(pem)
    argv = [
        str(peer_binary("istioctl")), "proxy-status", "-v", "1", "-r", "default",
        "--xds-address", f"{mesh.network.node_ip}:{mesh.secure_port}",
        "--cert-dir", str(certs), "--authority", "istiod.istio-system.svc",
    ]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env={"HOME": str(mesh.tmp)})
    assert out.returncode == 0, out.stderr
    header, *lines = [line.split() for line in out.stdout.splitlines() if line.strip()]
    return {line[0]: dict(zip(header, line, strict=True)) for line in lines}


def plaintext_works(mesh: Mesh) -> bool:
    """A plain HTTP request from the client pod straight to the server sidecar's inbound listener."""
    client, server = mesh.pods["client"], mesh.pods["server"]
    try:
        return send(SERVER_PORT, "/plain", connect=lambda _h, p: client.connect(server.ip, p)).status == 200
    except OSError:
        return False


def test_istio_sidecars_get_certificates_config_and_dns_and_talk_mtls(mesh: Mesh) -> None:
    with mesh.serve() as server, mesh.proxy(SERVER), mesh.proxy(CLIENT) as client:
        # client app -> client Envoy -> (mTLS, certificates from pilotfish's CA over SDS) -> server Envoy -> app
        wait_until(lambda: mesh.from_client("/").status == 200, "mesh traffic from client to server")
        reply = mesh.from_client("/mesh")
        assert reply.backend == "server-app", reply.text
        headers = {k.lower(): v for k, v in reply.body["headers"].items()}
        xfcc = headers.get("x-forwarded-client-cert", "")
        assert f"URI=spiffe://cluster.local/ns/{NS}/sa/client" in xfcc, xfcc
        assert f"By=spiffe://cluster.local/ns/{NS}/sa/server" in xfcc, xfcc

        # Delta ADS through each agent, on the secure port, with the identity the CA gave it
        streams = {s["proxy"]: s for s in server.sync_status()}
        for workload in (CLIENT, SERVER):
            stream = streams[f"{workload.pod_name}.{NS}"]
            assert stream["protocol"] == "delta", stream
            assert stream["identity"] == f"spiffe://cluster.local/ns/{NS}/sa/{workload.service_account}", stream
            assert stream["nacks"] == 0, stream
        # the workload certificate Envoy got over SDS chains to pilotfish's root
        secrets = client.config_dump()["SecretsConfigDump"]["dynamic_active_secrets"]
        assert {s["name"] for s in secrets} == {"default", "ROOTCA"}, secrets

        # the agent's DNS proxy answers from the name table pilotfish sent (NDS)
        assert resolve(mesh.pods["client"], SERVER_HOST) == [SERVER_VIP]

        # istioctl proxy-status, pointed straight at pilotfish's secure port (istiod's debug types)
        rows = istioctl_proxy_status(mesh)
        for workload in (CLIENT, SERVER):
            row = rows[f"{workload.pod_name}.{NS}"]
            assert row["CDS"] == row["LDS"] == "SYNCED" and row["ISTIOD"] == "pilotfish", rows
            assert row["VERSION"] == istio_version(), rows
        assert rows[f"{CLIENT.pod_name}.{NS}"]["RDS"] == "SYNCED", rows

        # PERMISSIVE takes plaintext too; STRICT, pushed to the server's agent, ends it
        assert plaintext_works(mesh)
        mesh.config.write("strict.yaml", STRICT)
        wait_until(lambda: not plaintext_works(mesh), "STRICT to refuse plaintext")
        assert mesh.from_client("/after-strict").backend == "server-app"


def routed_header(mesh: Mesh) -> str | None:
    """The x-config request header the gateway's route sets, as the app saw it."""
    gw = mesh.pods["istio-ingressgateway"]
    reply = send(GATEWAY_PORT, "/", host="web.example.com", connect=lambda _h, p: gw.connect(gw.ip, p))
    if reply.backend != "server-app":
        return None
    headers = {k.lower(): v for k, v in reply.body["headers"].items()}
    return headers.get("x-config", "")


def test_istio_gateway_serves_a_gateway_and_converges_after_pilotfish_restarts(mesh: Mesh) -> None:
    with contextlib.ExitStack() as proxies:
        with mesh.serve():
            proxies.enter_context(mesh.proxy(SERVER))
            proxies.enter_context(mesh.proxy(GATEWAY))
            wait_until(lambda: routed_header(mesh) == "", "traffic through the gateway")
            mesh.config.write("gateway.yaml", gateway("live"))
            wait_until(lambda: routed_header(mesh) == "live", "a VirtualService change to reach the gateway")
        # changed while pilotfish is down: the proxies keep their config, then get the new one
        mesh.config.write("gateway.yaml", gateway("restarted"))
        assert routed_header(mesh) == "live"
        with mesh.serve():
            wait_until(lambda: routed_header(mesh) == "restarted", "the change made while down to reach the gateway")
