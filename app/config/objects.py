"""The config object every source produces and every consumer reads.

A ``ConfigObject`` is immutable once built: sources replace objects, they never edit them.
``spec`` is the typed body: a protobuf message for Istio kinds (Istio's own, app/api/networking.py),
a frozen dataclass for Kubernetes kinds (app/config/kube.py).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})
# object names as the API server has them: a namespace is a DNS label, a name a DNS subdomain
DNS_LABEL_TEXT = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{DNS_LABEL_TEXT}(?:\.{DNS_LABEL_TEXT})*")
MAX_NAME = 253


def is_object_name(name: str) -> bool:
    """A name the API server takes for an object: a DNS subdomain of at most 253 characters."""
    return len(name) <= MAX_NAME and _DNS_SUBDOMAIN.fullmatch(name) is not None


class Kind(enum.StrEnum):
    """Config kinds pilotfish reads, named as in their ``kind:`` field."""

    DESTINATION_RULE = "DestinationRule"
    VIRTUAL_SERVICE = "VirtualService"
    SERVICE_ENTRY = "ServiceEntry"
    WORKLOAD_ENTRY = "WorkloadEntry"
    SIDECAR = "Sidecar"
    GATEWAY = "Gateway"
    PEER_AUTHENTICATION = "PeerAuthentication"
    AUTHORIZATION_POLICY = "AuthorizationPolicy"
    REQUEST_AUTHENTICATION = "RequestAuthentication"
    # what injection gives a pod's proxy (concurrency, environment, image), over the mesh's
    # defaultConfig: read by the injector only, never by xDS (istiod's push skip lists hold it)
    PROXY_CONFIG = "ProxyConfig"
    # access logging (and metrics, tracing) by namespace and workload (telemetry.istio.io)
    TELEMETRY = "Telemetry"
    # patches to the generated Envoy config (networking.istio.io v1alpha3 only)
    ENVOY_FILTER = "EnvoyFilter"
    SERVICE = "Service"
    POD = "Pod"
    NAMESPACE = "Namespace"
    NODE = "Node"  # its topology labels: the locality of the pods on it (istiod getPodLocality)
    ENDPOINT_SLICE = "EndpointSlice"
    CONFIG_MAP = "ConfigMap"
    SECRET = "Secret"  # a credentialName's certificates (istiod's credentials controller)
    MESH_CONFIG = "MeshConfig"
    # a change of the names a headless service answers with but nothing else (istiod
    # kind.DNSName): only the DNS name table reads it
    DNS_NAME = "DNSName"


# kinds the control plane names changes by, which no document carries
INTERNAL_KINDS = frozenset({Kind.MESH_CONFIG, Kind.DNS_NAME})


ISTIO_KINDS = frozenset(
    {
        Kind.DESTINATION_RULE,
        Kind.VIRTUAL_SERVICE,
        Kind.SERVICE_ENTRY,
        Kind.WORKLOAD_ENTRY,
        Kind.SIDECAR,
        Kind.GATEWAY,
        Kind.PEER_AUTHENTICATION,
        Kind.AUTHORIZATION_POLICY,
        Kind.REQUEST_AUTHENTICATION,
        Kind.PROXY_CONFIG,
        Kind.TELEMETRY,
        Kind.ENVOY_FILTER,
    }
)


class ConfigKey(NamedTuple):
    kind: Kind
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    name: str
    namespace: str = ""
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    # RFC 3339 text as written; istiod orders merges by creation time, then name.
    creation_timestamp: str = ""
    resource_version: str = ""
    generation: int = 0


@dataclass(frozen=True, slots=True)
class ConfigObject:
    kind: Kind
    meta: ObjectMeta
    spec: Any
    # where it came from: "path/to/file.yaml" or "kube"; used in every message about it
    source: str = ""
    api_version: str = ""
    # the part of ``status`` generators read, parsed (ServiceEntry: the addresses istiod's
    # allocation controller recorded, as (host, address) pairs); None for every other kind
    status: Any = None
    # what reading it found and ignored, one line each ("http[0].websocketUpgrade: unknown
    # field, ignored ..."): not config, so not compared by sources
    warnings: tuple[str, ...] = ()

    @property
    def key(self) -> ConfigKey:
        return ConfigKey(self.kind, self.meta.namespace, self.meta.name)

    @property
    def namespaced_name(self) -> str:
        return f"{self.meta.namespace}/{self.meta.name}"

    def creation_order(self) -> tuple[str, str, str]:
        """istiod's stable order for merging: oldest first, then namespace, then name."""
        return (self.meta.creation_timestamp, self.meta.namespace, self.meta.name)


class EventType(enum.Enum):
    ADD = "add"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class ConfigEvent:
    """One object changed. For DELETE, ``obj`` is the last version that was in force."""

    type: EventType
    obj: ConfigObject
    old: ConfigObject | None = None
