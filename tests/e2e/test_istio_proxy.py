"""Istio's own sidecar against pilotfish in a real cluster control plane: pilot-agent (from the
pinned istio module) and Envoy in pods of their own (network namespaces), pilotfish reading the
mesh from a real kube-apiserver with the Helm chart's credentials and serving its secure port
only, as in a cluster.

Each pod is created in the API server and "runs" when the test writes its status as a kubelet
would, so its EndpointSlice comes from the real endpointslice controller. Each pilot-agent gets
its workload certificate from pilotfish's CA with its service account's TokenRequest token
(audience ``istio-ca``, checked by TokenReview against the API server), carries Envoy's Delta
ADS to the secure port through its local xDS proxy, serves Envoy the certificate over SDS and
answers the pod's DNS from the mesh's name table (NDS). Two sidecars talk mTLS, a gateway
(``pilot-agent proxy router``) serves a Gateway, config changes reach every proxy, and so does
a change made while pilotfish was down, after it restarts; with the CA kept in its Secret, as in a
cluster, certificates issued before and after a restart still make mTLS. ``istioctl proxy-status`` and
``istioctl x version``, pointed straight at pilotfish with a token, see every proxy.

Without traffic capture (interception NONE: the test pods have no iptables) the server's inbound
listener comes from its Sidecar's ``ingress`` entry and the client's outbound one from its egress
listener, as in test_mtls.py, which runs the same mesh with ``pilotfish agent`` and files.
"""

from __future__ import annotations

import base64
import contextlib
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dns.message
import dns.query
import dns.rdatatype
import pytest

from tests.e2e.backends import Backends
from tests.e2e.harness import Reply, free_port, send, wait_until
from tests.e2e.istio_proxy import IstioProxy, Workload, istio_version, run_istio_proxy
from tests.e2e.processes import REPO, Pilotfish, run_pilotfish
from tests.support.cluster import Cluster
from tests.support.mesh import sidecars_without_capture
from tests.support.peers import peer_binary
from tests.support.pods import Pod, PodNetwork, pod_network

APP_PORT, SERVER_PORT, GATEWAY_PORT = 8080, 9080, 8088
# without capture the client reaches a service through an egress listener on its port (istiod
# builds that listener's routes from the services on that port)
EGRESS_PORT = SERVICE_PORT = 15100
GATEWAY_LABELS = {"istio": "ingressgateway", "app": "istio-ingressgateway"}

MESH = """rootNamespace: istio-system
enableAutoMtls: true
trustDomain: cluster.local
connectTimeout: 2s
outboundTrafficPolicy: {mode: ALLOW_ANY}
"""


def gateway(namespace: str, x_config: str | None = None) -> str:
    """A Gateway for web.example.com and its route to the server; ``x_config`` a request header it sets."""
    headers = f"\n      headers: {{request: {{set: {{x-config: {x_config}}}}}}}" if x_config else ""
    return f"""
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: web, namespace: {namespace}}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {GATEWAY_PORT}, name: http, protocol: HTTP}}
    hosts: ["./web.example.com"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: web, namespace: {namespace}}}
spec:
  hosts: [web.example.com]
  gateways: [web]
  http:
  - route:
    - destination: {{host: server.{namespace}.svc.cluster.local, port: {{number: {SERVICE_PORT}}}}}{headers}
"""


@dataclass
class Mesh:
    kube: Cluster
    kubeconfig: Path  # the chart's credentials
    network: PodNetwork
    namespace: str
    workloads: dict[str, Workload]
    pods: dict[str, Pod]
    tmp: Path
    secure_port: int
    http_port: int
    ca_dir: bool = True  # as the last serve() ran

    @property
    def server_host(self) -> str:
        return f"server.{self.namespace}.svc.cluster.local"

    def serve(self, *, ca_dir: bool = True) -> contextlib.AbstractContextManager[Pilotfish]:
        """``pilotfish serve`` on the cluster, secure port on the node's bridge address, the same
        ports every time (a restart is where proxies reconnect); the CA in a dir, or (``ca_dir``
        False) kept in the API server as in a cluster (istio-system's istio-ca-secret)."""
        args = (
            *(("--ca-dir", str(self.tmp / "ca")) if ca_dir else ()),
            "--xds-address", "",
            "--secure-xds-address", f"{self.network.node_ip}:{self.secure_port}",
            "--mesh-config", str(self.tmp / "mesh.yaml"),
        )  # fmt: skip
        self.ca_dir = ca_dir
        return run_pilotfish(None, self.tmp, kubeconfig=self.kubeconfig, ports=(0, self.http_port), extra_args=args)

    def root(self) -> str:
        """The mesh root the proxies are given (their istio-ca-root-cert)."""
        if self.ca_dir:
            return (self.tmp / "ca" / "root-cert.pem").read_text()
        secret = self.kube.get("v1", "Secret", "istio-system", "istio-ca-secret")
        assert secret is not None, "no istio-ca-secret"
        return base64.b64decode(secret["data"]["ca-cert.pem"]).decode()

    def proxy(self, name: str) -> contextlib.AbstractContextManager[IstioProxy]:
        """Istio's sidecar for a workload, with a fresh projected token of its service account."""
        workload = self.workloads[name]
        token = self.kube.token(self.namespace, workload.service_account, audiences=("istio-ca",))
        discovery = f"istiod.istio-system.svc:{self.secure_port}"
        return run_istio_proxy(self.pods[name], workload, discovery=discovery, root_cert=self.root(), token=token)

    def from_client(self, path: str) -> Reply:
        return send(EGRESS_PORT, path, host=self.server_host, connect=self.pods["client"].connect)


def run_workload(kube: Cluster, workload: Workload, pod: Pod) -> None:
    """The pod as the injector leaves it (the sidecar's tlsMode label) and a kubelet runs it."""
    ports = [{"containerPort": p} for p in workload.ports]
    manifest = {
        "metadata": {"name": pod.name, "labels": {**workload.labels, "security.istio.io/tlsMode": "istio"}},
        "spec": {
            "serviceAccountName": workload.service_account,
            "containers": [{"name": workload.name, "ports": ports}, {"name": "istio-proxy"}],
        },
    }
    kube.run_pod(manifest, pod.ip, namespace=workload.namespace)


@pytest.fixture
def mesh(kube: Cluster, pilotfish_kubeconfig: Path, tmp_path: Path) -> Iterator[Mesh]:
    namespace = kube.namespace("mesh")
    workloads = {
        w.name: w
        for w in (
            Workload("client", namespace, "client", {"app": "client"}),
            Workload("server", namespace, "server", {"app": "server"}, ports=(SERVER_PORT,)),
            Workload("istio-ingressgateway", namespace, "istio-ingressgateway", GATEWAY_LABELS,
                     ports=(GATEWAY_PORT,), proxy_type="router"),
        )
    }  # fmt: skip
    (tmp_path / "mesh.yaml").write_text(MESH)
    with pod_network() as network:
        pods = {name: network.add_pod(w.pod_name, namespace, tmp_path / name) for name, w in workloads.items()}
        for name, workload in workloads.items():
            run_workload(kube, workload, pods[name])
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "server", "namespace": namespace},
                "spec": {
                    "selector": {"app": "server"},
                    "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": SERVER_PORT}],
                },
            },
            sidecars_without_capture(
                namespace, egress_port=EGRESS_PORT, server_ip=pods["server"].ip, server_port=SERVER_PORT,
                app_port=APP_PORT,
            ),
            gateway(namespace),
        )  # fmt: skip
        # the server app listens on its pod's loopback, where the sidecar's inbound listener sends
        app = Backends({}).start({"server-app": pods["server"].listen(APP_PORT)})
        try:
            ports = free_port(), free_port()
            yield Mesh(kube, pilotfish_kubeconfig, network, namespace, workloads, pods, tmp_path, *ports)
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


def istioctl(mesh: Mesh, *args: str) -> str:
    """istioctl pointed straight at pilotfish's secure port, as an operator runs it: with the
    cluster's kubeconfig, from which it makes a token for istio-system's ``default`` account."""
    argv = [
        str(peer_binary("istioctl")), *args, "--kubeconfig", str(mesh.kube.admin_kubeconfig),
        "--xds-address", f"{mesh.network.node_ip}:{mesh.secure_port}",
    ]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env={"HOME": str(mesh.tmp)})
    assert out.returncode == 0, f"{' '.join(argv)}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def pilotfish_proxy_status(server: Pilotfish) -> str:
    argv = [sys.executable, "-m", "app.cli", "proxy-status", "--server", f"http://127.0.0.1:{server.http_port}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True, cwd=REPO).stdout


def table(text: str) -> dict[str, dict[str, str]]:
    """A table as istioctl (and pilotfish) print them, by its first column, then column name:
    columns start where their headers do (a value may hold a space: ``NOT SENT``)."""
    header, *lines = [line for line in text.splitlines() if line.strip()]
    starts = [m.start() for m in re.finditer(r"(?<!\S)\S+(?: \S+)*", header)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    rows = [[line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)] for line in lines]
    return {row[0]: dict(zip(names, row, strict=True)) for row in rows}


def plaintext_works(mesh: Mesh) -> bool:
    """A plain HTTP request from the client pod straight to the server sidecar's inbound listener."""
    client, server = mesh.pods["client"], mesh.pods["server"]
    try:
        return send(SERVER_PORT, "/plain", connect=lambda _h, p: client.connect(server.ip, p)).status == 200
    except OSError:
        return False


def strict(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "security.istio.io/v1",
        "kind": "PeerAuthentication",
        "metadata": {"name": "default", "namespace": namespace},
        "spec": {"mtls": {"mode": "STRICT"}},
    }


def test_istio_sidecars_get_certificates_config_and_dns_and_talk_mtls(mesh: Mesh) -> None:
    ns = mesh.namespace
    with mesh.serve() as server, mesh.proxy("server"), mesh.proxy("client") as client:
        # client app -> client Envoy -> (mTLS, certificates from pilotfish's CA over SDS) -> server Envoy -> app
        wait_until(lambda: mesh.from_client("/").status == 200, "mesh traffic from client to server")
        reply = mesh.from_client("/mesh")
        assert reply.backend == "server-app", reply.text
        headers = {k.lower(): v for k, v in reply.body["headers"].items()}
        xfcc = headers.get("x-forwarded-client-cert", "")
        assert f"URI=spiffe://cluster.local/ns/{ns}/sa/client" in xfcc, xfcc
        assert f"By=spiffe://cluster.local/ns/{ns}/sa/server" in xfcc, xfcc

        # Delta ADS through each agent, on the secure port, with the identity its token proved
        streams = {s["proxy"]: s for s in server.sync_status()}
        for name in ("client", "server"):
            workload = mesh.workloads[name]
            stream = streams[f"{workload.pod_name}.{ns}"]
            assert stream["protocol"] == "delta", stream
            assert stream["identity"] == f"spiffe://cluster.local/ns/{ns}/sa/{workload.service_account}", stream
            assert stream["nacks"] == 0, stream
        secrets = client.config_dump()["SecretsConfigDump"]["dynamic_active_secrets"]
        assert {s["name"] for s in secrets} == {"default", "ROOTCA"}, secrets

        # the agent's DNS proxy answers from the name table pilotfish sent (NDS)
        vip = mesh.kube.get("v1", "Service", ns, "server")["spec"]["clusterIP"]  # type: ignore[index]
        assert resolve(mesh.pods["client"], mesh.server_host) == [vip]

        # istioctl, pointed straight at pilotfish (istiod's debug types over xDS)
        rows = table(istioctl(mesh, "proxy-status", "-v", "1"))
        for name in ("client", "server"):
            row = rows[f"{mesh.workloads[name].pod_name}.{ns}"]
            assert row["CDS"] == row["LDS"] == "SYNCED" and row["ISTIOD"] == "pilotfish", rows
            assert row["VERSION"] == istio_version(), rows
        assert rows[f"client-0.{ns}"]["RDS"] == "SYNCED", rows
        # ... and shows what pilotfish's own proxy-status shows (istioctl: IGNORED = not watched)
        ours = table(pilotfish_proxy_status(server))
        for proxy, row in ours.items():
            for column in ("CDS", "LDS", "EDS", "RDS"):
                expected = ("IGNORED", "NOT SENT") if row[column] == "NOT SENT" else (row[column],)
                assert rows[proxy][column] in expected, (rows, ours)
        versions = istioctl(mesh, "x", "version", "--remote")
        assert f"data plane version: {istio_version()} (2 proxies)" in versions, versions

        # PERMISSIVE takes plaintext too; STRICT, pushed to the server's agent, ends it
        assert plaintext_works(mesh)
        mesh.kube.apply(strict(ns))
        wait_until(lambda: not plaintext_works(mesh), "STRICT to refuse plaintext")
        assert mesh.from_client("/after-strict").backend == "server-app"


def routed_header(mesh: Mesh) -> str | None:
    """The x-config request header the gateway's route sets, as the app saw it."""
    gw = mesh.pods["istio-ingressgateway"]
    connect: Callable[[str, int], Any] = lambda _h, p: gw.connect(gw.ip, p)  # noqa: E731
    reply = send(GATEWAY_PORT, "/", host="web.example.com", connect=connect)
    if reply.backend != "server-app":
        return None
    headers = {k.lower(): v for k, v in reply.body["headers"].items()}
    return str(headers.get("x-config", ""))


def test_istio_gateway_serves_a_gateway_and_converges_after_pilotfish_restarts(mesh: Mesh) -> None:
    with contextlib.ExitStack() as proxies:
        with mesh.serve():
            proxies.enter_context(mesh.proxy("server"))
            proxies.enter_context(mesh.proxy("istio-ingressgateway"))
            wait_until(lambda: routed_header(mesh) == "", "traffic through the gateway")
            mesh.kube.apply(gateway(mesh.namespace, "live"))
            wait_until(lambda: routed_header(mesh) == "live", "a VirtualService change to reach the gateway")
        # changed while pilotfish is down: the proxies keep their config, then get the new one
        mesh.kube.apply(gateway(mesh.namespace, "restarted"))
        assert routed_header(mesh) == "live"
        with mesh.serve():
            wait_until(lambda: routed_header(mesh) == "restarted", "the change made while down to reach the gateway")


def test_the_root_kept_in_its_secret_outlives_a_restart_certificates_of_both_sides_of_it_talk(mesh: Mesh) -> None:
    """As in a cluster, the CA in istio-system's istio-ca-secret: pilotfish killed and started
    again reads the same root, so the server's certificate from before the restart and the
    client's from after it still make mTLS."""
    with contextlib.ExitStack() as proxies:
        with mesh.serve(ca_dir=False) as server:
            root = mesh.root()
            proxies.enter_context(mesh.proxy("server"))
            with mesh.proxy("client"):
                wait_until(lambda: mesh.from_client("/").status == 200, "mesh traffic")
            server.kill()  # no goodbye
            server.returncode = server.process.returncode
        with mesh.serve(ca_dir=False), mesh.proxy("client"):
            assert mesh.root() == root
            wait_until(lambda: mesh.from_client("/after").status == 200, "mesh traffic after the restart")
            assert mesh.from_client("/after").backend == "server-app"
