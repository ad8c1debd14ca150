"""Pods without a kubelet: each pod is a Linux network namespace with its own address on one
bridge, and a directory that stands for its filesystem root.

A pod's containers are local processes started in its namespace (``ip netns exec``), so every
pod has its own port space, as in a cluster: two Istio sidecars bind 15000, 15001, 15006,
15020, 15021 and 15090 each without meeting. The bridge carries the node's address (the
gateway of every pod, where the control plane listens). ``ip netns exec`` mounts
``/etc/netns/NAME/hosts`` and ``resolv.conf`` over ``/etc``'s, which gives each pod the names
a cluster's DNS would (``istiod.istio-system.svc`` is the node) and no resolver beyond the mesh's.

Needs root (CAP_NET_ADMIN), as CI has; elsewhere the tests that use it skip.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

BRIDGE = "pf-pods0"
NETNS_PREFIX = "pf-"
VETH_PREFIX = "pfv"
NETNS_ETC = Path("/etc/netns")
CONTROL_PLANE_NAMES = ("istiod", "pilotfish")
SUBNET = ipaddress.IPv4Network("10.89.0.0/24")
_CLONE_NEWNET = 0x40000000
T = TypeVar("T")


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


def in_netns(netns: str, fn: Callable[[], T]) -> T:
    """``fn()`` run on a thread that entered ``netns`` (setns moves only the calling thread).

    A socket made there stays in that namespace for good: the test process can serve or connect
    through it from any thread, as a container process of that pod would."""
    out: list[T] = []
    error: list[BaseException] = []

    def enter_and_run() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            with open(f"/var/run/netns/{netns}") as f:
                if libc.setns(f.fileno(), _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns {netns}")
            out.append(fn())
        except BaseException as e:
            error.append(e)

    thread = threading.Thread(target=enter_and_run, name=f"netns-{netns}")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return out[0]


@dataclass(frozen=True)
class Names:
    """The bridge, and the prefixes of the network namespaces and veth links, of one pod network
    (two networks with different names and subnets live side by side)."""

    bridge: str = BRIDGE
    netns: str = NETNS_PREFIX
    veth: str = VETH_PREFIX


def _delete_leftovers(names: Names) -> None:
    """What an earlier, killed run left behind: its pods' processes, namespaces and links."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(names.netns):
            pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False)
            for pid in pids.stdout.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "delete", name], check=False)
            shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    for line in links.splitlines():
        name = line.split(": ")[1].split("@")[0] if ": " in line else ""
        if name == names.bridge or name.startswith(names.veth):
            subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)


@dataclass
class Pod:
    """One pod's network namespace, address and root directory."""

    name: str
    namespace: str
    netns: str
    ip: str
    node_ip: str
    root: Path

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the pod's network namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def start(
        self, argv: Sequence[str], log_path: Path, env: Mapping[str, str], *, cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """A container process of this pod, its output in ``log_path``."""
        with log_path.open("ab") as log:
            return subprocess.Popen(
                self.argv(argv), stdout=log, stderr=subprocess.STDOUT, env=dict(env), cwd=cwd or self.root,
                start_new_session=True,
            )  # fmt: skip

    def listen(self, port: int, address: str = "127.0.0.1") -> socket.socket:
        """A listening TCP socket in the pod (an app container's)."""

        return in_netns(self.netns, lambda: socket.create_server((address, port), backlog=128))

    def connect(self, address: str, port: int, timeout: float = 10.0) -> socket.socket:
        """A TCP connection from the pod (an app container's)."""
        return in_netns(self.netns, lambda: socket.create_connection((address, port), timeout=timeout))

    def udp_socket(self) -> socket.socket:
        """An unbound UDP socket in the pod (for a DNS query from an app container)."""
        return in_netns(self.netns, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))

    def run(self, argv: Sequence[str], *, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """A short command in the pod (as ``kubectl exec`` would run it)."""
        return subprocess.run(self.argv(argv), capture_output=True, text=True, timeout=timeout, check=False)


@dataclass
class PodNetwork:
    """The node's bridge and the pods on it."""

    subnet: ipaddress.IPv4Network = SUBNET
    pods: list[Pod] = field(default_factory=list)
    names: Names = field(default_factory=Names)

    @property
    def node_ip(self) -> str:
        return str(self.subnet.network_address + 1)

    def up(self) -> None:
        _delete_leftovers(self.names)
        _ip("link", "add", self.names.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.node_ip}/{self.subnet.prefixlen}", "dev", self.names.bridge)
        _ip("link", "set", self.names.bridge, "up")

    def add_pod(self, name: str, namespace: str, root: Path) -> Pod:
        index = len(self.pods) + 2
        netns = f"{self.names.netns}{index}-{name}"[:40]
        ip = str(self.subnet.network_address + index)
        veth = f"{self.names.veth}{index}"
        _ip("netns", "add", netns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _ip("link", "set", veth, "master", self.names.bridge, "up")
        _ip("-n", netns, "addr", "add", f"{ip}/{self.subnet.prefixlen}", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", netns, "route", "add", "default", "via", self.node_ip)
        etc = NETNS_ETC / netns
        etc.mkdir(parents=True, exist_ok=True)
        # the control plane runs on the node, under the names a cluster's DNS gives istiod
        control_plane = " ".join(f"{n}.istio-system.svc" for n in CONTROL_PLANE_NAMES)
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n{ip} {name}\n{self.node_ip} {control_plane}\n")
        # the node answers nothing on 53: a name the mesh does not know fails at once
        (etc / "resolv.conf").write_text(f"nameserver {self.node_ip}\nsearch {namespace}.svc.cluster.local\n")
        root.mkdir(parents=True, exist_ok=True)
        pod = Pod(name, namespace, netns, ip, self.node_ip, root)
        self.pods.append(pod)
        return pod

    def down(self) -> None:
        for pod in self.pods:
            subprocess.run(["ip", "netns", "delete", pod.netns], check=False, capture_output=True)
            shutil.rmtree(NETNS_ETC / pod.netns, ignore_errors=True)
        self.pods.clear()
        subprocess.run(["ip", "link", "delete", self.names.bridge], capture_output=True, check=False)


def require_root() -> None:
    """Network namespaces need root: CI is; elsewhere skip rather than fail."""
    if os.geteuid() == 0 and shutil.which("ip"):
        return
    if os.environ.get("CI") == "true":
        pytest.fail("pods need root and iproute2's ip (CI runs as root)")
    pytest.skip("pods need root and iproute2's ip")


@contextmanager
def pod_network(subnet: ipaddress.IPv4Network = SUBNET, names: Names = Names()) -> Iterator[PodNetwork]:
    require_root()
    network = PodNetwork(subnet, names=names)
    network.up()
    try:
        yield network
    finally:
        network.down()
