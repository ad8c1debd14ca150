"""Small tools the end-to-end tests share: free ports, polling, the config dir (and a Kubernetes
service written into it), HTTP through Envoy.

Everything here is synchronous: the backends run in their own thread (backends.py), so a test
may block while it waits for Envoy without starving anything it talks to.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import string
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "e2e"
# generous: a loaded 2-core CI machine; polling returns as soon as the condition holds
WAIT_TIMEOUT = 45.0
POLL_INTERVAL = 0.1

T = TypeVar("T")

_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now, never the same one twice in this test session."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def wait_until(predicate: Callable[[], T | None], what: str, timeout: float = WAIT_TIMEOUT) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    An exception from the predicate counts as "not yet" (Envoy's admin port may not be up);
    the last one is reported if time runs out.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
        except (OSError, http.client.HTTPException, ValueError, KeyError, AssertionError) as e:
            value, last = None, e
        else:
            last = value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last result: {last!r}")
        time.sleep(POLL_INTERVAL)


class ConfigDir:
    """The directory pilotfish watches; tests write Istio/Kubernetes YAML into it as a user would."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def write(self, name: str, text: str) -> Path:
        """Replace ``name`` atomically, so the watcher never reads a half-written file."""
        target = self.path / name
        staging = self.path / f".{name}.tmp"  # hidden: not a config file for pilotfish
        staging.write_text(text)
        os.replace(staging, target)
        return target

    def render(self, template: str, name: str | None = None, **values: object) -> Path:
        """Write tests/data/e2e/``template`` with ``$placeholders`` filled in, as ``name``."""
        text = string.Template((TEMPLATES / template).read_text()).substitute({k: str(v) for k, v in values.items()})
        return self.write(name or Path(template).name, text)

    def remove(self, name: str) -> None:
        (self.path / name).unlink()


@dataclass(frozen=True)
class KubernetesRegistration:
    """Service ``app`` of ``namespace``, one Pod per version (name -> address) and their EndpointSlice."""

    addresses: Mapping[str, str]
    cluster_ip: str
    service_port: int = 80
    namespace: str = "default"

    @property
    def host(self) -> str:
        return f"app.{self.namespace}.svc.cluster.local"

    def write(self, config: ConfigDir, target_port: int) -> None:
        config.render(
            "kubernetes/service.yaml",
            "app-service.yaml",
            namespace=self.namespace,
            cluster_ip=self.cluster_ip,
            service_port=self.service_port,
            target_port=target_port,
        )
        for version in self.addresses:
            self._write_pod(config, version, target_port)
        self._write_slice(config, list(self.addresses), target_port)

    def remove_endpoint(self, config: ConfigDir, version: str, target_port: int) -> None:
        # as Kubernetes does when the pod goes away: the slice drops it, the pod is deleted
        self._write_slice(config, [v for v in self.addresses if v != version], target_port)
        config.remove(f"app-{version}.yaml")

    def _write_pod(self, config: ConfigDir, version: str, target_port: int) -> None:
        config.render(
            "kubernetes/pod.yaml",
            f"app-{version}.yaml",
            namespace=self.namespace,
            version=version,
            address=self.addresses[version],
            target_port=target_port,
        )

    def _write_slice(self, config: ConfigDir, versions: list[str], target_port: int) -> None:
        endpoints = [
            {
                "addresses": [self.addresses[v]],
                "conditions": {"ready": True},
                "targetRef": {"kind": "Pod", "name": f"app-{v}", "namespace": self.namespace},
            }
            for v in versions
        ]
        config.render(
            "kubernetes/endpointslice.yaml",
            "app-endpointslice.yaml",
            namespace=self.namespace,
            target_port=target_port,
            endpoints=json.dumps(endpoints),
        )


@dataclass(frozen=True)
class Reply:
    """One HTTP response that came through Envoy; ``backend`` is None when Envoy answered itself."""

    status: int
    backend: str | None
    body: Mapping[str, Any] = field(default_factory=dict)
    text: str = ""


def send(
    port: int,
    path: str = "/",
    *,
    host: str | None = None,
    headers: Mapping[str, str] | None = None,
    connect: Callable[[str, int], socket.socket] | None = None,
) -> Reply:
    """One GET to 127.0.0.1 on a fresh connection (so a listener update is never hidden behind a
    kept-alive one); ``connect`` makes that connection elsewhere (from a pod: ``Pod.connect``)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    if connect is not None:
        conn.sock = connect("127.0.0.1", port)
    try:
        all_headers = dict(headers or {})
        if host is not None:
            all_headers["Host"] = host
        conn.request("GET", path, headers=all_headers)
        response = conn.getresponse()
        raw = response.read().decode(errors="replace")
        backend = response.getheader("x-backend")
        body: Mapping[str, Any] = json.loads(raw) if backend is not None else {}
        return Reply(response.status, backend, body, raw)
    finally:
        conn.close()


def backends_seen(port: int, count: int, path: str = "/", **kwargs: Any) -> Counter[str | None]:
    """Which backend answered each of ``count`` requests (None: Envoy answered, e.g. 503/404)."""
    return Counter(send(port, path, **kwargs).backend for _ in range(count))


def routed_to(port: int, backend: str, path: str = "/", **kwargs: Any) -> Callable[[], bool]:
    """A predicate for wait_until: the next request lands on ``backend``."""

    def check() -> bool:
        return send(port, path, **kwargs).backend == backend

    return check
