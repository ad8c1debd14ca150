"""Gateways merged for one gateway proxy, as istiod's model/gateway.go mergeGateways: which
Gateways select the proxy (selector labels a subset of its labels; oldest first), each server's
hosts normalised (``./h`` -> ``ns/h``, ``*/h`` -> ``h``), its port translated from a Service port
of the proxy to the target port, and the RDS route name serving it: ``http.PORT[.BIND]`` shared
by every plain HTTP server on a port, ``https.PORT.PORTNAME.GATEWAY.NAMESPACE[.BIND]`` per
TLS-terminating HTTPS server. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.api import networking_pb2 as net
from app.config.model import ConfigObject
from app.model.proxy import Proxy
from app.model.service import Endpoint, Service, ServicePort, parse_protocol
from app.model.service import Protocol as PortProtocol

# a Service label opting out of Gateway port -> targetPort translation (istiod model/gateway.go)
DISABLE_PORT_TRANSLATION_LABEL = "experimental.istio.io/disable-gateway-port-translation"


@dataclass(frozen=True, slots=True)
class GatewayServer:
    """One server of a Gateway selecting the proxy, with its hosts made ``ns/host`` or ``host``."""

    gateway: str  # ns/name
    server: net.Server
    hosts: tuple[str, ...]


def merge_gateway_servers(
    proxy: Proxy, gateways: Sequence[ConfigObject], targets: Sequence[tuple[Service, ServicePort, Endpoint]]
) -> dict[str, tuple[GatewayServer, ...]]:
    """Route name -> the servers it serves, for the Gateways selecting ``proxy`` merged as
    istiod's mergeGateways does (oldest Gateway first; a server whose port clashes with an
    earlier one's protocol, or whose TLS hosts repeat, is dropped). ``targets`` are the proxy's
    own (Service, port, endpoint) triples, for Service port -> target port translation."""
    by_route: dict[str, list[GatewayServer]] = {}
    ports: set[int] = set()
    plaintext: dict[int, tuple[PortProtocol, str]] = {}  # port -> (protocol, bind)
    tls_hosts: dict[int, dict[str, str]] = {}  # port -> host -> bind
    for gw in _selected_gateways(proxy, gateways):
        ns = gw.meta.namespace
        for s in gw.spec.servers:
            if not s.HasField("port"):
                continue
            entry = GatewayServer(f"{ns}/{gw.meta.name}", s, _sanitize_server_hosts(s.hosts, ns))
            port = _resolve_port(s.port.number, targets)
            route = _gateway_route_name(s, port, gw)
            if s.HasField("tls") and _repeats_tls_hosts(entry.hosts, s.bind, tls_hosts.setdefault(port, {})):
                continue
            protocol = parse_protocol(s.port.protocol)
            if port not in ports:
                ports.add(port)
                if not _is_tls_server(s):
                    plaintext[port] = (protocol, s.bind)
                if _is_http_server(s):
                    by_route[route] = [entry]
            elif port in plaintext:
                current, bind = plaintext[port]
                clash = not ((protocol.is_http or protocol is current) and current.is_http)
                if bind == s.bind and (clash or not route):
                    continue
                if route:
                    by_route.setdefault(route, []).append(entry)
            elif _is_http_server(s) and route and route not in by_route:
                by_route[route] = [entry]
    return {name: tuple(servers) for name, servers in by_route.items()}


def _selected_gateways(proxy: Proxy, gateways: Sequence[ConfigObject]) -> list[ConfigObject]:
    ordered = sorted(gateways, key=lambda g: (g.meta.creation_timestamp, f"{g.meta.name}.{g.meta.namespace}"))
    return [g for g in ordered if all(proxy.labels.get(k) == v for k, v in g.spec.selector.items())]


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


def _is_passthrough(s: net.Server) -> bool:
    return s.HasField("tls") and s.tls.mode in (
        net.ServerTLSSettings.PASSTHROUGH,
        net.ServerTLSSettings.AUTO_PASSTHROUGH,
    )


def _is_tls_server(s: net.Server) -> bool:
    return s.HasField("tls") and not parse_protocol(s.port.protocol).is_http


def _is_http_server(s: net.Server) -> bool:
    protocol = parse_protocol(s.port.protocol)
    return protocol.is_http or (protocol is PortProtocol.HTTPS and s.HasField("tls") and not _is_passthrough(s))


def _gateway_route_name(s: net.Server, port: int, gw: ConfigObject) -> str:
    bind = f".{s.bind}" if s.bind else ""
    protocol = parse_protocol(s.port.protocol)
    if protocol.is_http:
        return f"http.{port}{bind}"
    if protocol is PortProtocol.HTTPS and not _is_passthrough(s):
        return f"https.{s.port.number}.{s.port.name}.{gw.meta.name}.{gw.meta.namespace}{bind}"
    return ""


def _repeats_tls_hosts(hosts: Sequence[str], bind: str, known: dict[str, str]) -> bool:
    """True when a host is already served on this port and bind; else records the hosts."""
    if any(known.get(h) == bind for h in hosts if h in known):
        return True
    known.update(dict.fromkeys(hosts, bind))
    return False
