"""``pilotfish proxy-config``: a connected proxy's config as the control plane serves it (from
``/debug/config_dump``), like ``istioctl proxy-config`` but from pilotfish's side. Pure: the
``short`` tables from the decoded dump; the CLI fetches it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from app.debug.status import table

SECTIONS = ("clusters", "listeners", "routes", "endpoints")

Dump = Mapping[str, Sequence[Mapping[str, Any]]]


def clusters(dump: Dump) -> str:
    rows = []
    for c in dump.get("clusters", ()):
        name = str(c.get("name", ""))
        parts = name.split("|")
        kind = str(c.get("type", "EDS" if "edsClusterConfig" in c else "STATIC"))
        if len(parts) == 4:
            direction, port, subset, fqdn = parts
            rows.append((fqdn or "-", port, subset or "-", direction, kind))
        else:
            rows.append((name, "-", "-", "-", kind))
    return table(("SERVICE FQDN", "PORT", "SUBSET", "DIRECTION", "TYPE"), rows)


def listeners(dump: Dump) -> str:
    rows = []
    for lis in dump.get("listeners", ()):
        sock = (lis.get("address") or {}).get("socketAddress") or {}
        chains = str(len(lis.get("filterChains") or ()))
        rows.append((str(lis.get("name", "")), str(sock.get("address", "-")), str(sock.get("portValue", "-")), chains))
    return table(("NAME", "ADDRESS", "PORT", "CHAINS"), rows)


def routes(dump: Dump) -> str:
    rows = []
    for rc in dump.get("routes", ()):
        for vh in rc.get("virtualHosts") or ():
            domains = [str(d) for d in vh.get("domains") or ()]
            shown = ", ".join(domains[:2]) + (f" + {len(domains) - 2} more" if len(domains) > 2 else "")
            rows.append((str(rc.get("name", "")), str(vh.get("name", "")), shown, str(len(vh.get("routes") or ()))))
    return table(("NAME", "VHOST NAME", "DOMAINS", "ROUTES"), rows)


def endpoints(dump: Dump) -> str:
    rows = []
    for cla in dump.get("endpoints", ()):
        for group in cla.get("endpoints") or ():
            for lb in group.get("lbEndpoints") or ():
                sock = ((lb.get("endpoint") or {}).get("address") or {}).get("socketAddress") or {}
                address = f"{sock.get('address', '')}:{sock.get('portValue', '')}"
                rows.append((address, str(lb.get("healthStatus", "HEALTHY")), str(cla.get("clusterName", ""))))
    return table(("ENDPOINT", "STATUS", "CLUSTER"), rows)


SHORT: Mapping[str, Callable[[Dump], str]] = {
    "clusters": clusters,
    "listeners": listeners,
    "routes": routes,
    "endpoints": endpoints,
}
