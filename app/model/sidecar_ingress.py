"""A Sidecar's ``ingress`` listeners and inbound connection pools, as istiod reads them
(pilot/pkg/networking/core/listener_inbound.go buildInboundChainConfigs, cluster.go
buildInboundClustersFromSidecar, model/sidecar.go InboundConnectionPoolForPort). Pure.

A Sidecar with ingress listeners replaces the proxy's service-derived inbound ports: each
entry is one inbound port (its filter chains, and its own ``inbound|PORT||`` cluster sending to
``defaultEndpoint``), whatever Services select the workload. With istiod's
PILOT_ALLOW_SIDECAR_SERVICE_INBOUND_LISTENER_MERGE the service ports the entries do not name
stay beside them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from app.api import networking as net
from app.config.go_strconv import go_int
from app.model.features import Features
from app.model.proxy import Proxy
from app.model.service import Protocol, ServicePort, parse_protocol

UNIX_PREFIX = "unix://"
_POD_IPV4, _POD_IPV6 = "0.0.0.0", "::"  # defaultEndpoint hosts meaning "the pod's own IP"
_LOCAL_IPV4, _LOCAL_IPV6 = "127.0.0.1", "::1"


@dataclass(frozen=True, slots=True)
class IngressPort:
    """One ``ingress`` entry as the inbound builders use it."""

    port: ServicePort  # the port number is the workload port too (no targetPort on Sidecars)
    bind: str  # as written; "" lets the builder pick the proxy's address
    bind_to_port: bool  # a listener of its own rather than a chain of virtualInbound
    default_endpoint: str
    tls: net.ServerTLSSettings | None


def bind_to_port(capture_mode: int, proxy: Proxy) -> bool:
    """istiod getBindToPort: an explicit captureMode decides; DEFAULT follows the proxy."""
    if capture_mode == net.CaptureMode.DEFAULT:
        return proxy.interception_mode == "NONE"
    return capture_mode == net.CaptureMode.NONE


@dataclass(frozen=True, slots=True)
class SidecarIngress:
    """The proxy's Sidecar as far as its inbound ports go; ``ports`` is never empty."""

    namespace: str
    name: str
    ports: tuple[IngressPort, ...]
    features: Features


def sidecar_ingress(
    scope_name: str | None, scope_namespace: str, sidecar: net.Sidecar | None, proxy: Proxy, features: Features
) -> SidecarIngress | None:
    """``scope_name`` is the SidecarScope's ``namespace/name`` of its Sidecar, ``scope_namespace``
    the namespace it was computed for: a root-namespace Sidecar serves proxies of every
    namespace, and istiod names their ingress chains after the proxy's namespace
    (convertToSidecarScope). None without ingress entries."""
    if scope_name is None or sidecar is None or not sidecar.ingress:
        return None
    name = scope_name.partition("/")[2]
    return SidecarIngress(scope_namespace, name, _ingress_ports(sidecar, proxy), features)


def _ingress_ports(sidecar: net.Sidecar, proxy: Proxy) -> tuple[IngressPort, ...]:
    out = []
    for ingress in sidecar.ingress:
        p = ingress.port
        out.append(
            IngressPort(
                port=ServicePort(p.name, p.number, parse_protocol(p.protocol)),
                bind=ingress.bind,
                bind_to_port=bind_to_port(ingress.capture_mode, proxy),
                default_endpoint=ingress.default_endpoint,
                tls=ingress.tls if ingress.HasField("tls") else None,
            )
        )
    return tuple(out)


def inbound_connection_pool(sidecar: net.Sidecar | None, port: int) -> net.ConnectionPoolSettings | None:
    """The Sidecar's pool for an inbound cluster port: the ingress entry's own, else the
    Sidecar-wide ``inboundConnectionPool``, else None (the DestinationRule's, if any, stays)."""
    if sidecar is None:
        return None
    for ingress in sidecar.ingress:
        if ingress.port.number == port and ingress.HasField("connection_pool"):
            return ingress.connection_pool
    return sidecar.inbound_connection_pool if sidecar.HasField("inbound_connection_pool") else None


def after_tls_termination(protocol: Protocol) -> Protocol:
    """istiod protocol.AfterTLSTermination: what a port carries once its TLS is terminated."""
    return {Protocol.HTTPS: Protocol.HTTP, Protocol.TLS: Protocol.TCP}.get(protocol, protocol)


def _version(ip: str) -> int:
    try:
        return ipaddress.ip_address(ip).version
    except ValueError:
        return 0


def global_unicast_ip(ips: Sequence[str]) -> str:
    """The proxy's first address Go's IsGlobalUnicast accepts (private ranges included), or ""."""
    for ip in ips:
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            continue
        if addr.is_loopback or addr.is_link_local or addr.is_multicast or addr.is_unspecified:
            continue
        if addr == ipaddress.IPv4Address("255.255.255.255"):
            continue
        return str(addr)  # normalized, as Go's addr.String() (fd00:0:0::1 -> fd00::1)
    return ""


def default_endpoint_address(default_endpoint: str, ips: Sequence[str]) -> tuple[str, int] | None:
    """Where an ingress entry's cluster sends traffic: (address, port); address "" means the
    original destination (no defaultEndpoint). ``0.0.0.0`` / ``::`` stand for the pod's own IP of
    that family (else loopback), ``127.0.0.1`` / ``::1`` for the loopback of the proxy's IP
    family, ``unix://`` paths are kept as they are. None when the endpoint cannot be read (istiod
    skips the entry's cluster)."""
    if not default_endpoint:
        return "", 0
    if default_endpoint.startswith(UNIX_PREFIX):
        return default_endpoint, 0
    host, sep, port_text = default_endpoint.rpartition(":")
    port = go_int(port_text) if sep else None  # as validation reads it (istiod: strconv.Atoi)
    if port is None:
        return None
    host = host.removeprefix("[").removesuffix("]")
    families = {_version(ip) for ip in ips}
    v4 = 4 in families or not families - {0}
    v6 = 6 in families
    if host == _POD_IPV4:
        address = next((ip for ip in ips if _version(ip) == 4), _LOCAL_IPV4)
    elif host == _POD_IPV6:
        address = next((ip for ip in ips if _version(ip) == 6), _LOCAL_IPV6)
    elif host == _LOCAL_IPV4:
        address = _LOCAL_IPV4 if v4 else _LOCAL_IPV6
    elif host == _LOCAL_IPV6:
        address = _LOCAL_IPV6 if v6 else _LOCAL_IPV4
    else:
        address = ""  # validation admits no other host; istiod leaves the original destination
    return address, port
