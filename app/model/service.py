"""Services and endpoints, the registry's output and what generators read.

These mirror istiod's ``model.Service`` / ``model.IstioEndpoint`` with the fields pilotfish
uses. All are frozen; a change in the registry produces new objects.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from app.config.objects import EMPTY_LABELS


class Protocol(enum.StrEnum):
    """Istio's port protocols (pkg/config/protocol). UNSUPPORTED means "sniff it"."""

    HTTP = "HTTP"
    HTTPS = "HTTPS"
    HTTP2 = "HTTP2"
    GRPC = "GRPC"
    GRPC_WEB = "GRPC-Web"
    TCP = "TCP"
    TLS = "TLS"
    MONGO = "Mongo"
    REDIS = "Redis"
    MYSQL = "MySQL"
    UDP = "UDP"
    UNSUPPORTED = "UnsupportedProtocol"

    @property
    def is_http(self) -> bool:
        return self in (Protocol.HTTP, Protocol.HTTP2, Protocol.GRPC, Protocol.GRPC_WEB)

    @property
    def is_http2(self) -> bool:
        return self in (Protocol.HTTP2, Protocol.GRPC, Protocol.GRPC_WEB)


_BY_NAME = {
    "http": Protocol.HTTP,
    "http2": Protocol.HTTP2,
    "h2c": Protocol.HTTP2,
    "grpc": Protocol.GRPC,
    "grpc-web": Protocol.GRPC_WEB,
    "https": Protocol.HTTPS,
    "tcp": Protocol.TCP,
    "tls": Protocol.TLS,
    "mongo": Protocol.MONGO,
    "redis": Protocol.REDIS,
    "mysql": Protocol.MYSQL,
    "udp": Protocol.UDP,
}
# appProtocol values Kubernetes defines (KEP-3726) mapped as istiod maps them
_K8S_APP_PROTOCOLS = {
    "kubernetes.io/h2c": Protocol.HTTP2,
    "kubernetes.io/ws": Protocol.HTTP,
    "kubernetes.io/wss": Protocol.HTTPS,
}


def parse_protocol(value: str) -> Protocol:
    """A protocol name as written in a ServiceEntry / Gateway port or an appProtocol."""
    v = value.strip()
    if v in _K8S_APP_PROTOCOLS:
        return _K8S_APP_PROTOCOLS[v]
    return _BY_NAME.get(v.lower(), Protocol.UNSUPPORTED)


def protocol_from_port_name(name: str) -> Protocol:
    """Kubernetes port naming convention: ``<protocol>[-<suffix>]`` (``http-web``, ``grpc``)."""
    lowered = name.lower()
    if lowered in _BY_NAME:
        return _BY_NAME[lowered]
    if lowered.startswith("grpc-web"):
        return Protocol.GRPC_WEB
    prefix = lowered.split("-", 1)[0]
    return _BY_NAME.get(prefix, Protocol.UNSUPPORTED)


class Resolution(enum.Enum):
    """How a client reaches a service's endpoints (istiod's model.Resolution)."""

    CLIENT_SIDE_LB = "ClientSideLB"  # EDS
    DNS_LB = "DNSLB"  # STRICT_DNS
    DNS_ROUND_ROBIN_LB = "DNSRoundRobinLB"  # LOGICAL_DNS
    PASSTHROUGH = "Passthrough"  # ORIGINAL_DST
    ALIAS = "Alias"  # ExternalName without a cluster of its own


class TrafficDistribution(enum.Enum):
    """Where a service prefers its traffic to go (istiod model.TrafficDistribution): a Kubernetes
    Service's ``spec.trafficDistribution``, else the ``networking.istio.io/traffic-distribution``
    annotation of the service, then of its namespace."""

    ANY = "Any"
    PREFER_SAME_ZONE = "PreferSameZone"  # then the same region, then the same network
    PREFER_SAME_NODE = "PreferSameNode"  # the same node first, then as PreferSameZone


TRAFFIC_DISTRIBUTION_ANNOTATION = "networking.istio.io/traffic-distribution"
_DISTRIBUTIONS = {
    "preferclose": TrafficDistribution.PREFER_SAME_ZONE,
    "prefersamezone": TrafficDistribution.PREFER_SAME_ZONE,
    "prefersamenode": TrafficDistribution.PREFER_SAME_NODE,
}


def traffic_distribution(
    spec_value: str, annotations: Mapping[str, str], namespace_annotations: Mapping[str, str]
) -> TrafficDistribution:
    """istiod GetTrafficDistribution: the spec's value when it is one Kubernetes defines (exactly
    as written), else the service's annotation, else the namespace's (either in any case; an
    unknown annotation value means Any)."""
    if spec_value in ("PreferClose", "PreferSameZone", "PreferSameNode"):
        return _DISTRIBUTIONS[spec_value.lower()]
    for source in (annotations, namespace_annotations):
        value = source.get(TRAFFIC_DISTRIBUTION_ANNOTATION, "").lower()
        if value:
            return _DISTRIBUTIONS.get(value, TrafficDistribution.ANY)
    return TrafficDistribution.ANY


class Registry(enum.StrEnum):
    KUBERNETES = "Kubernetes"
    EXTERNAL = "External"  # ServiceEntry


@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str
    port: int
    protocol: Protocol


# the Service labels that opt in to persistent sessions (istiod PERSISTENT_SESSION_LABEL and
# PERSISTENT_SESSION_HEADER_LABEL, their defaults)
PERSISTENT_SESSION_LABELS = ("istio.io/persistent-session", "istio.io/persistent-session-header")


# up to this many ports, a look-up scans them (cheaper than a map for the usual one to three)
_SCANNED_PORTS = 8


@dataclass(frozen=True, slots=True)
class Service:
    hostname: str
    namespace: str
    ports: tuple[ServicePort, ...]
    registry: Registry
    name: str = ""  # Service / ServiceEntry object name
    addresses: tuple[str, ...] = ()  # ClusterIP(s) or ServiceEntry addresses; empty = none
    resolution: Resolution = Resolution.CLIENT_SIDE_LB
    mesh_external: bool = False
    # visibility as written or defaulted: ".", "*", or namespaces; empty = mesh default
    export_to: frozenset[str] = frozenset()
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    # selector over workloads (Pods / WorkloadEntries); None = no selector (explicit endpoints)
    selector: Mapping[str, str] | None = None
    service_accounts: tuple[str, ...] = ()
    creation_timestamp: str = ""
    external_name: str = ""  # ExternalName services
    # the IPv4 / IPv6 addresses istiod's allocation controller gave a ServiceEntry without
    # addresses, as its status.addresses records them (used by DNS-capturing proxies)
    auto_addresses: tuple[str, ...] = ()
    publish_not_ready: bool = False  # Kubernetes spec.publishNotReadyAddresses
    # (service port, targetPort) of a resolution-NONE ServiceEntry: its ORIGINAL_DST clusters
    # override the destination port (istiod PassthroughTargetPorts)
    passthrough_target_ports: tuple[tuple[int, int], ...] = ()
    traffic_distribution: TrafficDistribution = TrafficDistribution.ANY
    # port number -> its first port, made on first use for a service of many ports: generation
    # looks a port up for each of them (a Service of 5,000 ports took 6 s for one proxy's EDS)
    _by_number: dict[int, ServicePort] | None = field(default=None, init=False, repr=False, compare=False)

    def port_by_number(self, number: int) -> ServicePort | None:
        if len(self.ports) <= _SCANNED_PORTS:
            for p in self.ports:
                if p.port == number:
                    return p
            return None
        index = self._by_number
        if index is None:
            index = {}
            for p in self.ports:
                index.setdefault(p.port, p)
            object.__setattr__(self, "_by_number", index)
        return index.get(number)

    def port_by_name(self, name: str) -> ServicePort | None:
        for p in self.ports:
            if p.name == name:
                return p
        return None

    @property
    def supports_draining_endpoints(self) -> bool:
        """istiod Service.SupportsDrainingEndpoints: it opts in to persistent sessions, so its
        terminating endpoints stay, draining."""
        return any(self.labels.get(k) for k in PERSISTENT_SESSION_LABELS)

    def with_ports_of(self, other: Service) -> Service:
        """This service with the ports of ``other`` whose numbers it lacks appended (itself when none)."""
        extra = tuple(p for p in other.ports if self.port_by_number(p.port) is None)
        return replace(self, ports=self.ports + extra) if extra else self

    @property
    def key(self) -> tuple[str, str]:
        return (self.hostname, self.namespace)


class HealthStatus(enum.Enum):
    # nothing reports health (ServiceEntry and WorkloadEntry endpoints): istiod leaves its
    # model.HealthStatus at the zero value, which Envoy reads as UNKNOWN and treats as healthy
    UNKNOWN = "UNKNOWN"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DRAINING = "DRAINING"
    # shutting down without persistent sessions (istiod model.Terminating): never sent
    TERMINATING = "TERMINATING"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One address+port serving one port of one service (istiod's IstioEndpoint)."""

    address: str
    port: int  # the port on the workload (target port)
    service_port_name: str  # which ServicePort this serves
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    locality: str = ""  # "region/zone/subzone"
    weight: int = 0  # 0 = unset
    health: HealthStatus = HealthStatus.HEALTHY
    network: str = ""
    service_account: str = ""
    namespace: str = ""
    workload_name: str = ""
    # "istio" when the workload has a sidecar (auto mTLS), else "disabled"
    tls_mode: str = "disabled"
    # the registry cluster the endpoint lives in (istiod IstioEndpoint.Locality.ClusterID);
    # pilotfish reads one cluster, named as istiod's default
    cluster_id: str = "Kubernetes"
    # a Pod with spec.subdomain: its DNS name is <hostname>.<subdomain>.<namespace>.svc.<domain>
    hostname: str = ""
    subdomain: str = ""
    node_name: str = ""  # the Kubernetes node of the Pod behind it (topology label kubernetes.io/hostname)
