"""``pilotfish serve`` + ``pilotfish agent`` (which starts a real Envoy), as a pod runs istiod and
pilot-agent: Envoy's traffic reaches a local upstream through the mesh, the agent's DNS proxy
answers mesh names from the NDS table and forwards the rest to a (fake) upstream resolver, a
ServiceEntry added to the config dir becomes resolvable without a restart, and a control-plane
restart leaves Envoy's stream to the agent up while the config converges again.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dns.message
import dns.query
import dns.rdatatype
import dns.rrset
import pytest

from tests.e2e.backends import Backends
from tests.e2e.conftest import new_config_dir
from tests.e2e.harness import ConfigDir, KubernetesRegistration, backends_seen, free_port, routed_to, wait_until
from tests.e2e.processes import AgentProcess, _spawn, http_get, run_pilotfish
from tests.support.envoy import envoy_binary

ADDRESSES = {"v1": "127.0.0.41"}
FQDN = "app.default.svc.cluster.local"
CLUSTER_IP = "10.96.0.61"
EXTERNAL_ANSWER = "203.0.113.7"

WIKI = """
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: wiki, namespace: default}
spec:
  hosts: [wiki.corp.example]
  addresses: [192.0.2.44]
  ports: [{number: $port, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 192.0.2.44}]
"""


class FakeResolver:
    """An upstream DNS server on UDP: ``example.org`` has an A record, anything else NXDOMAIN."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.queries: list[str] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            query = dns.message.from_wire(data)
            name = query.question[0].name.to_text()
            self.queries.append(name)
            reply = dns.message.make_response(query)
            if name == "example.org.":
                reply.answer.append(dns.rrset.from_text(name, 60, "IN", "A", EXTERNAL_ANSWER))
            else:
                reply.set_rcode(dns.rcode.NXDOMAIN)
            self.sock.sendto(reply.to_wire(), peer)

    def close(self) -> None:
        self.sock.close()


@contextmanager
def run_agent(xds_port: int, resolver: FakeResolver, workdir: Path) -> Iterator[AgentProcess]:
    admin, status, dns_port = free_port(), free_port(), free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "resolv.conf").write_text("nameserver 127.0.0.1\nsearch default.svc.cluster.local svc.cluster.local\n")
    argv = [
        sys.executable, "-m", "app.cli", "agent",
        "--discovery-address", f"127.0.0.1:{xds_port}",
        "--xds-socket", str(workdir / "XDS"),
        "--sds-socket", str(workdir / "SDS"),
        "--bootstrap-path", str(workdir / "envoy-rev.json"),
        "--dns-address", f"127.0.0.1:{dns_port}",
        "--status-address", f"127.0.0.1:{status}",
        "--envoy-admin-address", f"127.0.0.1:{admin}",
        "--envoy-binary", envoy_binary(),
        "--resolv-conf", str(workdir / "resolv.conf"),
        "--dns-upstream", f"127.0.0.1:{resolver.port}",
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "POD_NAME": "sleep-1",
        "POD_NAMESPACE": "default",
        "INSTANCE_IP": "127.0.0.1",
        "ISTIO_META_INTERCEPTION_MODE": "NONE",  # no iptables here: listeners bind for real
        "ISTIO_META_DNS_CAPTURE": "true",
        "ISTIO_METAJSON_LABELS": json.dumps({"app": "sleep"}),
    }
    agent = _spawn(AgentProcess, "agent", argv, workdir / "agent.log", env)
    agent.admin_port, agent.status_port, agent.dns_port = admin, status, dns_port
    try:
        yield agent
    finally:
        agent.assert_nothing_rejected()
        agent.stop()


def resolve(port: int, name: str, tcp: bool = False) -> tuple[str, list[str]]:
    query = dns.message.make_query(name, "A")
    send = dns.query.tcp if tcp else dns.query.udp
    reply = send(query, "127.0.0.1", port=port, timeout=3)
    addresses = sorted(r.to_text() for rrset in reply.answer for r in rrset if r.rdtype == dns.rdatatype.A)
    return dns.rcode.to_text(reply.rcode()), addresses


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ConfigDir, Backends, int]]:
    backends = Backends(ADDRESSES).start()
    try:
        egress_port = free_port()
        config = new_config_dir(tmp_path_factory.mktemp("agent") / "config")
        KubernetesRegistration(ADDRESSES, cluster_ip=CLUSTER_IP, service_port=egress_port).write(config, backends.port)
        config.render("sidecar/sidecar.yaml", egress_port=egress_port)
        yield config, backends, egress_port
    finally:
        backends.stop()


def test_agent_carries_xds_answers_dns_and_survives_a_control_plane_restart(
    mesh: tuple[ConfigDir, Backends, int], tmp_path: Path
) -> None:
    config, _, egress_port = mesh
    resolver = FakeResolver()
    xds_port, http_port = free_port(), free_port()
    try:
        with (
            run_pilotfish(config, tmp_path, ports=(xds_port, http_port)) as server,
            run_agent(server.xds_port, resolver, tmp_path / "pod") as agent,
        ):
            ready = f"http://127.0.0.1:{agent.status_port}/healthz/ready"
            wait_until(lambda: http_get(ready, timeout=2)[0] == 200, "the agent's /healthz/ready")
            # traffic: Envoy's bound egress listener routes to the local upstream
            wait_until(routed_to(egress_port, "v1", host=FQDN), f"127.0.0.1:{egress_port} to route {FQDN}")
            assert backends_seen(egress_port, 3, host=FQDN) == {"v1": 3}
            # DNS: mesh names (and their short forms) from the table, over UDP and TCP
            assert resolve(agent.dns_port, f"{FQDN}.") == ("NOERROR", [CLUSTER_IP])
            assert resolve(agent.dns_port, "app.", tcp=True) == ("NOERROR", [CLUSTER_IP])
            assert resolve(agent.dns_port, "app.default.") == ("NOERROR", [CLUSTER_IP])
            # everything else goes to the upstream resolver, its answer relayed
            assert resolve(agent.dns_port, "example.org.") == ("NOERROR", [EXTERNAL_ANSWER])
            assert resolve(agent.dns_port, "nowhere.example.") == ("NXDOMAIN", [])
            assert "example.org." in resolver.queries and f"{FQDN}." not in resolver.queries
            # a ServiceEntry written to the config dir becomes resolvable, no restart
            # (on the egress port: a Sidecar's egress listener with a port imports only services on it)
            config.write("wiki.yaml", WIKI.replace("$port", str(egress_port)))
            wait_until(lambda: resolve(agent.dns_port, "wiki.corp.example.")[1] == ["192.0.2.44"], "wiki to resolve")
            wiki = f"outbound|{egress_port}||wiki.corp.example"
            wait_until(lambda: wiki in agent.active_clusters(), "wiki's cluster in Envoy")

            connected, connections, streams = agent.xds_stream()
            assert connected == 1
            # the control plane restarts: Envoy's stream to the agent stays up
            assert server.stop() == 0, server.describe()
            config.remove("wiki.yaml")
            (tmp_path / "again").mkdir()
            with run_pilotfish(config, tmp_path / "again", ports=(xds_port, http_port)):
                wait_until(lambda: resolve(agent.dns_port, "wiki.corp.example.")[0] == "NXDOMAIN", "wiki to go")
                assert agent.xds_stream() == (1, connections, streams), "Envoy's stream to the agent was re-opened"
                wait_until(lambda: wiki not in agent.active_clusters(), "wiki's cluster to go")
                assert backends_seen(egress_port, 3, host=FQDN) == {"v1": 3}
                # the agent reports its upstream as pilot-agent does: one stream ended, one open
                status, metrics = http_get(f"http://127.0.0.1:{agent.status_port}/stats/prometheus")
                assert status == 200
                assert 'istio_agent_istiod_connection_terminations{type="error"} 1' in metrics
                assert "pilotfish_agent_upstream_connected 1" in metrics
    finally:
        resolver.close()


def test_bootstrap_only_prints_a_bootstrap_envoy_accepts(tmp_path: Path) -> None:
    env = {**os.environ, "POD_NAME": "sleep-1", "POD_NAMESPACE": "default", "INSTANCE_IP": "10.1.0.7"}
    argv = [sys.executable, "-m", "app.cli", "agent", "--bootstrap-only", "--xds-socket", str(tmp_path / "XDS")]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    bootstrap = json.loads(out)
    assert bootstrap["node"]["id"] == "sidecar~10.1.0.7~sleep-1.default~default.svc.cluster.local"
    (tmp_path / "b.json").write_text(out)
    check = subprocess.run([envoy_binary(), "--mode", "validate", "-c", str(tmp_path / "b.json")], capture_output=True)
    assert check.returncode == 0, check.stderr.decode()
