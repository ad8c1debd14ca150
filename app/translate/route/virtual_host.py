"""Virtual hosts and their domains, as istiod builds them (pilot/pkg/networking/core/httproute.go,
gateway.go). Pure builders: names, the Host-header variants a client may use for a service, the
de-duplication Envoy needs (it rejects a route configuration where two virtual hosts share a
domain), the sidecar catch-all virtual host, and the gateway helpers (catch-all routes last,
virtual hosts with identical routes collapsed into one).

Sidecars and gateways set ``ignore_port_in_host_matching``, so no domain carries a ``:PORT``
suffix; virtual host names still do (``reviews.default.svc.cluster.local:9080``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from envoy.config.route.v3 import route_components_pb2 as rc

from app.config.host import specificity_key
from app.model.service import Registry, Resolution, Service
from app.translate.route.match import is_catch_all_route

ALLOW_ANY_NAME = "allow_any"  # istiod util.Passthrough: virtual host and route name
BLOCK_ALL_NAME = "block_all"  # istiod util.BlackHole
UNSPECIFIED_IP = "0.0.0.0"


def ipv6_compliant(host: str) -> str:
    """Brackets around an IPv6 address so it can carry a port (istiod util.IPv6Compliant)."""
    return f"[{host}]" if ":" in host else host


def domain_name(host: str, port: int) -> str:
    """``host:port``, the name of a virtual host (istiod util.DomainName)."""
    return f"{ipv6_compliant(host)}:{port}"


def alt_hosts(hostname: str, proxy_domain: str) -> list[str]:
    """The other names a client in ``proxy_domain`` (``ns.svc.cluster.local``) may use for
    ``hostname``: the absolute FQDN ``hostname.``, then the shorter names (istiod
    GenerateAltVirtualHosts without port suffixes)."""
    # PILOT_ENABLE_ABSOLUTE_FQDN_VHOST_DOMAIN (default true, istio/istio#56007): a Host header
    # may carry the root dot
    absolute = [] if _is_ip(hostname) else [f"{hostname}."]
    svc = proxy_domain.find(".svc.")
    if svc != -1:
        # a Kubernetes proxy expands only Kubernetes-shaped names sharing its cluster suffix
        if not hostname.endswith(proxy_domain[svc:] if svc > 0 else proxy_domain):
            return absolute
        return absolute + _kube_alt_hosts(hostname, proxy_domain[:svc])
    unique, shared = _unique_and_shared(hostname, proxy_domain)
    if not shared:
        return absolute
    short = ".".join(unique)
    out = [*absolute, short]
    if len(unique) == 2:  # name.namespace: also name.namespace.<first shared label>
        out.append(f"{short}.{shared[0]}")
    return out


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _kube_alt_hosts(hostname: str, proxy_namespace: str) -> list[str]:
    svc = hostname.find(".svc.")
    if svc <= 0:
        return []  # not a Kubernetes service name
    dot = hostname.index(".")
    if dot + 1 > svc:
        return []  # no namespace label before .svc
    name_ns = hostname[:svc]
    if hostname[dot + 1 : svc] == proxy_namespace:
        return [hostname[:dot], f"{name_ns}.svc", name_ns]
    return [name_ns, f"{name_ns}.svc"]


def _unique_and_shared(hostname: str, proxy_domain: str) -> tuple[list[str], list[str]]:
    host_parts, domain_parts = hostname.split("."), proxy_domain.split(".")
    shared = 0
    for a, b in zip(reversed(host_parts), reversed(domain_parts), strict=False):
        if a != b:
            break
        shared += 1
    if shared == 0:
        return host_parts, []
    return host_parts[: len(host_parts) - shared], host_parts[len(host_parts) - shared :]


def service_domains(
    service: Service, proxy_domain: str, allocated: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """Domains of a service's virtual host, and which of them are short-name expansions
    (istiod generateVirtualHostDomains with the port ignored); ``allocated``: the auto-allocated
    addresses the proxy uses for a service without its own (GetAllAddressesForProxy)."""
    alts = alt_hosts(service.hostname, proxy_domain)
    domains = [ipv6_compliant(service.hostname), *alts]
    if service.resolution is Resolution.PASSTHROUGH and service.registry is Registry.KUBERNETES:
        # headless: clients also address pods as <pod>.<service name>
        domains += [f"*.{d}" for d in domains]
    domains += [ipv6_compliant(a) for a in (*service.addresses, *allocated) if a and a != UNSPECIFIED_IP]
    return domains, alts


@dataclass(frozen=True, slots=True)
class VirtualHostWrapper:
    """Routes for one port and the hosts they serve (istiod route.VirtualHostWrapper)."""

    port: int
    services: tuple[Service, ...]
    vs_hosts: tuple[str, ...]  # VirtualService hosts that are not registry services
    routes: tuple[rc.Route, ...]


def build_sidecar_virtual_hosts(
    wrappers: Sequence[VirtualHostWrapper],
    proxy_domain: str,
    include_attempt_count: bool,
    allocated: Callable[[Service], Sequence[str]] = lambda _: (),
) -> list[rc.VirtualHost]:
    """One virtual host per VirtualService host and per service of each wrapper, in order. A
    name or domain already taken by an earlier virtual host is dropped (istiod
    BuildSidecarOutboundVirtualHosts); a short name that is itself some service's FQDN is never
    used as an expansion. ``allocated``: a service's auto-allocated addresses the proxy uses."""
    names: set[str] = set()
    taken: set[str] = set()
    known_fqdns: set[str] = set()
    for w in wrappers:
        for svc in w.services:
            known_fqdns.update((domain_name(svc.hostname, w.port), svc.hostname))
    out: list[rc.VirtualHost] = []
    for w in wrappers:
        if not w.routes:
            continue
        hosts: list[tuple[str, Service | None]] = [(h, None) for h in w.vs_hosts]
        hosts += [(s.hostname, s) for s in w.services]
        for hostname, maybe_svc in hosts:
            name = domain_name(hostname, w.port)
            if name in names:
                continue
            names.add(name)
            expanded: list[str] = []
            if maybe_svc is None:
                domains = [ipv6_compliant(hostname)]
            else:
                domains, expanded = service_domains(maybe_svc, proxy_domain, allocated(maybe_svc))
            kept = _dedupe(domains, taken, expanded, known_fqdns)
            if kept:
                out.append(
                    rc.VirtualHost(
                        name=name, domains=kept, routes=w.routes, include_request_attempt_count=include_attempt_count
                    )
                )
    return out


def _dedupe(domains: Iterable[str], taken: set[str], expanded: Sequence[str], known_fqdns: set[str]) -> list[str]:
    kept: list[str] = []
    for d in domains:
        if d.lower() in taken or (d in expanded and d in known_fqdns):
            continue
        kept.append(d)
        taken.add(d.lower())
    return kept


def virtual_hosts_for_sniffed_route(vhosts: Sequence[rc.VirtualHost], route_name: str) -> list[rc.VirtualHost]:
    """The virtual host of the one service a sniffed ``HOST:PORT`` listener carries; a single
    match serves every Host (``*``), as istiod getVirtualHostsForSniffedServicePort does."""
    host = route_name.rpartition(":")[0]
    found = [vh for vh in vhosts if any(d in (route_name, host) for d in vh.domains)]
    if len(found) == 1:
        del found[0].domains[:]
        found[0].domains.append("*")
    return found


def build_catch_all_virtual_host(allow_any: bool, egress_cluster: str, include_attempt_count: bool) -> rc.VirtualHost:
    """The last virtual host of a sidecar's outbound route configuration: ``allow_any`` to the
    passthrough (or egress proxy) cluster with no timeout, or ``block_all`` answering 502."""
    if allow_any:
        action = rc.RouteAction(cluster=egress_cluster)
        action.timeout.SetInParent()
        action.max_grpc_timeout.SetInParent()
        route = rc.Route(name=ALLOW_ANY_NAME, route=action)
        name = ALLOW_ANY_NAME
    else:
        route = rc.Route(name=BLOCK_ALL_NAME, direct_response=rc.DirectResponseAction(status=502))
        name = BLOCK_ALL_NAME
    route.match.prefix = "/"
    return rc.VirtualHost(name=name, domains=["*"], routes=[route], include_request_attempt_count=include_attempt_count)


def gateway_blackhole_virtual_host(port: int) -> rc.VirtualHost:
    """A gateway route configuration with nothing bound to it: no routes, so Envoy answers 404."""
    return rc.VirtualHost(name=domain_name("blackhole", port), domains=["*"])


@dataclass(slots=True)
class GatewayVirtualHost:
    """A gateway virtual host being assembled. Its ``routes`` are the very objects built once
    per VirtualService, shared by every virtual host it serves, so virtual hosts are collapsed
    by route identity as istiod compares route pointers."""

    name: str
    domains: list[str]
    include_attempt_count: bool
    routes: list[rc.Route] = field(default_factory=list)
    require_tls: bool = False

    def build(self) -> rc.VirtualHost:
        vh = rc.VirtualHost(
            name=self.name,
            domains=self.domains,
            # istiod SortVHostRoutes: catch-alls last, order kept (the sort is stable)
            routes=sorted(self.routes, key=is_catch_all_route),
            include_request_attempt_count=self.include_attempt_count,
        )
        if self.require_tls:
            vh.require_tls = rc.VirtualHost.ALL
        return vh


def collapse_gateway_virtual_hosts(by_host: dict[str, GatewayVirtualHost]) -> list[GatewayVirtualHost]:
    """Merge virtual hosts whose routes are the same into the first of them by host order
    (istiod collapseDuplicateRoutes, on by default via PILOT_ENABLE_ROUTE_COLLAPSE_OPTIMIZATION)."""
    kept: dict[str, GatewayVirtualHost] = {}
    primary_for: dict[tuple[int, ...], str] = {}
    for host in sorted(by_host, key=specificity_key):
        vh = by_host[host]
        key = tuple(map(id, vh.routes))
        primary = primary_for.get(key)
        if primary is not None and _mergeable(vh, kept[primary]):
            kept[primary].domains.extend(vh.domains)
            continue
        primary_for[key] = host
        kept[host] = vh
    return list(kept.values())


def _mergeable(a: GatewayVirtualHost, b: GatewayVirtualHost) -> bool:
    return a.include_attempt_count == b.include_attempt_count and a.require_tls == b.require_tls
