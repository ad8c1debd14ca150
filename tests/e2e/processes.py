"""The two real processes of an end-to-end test: ``pilotfish serve`` and Envoy.

``run_pilotfish`` starts the server on free ports, waits for ``/ready`` and, on the way out,
sends SIGTERM and requires a clean exit. ``run_envoy`` writes an Istio-style bootstrap (ADS
over the ``xds-grpc`` cluster, node id and metadata as the Istio agent sends them), waits for
Envoy to go LIVE and, on the way out, requires that Envoy rejected no xDS update.

Every running process is listed in ``LIVE`` so a failing test can show their logs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tests.e2e.harness import WAIT_TIMEOUT, ConfigDir, free_port, wait_until
from tests.support.envoy import agent_bootstrap, envoy_binary

REPO = Path(__file__).resolve().parents[2]
STOP_TIMEOUT = 20.0  # SIGTERM must end pilotfish "within a few seconds"; generous for CI
LOG_TAIL = 12_000
_INVENTORY = re.compile(r"\]\[(main|admin)\] \[\S+\] {3}")
_CDS_RESPONSE = re.compile(r"cds: response indicates (\d+) added/updated cluster\(s\), (\d+) removed cluster\(s\)")


class LoggedProcess:
    def __init__(self, name: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.name = name
        self.process = process
        self.log_path = log_path

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, size: int = LOG_TAIL) -> str:
        # Envoy's start-up inventory (extensions, header maps; indented lines) buries what matters
        lines = (line for line in self.log().splitlines(keepends=True) if not _INVENTORY.search(line))
        return "".join(lines)[-size:]

    def alive(self) -> bool:
        return self.process.poll() is None

    def describe(self) -> str:
        return f"--- {self.name} (pid {self.process.pid}) log, last {LOG_TAIL} chars ---\n{self.log_tail()}"

    def kill(self) -> None:
        """SIGKILL, reap, and forget."""
        self.process.kill()
        self.process.wait()
        LIVE.pop(self.process.pid, None)

    def wait_ready(self, port: int, what: str, timeout: float) -> None:
        """Poll ``/ready`` on ``port`` until it answers 200; raises RuntimeError if the process exits first."""

        def ready() -> bool:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with {self.process.returncode} before it was ready")
            return http_get(f"http://127.0.0.1:{port}/ready", timeout=2)[0] == 200

        wait_until(ready, what, timeout=timeout)


LIVE: dict[int, LoggedProcess] = {}


P = TypeVar("P", bound=LoggedProcess)


def _spawn(cls: type[P], name: str, argv: list[str], log_path: Path, env: Mapping[str, str] | None = None) -> P:
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    proc = cls(name, process, log_path)
    LIVE[process.pid] = proc
    return proc


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


# --- pilotfish ---------------------------------------------------------------------------------


class Pilotfish(LoggedProcess):
    xds_port: int
    http_port: int
    returncode: int | None = None

    def sync_status(self) -> list[dict[str, Any]]:
        """``/debug/syncz``: per xDS stream, its pushes and, per type, the nonce last sent and acked."""
        status, body = http_get(f"http://127.0.0.1:{self.http_port}/debug/syncz")
        assert status == 200, f"/debug/syncz: HTTP {status}: {body[:500]}"
        streams: list[dict[str, Any]] = json.loads(body)
        return streams

    def stop(self) -> int:
        """SIGTERM, then the exit status; a server that does not exit is killed and reported."""
        if self.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.returncode = self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()
                message = f"pilotfish did not exit {STOP_TIMEOUT:.0f}s after SIGTERM"
                raise AssertionError(f"{message}\n{self.describe()}") from None
            LIVE.pop(self.process.pid, None)
        return self.returncode


@contextmanager
def run_pilotfish(
    config_dir: ConfigDir | None,
    workdir: Path,
    *,
    kubeconfig: Path | None = None,
    ports: tuple[int, int] | None = None,
    extra_args: tuple[str, ...] = (),
) -> Iterator[Pilotfish]:
    """``pilotfish serve`` on a config dir, a Kubernetes API server (``kubeconfig``), or both;
    ``ports`` (xDS, HTTP) to start it where an earlier one served; ``extra_args`` for serve."""
    xds_port, http_port = ports or (free_port(), free_port())
    argv = [
        sys.executable, "-m", "app.cli", "serve",
        "--xds-address", f"127.0.0.1:{xds_port}",
        "--http-address", f"127.0.0.1:{http_port}",
        # with Kubernetes the CA and its secure port are on, as istiod's: never 15012 of the machine
        "--secure-xds-address", f"127.0.0.1:{free_port()}",
    ]  # fmt: skip
    if config_dir is not None:
        argv += ["--config-dir", str(config_dir.path)]
    if kubeconfig is not None:
        argv += ["--kubeconfig", str(kubeconfig)]
    argv += extra_args
    # only the cluster named here: a KUBECONFIG of the machine running the tests is not one
    env = {**{k: v for k, v in os.environ.items() if k != "KUBECONFIG"}, "PYTHONUNBUFFERED": "1"}
    server = _spawn(Pilotfish, "pilotfish", argv, workdir / f"pilotfish-{xds_port}.log", env)
    server.xds_port, server.http_port = xds_port, http_port
    try:
        server.wait_ready(http_port, "pilotfish /ready", timeout=60)
    except (RuntimeError, AssertionError) as e:
        server.kill()
        raise AssertionError(f"{e}\n{server.describe()}") from None
    try:
        yield server
    finally:
        if server.returncode is None:  # a test may have stopped it already, and checked how
            code = server.stop()
            assert code == 0, f"pilotfish exited with {code} after SIGTERM\n{server.describe()}"


# --- Envoy -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProxyIdentity:
    """What the Istio agent would put in the bootstrap's node: id, service cluster, metadata."""

    node_id: str
    cluster: str
    namespace: str
    labels: Mapping[str, str]
    interception_mode: str | None = None

    @property
    def pod_name(self) -> str:
        return self.node_id.split("~")[2].split(".")[0]

    @property
    def metadata(self) -> dict[str, Any]:
        """The node metadata the Istio agent would send, reduced to what xDS needs."""
        metadata: dict[str, Any] = {
            "NAME": self.pod_name,
            "NAMESPACE": self.namespace,
            "LABELS": dict(self.labels),
            "INSTANCE_IPS": "127.0.0.1",
            "CLUSTER_ID": "Kubernetes",
        }
        if self.interception_mode is not None:
            metadata["INTERCEPTION_MODE"] = self.interception_mode
        return metadata


GATEWAY = ProxyIdentity(
    node_id="router~127.0.0.1~istio-ingressgateway-1.istio-system~istio-system.svc.cluster.local",
    cluster="istio-ingressgateway.istio-system",
    namespace="istio-system",
    labels={"istio": "ingressgateway", "app": "istio-ingressgateway"},
)
SIDECAR = ProxyIdentity(
    node_id="sidecar~127.0.0.1~sleep-1.default~default.svc.cluster.local",
    cluster="sleep.default",
    namespace="default",
    labels={"app": "sleep"},
    interception_mode="NONE",  # no iptables here: listeners must bind for real
)


class Envoy(LoggedProcess):
    admin_port: int

    def admin(self, path: str) -> str:
        status, body = http_get(f"http://127.0.0.1:{self.admin_port}{path}")
        assert status == 200, f"admin {path}: HTTP {status}: {body[:500]}"
        return body

    def stats(self) -> dict[str, int]:
        """Counters and gauges by full name (text readouts and histograms left out)."""
        entries = json.loads(self.admin("/stats?format=json"))["stats"]
        return {e["name"]: e["value"] for e in entries if isinstance(e.get("value"), int)}

    def config_dump(self) -> dict[str, Any]:
        """``/config_dump?include_eds``, keyed by the dump's type name (ClustersConfigDump, ...)."""
        dump = json.loads(self.admin("/config_dump?include_eds"))
        return {c["@type"].rsplit(".", 1)[-1]: c for c in dump["configs"]}

    def active_clusters(self) -> dict[str, dict[str, Any]]:
        clusters = self.config_dump()["ClustersConfigDump"].get("dynamic_active_clusters", [])
        return {c["cluster"]["name"]: c["cluster"] for c in clusters}

    def warming_clusters(self) -> list[str]:
        """The dynamic clusters still warming (waiting for their endpoints, say)."""
        warming = self.config_dump()["ClustersConfigDump"].get("dynamic_warming_clusters", [])
        return sorted(c["cluster"]["name"] for c in warming)

    def cds_responses(self, since: int = 0) -> list[tuple[int, int]]:
        """(clusters added or updated, clusters removed) that each CDS response carried, as Envoy
        logs them (cds_api_helper.cc, info level), from log offset ``since`` on: an unchanged
        cluster a response repeats counts here, though no stat shows it (Envoy skips it)."""
        return [(int(m[1]), int(m[2])) for m in _CDS_RESPONSE.finditer(self.log()[since:])]

    def listeners(self) -> dict[str, dict[str, Any]]:
        """Dynamic listeners by name, each with its ``active_state`` / ``warming_state`` / ``error_state``."""
        listeners = self.config_dump()["ListenersConfigDump"].get("dynamic_listeners", [])
        return {listener["name"]: listener for listener in listeners}

    def route_configs(self) -> dict[str, dict[str, Any]]:
        routes = self.config_dump().get("RoutesConfigDump", {}).get("dynamic_route_configs", [])
        return {r["route_config"]["name"]: r["route_config"] for r in routes}

    def cluster_hosts(self) -> dict[str, set[str]]:
        """``/clusters``: the ``ip:port`` of every host Envoy has for each cluster."""
        statuses = json.loads(self.admin("/clusters?format=json")).get("cluster_statuses", [])
        out: dict[str, set[str]] = {}
        for status in statuses:
            hosts = out.setdefault(status["name"], set())
            for host in status.get("host_statuses", []):
                sock = host["address"].get("socket_address")
                if sock:
                    hosts.add(f"{sock['address']}:{sock['port_value']}")
        return out

    def xds_stream(self) -> tuple[int, int, int]:
        """(connected, connections opened, gRPC streams opened) to the control plane.

        Each ADS stream is one request on the ``xds-grpc`` cluster, so an unchanged
        ``upstream_rq_total`` proves the stream was never re-established.
        """
        stats = self.stats()
        return (
            stats["control_plane.connected_state"],
            stats["cluster.xds-grpc.upstream_cx_total"],
            stats["cluster.xds-grpc.upstream_rq_total"],
        )

    def rejected_updates(self) -> dict[str, int]:
        """Every ``*.update_rejected`` counter (CDS, LDS, each cluster's EDS, each RDS) by name."""
        return {name: value for name, value in self.stats().items() if name.endswith(".update_rejected")}

    def assert_nothing_rejected(self) -> None:
        rejected = self.rejected_updates()
        for required in ("cluster_manager.cds.update_rejected", "listener_manager.lds.update_rejected"):
            assert required in rejected, f"Envoy has no {required} counter; stats: {sorted(rejected)}"
        bad = {name: value for name, value in rejected.items() if value}
        assert not bad, f"Envoy rejected xDS updates: {bad}\n{self.describe()}"

    def stop(self) -> None:
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        LIVE.pop(self.process.pid, None)


@contextmanager
def run_envoy(
    pilotfish: Pilotfish, proxy: ProxyIdentity, api_type: str, workdir: Path, *, rejecting: bool = False
) -> Iterator[Envoy]:
    """A real Envoy on ADS to ``pilotfish``; on exit it must have rejected no update, unless the
    test makes it reject some (``rejecting``)."""
    admin_port = free_port()
    bootstrap = agent_bootstrap(
        proxy.node_id,
        node_cluster=proxy.cluster,
        node_metadata=proxy.metadata,
        api_type=api_type,
        xds_port=pilotfish.xds_port,
        admin_port=admin_port,
        # as in Istio's bootstrap; nothing serves it here (mesh.yaml turns auto mTLS off)
        sds_path=str(workdir / f"sds-{admin_port}.sock"),
        dynamic=True,
    )
    config = workdir / f"envoy-{admin_port}.json"
    config.write_text(json.dumps(bootstrap, indent=2))
    argv = [
        envoy_binary(), "-c", str(config),
        "--use-dynamic-base-id",  # a unique base id per Envoy, so several run side by side
        "--log-level", "info",
        "--concurrency", "1",
    ]  # fmt: skip
    name = f"envoy {proxy.node_id.split('~')[0]} {api_type}"
    envoy = _spawn(Envoy, name, argv, workdir / f"envoy-{admin_port}.log")
    envoy.admin_port = admin_port
    try:
        try:
            # LIVE only after the first CDS and LDS responses (initial_fetch_timeout 0s: no giving up)
            envoy.wait_ready(admin_port, f"{name} to get its first CDS and LDS and go LIVE", timeout=WAIT_TIMEOUT)
        except (RuntimeError, AssertionError) as e:
            raise AssertionError(f"{e}\n{envoy.describe()}\n{pilotfish.describe()}") from None
        yield envoy
        assert envoy.alive(), f"Envoy died during the test\n{envoy.describe()}"
        if not rejecting:
            envoy.assert_nothing_rejected()
    finally:
        envoy.stop()


class AgentProcess(Envoy):
    """``pilotfish agent``; its Envoy child writes to the same log and answers on ``admin_port``."""

    status_port: int
    dns_port: int

    def xds_stream(self) -> tuple[int, int, int]:
        """As Envoy's: the agent's bootstrap names the cluster's stats ``xds-grpc;`` (istio's template)."""
        stats = self.stats()
        cluster = "cluster.xds-grpc;"
        return (
            stats["control_plane.connected_state"],
            stats[f"{cluster}.upstream_cx_total"],
            stats[f"{cluster}.upstream_rq_total"],
        )

    def stop(self) -> None:
        """SIGTERM to the agent: it ends Envoy and exits with Envoy's status, which must be 0."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            code = self.process.wait(STOP_TIMEOUT)
            assert code == 0, f"agent exited with {code}\n{self.describe()}"
        LIVE.pop(self.process.pid, None)


@dataclass(frozen=True)
class SecureAgent:
    """A pod whose agent gets its certificate from the CA by token and its xDS over the secure port."""

    account: str  # the service account; the pod is ACCOUNT-0
    namespace: str
    token: str
    ip: str
    labels: Mapping[str, str]
    proxy_type: str = "sidecar"


@contextmanager
def run_secure_agent(pod: SecureAgent, secure_port: int, root: str, workdir: Path) -> Iterator[AgentProcess]:
    """``pilotfish agent`` (without traffic capture) with a real Envoy, trusting ``root``."""
    admin, status = free_port(), free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "root-cert.pem").write_text(root)
    (workdir / "token").write_text(pod.token)
    argv = [
        sys.executable, "-m", "app.cli", "agent",
        "--proxy-type", pod.proxy_type,
        "--discovery-address", f"127.0.0.1:{secure_port}",
        "--root-cert", str(workdir / "root-cert.pem"),
        "--token-file", str(workdir / "token"),
        "--xds-socket", str(workdir / "XDS"),
        "--sds-socket", str(workdir / "SDS"),
        "--bootstrap-path", str(workdir / "envoy-rev.json"),
        "--status-address", f"127.0.0.1:{status}",
        "--envoy-admin-address", f"127.0.0.1:{admin}",
        "--envoy-binary", envoy_binary(),
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "POD_NAME": f"{pod.account}-0",
        "POD_NAMESPACE": pod.namespace,
        "SERVICE_ACCOUNT": pod.account,
        "INSTANCE_IP": pod.ip,
        "ISTIO_META_INTERCEPTION_MODE": "NONE",
        "ISTIO_METAJSON_LABELS": json.dumps(dict(pod.labels)),
    }
    agent = _spawn(AgentProcess, f"agent-{pod.account}", argv, workdir / "agent.log", env)
    agent.admin_port, agent.status_port = admin, status
    try:
        yield agent
    finally:
        agent.assert_nothing_rejected()
        agent.stop()
