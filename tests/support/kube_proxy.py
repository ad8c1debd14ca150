"""Services for the test pods, as kube-proxy's userspace mode and the cluster's DNS provide them.

There is no iptables here, so ClusterIPs cannot be rewritten in the kernel. Instead each
ClusterIP is an address of the node's pod bridge (tests/support/pods.py; gone with it), and
a listener there per Service port forwards every TCP connection to one ready endpoint from the
Service's EndpointSlices (round robin), which is what kube-proxy's original userspace proxier
did. The pods' default route is the node, so a pod reaches ``10.96.x.y:PORT`` as in a cluster. The master Service
(``default/kubernetes``, no endpoints here: the API server runs with ``--endpoint-reconciler-type
none``) forwards to the API server on the node's loopback, which is what its endpoint would say.

The cluster DNS is the other half: ``hosts()`` lists every Service's ClusterIP under its
``NAME.NAMESPACE.svc[.cluster.local]`` names, which the kubelet writes into each pod's
/etc/hosts (a resolver the pods already have; no DNS server).

Only TCP; headless Services get no proxy (their names are not listed).
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.support.cluster import Cluster

CLUSTER_DOMAIN = "cluster.local"


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _relay(client: socket.socket, upstream: socket.socket) -> None:
    """Both directions until both ends closed, then both sockets closed."""
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


@dataclass
class ServiceProxy:
    cluster: Cluster
    bridge: str  # the node's pod bridge, where the ClusterIPs are addresses
    _listeners: dict[tuple[str, int], socket.socket] = field(default_factory=dict)
    _backends: dict[tuple[str, int], list[tuple[str, int]]] = field(default_factory=dict)
    _turn: Iterator[int] = field(default_factory=itertools.count)
    _names: dict[str, list[str]] = field(default_factory=dict)  # ClusterIP -> DNS names
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def down(self) -> None:
        for sock in self._listeners.values():
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked on it: close alone does not
            sock.close()
        for ip in {ip for ip, _ in self._listeners}:
            subprocess.run(["ip", "addr", "delete", f"{ip}/32", "dev", self.bridge], capture_output=True, check=False)
        self._listeners.clear()

    def hosts(self) -> str:
        """The cluster DNS's answers as /etc/hosts lines."""
        with self._lock:
            return "".join(f"{ip} {' '.join(names)}\n" for ip, names in sorted(self._names.items()))

    def sync(self) -> None:
        """Listen on every Service's ClusterIP ports and learn their ready endpoints."""
        services = self.cluster.list("v1", "Service")
        slices = self.cluster.list("discovery.k8s.io/v1", "EndpointSlice")
        backends: dict[tuple[str, int], list[tuple[str, int]]] = {}
        names: dict[str, list[str]] = {}
        for service in services:
            meta, spec = service["metadata"], service["spec"]
            cluster_ip = spec.get("clusterIP") or "None"
            if cluster_ip == "None":
                continue
            fqdn = f"{meta['name']}.{meta['namespace']}.svc"
            names[cluster_ip] = [fqdn, f"{fqdn}.{CLUSTER_DOMAIN}"]
            mine = [s for s in slices if _owner(s) == (meta["namespace"], meta["name"])]
            for port in spec.get("ports") or []:
                if port.get("protocol", "TCP") != "TCP":
                    continue
                key = (cluster_ip, int(port["port"]))
                if (meta["namespace"], meta["name"]) == ("default", "kubernetes"):
                    host, api_port = self.cluster.server.removeprefix("https://").split(":")
                    backends[key] = [(host, int(api_port))]
                else:
                    backends[key] = _ready(mine, port.get("name", ""))
                self._listen(key)
        with self._lock:
            self._backends, self._names = backends, names

    def _listen(self, key: tuple[str, int]) -> None:
        if key in self._listeners:
            return
        if not any(ip == key[0] for ip, _ in self._listeners):
            _ip("addr", "add", f"{key[0]}/32", "dev", self.bridge)
        sock = socket.create_server(key, backlog=128)
        self._listeners[key] = sock
        threading.Thread(target=self._accept, args=(key, sock), name=f"svc-{key[0]}:{key[1]}", daemon=True).start()

    def _accept(self, key: tuple[str, int], sock: socket.socket) -> None:
        while True:
            try:
                client, _ = sock.accept()
            except OSError:
                return  # closed: the proxy is down
            with self._lock:
                backends = self._backends.get(key, [])
                backend = backends[next(self._turn) % len(backends)] if backends else None
            if backend is None:
                client.close()  # no ready endpoint: refused, as kube-proxy rejects it
                continue
            try:
                upstream = socket.create_connection(backend, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            threading.Thread(target=_relay, args=(client, upstream), daemon=True).start()


def _owner(endpoint_slice: dict[str, Any]) -> tuple[str, str]:
    meta = endpoint_slice["metadata"]
    return meta["namespace"], (meta.get("labels") or {}).get("kubernetes.io/service-name", "")


def _ready(slices: list[dict[str, Any]], port_name: str) -> list[tuple[str, int]]:
    out = []
    for endpoint_slice in slices:
        ports = [p for p in endpoint_slice.get("ports") or [] if p.get("name", "") == port_name]
        for endpoint in endpoint_slice.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") and ports:
                out += [(address, int(ports[0]["port"])) for address in endpoint["addresses"]]
    return sorted(out)
