"""NDS generator: the DNS name table a node agent answers its pod's queries from, as istiod's
BuildNameTable makes it (pkg/dns/server/name_table.go).

Over the services the proxy's SidecarScope sees, each host maps to the addresses a client in the
proxy's cluster uses for it: the ClusterIPs of its cluster in the proxy's IP families, a
ServiceEntry's addresses, or, for proxies that capture DNS, the addresses istiod's allocator
gave an address-less ServiceEntry. A host without an address (``0.0.0.0``: a headless Service,
a NONE-resolution ServiceEntry) resolves to its ready endpoints in the proxy's network (and its
cluster, unless multicluster headless is on), and each endpoint of a Pod with a subdomain gets
its own ``<hostname>.<subdomain>.<namespace>.svc.<domain>`` record, as Kubernetes DNS has it.

Built for sidecars only (a router is answered with no table). Synchronous and pure.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from app.api.nds import NameTable
from app.model.features import Features
from app.model.proxy import Proxy, ProxyType
from app.model.service import Endpoint, HealthStatus, Registry, Resolution, Service
from app.translate.allocated import allocated_addresses, allocation, consumes_allocated, of_families, proxy_families

UNSPECIFIED_IP = "0.0.0.0"
# the registry's own cluster (pilotfish reads one cluster; istiod's default CLUSTER_ID)
REGISTRY_CLUSTER = "Kubernetes"
# Kubernetes Multi-Cluster Services hosts get no short names (they would shadow cluster.local's)
_CLUSTERSET_SUFFIX = ".clusterset.local"


class NameTableView(Protocol):
    """What the name table reads of a push: the features, each service's endpoints."""

    @property
    def features(self) -> Features: ...

    def endpoints(self, hostname: str, namespace: str) -> Sequence[Endpoint]: ...


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _same_or_empty(a: str, b: str) -> bool:
    return not a or not b or a == b


def _service_addresses(svc: Service, proxy: Proxy, features: Features) -> list[list[str]]:
    """The addresses a proxy uses for a service, one list per istiod Service: istiod makes one
    Service per ServiceEntry address, pilotfish keeps them in one (GetAllAddressesForProxy)."""
    v4, v6 = proxy_families(proxy)
    if svc.registry is Registry.KUBERNETES:
        # ClusterVIPs of the registry's cluster; DefaultAddress the first of them
        vips = list(svc.addresses) or [UNSPECIFIED_IP]
        found = of_families(vips, v4, v6) if proxy.cluster_id == REGISTRY_CLUSTER else []
        return [found or of_families(vips[:1], v4, v6)]
    if len(svc.addresses):
        # one istiod Service per address; a /32 (/128) CIDR is its address, a wider one kept
        # as written (and so skipped as no IP)
        return [[_single_host(a)] for a in svc.addresses]
    allocated = allocated_addresses(svc, allocation(proxy, consumes_allocated(proxy, features)))
    if allocated:
        return [list(allocated)]
    return [[UNSPECIFIED_IP]]


def _single_host(address: str) -> str:
    try:
        net = ipaddress.ip_network(address, strict=False)
    except ValueError:
        return address
    return str(net.network_address) if net.num_addresses == 1 and "/" in address else address


@dataclass(slots=True)
class _Entry:
    ips: list[str]
    registry: str
    shortname: str = ""
    namespace: str = ""


@dataclass(slots=True)
class _Table:
    entries: dict[str, _Entry] = field(default_factory=dict)

    def add_service(self, svc: Service, hostname: str, ips: list[str]) -> None:
        """istiod's merge: the first service of a host makes its entry; a Kubernetes service
        replaces one from another registry (a ServiceEntry decorating it), and further
        ServiceEntry addresses are appended."""
        kube = svc.registry is Registry.KUBERNETES
        short = kube and not hostname.endswith(_CLUSTERSET_SUFFIX)
        found = self.entries.get(hostname)
        if found is None:
            self.entries[hostname] = _Entry(
                list(ips), str(svc.registry), svc.name if short else "", svc.namespace if short else ""
            )
        elif found.registry != Registry.KUBERNETES:
            if kube:
                found.ips, found.registry = list(ips), str(Registry.KUBERNETES)
                if short:
                    found.shortname, found.namespace = svc.name, svc.namespace
            else:
                found.ips.extend(ips)

    def message(self) -> NameTable:
        out = NameTable()
        for host in sorted(self.entries):  # sorted: the encoding (and so the version) is stable
            entry = self.entries[host]
            info = out.table[host]
            info.ips.extend(entry.ips)
            info.registry = entry.registry
            info.shortname = entry.shortname
            info.namespace = entry.namespace
        return out


def _endpoint_addresses(
    table: _Table, svc: Service, proxy: Proxy, push: NameTableView, features: Features
) -> list[str]:
    """A host without an address: its endpoints' addresses, and the Pod subdomain records
    (written to ``table``, a same-cluster record before one from another cluster)."""
    addresses: list[str] = []
    local: dict[str, list[str]] = {}
    remote: dict[str, list[str]] = {}
    short_names: dict[str, str] = {}
    seen: set[str] = set()
    _, _, domain = svc.hostname.partition(".")
    for ep in push.endpoints(svc.hostname, svc.namespace):
        if not _is_ip(ep.address):
            continue
        if not svc.publish_not_ready and ep.health is not HealthStatus.HEALTHY:
            continue
        if ep.address in seen:  # one endpoint per port: an address once
            continue
        seen.add(ep.address)
        same_network = _same_or_empty(ep.network, proxy.network)
        same_cluster = _same_or_empty(ep.cluster_id, proxy.cluster_id)
        if ep.subdomain and same_network:
            if not domain:
                continue
            short = f"{ep.hostname}.{ep.subdomain}"
            host = f"{short}.{domain}"
            short_names[host] = short
            (local if same_cluster else remote).setdefault(host, []).append(ep.address)
        if not same_network or (not same_cluster and not features.multicluster_headless):
            # cluster-local endpoints only, as Kubernetes DNS answers: a client resolving a
            # headless name gets addresses it reaches without a network gateway
            continue
        addresses.append(ep.address)
    registry = str(svc.registry)
    for host, ips in local.items():
        table.entries[host] = _Entry(ips, registry, short_names[host], svc.namespace)
    for host, ips in remote.items():
        if host not in local:
            table.entries[host] = _Entry(ips, registry, short_names[host], svc.namespace)
    return addresses


def build_name_table(proxy: Proxy, push: NameTableView, services: Iterable[Service]) -> NameTable | None:
    """The name table of a sidecar over the services its scope sees (None for a router)."""
    if proxy.type is not ProxyType.SIDECAR:
        return None
    features = push.features
    table = _Table()
    for svc in services:
        for addresses in _service_addresses(svc, proxy, features):
            ips: list[str] = []
            headless = False
            for address in addresses:
                if address == UNSPECIFIED_IP:
                    headless = True
                    break
                if _is_ip(address):  # a CIDR is no address to answer with
                    ips.append(address)
            if headless and svc.resolution is Resolution.PASSTHROUGH and svc.ports:
                ips.extend(_endpoint_addresses(table, svc, proxy, push, features))
            if ips:
                table.add_service(svc, svc.hostname, ips)
    return table.message()
