"""Whether the proxy is injected as a native sidecar (an init container with ``restartPolicy:
Always``), as istiod decides it: ``ENABLE_NATIVE_SIDECARS`` is true, false or auto (the default;
pilot/pkg/features EnableNativeSidecars), and in auto the webhook asks the nodes' kubelets per pod
(pkg/kube/inject DetectNativeSidecar): the pod's node if it is bound to a known one, else every
node; one kubelet older than 1.33 (native sidecars' GA) or whose version does not parse turns it
off, so a pod never lands with a native sidecar on a kubelet that cannot run it. Pure: the node
informer (app/sources/kube/nodes.py) feeds ``KubeletVersions``."""

from __future__ import annotations

import enum
import logging
import re

logger = logging.getLogger(__name__)

# native sidecars graduated to stable in Kubernetes 1.33 (KEP 753)
MIN_KUBELET_MINOR = 33
# hashicorp/go-version's VersionRegexpRaw, which istiod parses kubeletVersion with (NewVersion)
_GO_VERSION = re.compile(
    r"v?([0-9]+(\.[0-9]+)*?)"
    r"(-([0-9]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)|(-?([A-Za-z\-~]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)))?"
    r"(\+([0-9A-Za-z\-~]+(\.[0-9A-Za-z\-~]+)*))?"
    r"?"
)
_INT64_MAX = 2**63 - 1


class NativeSidecarMode(enum.StrEnum):
    ENABLED = "true"
    DISABLED = "false"
    AUTO = "auto"


def native_sidecar_mode(value: str) -> NativeSidecarMode:
    """``ENABLE_NATIVE_SIDECARS`` as istiod reads it: exactly true, false or auto; anything else
    turns native sidecars off, with a warning naming the value."""
    try:
        return NativeSidecarMode(value)
    except ValueError:
        logger.warning("ENABLE_NATIVE_SIDECARS=%r: want true, false or auto; native sidecars are off", value)
        return NativeSidecarMode.DISABLED


def kubelet_minor(version: str) -> int | None:
    """The minor version istiod reads from a kubeletVersion (``v1.32.9-gke.100``: 32), parsed as
    go-version's NewVersion parses it (a missing segment is 0); None when it does not parse."""
    match = _GO_VERSION.fullmatch(version)
    if match is None:
        return None
    segments = [int(s) for s in match.group(1).split(".")]
    if any(s > _INT64_MAX for s in segments):  # strconv.ParseInt's range error
        return None
    return segments[1] if len(segments) > 1 else 0


class KubeletVersions:
    """For each node, whether its kubelet runs native sidecars; kept as the Node informer sees
    them (a boolean per node: the decision at each review is O(1), and big clusters have
    thousands of nodes)."""

    def __init__(self) -> None:
        self._supports: dict[str, bool] = {}
        self._unsupported = 0  # nodes whose kubelet cannot, or whose version does not parse

    def __len__(self) -> int:
        return len(self._supports)

    def set(self, node: str, version: str) -> None:
        minor = kubelet_minor(version)
        if minor is None:
            logger.warning("node %s: could not read its kubelet version %r; native sidecars are off", node, version)
        elif minor < MIN_KUBELET_MINOR:
            logger.info("node %s: kubelet %s < 1.%d; native sidecars are off", node, version, MIN_KUBELET_MINOR)
        supports = minor is not None and minor >= MIN_KUBELET_MINOR
        self.delete(node)
        self._supports[node] = supports
        self._unsupported += not supports

    def delete(self, node: str) -> None:
        if self._supports.pop(node, True) is False:
            self._unsupported -= 1

    @property
    def every_node_supports(self) -> bool:
        """True when no node holds native sidecars back: then every pod gets them, bound or not."""
        return self._unsupported == 0

    def native_sidecars(self, node_name: str = "") -> bool:
        """DetectNativeSidecar's auto case: the pod's node's kubelet when it is bound to a known
        node, else (unbound, or its node not seen) every node's."""
        if node_name:
            supports = self._supports.get(node_name)
            if supports is not None:
                return supports
            logger.warning("pod assigned to node %r, but the node is not known; deciding by every node", node_name)
        return self.every_node_supports


def detect_native_sidecar(mode: NativeSidecarMode, kubelets: KubeletVersions | None, node_name: str = "") -> bool:
    """istiod's decision for one pod: the mode, and in auto the kubelets (None: no node client
    — offline, or without Kubernetes — where istiod and istioctl turn native sidecars off)."""
    if mode is not NativeSidecarMode.AUTO:
        return mode is NativeSidecarMode.ENABLED
    return kubelets is not None and kubelets.native_sidecars(node_name)
