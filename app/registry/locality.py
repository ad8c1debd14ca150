"""A workload's locality, as istiod's kube controller reads it (getPodLocality). Pure.

A Pod's locality is its ``topology.istio.io/locality`` (or older ``istio-locality``) label when
it has one, else the topology labels of the Node it runs on (``spec.nodeName``): region and zone
(the GA labels, else the pre-1.17 failure-domain ones) and Istio's subzone. The Pod's own
region/zone labels count for nothing, and neither does an EndpointSlice's zone hint; a Pod whose
Node is unknown has no locality (istiod logs it and returns ""). ``NodeLocalities`` is what the
registry knows of Nodes; ``PodsByNode`` which of its pods read which Node, so a Node whose
labels change re-locates exactly those (istiod reads the Node only when it rebuilds a pod's
endpoints; pilotfish re-pushes them at once).

Localities are ``region/zone/subzone`` with trailing empty parts dropped (``r1/z1``), the form
every locality in pilotfish takes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from app.config.labels import (
    BETA_REGION_LABEL,
    BETA_ZONE_LABEL,
    LEGACY_LOCALITY_LABEL,
    LOCALITY_LABEL,
    REGION_LABEL,
    SUBZONE_LABEL,
    ZONE_LABEL,
)

ObjectKey = tuple[str, str]  # (namespace, name)

# the labels of a Node that its pods' locality is made of
NODE_LOCALITY_LABELS = (REGION_LABEL, BETA_REGION_LABEL, ZONE_LABEL, BETA_ZONE_LABEL, SUBZONE_LABEL)


def locality_label(labels: Mapping[str, str]) -> str:
    """The locality a workload's label gives ("" when none): istiod GetLocalityLabel (the first
    of the two labels present wins, even empty) then SanitizeLocalityLabel ('.' for '/', unless
    the value already holds a '/')."""
    value = labels.get(LOCALITY_LABEL)
    if value is None:
        value = labels.get(LEGACY_LOCALITY_LABEL, "")
    if "/" not in value:
        value = value.replace(".", "/")
    return value.rstrip("/")


def node_locality(labels: Mapping[str, str]) -> str:
    """A Node's locality from its topology labels ("" when it has none)."""
    region = labels.get(REGION_LABEL) or labels.get(BETA_REGION_LABEL, "")
    zone = labels.get(ZONE_LABEL) or labels.get(BETA_ZONE_LABEL, "")
    subzone = labels.get(SUBZONE_LABEL, "")
    return f"{region}/{zone}/{subzone}".rstrip("/") if region or zone or subzone else ""


class NodeLocalities:
    """Node name -> its locality, for the Nodes the registry has seen."""

    def __init__(self) -> None:
        self._localities: dict[str, str] = {}

    def locality(self, node: str) -> str:
        """The locality of the Node of that name; "" when it has none or is unknown."""
        return self._localities.get(node, "") if node else ""

    def set(self, node: str, labels: Mapping[str, str] | None) -> bool:
        """Record a Node's labels (None: it was deleted); True when its locality changed."""
        before = self._localities.get(node)
        after = node_locality(labels) if labels is not None else None
        if after is None or after == "":
            self._localities.pop(node, None)
        else:
            self._localities[node] = after
        return (before or "") != (after or "")


class PodsByNode:
    """Which pods take their locality from which Node (those without a locality label)."""

    def __init__(self) -> None:
        self._node_of: dict[ObjectKey, str] = {}
        self._pods: dict[str, set[ObjectKey]] = {}

    def set(self, pod: ObjectKey, node: str) -> None:
        """The Node ``pod`` reads its locality from now ("": none, or it is gone)."""
        before = self._node_of.get(pod, "")
        if before == node:
            return
        if before:
            pods = self._pods[before]
            pods.discard(pod)
            if not pods:
                del self._pods[before]
            del self._node_of[pod]
        if node:
            self._node_of[pod] = node
            self._pods.setdefault(node, set()).add(pod)

    def pods(self, node: str) -> Iterable[ObjectKey]:
        """The pods on ``node`` that read its locality, in a stable order."""
        return sorted(self._pods.get(node, ()))
