"""A connected (or imagined, for config-dump) Envoy: identity and metadata as Istio sends them.

``node.id`` is ``TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local``; ``node.metadata`` may carry
NAMESPACE, LABELS, STATIC_LABELS, INSTANCE_IPS, CLUSTER_ID, NETWORK, NODE_NAME, ISTIO_VERSION,
INTERCEPTION_MODE, DNS_CAPTURE, DNS_AUTO_ALLOCATE. Missing metadata falls back to what the id says.

``build_proxy`` gives a proxy the labels and locality its node sends; a connected proxy's are
then its pod's as the registry knows them (app/registry/proxy_labels.py, istiod
SetWorkloadLabels), so what the node sent is kept to recompute them when the pod is relabelled.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.config.go_strconv import go_bool
from app.config.objects import EMPTY_LABELS
from app.errors import PilotfishError, shown


class ProxyType(enum.StrEnum):
    SIDECAR = "sidecar"
    ROUTER = "router"  # gateways


def family_ips(ips: Sequence[str]) -> tuple[str, ...]:
    """One placeholder address per IP family the proxy has: all that config shared by proxies at
    other addresses reads of them (the wildcard and loopback addresses it binds and dials)."""
    v4 = any(":" not in ip for ip in ips)
    v6 = any(":" in ip for ip in ips)
    return (*(("0.0.0.0",) if v4 else ()), *(("::",) if v6 else ()))


class InvalidNodeError(PilotfishError):
    """A node id or metadata that cannot identify a proxy."""


@dataclass(frozen=True, slots=True)
class Proxy:
    type: ProxyType
    id: str  # POD.NAMESPACE
    ip_addresses: tuple[str, ...]
    namespace: str  # the proxy's config namespace
    dns_domain: str
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)  # the workload's
    cluster_id: str = "Kubernetes"
    mesh_id: str = ""  # MESH_ID: what tracing tags name the mesh
    network: str = ""
    istio_version: str = ""
    service_cluster: str = ""  # node.cluster: what Datadog and OpenTelemetry tracing name the service
    interception_mode: str = "REDIRECT"
    locality: str = ""  # region/zone/subzone
    # ISTIO_META_DNS_CAPTURE / ISTIO_META_DNS_AUTO_ALLOCATE: the agent answers DNS, and may
    # hand out auto-allocated ServiceEntry addresses
    dns_capture: bool = False
    dns_auto_allocate: bool = False
    # SERVICE_ACCOUNT: what the secure port checks the caller's identity against (with the
    # namespace); no generator reads it
    service_account: str = ""
    # the secure port authenticated an identity of this proxy's namespace (istiod
    # VerifiedIdentity): only then may it have its namespace's credentialName secrets
    verified: bool = False
    # why the API server says the verified service account may not list its namespace's
    # Secrets (istiod Authorize's error, from a SubjectAccessReview the transport asked before
    # generation); "" when it may, or when nobody is asked (no Kubernetes)
    secrets_denied: str = ""
    # what the node sent, from which ``labels`` and ``locality`` are recomputed (istiod
    # Metadata.Labels, Metadata.StaticLabels: ISTIO_METAJSON_LABELS, XdsNode.Locality and
    # Metadata.NodeName: the Kubernetes node); no generator reads them
    metadata_labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    static_labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    node_locality: str = ""
    node_name: str = ""
    # the node metadata's string values (istiod Metadata.Raw): what an EnvoyFilter's proxy
    # match compares; no generator reads it
    raw_metadata: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)

    @property
    def is_gateway(self) -> bool:
        return self.type is ProxyType.ROUTER


def parse_node_id(node_id: str) -> tuple[ProxyType, str, str, str]:
    """Split ``TYPE~IP~ID~DOMAIN`` into its parts; raises InvalidNodeError."""
    parts = node_id.split("~")
    if len(parts) != 4:
        raise InvalidNodeError(f"node id {shown(node_id)}: want TYPE~IP~POD.NAMESPACE~DOMAIN")
    kind, ip, pod_id, domain = parts
    try:
        proxy_type = ProxyType(kind)
    except ValueError:
        message = f"node id {shown(node_id)}: unknown proxy type {shown(kind, 16)} (want sidecar or router)"
        raise InvalidNodeError(message) from None
    if not ip:
        raise InvalidNodeError(f"node id {shown(node_id)}: missing IP")
    return proxy_type, ip, pod_id, domain


def build_proxy(
    node_id: str, metadata: Mapping[str, Any] | None = None, locality: str = "", service_cluster: str = ""
) -> Proxy:
    """A Proxy from an xDS node id and its metadata (a plain dict, e.g. from a Struct), its
    locality and its cluster (``node.cluster``)."""
    proxy_type, ip, pod_id, domain = parse_node_id(node_id)
    md = metadata or {}
    namespace = _str(md.get("NAMESPACE"))
    if not namespace:
        # POD.NAMESPACE in the id, else the first label of the DNS domain (NAMESPACE.svc.cluster.local)
        if "." in pod_id:
            namespace = pod_id.rsplit(".", 1)[1]
        elif domain:
            namespace = domain.split(".", 1)[0]
    if not namespace:
        raise InvalidNodeError(f"node id {shown(node_id)}: cannot tell the proxy's namespace")
    raw_ips = md.get("INSTANCE_IPS")
    ips = tuple(p.strip() for p in raw_ips.split(",") if p.strip()) if isinstance(raw_ips, str) else ()
    if not ips:
        ips = (ip,)
    clean_labels = _labels(md.get("LABELS"))
    return Proxy(
        type=proxy_type,
        id=pod_id,
        ip_addresses=ips,
        namespace=namespace,
        dns_domain=domain or f"{namespace}.svc.cluster.local",
        labels=clean_labels,
        cluster_id=_str(md.get("CLUSTER_ID")) or "Kubernetes",
        mesh_id=_str(md.get("MESH_ID")),
        network=_str(md.get("NETWORK")),
        istio_version=_str(md.get("ISTIO_VERSION")),
        service_cluster=service_cluster,
        interception_mode=_str(md.get("INTERCEPTION_MODE")) or "REDIRECT",
        locality=locality,
        dns_capture=_bool(md.get("DNS_CAPTURE")),
        dns_auto_allocate=_bool(md.get("DNS_AUTO_ALLOCATE")),
        service_account=_str(md.get("SERVICE_ACCOUNT")),
        metadata_labels=clean_labels,
        static_labels=_labels(md.get("STATIC_LABELS")),
        node_locality=locality,
        node_name=_str(md.get("NODE_NAME")),
        raw_metadata={str(k): v for k, v in md.items() if isinstance(v, str)},
    )


def _labels(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _bool(value: Any) -> bool:
    """istiod's StringBool metadata: Go's ParseBool of a string; anything else is false."""
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and go_bool(value.strip()) is True
