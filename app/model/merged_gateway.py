"""The Gateways merged for one gateway proxy, as istiod's MergedGateway (pilot/pkg/model/gateway.go
mergeGateways): the one merge both LDS and RDS read, so listener and route names agree.

Owns which Gateways select the proxy (selector labels a subset of its labels, any namespace:
PILOT_SCOPE_GATEWAY_TO_NAMESPACE is off by default; oldest first), each server's hosts made
namespace-explicit (``./h`` -> ``ns/h``, ``*/h`` -> ``h``), its port translated from a Service
port of the proxy to the target port, the RDS route name serving it (``http.PORT[.BIND]`` shared
by every plain HTTP server on a port, ``https.PORT.PORTNAME.GATEWAY.NAMESPACE[.BIND]`` per
TLS-terminating HTTPS server), the servers merged per (port, protocol, bind) — the listeners — and
per route name. A server whose port clashes with an earlier one's protocol, or whose TLS hosts
repeat on its port and bind, is dropped. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from app.api import networking as net
from app.config.labels import selector_matches
from app.config.objects import ConfigObject
from app.model.proxy import Proxy
from app.model.service import Endpoint, Service, ServicePort, parse_protocol
from app.model.service import Protocol as PortProtocol

# a Service label opting out of Gateway port -> targetPort translation (istiod model/gateway.go)
DISABLE_PORT_TRANSLATION_LABEL = "experimental.istio.io/disable-gateway-port-translation"
_PASSTHROUGH_MODES = (net.ServerTLSSettings.PASSTHROUGH, net.ServerTLSSettings.AUTO_PASSTHROUGH)


@dataclass(frozen=True, slots=True)
class ServerPort:
    """istiod ServerPort: a resolved port number, the protocol as written and the bind; one
    listener (or one set of filter chains of the ``BIND_PORT`` listener) per key."""

    number: int
    protocol: str
    bind: str


@dataclass(frozen=True, slots=True, eq=False)
class GatewayServer:
    """One server of a Gateway selecting the proxy, with its hosts made ``ns/host`` or ``host``,
    the RDS route name serving it (empty for TCP, TLS and passthrough servers) and, for a TLS
    server, the SNI names its filter chain matches."""

    gateway: ConfigObject
    server: net.Server
    hosts: tuple[str, ...]
    protocol: PortProtocol
    route_name: str
    sni_hosts: tuple[str, ...] = ()

    @property
    def gateway_name(self) -> str:
        """``namespace/name`` of the Gateway, as VirtualServices bind to it."""
        return self.gateway.namespaced_name

    @property
    def has_tls(self) -> bool:
        return self.server.HasField("tls")

    @property
    def passthrough(self) -> bool:
        return self.has_tls and self.server.tls.mode in _PASSTHROUGH_MODES

    @property
    def is_tls_server(self) -> bool:
        """istiod IsTLSServer: a TLS block on a non-HTTP port."""
        return self.has_tls and not self.protocol.is_http

    @property
    def is_http_server(self) -> bool:
        """istiod IsHTTPServer: HTTP, or HTTPS that terminates TLS."""
        return self.protocol.is_http or (self.protocol is PortProtocol.HTTPS and self.has_tls and not self.passthrough)


@dataclass(frozen=True, slots=True)
class MergedServers:
    """The servers sharing one ServerPort; ``route_name`` is the RDS name of its plain HTTP
    connection manager (empty when the port serves no plain HTTP)."""

    servers: tuple[GatewayServer, ...]
    route_name: str


@dataclass(frozen=True, slots=True)
class MergedGateway:
    """istiod MergedGateway: servers per listener key (in the order first seen) and per RDS name."""

    server_ports: tuple[ServerPort, ...]
    merged_servers: Mapping[ServerPort, MergedServers]
    servers_by_route_name: Mapping[str, tuple[GatewayServer, ...]]


def merge_gateways(
    proxy: Proxy, gateways: Sequence[ConfigObject], targets: Sequence[tuple[Service, ServicePort, Endpoint]]
) -> MergedGateway:
    """The Gateways selecting ``proxy``, merged. ``targets`` are the proxy's own (Service, port,
    endpoint) triples, for Service port -> target port translation."""
    merger = _Merger(targets)
    for gateway in _selected_gateways(proxy, gateways):
        for spec in gateway.spec.servers:
            merger.add(gateway, spec)
    return MergedGateway(
        server_ports=tuple(merger.order),
        merged_servers={key: MergedServers(tuple(m.servers), m.route_name) for key, m in merger.merged.items()},
        servers_by_route_name={name: tuple(servers) for name, servers in merger.by_route.items()},
    )


def _selected_gateways(proxy: Proxy, gateways: Sequence[ConfigObject]) -> list[ConfigObject]:
    # istiod sortConfigByCreationTime: oldest first, then by name, then by namespace
    ordered = sorted(gateways, key=lambda g: (g.meta.creation_timestamp, g.meta.name, g.meta.namespace))
    return [g for g in ordered if selector_matches(g.spec.selector, proxy.labels)]


def _resolve_port(number: int, targets: Sequence[tuple[Service, ServicePort, Endpoint]]) -> int:
    """A Gateway port naming a port of the proxy's own Service listens on its target port;
    any other port is used as is (istiod resolvePorts, legacy label selection)."""
    for svc, port, endpoint in targets:
        if DISABLE_PORT_TRANSLATION_LABEL not in svc.labels and port.port == number:
            return endpoint.port
    return number


def _sanitize_server_hosts(hosts: Iterable[str], namespace: str) -> tuple[str, ...]:
    """``./h`` -> ``ns/h``, ``*/h`` -> ``h``, and ``*/*`` alone means ``*``."""
    out: list[str] = []
    for h in hosts:
        ns, slash, name = h.partition("/")
        if not slash:
            out.append(h)
        elif ns == ".":
            out.append(f"{namespace}/{name}")
        elif ns == "*":
            if name == "*":
                return ("*",)
            out.append(name)
        else:
            out.append(h)
    return tuple(out)


def _route_name(spec: net.Server, protocol: PortProtocol, port: int, gateway: ConfigObject) -> str:
    """istiod gatewayRDSRouteName."""
    bind = f".{spec.bind}" if spec.bind else ""
    if protocol.is_http:
        return f"http.{port}{bind}"
    if protocol is PortProtocol.HTTPS and not (spec.HasField("tls") and spec.tls.mode in _PASSTHROUGH_MODES):
        meta = gateway.meta
        return f"https.{spec.port.number}.{spec.port.name}.{meta.name}.{meta.namespace}{bind}"
    return ""


def _can_merge(new: PortProtocol, existing: PortProtocol) -> bool:
    return (new.is_http or new is existing) and existing.is_http


@dataclass(slots=True)
class _Merging:
    servers: list[GatewayServer] = field(default_factory=list)
    route_name: str = ""


@dataclass(slots=True)
class _Merger:
    """istiod mergeGateways, one server at a time."""

    targets: Sequence[tuple[Service, ServicePort, Endpoint]]
    ports: set[int] = field(default_factory=set)
    plaintext: dict[int, ServerPort] = field(default_factory=dict)
    non_plaintext_binds: dict[int, set[str]] = field(default_factory=dict)
    by_route: dict[str, list[GatewayServer]] = field(default_factory=dict)
    tls_hosts: dict[int, dict[str, str]] = field(default_factory=dict)  # port -> host -> bind
    merged: dict[ServerPort, _Merging] = field(default_factory=dict)
    order: list[ServerPort] = field(default_factory=list)

    def add(self, gateway: ConfigObject, spec: net.Server) -> None:
        if not spec.HasField("port"):
            return
        hosts = _sanitize_server_hosts(spec.hosts, gateway.meta.namespace)
        protocol = parse_protocol(spec.port.protocol)
        port = _resolve_port(spec.port.number, self.targets)
        sni_hosts: tuple[str, ...] = ()
        if spec.HasField("tls"):
            known = self.tls_hosts.setdefault(port, {})
            if any(known.get(h) == spec.bind for h in hosts if h in known):
                return  # duplicate SNI hosts would make two chains match alike
            known.update(dict.fromkeys(hosts, spec.bind))
            sni_hosts = tuple(sorted({h.split("/", 1)[-1] for h in hosts}))
        server = GatewayServer(gateway, spec, hosts, protocol, _route_name(spec, protocol, port, gateway), sni_hosts)
        route = server.route_name
        key = ServerPort(port, spec.port.protocol, spec.bind)
        if port not in self.ports:
            self.ports.add(port)
            if not server.is_tls_server:
                self.plaintext[port] = key
            if server.is_http_server:
                self.by_route[route] = [server]
            self._append(key, server, route)
            return
        current = self.plaintext.get(port)
        if current is not None:
            same_bind = current.bind == spec.bind
            if same_bind and not (_can_merge(protocol, parse_protocol(current.protocol)) and route):
                return  # a protocol clash, or a TCP server, on the same port and bind
            self._append(current if same_bind else key, server, route)
            if route:
                self.by_route.setdefault(route, []).append(server)
            return
        if server.is_http_server:
            if not route or route in self.by_route:
                return
            self.by_route[route] = [server]
        binds = self.non_plaintext_binds.setdefault(port, set())
        new_bind = spec.bind not in binds
        binds.add(spec.bind)
        if not server.has_tls and not new_bind:
            return
        self._append(key, server, "")

    def _append(self, key: ServerPort, server: GatewayServer, route_name: str) -> None:
        entry = self.merged.get(key)
        if entry is None:
            entry = self.merged[key] = _Merging()
            self.order.append(key)
        entry.servers.append(server)
        if route_name:
            entry.route_name = route_name
