"""What a sidecar's scope-wide listeners are built from, as values (DESIGN §7 rule 3): the
builder reads nothing else, and equal values build equal listeners, so the value is the key a
caller reuses a listener by. Objects of the snapshot (services, VirtualServices, rules, the mesh
config) are held by identity: they are replaced on change, never edited. The parts a plan makes
a thousand of are named tuples (hashed and compared in C)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.model.ident import Ident
from app.model.proxy import Proxy, ProxyType
from app.model.service import Protocol as PortProtocol
from app.model.service import Service, ServicePort
from app.model.virtual_service import ResolvedVirtualService
from app.translate.listener.access_log import Logs
from app.translate.listener.tcp import TCP_PROTOCOLS
from app.translate.listener.tracing import TraceChoice


class ListenerKind(enum.Enum):
    """istiod ListenerProtocol: how a port's traffic is handled by a listener."""

    HTTP = "HTTP"
    TCP = "TCP"
    AUTO = "AUTO"


def listener_kind(protocol: PortProtocol) -> ListenerKind | None:
    if protocol.is_http:
        return ListenerKind.HTTP
    if protocol in TCP_PROTOCOLS:
        return ListenerKind.TCP
    if protocol is PortProtocol.UNSUPPORTED:
        return ListenerKind.AUTO
    return None  # UDP: no listener


class ListenerContext(NamedTuple):
    """What every scope-wide listener of a sidecar reads besides the service ports offered to it:
    the mesh config, where unknown traffic goes, the proxy's addresses, namespace, labels,
    cluster and mesh (binding, ``sourceLabels`` matches, tracing tags) and the access logs its
    Telemetry selects, and what they trace with."""

    mesh: Ident[MeshConfig]
    outbound_policy: str
    egress: str  # where the catch-all chains send ALLOW_ANY traffic
    ip_addresses: tuple[str, ...]
    namespace: str
    labels: tuple[tuple[str, str], ...]
    cluster_id: str
    mesh_id: str
    interception_mode: str
    allocated: bool  # the proxy uses auto-allocated addresses (app/translate/allocated.py)
    logs: Logs  # what the outbound listeners log (the CLIENT mode's selection)
    tracing: TraceChoice  # what they trace with (the CLIENT mode's)

    @staticmethod
    def of(
        proxy: Proxy,
        mesh: MeshConfig,
        outbound_policy: str,
        egress: str,
        allocated: bool,
        logs: Logs,
        tracing: TraceChoice,
    ) -> ListenerContext:
        return ListenerContext(
            Ident(mesh),
            outbound_policy,
            egress,
            proxy.ip_addresses,
            proxy.namespace,
            tuple(sorted(proxy.labels.items())),
            proxy.cluster_id,
            proxy.mesh_id,
            proxy.interception_mode,
            allocated,
            logs,
            tracing,
        )

    def proxy(self) -> Proxy:
        """The proxy as the builders see it: these fields and nothing else."""
        return Proxy(
            type=ProxyType.SIDECAR,
            id="",
            ip_addresses=self.ip_addresses,
            namespace=self.namespace,
            dns_domain="",
            labels=dict(self.labels),
            cluster_id=self.cluster_id,
            mesh_id=self.mesh_id,
            interception_mode=self.interception_mode,
        )


# a host a TCP chain's routes read: its service and the DestinationRule the proxy applies to it
HostRead = tuple[str, Ident[Service | None], Ident[net.DestinationRule | None]]


class PortAdd(NamedTuple):
    """One service port offered to the listener at (bind, port), in the order it came: a
    listener is a function of the adds that reached it. An HTTP add reads only the service's
    hostname (its chain asks RDS); a TCP or sniffed one the service, the VirtualServices
    matching it and the hosts their routes name."""

    hostname: str
    service: Ident[Service] | None  # None for HTTP
    port: ServicePort
    bind: str
    bind_to_port: bool
    cidr: str
    kind: ListenerKind
    virtual_services: tuple[Ident[ResolvedVirtualService], ...] = ()
    reads: tuple[HostRead, ...] = ()


# the catch-all egress listener began: the listeners there so far take no more services
LOCK = "lock"


@dataclass(frozen=True, slots=True)
class OutboundListenerInputs:
    """One outbound listener: the service ports offered to it (``LOCK`` where the catch-all egress
    listener began)."""

    context: ListenerContext
    adds: tuple[PortAdd | str, ...]


@dataclass(frozen=True, slots=True)
class VirtualOutboundInputs:
    """``virtualOutbound`` on the capture port."""

    context: ListenerContext


ScopeListenerInputs = OutboundListenerInputs | VirtualOutboundInputs
