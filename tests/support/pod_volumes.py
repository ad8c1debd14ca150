"""A pod's volumes on the node, and a container's filesystem view of them, as the kubelet and the
container runtime make them.

Volumes are directories under the pod's directory: ``emptyDir``; ``configMap`` / ``secret``
(keys or ``items``, ``defaultMode``, ``optional``; a missing required object is an error the
kubelet retries, as it leaves such a pod in ContainerCreating); ``downwardAPI``; ``projected``
(``serviceAccountToken`` through the real TokenRequest API, bound to the pod, with its
``audience`` and ``expirationSeconds``; configMap, secret and downwardAPI sources), which also
covers the service-account volume the ServiceAccount admission plugin adds at
/var/run/secrets/kubernetes.io/serviceaccount (token, ca.crt, namespace); ``hostPath``.

Each container runs in a private mount namespace (``ip netns exec`` makes one, and makes ``/`` a
slave of the node's), where a short shell prologue puts every volume and the image's own files
at their container paths with bind mounts, then ``exec``s the program. Absolute paths are what
containers and their programs use (the in-cluster client reads
/var/run/secrets/kubernetes.io/serviceaccount/token; the chart passes --ca-dir=/etc/cacerts), so
a working-directory root (as tests/e2e/istio_proxy.py does for pilot-agent alone, whose paths are
relative) would mean rewriting the pod's own args; mounts keep the spec as written. A mount
point the node lacks is made without touching the node: the deepest directory that exists
(``/etc``, ``/run`` ...) gets an overlay whose upper layer is a tmpfs of the container, and the
directory is made there. Nothing outside the pod's directory changes on the node.

What differs from a container, honestly: the rest of the node's filesystem is visible (there is
no image root filesystem: the programs are the node's own), processes run as root (the
securityContext's runAsUser would not reach the node's Python under /root), and tokens are not
refreshed (tests end long before 80% of their lifetime).
"""

from __future__ import annotations

import base64
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from tests.support.pod_env import PodSpecError, field_value, resource_value

# (kind, namespace, name) -> the object's data, decoded (None: not found)
ReadData = Callable[[str, str, str], Mapping[str, bytes] | None]
# (namespace, account, audience or None, seconds, pod) -> a TokenRequest token
RequestToken = Callable[[str, str, str | None, int, Mapping[str, Any]], str]


class VolumeNotReady(Exception):
    """A volume's source does not exist yet (the kubelet retries; the pod waits)."""


@dataclass(frozen=True)
class Mount:
    """``source`` (a directory or file on the node) at ``path`` in the container."""

    source: Path
    path: str
    read_only: bool = False


def materialize(
    pod: Mapping[str, Any],
    volume: Mapping[str, Any],
    directory: Path,
    *,
    read: ReadData,
    token: RequestToken,
    allocatable: Mapping[str, str],
) -> Path:
    """Write ``volume`` of ``pod`` under ``directory``; its path on the node."""
    name = str(volume["name"])
    if "hostPath" in volume:
        return Path(volume["hostPath"]["path"])
    target = directory / name
    target.mkdir(parents=True, exist_ok=True)
    namespace = pod["metadata"]["namespace"]
    if "emptyDir" in volume:
        return target
    files: dict[str, tuple[bytes, int]] = {}
    if "configMap" in volume or "secret" in volume:
        _object_files(files, volume, namespace, read, volume.get("defaultMode", 0o644))
    elif "downwardAPI" in volume:
        spec = volume["downwardAPI"]
        _downward_files(files, pod, spec.get("items") or [], spec.get("defaultMode", 0o644), allocatable)
    elif "projected" in volume:
        spec = volume["projected"]
        mode = spec.get("defaultMode", 0o644)
        for source in spec.get("sources") or []:
            if "serviceAccountToken" in source:
                ref = source["serviceAccountToken"]
                account = pod["spec"].get("serviceAccountName") or "default"
                jwt = token(namespace, account, ref.get("audience"), int(ref.get("expirationSeconds", 3600)), pod)
                files[ref["path"]] = (jwt.encode(), 0o600 if "defaultMode" not in spec else mode)
            elif "downwardAPI" in source:
                _downward_files(files, pod, source["downwardAPI"].get("items") or [], mode, allocatable)
            elif "configMap" in source or "secret" in source:
                _object_files(files, source, namespace, read, mode)
            else:
                raise PodSpecError(f"volume {name}: projected source {sorted(source)} is not run by this kubelet")
    else:
        kinds = sorted(k for k in volume if k != "name")
        raise PodSpecError(f"volume {name}: {kinds} volumes are not run by this kubelet")
    for relative, (data, file_mode) in files.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(file_mode)
    return target


def _object_files(
    files: dict[str, tuple[bytes, int]], source: Mapping[str, Any], namespace: str, read: ReadData, mode: int
) -> None:
    kind, ref = ("ConfigMap", source["configMap"]) if "configMap" in source else ("Secret", source["secret"])
    name = ref.get("name") or ref.get("secretName", "")
    data = read(kind, namespace, name)
    if data is None:
        if ref.get("optional"):
            return
        raise VolumeNotReady(f"{kind} {namespace}/{name} not found")
    items = ref.get("items")
    if items is None:
        files.update({key: (value, ref.get("defaultMode", mode)) for key, value in data.items()})
        return
    for item in items:
        if item["key"] not in data:
            if ref.get("optional"):
                continue
            raise VolumeNotReady(f"{kind} {namespace}/{name} has no key {item['key']!r}")
        files[item["path"]] = (data[item["key"]], item.get("mode", ref.get("defaultMode", mode)))


def _downward_files(
    files: dict[str, tuple[bytes, int]],
    pod: Mapping[str, Any],
    items: Sequence[Mapping[str, Any]],
    mode: int,
    allocatable: Mapping[str, str],
) -> None:
    for item in items:
        if "fieldRef" in item:
            value = field_value(pod, item["fieldRef"]["fieldPath"])
        else:
            ref = item["resourceFieldRef"]
            value = resource_value(pod, ref["containerName"], ref, allocatable)
        files[item["path"]] = (value.encode(), item.get("mode", mode))


def decode_data(obj: Mapping[str, Any]) -> dict[str, bytes]:
    """A ConfigMap's ``data`` and ``binaryData``, or a Secret's ``data``, as bytes."""
    if obj.get("kind") == "Secret":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    out = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return out


def mounts_for(container: Mapping[str, Any], volumes: Mapping[str, Path]) -> list[Mount]:
    out = []
    for mount in container.get("volumeMounts") or []:
        if mount.get("subPath") or mount.get("subPathExpr"):
            raise PodSpecError(f"container {container['name']}: subPath mounts are not run by this kubelet")
        if mount["name"] not in volumes:
            raise PodSpecError(f"container {container['name']}: volumeMount of undeclared volume {mount['name']!r}")
        out.append(Mount(volumes[mount["name"]], mount["mountPath"], bool(mount.get("readOnly"))))
    return out


def _existing_ancestor(path: PurePosixPath) -> PurePosixPath:
    while not os.path.lexists(path):
        path = path.parent
    return PurePosixPath(os.path.realpath(path))


def prologue(
    mounts: Sequence[Mount], scratch: Path, etc_files: Mapping[str, Path], working_dir: str, hostname: str
) -> str:
    """The shell commands that give a container its filesystem view in its mount namespace and
    its pod's hostname in its UTS namespace, then run ``"$@"`` (in ``working_dir``).
    ``scratch``: an empty directory of the pod for the tmpfs that holds the overlays' upper
    layers; ``etc_files``: /etc files the kubelet manages (hosts, resolv.conf) by path."""
    ordered = sorted(mounts, key=lambda m: len(PurePosixPath(m.path).parts))
    missing = [PurePosixPath(m.path) for m in ordered if not os.path.lexists(m.path)]
    # a mount point inside another volume is made in that volume's directory
    under_mount = {p for p in missing for m in ordered if PurePosixPath(m.path) in p.parents}
    overlays = {_existing_ancestor(p) for p in missing if p not in under_mount}
    overlays = {o for o in overlays if not any(a in overlays for a in o.parents)}
    if PurePosixPath("/") in overlays:
        raise PodSpecError(f"mount points {[str(p) for p in missing]}: one has no parent directory on the node but /")
    q = shlex.quote
    lines = ["set -e", f"hostname {q(hostname)}", "mount --make-rprivate /", f"mount -t tmpfs tmpfs {q(str(scratch))}"]
    for i, base in enumerate(sorted(overlays)):
        upper, work = scratch / f"upper{i}", scratch / f"work{i}"
        options = f"lowerdir={base},upperdir={upper},workdir={work}"
        lines += [
            f"mkdir -p {q(str(upper))} {q(str(work))}",
            f"mount -t overlay overlay -o {q(options)} {q(str(base))}",
        ]
    for mount in ordered:
        kind = "-p" if mount.source.is_dir() else ""
        make = f"mkdir -p {q(mount.path)}" if kind else f"[ -e {q(mount.path)} ] || touch {q(mount.path)}"
        lines += [make, f"mount --bind {q(str(mount.source))} {q(mount.path)}"]
        if mount.read_only:
            lines.append(f"mount -o remount,bind,ro {q(mount.path)}")
    for path, source in etc_files.items():
        lines.append(f"mount --bind {q(str(source))} {q(path)}")
    lines += [f"cd {q(working_dir)}", 'exec "$@"']
    return "\n".join(lines)
