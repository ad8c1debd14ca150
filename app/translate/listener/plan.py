"""Which service ports go to which outbound listener of a sidecar, as istiod's
buildSidecarOutboundListeners walks the SidecarScope's egress listeners (listener.go): one
listener per (bind, port) — HTTP ports share ``0.0.0.0_PORT``, TCP ports listen on the service
VIP, headless TCP services get one listener per endpoint — with binding (``bind_to_port`` false
unless the proxy or the egress listener does not capture) and the reserved ports. The answer is
one inputs value per listener (``inputs.py``); ``builder.py`` builds each from it alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol as TypingProtocol

from app.api import networking as net
from app.config.host import is_ip_address
from app.model.ident import Ident
from app.model.service import Endpoint, Registry, Resolution, Service, ServicePort, parse_protocol
from app.model.service import Protocol as PortProtocol
from app.model.virtual_service import ResolvedVirtualService, VirtualServicesByHost
from app.translate.listener.builder import PROMETHEUS_PORT, STATUS_PORT, capture_ports
from app.translate.listener.inputs import (
    LOCK,
    ListenerContext,
    ListenerKind,
    OutboundListenerInputs,
    PortAdd,
    listener_kind,
)
from app.translate.listener.tcp import TCP_PROTOCOLS, OutboundContext, service_address


class EgressListenerView(TypingProtocol):
    """What listener building reads from a SidecarScope egress listener."""

    @property
    def port(self) -> net.SidecarPort | None: ...
    @property
    def bind(self) -> str: ...
    @property
    def capture_mode(self) -> str: ...
    @property
    def services(self) -> Sequence[Service]: ...
    @property
    def virtual_services(self) -> Sequence[ResolvedVirtualService]: ...
    @property
    def virtual_services_by_host(self) -> VirtualServicesByHost: ...
    @property
    def headless_services(self) -> Sequence[Service]: ...


def _binds_to_port(egress: EgressListenerView, interception_mode: str) -> bool:
    # nothing is redirected to a proxy or an egress listener that does not capture: they bind
    return interception_mode == "NONE" or egress.capture_mode == "NONE"


def _per_endpoint(egress: EgressListenerView, interception_mode: str, service: Service, port: ServicePort) -> bool:
    """Whether a catch-all egress listener gives this service port one listener per endpoint:
    headless TCP on no bind of its own, as HTTP can share 0.0.0.0:PORT but TCP cannot."""
    if egress.bind or _binds_to_port(egress, interception_mode):
        return False
    tcp_like = port.protocol in TCP_PROTOCOLS or port.protocol is PortProtocol.UNSUPPORTED
    return service.resolution is Resolution.PASSTHROUGH and not service.addresses and tcp_like


def _endpoint_binds(service: Service, port: ServicePort, endpoints: Sequence[Endpoint]) -> list[str] | None:
    """The addresses a per-endpoint service port binds (its endpoints' IPs); None for a plain
    ServiceEntry with resolution NONE and no endpoints, which falls back to a wildcard listener."""
    instances = [e for e in endpoints if e.service_port_name == port.name]
    if service.registry is not Registry.KUBERNETES and not instances and service.selector is None:
        return None
    return [e.address for e in instances if is_ip_address(e.address)]


def per_endpoint_addresses(
    egress_listeners: Sequence[EgressListenerView],
    interception_mode: str,
    endpoints: Callable[[Service], Sequence[Endpoint]],
) -> frozenset[str]:
    """Every address the outbound listeners bind one listener per endpoint to. A proxy at one of
    them gets no listener for itself (istiod listener.go skips ``node.IPAddresses[0]``): only
    then is its first IP something its scope-wide listeners read."""
    out: set[str] = set()
    for egress in egress_listeners:
        if egress.port is not None or egress.bind.startswith("unix://"):
            continue
        for service in egress.headless_services:  # the only ones ``_per_endpoint`` may take
            for port in service.ports:
                if _per_endpoint(egress, interception_mode, service, port):
                    out.update(_endpoint_binds(service, port, endpoints(service)) or ())
    return frozenset(out)


@dataclass(slots=True)
class _Planner:
    ctx: OutboundContext
    context: ListenerContext
    endpoints: Callable[[Service], Sequence[Endpoint]]
    adds: dict[tuple[str, int], list[PortAdd | str]] = field(default_factory=dict)

    def can_bind(self, bind: str, port: int, protocol: PortProtocol) -> bool:
        """istiod conflictWithReservedListener: a wildcard listener may not take the ports of
        Envoy's own static and virtual listeners."""
        if bind and bind != self.ctx.wildcard:
            return True
        if not bind and not protocol.is_http:
            return True
        return port not in {STATUS_PORT, PROMETHEUS_PORT, *capture_ports(self.ctx.mesh)}

    def add_egress_listener(self, egress: EgressListenerView) -> None:
        if egress.bind.startswith("unix://"):
            return  # Unix domain socket listeners are not supported
        mode = self.ctx.proxy.interception_mode
        bind_to_port = _binds_to_port(egress, mode)
        bind = egress.bind or (self.ctx.localhost if bind_to_port else "")
        vss = egress.virtual_services_by_host
        if egress.port is not None:
            p = egress.port
            listen_port = ServicePort(p.name, p.number, parse_protocol(p.protocol))
            if not self.can_bind(bind, listen_port.port, listen_port.protocol):
                return
            for service in egress.services:
                self.add(service, listen_port, bind, bind_to_port, vss)
            return
        # the catch-all egress listener adds nothing to ports an explicit one already claimed
        for adds in self.adds.values():
            adds.append(LOCK)
        for service in egress.services:
            for port in service.ports:
                if not self.can_bind(bind, port.port, port.protocol):
                    continue
                if _per_endpoint(egress, mode, service, port):
                    self._add_per_endpoint(service, port, bind_to_port, vss)
                else:
                    self.add(service, port, bind, bind_to_port, vss)

    def _add_per_endpoint(
        self, service: Service, port: ServicePort, bind_to_port: bool, vss: VirtualServicesByHost
    ) -> None:
        binds = _endpoint_binds(service, port, self.endpoints(service))
        if binds is None:
            self.add(service, port, "", bind_to_port, vss)
            return
        own_ip = self.ctx.proxy.ip_addresses[0] if self.ctx.proxy.ip_addresses else ""
        for address in binds:
            if address != own_ip:
                self.add(service, port, address, bind_to_port, vss)

    def add(
        self, service: Service, port: ServicePort, bind: str, bind_to_port: bool, vss: VirtualServicesByHost
    ) -> None:
        """Offer one service port to the listener its address and port select."""
        if service.resolution is Resolution.ALIAS:
            return
        kind = listener_kind(port.protocol)
        if kind is None:
            return
        if kind is ListenerKind.HTTP:
            bind = bind or self.ctx.wildcard
            self.adds.setdefault((bind, port.port), []).append(
                PortAdd(service.hostname, None, port, bind, bind_to_port, "", kind)
            )
            return
        # istiod makes one Service per ServiceEntry address, so each address binds a listener of
        # its own and each CIDR a prefix-matched chain of the wildcard listener
        if bind:
            addresses = [bind]
        elif len(service.addresses) > 1:
            addresses = list(service.addresses)
        else:
            addresses = [service_address(self.ctx, service)]
        for address in addresses:
            at, cidr = (self.ctx.wildcard, address) if "/" in address else (address, "")
            add = self._tcp_add(service, port, at, bind_to_port, cidr, kind, vss)
            self.adds.setdefault((at, port.port), []).append(add)

    def _tcp_add(
        self,
        service: Service,
        port: ServicePort,
        bind: str,
        bind_to_port: bool,
        cidr: str,
        kind: ListenerKind,
        vss: VirtualServicesByHost,
    ) -> PortAdd:
        """A TCP or sniffed add: the VirtualServices matching the service, and the service and
        rule of every host the chains' routes may name."""
        matching = vss.matching(service.hostname)
        hosts = {service.hostname}
        for vs in matching:
            for tcp in vs.spec.tcp:
                hosts.update(r.destination.host for r in tcp.route)
            for tls in vs.spec.tls:
                hosts.update(r.destination.host for r in tls.route)
        services, rules = self.ctx.services, self.ctx.rules
        reads = tuple((h, Ident(services.get(h)), Ident(rules.get(h))) for h in sorted(hosts))
        return PortAdd(
            service.hostname, Ident(service), port, bind, bind_to_port, cidr, kind, tuple(map(Ident, matching)), reads
        )

    def plan(self) -> list[OutboundListenerInputs]:
        """Every listener, in the order its first service came."""
        return [OutboundListenerInputs(self.context, tuple(adds)) for adds in self.adds.values()]


def plan_outbound_listeners(
    ctx: OutboundContext,
    context: ListenerContext,
    egress_listeners: Sequence[EgressListenerView],
    endpoints: Callable[[Service], Sequence[Endpoint]],
) -> list[OutboundListenerInputs]:
    """The listeners for every egress listener of the proxy's SidecarScope, in its order, as
    the values they are built from."""
    planner = _Planner(ctx, context, endpoints)
    for listener in egress_listeners:
        planner.add_egress_listener(listener)
    return planner.plan()
