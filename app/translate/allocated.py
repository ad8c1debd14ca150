"""Auto-allocated ServiceEntry addresses as one proxy sees them.

istiod gives a ServiceEntry without addresses an address from 240.240.0.0/16 (and 2001:2::/48)
in its status (PILOT_ENABLE_IP_AUTOALLOCATE), and a proxy whose agent captures DNS uses it
everywhere it would use a VIP: the name table answers with it, the outbound TCP listener binds
it, and the service's virtual host lists it among its domains (pilot/pkg/model/service.go
nodeUsesAutoallocatedIPs, GetAddressForProxy, getAllAddressesForProxy). Other proxies keep the
unspecified address. pilotfish reads the allocation from the status only (istiod's older
in-memory allocation for DNS_AUTO_ALLOCATE is not modelled), so allocation needs the feature on.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.model.features import Features
from app.model.proxy import Proxy
from app.model.service import Service


def uses_allocated_addresses(proxy: Proxy, features: Features) -> bool:
    """istiod nodeUsesAutoallocatedIPs: allocation is on (the proxy's DNS_AUTO_ALLOCATE or the
    PILOT_ENABLE_IP_AUTOALLOCATE controller) and the proxy's agent captures DNS."""
    return (proxy.dns_auto_allocate or features.enable_ip_autoallocate) and proxy.dns_capture


def proxy_families(proxy: Proxy) -> tuple[bool, bool]:
    """(IPv4, IPv6): the families the proxy has an address of."""
    v6 = any(":" in ip for ip in proxy.ip_addresses)
    v4 = any(":" not in ip for ip in proxy.ip_addresses)
    return v4, v6


def of_families(addresses: Iterable[str], v4: bool, v6: bool) -> list[str]:
    return [a for a in addresses if (v6 if ":" in a else v4)]


def consumes_allocated(proxy: Proxy, features: Features) -> bool:
    """Whether the proxy is given allocated addresses: the status-based allocation is on and the
    proxy uses it."""
    return features.enable_ip_autoallocate and uses_allocated_addresses(proxy, features)


def allocation(proxy: Proxy, consumes: bool) -> tuple[bool, bool] | None:
    """The (IPv4, IPv6) families whose allocated addresses the proxy uses; None when it uses
    none (``consumes``: ``consumes_allocated``)."""
    return proxy_families(proxy) if consumes else None


def allocated_addresses(service: Service, families: tuple[bool, bool] | None) -> tuple[str, ...]:
    """The allocated addresses of ``service`` a proxy uses in place of a VIP, of its
    ``families`` (``allocation``); none for a service with addresses of its own."""
    if families is None or service.addresses:
        return ()
    return tuple(of_families(service.auto_addresses, *families))
