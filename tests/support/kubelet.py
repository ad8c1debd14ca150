"""A stand-in for the kubelet of ``node-1``, the one part of a cluster that cannot run here: it
runs the pods the API server holds as local processes, and reports them as a kubelet does.

* Pods: every pod of the watched namespaces that is unscheduled (there is no scheduler: the
  kubelet binds it, as the scheduler would, through ``pods/binding``) or bound to the node.
  Each gets a network namespace with its own address on the node's bridge (tests/support/pods.py;
  the node's network ``NODE_NETWORK`` is apart from the one of tests that run pods by hand).
* Status, as the kubelet writes it: ``hostIP``/``podIP(s)``, ``startTime``, phase, the
  PodScheduled / Initialized / ContainersReady / Ready conditions, ``initContainerStatuses`` and
  ``containerStatuses`` (waiting / running / terminated, started, ready, restartCount);
  readiness from the containers' probes (httpGet, tcpSocket, exec; startupProbe first), and a
  container failing its liveness probe killed and restarted;
  native sidecars (an init container with ``restartPolicy: Always``) started in order, the next
  init container once the sidecar has started. The Node's status too (addresses, allocatable).
* Containers: ``command``/``args`` over the image's entrypoint and cmd, ``$(VAR)`` expanded; the
  environment from tests/support/pod_env.py; volumes and the image's files at their paths from
  tests/support/pod_volumes.py (a mount namespace per container), the pod's hostname (a UTS
  namespace), /etc/hosts managed by the kubelet (with the cluster DNS's names; ClusterIPs proxied
  by tests/support/kube_proxy.py). Containers restart per the pod's restartPolicy, with back-off.
* ``exec``: a command in a container's namespaces, mounts and environment (``kubectl exec``).
* Deletion: a pod with a deletionTimestamp gets its preStop hooks and SIGTERM (main containers,
  then sidecars), SIGKILL after the grace period, and is then deleted for good
  (``gracePeriodSeconds=0``), as the kubelet's status manager does.

Images are the node's programs (tests/support/images.py).

No iptables: this machine has none, so istio-init (``istio-iptables``) would run and fail, and
the pod would stay in Init, as on a node without it. Meshed pods therefore do not ask for
capture (``sidecar.istio.io/interceptionMode: NONE``, for which the injector adds no
istio-init); traffic reaches Envoy through listeners that bind (a Sidecar's egress
``bind``/``captureMode: NONE`` and ingress ``bind``), as in tests/e2e/test_istio_proxy.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support.cluster import NODE, ApiError, Cluster
from tests.support.images import image
from tests.support.kube_proxy import ServiceProxy
from tests.support.pod_env import PodSpecError, container_env, expand, service_env
from tests.support.pod_volumes import (
    Mount,
    VolumeNotReady,
    decode_data,
    materialize,
    mounts_for,
    prologue,
)
from tests.support.pods import Names, Pod, PodNetwork, pod_network
from tests.support.probes import network_probe

SYNC_PERIOD = 0.3  # seconds between looks at the API server (the real one watches)
BACKOFF_MAX = 10.0


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_allocatable() -> dict[str, str]:
    """What the node offers (the kubelet reports it; an unset limit in a resourceFieldRef is it)."""
    meminfo = Path("/proc/meminfo").read_text().split()
    memory_kib = int(meminfo[meminfo.index("MemTotal:") + 1])
    return {"cpu": str(os.cpu_count() or 1), "memory": f"{memory_kib}Ki", "pods": "110"}


@dataclass
class Container:
    """One container of a running pod: its spec, process and what the kubelet knows of it."""

    spec: dict[str, Any]
    sidecar: bool = False  # a native sidecar: an init container with restartPolicy Always
    init: bool = False
    process: subprocess.Popen[bytes] | None = None
    started_at: str = ""
    started: bool = False  # the startupProbe passed (or there is none)
    ready: bool = False
    restarts: int = 0
    last_exit: dict[str, Any] | None = None
    waiting: tuple[str, str] | None = ("ContainerCreating", "")
    next_probe: float = 0.0
    probe_failures: int = 0
    next_liveness: float = 0.0
    liveness_failures: int = 0
    restart_at: float = 0.0

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self, image_ref: str) -> dict[str, Any]:
        state: dict[str, Any]
        if self.process is not None and self.process.poll() is None:
            state = {"running": {"startedAt": self.started_at}}
        elif self.waiting is not None:
            state = {
                "waiting": {"reason": self.waiting[0], **({"message": self.waiting[1]} if self.waiting[1] else {})}
            }
        else:
            state = {"terminated": self.last_exit or {"exitCode": 0, "reason": "Completed"}}
        out: dict[str, Any] = {
            "name": self.name, "image": image_ref, "imageID": image_ref, "state": state,
            "ready": self.ready, "started": self.started, "restartCount": self.restarts,
        }  # fmt: skip
        if self.process is not None:
            out["containerID"] = f"process://{self.process.pid}"
        if self.last_exit is not None and "running" in state:
            out["lastState"] = {"terminated": self.last_exit}
        return out


class RunningPod:
    """One pod on the node: its network namespace, volumes and container processes."""

    def __init__(self, kubelet: Kubelet, pod: dict[str, Any]) -> None:
        self.kubelet = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.dir = kubelet.workdir / "pods" / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        self.network: Pod | None = None
        self.volumes: dict[str, Path] = {}
        spec = pod["spec"]
        self.init = [Container(c, sidecar=c.get("restartPolicy") == "Always", init=True)
                     for c in spec.get("initContainers") or []]  # fmt: skip
        self.main = [Container(c) for c in spec["containers"]]
        self.initialized = False
        self.deleting = threading.Event()
        self.stopped = threading.Event()
        self.failure = ""  # why the pod cannot start (a spec the kubelet refuses)
        self._last_status: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run, name=f"pod-{self.namespace}/{self.name}", daemon=True)

    # --- what tests read ---------------------------------------------------------------------

    @property
    def ip(self) -> str:
        assert self.network is not None, f"pod {self.namespace}/{self.name} has no address yet"
        return self.network.ip

    def container(self, name: str) -> Container:
        for c in [*self.init, *self.main]:
            if c.name == name:
                return c
        raise KeyError(f"pod {self.namespace}/{self.name} has no container {name!r}")

    def log_path(self, container: str) -> Path:
        return self.dir / f"{container}.log"

    def log(self, container: str) -> str:
        try:
            return self.log_path(container).read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def exec(self, container: str, argv: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """``kubectl exec``: ``argv`` in the container's namespaces, environment and mounts."""
        c = self.container(container)
        command, env = self._command(c, list(argv))
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)

    # --- the pod worker ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._start()
            while not self.deleting.wait(SYNC_PERIOD):
                self._tick()
            self._terminate()
        except Exception as e:  # reported, as a kubelet reports a pod it cannot run
            self.failure = f"{type(e).__name__}: {e}"
            with contextlib.suppress(Exception):
                self._write_status()
            if self.deleting.is_set():
                self._terminate()
        finally:
            self.stopped.set()

    def _start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        with self.kubelet.network_lock:  # PodNetwork numbers pods by count: one at a time
            self.network = self.kubelet.network.add_pod(self.name[:12], self.namespace, self.dir / "root")
        status = self.pod.setdefault("status", {})
        status.update({"hostIP": self.network.node_ip, "hostIPs": [{"ip": self.network.node_ip}],
                       "podIP": self.network.ip, "podIPs": [{"ip": self.network.ip}]})  # fmt: skip
        self._write_status()
        while not self.deleting.is_set():
            try:
                for volume in self.pod["spec"].get("volumes") or []:
                    if volume["name"] not in self.volumes:
                        self.volumes[volume["name"]] = materialize(
                            self.pod, volume, self.dir / "volumes", read=self.kubelet.read,
                            token=self.kubelet.request_token, allocatable=self.kubelet.allocatable,
                        )  # fmt: skip
                break
            except VolumeNotReady as e:  # MountVolume.SetUp failed; retried until it appears
                for c in [*self.init, *self.main]:
                    c.waiting = ("ContainerCreating", f"MountVolume.SetUp failed: {e}")
                self._write_status()
                self.deleting.wait(1.0)
        (self.dir / "hosts").write_text(self._hosts())
        (self.dir / "scratch").mkdir(exist_ok=True)

    def _hosts(self) -> str:
        assert self.network is not None
        hostname = self.pod["spec"].get("hostname") or self.name
        return f"127.0.0.1 localhost\n{self.network.ip} {hostname}\n" + self.kubelet.services.hosts()

    def _tick(self) -> None:
        (self.dir / "hosts").write_text(self._hosts())  # the same file, rewritten: bind mounts see it
        if not self.initialized:
            self._step_init()
        if self.initialized:
            for c in self.main:
                self._keep_running(c)
        for c in self.init:
            if c.sidecar and c.process is not None:
                self._keep_running(c)
        for c in [*self.init, *self.main]:
            if c.process is not None and c.process.poll() is None:
                self._probe(c)
        self._write_status()

    def _step_init(self) -> None:
        """Init containers in order: a regular one to completion, a sidecar until started."""
        for c in self.init:
            if c.sidecar:
                if c.process is None:
                    self._launch(c)
                if not c.started:
                    return
                continue
            if c.last_exit is not None and c.last_exit["exitCode"] == 0 and c.process is None:
                continue
            if c.process is None:
                if time.monotonic() >= c.restart_at:
                    self._launch(c)
                return
            code = c.process.poll()
            if code is None:
                return
            self._exited(c, code)
            if code != 0:
                return
            c.process = None
        self.initialized = True

    def _keep_running(self, c: Container) -> None:
        if c.process is None:
            if c.restart_at <= time.monotonic() and (c.last_exit is None or self._restarts(c)):
                self._launch(c)
            return
        code = c.process.poll()
        if code is None:
            return
        self._exited(c, code)
        c.process = None
        if self._restarts(c):
            c.waiting = ("CrashLoopBackOff", f"back-off restarting failed container {c.name}")
            c.restart_at = time.monotonic() + min(BACKOFF_MAX, 2.0**c.restarts)
            c.restarts += 1
        else:
            c.waiting = None

    def _restarts(self, c: Container) -> bool:
        if c.sidecar:
            return True
        policy = str(self.pod["spec"].get("restartPolicy", "Always"))
        return policy == "Always" or (policy == "OnFailure" and (c.last_exit or {}).get("exitCode", 0) != 0)

    def _exited(self, c: Container, code: int) -> None:
        c.last_exit = {
            "exitCode": code if code >= 0 else 128 - code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": c.started_at, "finishedAt": _now(),
        }  # fmt: skip
        c.ready = c.started = False

    def _command(self, c: Container, argv: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
        """The argv and environment that run ``argv`` (or the container's own command) in it."""
        assert self.network is not None
        img = image(c.spec["image"], self.kubelet.workdir / "images")
        services = self.kubelet.service_env(self.namespace, self.pod["spec"].get("enableServiceLinks", True))
        resolved = container_env(
            self.pod, c.spec, services=services, read=self.kubelet.read_text, allocatable=self.kubelet.allocatable
        )
        env = {**img.env, **resolved}
        env.setdefault("HOSTNAME", self.pod["spec"].get("hostname") or self.name)  # as the runtime sets it
        if argv is None:
            command = [expand(a, env) for a in c.spec.get("command") or []] or list(img.entrypoint)
            args = c.spec.get("args")
            argv = command + ([expand(a, env) for a in args] if args is not None else (
                list(img.cmd) if not c.spec.get("command") else []))  # fmt: skip
        if not argv:
            raise PodSpecError(f"container {c.name}: no command (neither the spec nor the image gives one)")
        mounts = [Mount(path, where) for where, path in img.files.items()] + mounts_for(c.spec, self.volumes)
        etc = {
            "/etc/hosts": self.dir / "hosts",
            "/etc/resolv.conf": Path("/etc/netns") / self.network.netns / "resolv.conf",
        }
        hostname = self.pod["spec"].get("hostname") or self.name
        script = prologue(mounts, self.dir / "scratch", etc, c.spec.get("workingDir") or img.working_dir, hostname)
        shell = [shutil.which("unshare") or "unshare", "--uts", "--", shutil.which("sh") or "/bin/sh"]
        return self.network.argv([*shell, "-c", script, c.name, *argv]), env

    def _launch(self, c: Container) -> None:
        try:
            command, env = self._command(c)
        except LookupError as e:
            c.waiting = ("ErrImagePull", str(e))
            return
        except PodSpecError as e:
            c.waiting = ("CreateContainerConfigError", str(e))
            return
        with self.log_path(c.name).open("ab") as log:
            log.write(f"--- {_now()} container {c.name} started\n".encode())
            c.process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/",
                start_new_session=True, preexec_fn=_die_with_parent,
            )  # fmt: skip
        c.started_at, c.waiting = _now(), None
        c.next_probe = time.monotonic() + float((c.spec.get("startupProbe") or c.spec.get("readinessProbe") or {})
                                                .get("initialDelaySeconds", 0))  # fmt: skip
        c.probe_failures = c.liveness_failures = 0
        c.next_liveness = time.monotonic() + float((c.spec.get("livenessProbe") or {}).get("initialDelaySeconds", 0))
        c.started = "startupProbe" not in c.spec
        c.ready = c.started and "readinessProbe" not in c.spec
        if "postStart" in (c.spec.get("lifecycle") or {}):
            self._hook(c, "postStart")

    def _hook(self, c: Container, which: str) -> None:
        handler = c.spec["lifecycle"][which]
        if "exec" in handler:
            self.exec(c.name, handler["exec"]["command"], timeout=60)
        elif "httpGet" in handler:
            network_probe(handler, self.ip, c.spec, 5.0)

    def _probe(self, c: Container) -> None:
        """The startup probe until it passes, then the readiness and liveness probes, each at its
        period; a container failing its startup or liveness probe ``failureThreshold`` times in a
        row is killed (and restarted per the restartPolicy)."""
        liveness = c.spec.get("livenessProbe")
        if c.started and liveness is not None and time.monotonic() >= c.next_liveness:
            c.next_liveness = time.monotonic() + float(liveness.get("periodSeconds", 10))
            c.liveness_failures = 0 if self._run_probe(c, liveness) else c.liveness_failures + 1
            if c.liveness_failures >= int(liveness.get("failureThreshold", 3)):
                self._kill(c)
                return
        probe = c.spec.get("startupProbe") if not c.started else c.spec.get("readinessProbe")
        if probe is None or time.monotonic() < c.next_probe:
            return
        c.next_probe = time.monotonic() + float(probe.get("periodSeconds", 10))
        if self._run_probe(c, probe):
            c.probe_failures = 0
            if not c.started:  # the readiness probe runs from now on, the first one at once
                c.started, c.next_probe = True, 0.0
                c.ready = "readinessProbe" not in c.spec
            else:
                c.ready = True
        else:
            c.probe_failures += 1
            if c.probe_failures >= int(probe.get("failureThreshold", 3)):
                if c.started:
                    c.ready = False
                else:
                    self._kill(c)

    def _run_probe(self, c: Container, probe: Mapping[str, Any]) -> bool:
        timeout = float(probe.get("timeoutSeconds", 1))
        if "exec" in probe:
            return self.exec(c.name, probe["exec"]["command"], timeout=timeout).returncode == 0
        return network_probe(probe, self.ip, c.spec, timeout)

    def _kill(self, c: Container) -> None:
        if c.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.process.pid, signal.SIGKILL)

    def _terminate(self) -> None:
        """preStop hooks, SIGTERM (main containers, then sidecars in reverse), SIGKILL at the
        grace period's end; then the pod is deleted for good."""
        grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
        deadline = time.monotonic() + grace
        for group in (self.main, list(reversed([c for c in self.init if c.sidecar]))):
            running = [c for c in group if c.process is not None and c.process.poll() is None]
            for c in running:
                if "preStop" in (c.spec.get("lifecycle") or {}):
                    with contextlib.suppress(Exception):
                        self._hook(c, "preStop")
                assert c.process is not None
                with contextlib.suppress(ProcessLookupError):
                    c.process.send_signal(signal.SIGTERM)
            for c in running:
                assert c.process is not None
                try:
                    c.process.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(c.process.pid, signal.SIGKILL)
                    c.process.wait()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(c.process.pid, signal.SIGKILL)  # what it left in its group (Envoy)
        if self.network is not None:
            subprocess.run(["ip", "netns", "delete", self.network.netns], capture_output=True, check=False)
        path = self.kubelet.cluster.path("v1", "Pod", self.namespace, self.name)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"uid": self.uid}}  # fmt: skip
        with contextlib.suppress(ApiError):
            self.kubelet.cluster.request("DELETE", path, body, ok=(200, 202, 404, 409))

    def _write_status(self) -> None:
        now = _now()
        status = self.pod.setdefault("status", {})
        init_done = self.initialized or not self.init
        containers_ready = (
            init_done and all(c.ready for c in self.main) and all(c.ready for c in self.init if c.sidecar)
        )
        running = init_done and any(c.process is not None and c.process.poll() is None for c in self.main)
        conditions = {
            "PodScheduled": True, "Initialized": init_done, "ContainersReady": containers_ready,
            "Ready": containers_ready,
        }  # fmt: skip
        previous = {c["type"]: c for c in status.get("conditions") or []}
        image_of = {
            c["name"]: c["image"]
            for c in [*(self.pod["spec"].get("initContainers") or []), *self.pod["spec"]["containers"]]
        }
        new = {
            "phase": "Running" if running else "Pending",
            "startTime": status.get("startTime") or now,
            "conditions": [
                {
                    "type": kind,
                    "status": str(value),
                    "lastTransitionTime": previous[kind]["lastTransitionTime"]
                    if kind in previous and previous[kind]["status"] == str(value)
                    else now,
                }
                for kind, value in conditions.items()
            ],
            "initContainerStatuses": [c.status(image_of[c.name]) for c in self.init],
            "containerStatuses": [c.status(image_of[c.name]) for c in self.main],
        }
        for key in ("hostIP", "hostIPs", "podIP", "podIPs"):
            if key in status:
                new[key] = status[key]
        if self.failure:
            new["message"], new["reason"] = self.failure, "KubeletError"
        if new == self._last_status:
            return
        try:
            self.kubelet.cluster.patch_status("v1", "Pod", self.namespace, self.name, new)
        except ApiError as e:
            if e.status != 404:
                raise
        self._last_status = new
        status.update(new)


class Kubelet:
    """The kubelet of ``node``, for the pods of ``namespaces`` (other tests share the API server;
    their pods are not this node's)."""

    def __init__(self, cluster: Cluster, network: PodNetwork, workdir: Path, namespaces: Sequence[str]) -> None:
        self.cluster = cluster
        self.network = network
        self.workdir = workdir
        self.namespaces = list(namespaces)
        self.services = ServiceProxy(cluster, network.names.bridge)
        self.allocatable = node_allocatable()
        self.pods: dict[str, RunningPod] = {}  # by uid
        self.network_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kubelet", daemon=True)
        self._services_cache: list[dict[str, Any]] = []
        self.errors: list[str] = []

    def watch(self, namespace: str) -> None:
        """Run the pods of ``namespace`` too."""
        self.namespaces.append(namespace)

    def start(self) -> None:
        self._register_node()
        self._sync()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for running in self.pods.values():
            running.deleting.set()
        for running in self.pods.values():
            running.stopped.wait(60)
        self.services.down()

    def _register_node(self) -> None:
        status = {
            "addresses": [
                {"type": "InternalIP", "address": self.network.node_ip}, {"type": "Hostname", "address": NODE}
            ],
            "capacity": self.allocatable, "allocatable": self.allocatable,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}],
        }  # fmt: skip
        self.cluster.patch_status("v1", "Node", "", NODE, status)

    def _loop(self) -> None:
        while not self._stop.wait(SYNC_PERIOD):
            try:
                self._sync()
            except Exception as e:  # the API server restarting, say: the next look may work
                self.errors.append(f"{type(e).__name__}: {e}")

    def _sync(self) -> None:
        self.services.sync()
        self._services_cache = self.cluster.list("v1", "Service")
        seen: set[str] = set()
        for namespace in list(self.namespaces):
            for pod in self.cluster.list("v1", "Pod", namespace):
                uid = pod["metadata"]["uid"]
                seen.add(uid)
                node = pod["spec"].get("nodeName")
                if node not in (None, "", NODE):
                    continue
                if not node:
                    self._bind(pod)
                    continue  # seen bound on the next look
                running = self.pods.get(uid)
                if running is None and not pod["metadata"].get("deletionTimestamp"):
                    running = self.pods[uid] = RunningPod(self, pod)
                    running.thread.start()
                if running is not None:
                    running.pod["metadata"] = pod["metadata"]  # labels and annotations may change
                    if pod["metadata"].get("deletionTimestamp"):
                        running.pod["spec"]["terminationGracePeriodSeconds"] = pod["metadata"].get(
                            "deletionGracePeriodSeconds", running.pod["spec"].get("terminationGracePeriodSeconds", 30)
                        )
                        running.deleting.set()
        for uid, running in self.pods.items():
            if uid not in seen:  # deleted for good elsewhere: stop what is left
                running.deleting.set()

    def _bind(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"], "uid": meta["uid"]},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}}  # fmt: skip
        path = self.cluster.path("v1", "Pod", meta["namespace"], meta["name"]) + "/binding"
        self.cluster.request("POST", path, binding, ok=(200, 201, 409))

    # --- what pods read through the kubelet ------------------------------------------------------

    def read(self, kind: str, namespace: str, name: str) -> dict[str, bytes] | None:
        obj = self.cluster.get("v1", kind, namespace, name)
        return None if obj is None else decode_data(obj)

    def read_text(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        data = self.read(kind, namespace, name)
        return None if data is None else {k: v.decode(errors="replace") for k, v in data.items()}

    def request_token(
        self, namespace: str, account: str, audience: str | None, seconds: int, pod: Mapping[str, Any]
    ) -> str:
        """A TokenRequest bound to the pod (the token dies with it), as the kubelet's token manager."""
        meta = pod["metadata"]
        spec: dict[str, Any] = {
            "expirationSeconds": seconds,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        }
        if audience:
            spec["audiences"] = [audience]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = self.cluster.path("v1", "ServiceAccount", namespace, account) + "/token"
        token: str = self.cluster.request("POST", path, body)["status"]["token"]
        return token

    def service_env(self, namespace: str, links: bool) -> dict[str, str]:
        return service_env(self._services_cache, namespace, links)

    # --- what tests ask -----------------------------------------------------------------------

    def pod(self, namespace: str, name: str, timeout: float = 60.0) -> RunningPod:
        """The running pod ``namespace/name`` (waiting for the kubelet to pick it up)."""

        def find() -> RunningPod | None:
            for running in self.pods.values():
                if (running.namespace, running.name) == (namespace, name) and not running.deleting.is_set():
                    return running
            return None

        try:
            return self.cluster.wait_for(f"the kubelet to run pod {namespace}/{name}", find, timeout)
        except AssertionError as e:
            raise AssertionError(f"{e}; the kubelet's last errors: {self.errors[-3:]}") from None

    def ready(self, namespace: str, name: str, timeout: float = 90.0) -> RunningPod:
        """The pod once its Ready condition is True in the API server."""
        running = self.pod(namespace, name, min(timeout, 30.0))

        def is_ready() -> bool:
            if running.failure:
                raise AssertionError(f"pod {namespace}/{name} cannot run: {running.failure}\n{self.describe(running)}")
            pod = self.cluster.get("v1", "Pod", namespace, name) or {}
            return any(
                c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", [])
            )

        try:
            self.cluster.wait_for(f"pod {namespace}/{name} to be Ready", is_ready, timeout)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.describe(running)}") from None
        return running

    def describe(self, running: RunningPod, tail: int = 4000) -> str:
        """Each container's state and the end of its log, for a failing assertion."""
        parts = [f"pod {running.namespace}/{running.name} {running.failure}"]
        for c in [*running.init, *running.main]:
            parts.append(
                f"--- {c.name}: waiting={c.waiting} exit={c.last_exit} ready={c.ready}\n{running.log(c.name)[-tail:]}"
            )
        return "\n".join(parts)


# the node's pod network: its own bridge, names and subnet, apart from tests/support/pods.py's
# default one (tests that run pods by hand), so the two never take each other's addresses
NODE_NETWORK = Names(bridge="pk-pods0", netns="pk-", veth="pkv")
NODE_SUBNET = ipaddress.IPv4Network("10.89.16.0/24")


@contextlib.contextmanager
def running_kubelet(cluster: Cluster, workdir: Path, namespaces: Sequence[str] = ()) -> Iterator[Kubelet]:
    """The node's pod network and its kubelet; on the way out every pod is stopped and deleted
    (the node goes, and its pods with it) and the network removed."""
    with pod_network(NODE_SUBNET, NODE_NETWORK) as network:
        kubelet = Kubelet(cluster, network, workdir, namespaces)
        kubelet.start()
        try:
            yield kubelet
        finally:
            kubelet.stop()
