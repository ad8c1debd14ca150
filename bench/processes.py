"""The servers under test as child processes: pilotfish (``python -m app.cli serve``) and the
transport floor (``python -m bench.floor_server``), and what /proc says about them.

pilotfish runs from ``--server-root`` (cwd and PYTHONPATH, so a plain clone of the repository
works) with this interpreter, i.e. this venv's dependencies; its log goes to a file. Its modules'
bytecode is compiled first, as an install's is (pip compiles what it installs): a fresh clone, or
an environment with PYTHONDONTWRITEBYTECODE, would otherwise compile every module on every start
(0.25 s of a 0.5 s start). CPU is utime + stime of the server process (all its threads) from
/proc/PID/stat; peak RSS is VmHWM from /proc/PID/status.
"""

from __future__ import annotations

import compileall
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

READY_TIMEOUT = 300.0
# how often /ready is asked: start to ready is a figure (bench/kube_load.py), under a second now
READY_POLL = 0.02
STOP_TIMEOUT = 15.0
BENCH_ROOT = Path(__file__).resolve().parents[1]
# istiod's defaults, which pilotfish also defaults to; set explicitly so the report states them
PILOT_DEFAULTS = {
    "PILOT_DEBOUNCE_AFTER": "100ms",
    "PILOT_DEBOUNCE_MAX": "10s",
    "PILOT_ENABLE_EDS_DEBOUNCE": "true",
    "PILOT_PUSH_THROTTLE": "100",
}
_TICK = os.sysconf("SC_CLK_TCK")
_WARNING = re.compile(r"(WARNING|ERROR|[EW]\d{4} |\S+\t(warn|error)\t)")  # Python, grpc core, istiod


def checkout(root: Path) -> dict[str, object]:
    """What a report says of the pilotfish checkout it ran: where, its commit, whether its app/
    had uncommitted changes."""

    def git(*command: str) -> str:
        done = subprocess.run(["git", "-C", str(root), "--no-optional-locks", *command], capture_output=True, text=True)
        return done.stdout.strip()

    return {
        "root": str(root),
        "commit": git("rev-parse", "HEAD"),
        "uncommitted_changes": bool(git("status", "--porcelain", "--", "app")),
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def pilot_env() -> dict[str, str]:
    """The PILOT_* settings the server gets: istiod's defaults unless the caller's env sets them."""
    return {key: os.environ.get(key, default) for key, default in PILOT_DEFAULTS.items()}


# pilotfish admits every new stream at once; istiod admits PILOT_MAX_REQUESTS_PER_SECOND (on 2
# cores its default is 25/s, features.RequestLimit) and refuses the rest for the client to retry
# after a backoff, so a connect storm would time its limiter. Lifted unless the caller's env sets
# it (PILOT_MAX_REQUESTS_PER_SECOND=25 shows istiod as it ships on this machine).
ISTIOD_REQUEST_LIMIT = "100000"


def istiod_env() -> dict[str, str]:
    """What istiod gets in the side-by-side run: pilotfish's PILOT_* settings (so the same push
    throttle, where istiod's own default on 2 cores is 25) and its request limit."""
    limit = os.environ.get("PILOT_MAX_REQUESTS_PER_SECOND", ISTIOD_REQUEST_LIMIT)
    return {**pilot_env(), "PILOT_MAX_REQUESTS_PER_SECOND": limit}


@dataclass
class ServerProcess:
    popen: subprocess.Popen[bytes]
    xds_address: str
    log: Path
    started: float = 0.0  # time.monotonic() when its process was started (0: not known)

    def cpu_seconds(self) -> float:
        """The process's CPU seconds and its live descendants' (pilotfish's config and informer
        workers, a floor's other processes)."""
        return sum(map(_cpu_seconds, _tree(self.popen.pid)))

    def peak_rss_mb(self) -> float:
        return self._status_mb("VmHWM:")

    def rss_mb(self) -> float:
        return self._status_mb("VmRSS:")

    def _status_mb(self, key: str) -> float:
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            raise RuntimeError(f"server exited with {self.popen.returncode}; see {self.log}")


def start_pilotfish(
    server_root: Path,
    config_dir: Path | None,
    log: Path,
    extra_env: dict[str, str] | None = None,
    module: str = "app.cli",
    kube: tuple[Path, str] | None = None,
) -> ServerProcess:
    """``module``: what runs the server's command line (bench.heap_probe wraps app.cli; the bench's
    directory is then on the server's path too). ``kube``: (kubeconfig, root namespace) of a
    cluster to read, instead of or beside ``config_dir``; with it the CA and its secure port run
    too, as istiod's do (on a free port), and the webhooks do not (nothing calls them)."""
    xds, http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    path = str(server_root) if module == "app.cli" else os.pathsep.join((str(server_root), str(BENCH_ROOT)))
    env = {**os.environ, **pilot_env(), **(extra_env or {}), "PYTHONPATH": path}
    env.pop("KUBECONFIG", None)  # only the cluster named here
    command = [sys.executable, "-m", module, "serve", "--xds-address", xds, "--http-address", http]
    if config_dir is not None:
        command += ["--config-dir", str(config_dir)]
    if kube is not None:
        kubeconfig, system_namespace = kube
        command += ["--kubeconfig", str(kubeconfig), "--system-namespace", system_namespace]
        command += ["--secure-xds-address", f"127.0.0.1:{free_port()}", "--webhook-address", ""]
    compileall.compile_dir(server_root / "app", quiet=1)
    started = time.monotonic()
    with log.open("wb") as out:
        popen = subprocess.Popen(command, cwd=server_root, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = ServerProcess(popen, xds, log, started)
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        server.check_alive()
        try:
            with urllib.request.urlopen(f"http://{http}/ready", timeout=2) as response:
                if response.status == 200:
                    return server
        except (OSError, urllib.error.URLError):
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise TimeoutError(f"pilotfish not ready after {READY_TIMEOUT:.0f}s; see {log}")
        time.sleep(READY_POLL)


def _cpu_seconds(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:  # ended meanwhile
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def _tree(pid: int) -> list[int]:
    """``pid`` and its live descendants."""
    found, i = [pid], 0
    while i < len(found):
        for task in Path(f"/proc/{found[i]}/task").glob("*/children"):
            with contextlib.suppress(FileNotFoundError):
                found.extend(int(child) for child in task.read_text().split())
        i += 1
    return found


def start_floor(recording: Path, log: Path, processes: int = 1) -> ServerProcess:
    xds = f"127.0.0.1:{free_port()}"
    command = [sys.executable, "-m", "bench.floor_server", "--recording", str(recording), "--address", xds]
    command += ["--processes", str(processes)]
    with log.open("wb") as err:
        popen = subprocess.Popen(command, cwd=BENCH_ROOT, stdout=subprocess.PIPE, stderr=err)
    assert popen.stdout is not None
    line = popen.stdout.readline()  # "serving" once it listens, EOF if it died
    server = ServerProcess(popen, xds, log)
    if line.strip() != b"serving":
        server.stop()
        raise RuntimeError(f"the floor server did not start; see {log}")
    return server


def log_warnings(log: Path, limit: int = 5) -> dict[str, object]:
    """How many WARNING / ERROR lines a server logged (Python logging's or grpc core's ``E1124 ...``
    format), and the first few distinct ones."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if _WARNING.match(line)]
    return {"count": len(lines), "first": list(dict.fromkeys(lines))[:limit]}


@dataclass
class OtlpSink:
    popen: subprocess.Popen[bytes]
    address: str


def start_otlp_sink() -> OtlpSink:
    """``bench.otlp_sink`` in its own process, listening once this returns."""
    address = f"127.0.0.1:{free_port()}"
    command = [sys.executable, "-m", "bench.otlp_sink", "--address", address]
    popen = subprocess.Popen(command, cwd=BENCH_ROOT, stdout=subprocess.PIPE)
    assert popen.stdout is not None
    if popen.stdout.readline().strip() != b"serving":
        popen.kill()
        raise RuntimeError("the OTLP sink did not start")
    return OtlpSink(popen, address)


def otlp_env(sink: OtlpSink) -> dict[str, str]:
    """What makes pilotfish export its push traces to ``sink`` (only standard OTEL_* variables)."""
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{sink.address}",
    }


def stop_otlp_sink(sink: OtlpSink) -> dict[str, int]:
    """SIGTERM, and the counts it printed: exports, spans, push spans, bytes."""
    sink.popen.send_signal(signal.SIGTERM)
    out, _ = sink.popen.communicate(timeout=STOP_TIMEOUT)
    counts: dict[str, int] = json.loads(out.decode().strip().splitlines()[-1])
    return counts
