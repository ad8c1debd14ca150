"""The kubelet's network probes and handlers (``httpGet``, ``tcpSocket``) against a pod's address,
as pkg/kubelet/prober does them: HTTP(S) without verifying TLS, success for 200-399; a port by
number or by the name of one of the container's ports."""

from __future__ import annotations

import contextlib
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from tests.support.pod_env import PodSpecError


def container_port(container: Mapping[str, Any], port: int | str) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise PodSpecError(f"container {container['name']}: probe port {port!r} names no container port")


def network_probe(probe: Mapping[str, Any], pod_ip: str, container: Mapping[str, Any], timeout: float) -> bool:
    """One ``httpGet`` or ``tcpSocket`` probe (or lifecycle handler) of ``container``."""
    if "tcpSocket" in probe:
        port = container_port(container, probe["tcpSocket"]["port"])
        with contextlib.suppress(OSError), socket.create_connection((pod_ip, port), timeout):
            return True
        return False
    get = probe["httpGet"]
    scheme = str(get.get("scheme", "HTTP")).lower()
    url = f"{scheme}://{get.get('host') or pod_ip}:{container_port(container, get['port'])}{get.get('path', '/')}"
    request = urllib.request.Request(url, headers={h["name"]: h["value"] for h in get.get("httpHeaders") or []})
    context = ssl._create_unverified_context() if scheme == "https" else None
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return 200 <= int(response.status) < 400
    except (OSError, urllib.error.URLError):
        return False
