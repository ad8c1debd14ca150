"""The outbound cluster of a mesh config extension provider's service, as istiod's
model.LookupCluster finds it (ext_authz and access log service providers)."""

from __future__ import annotations

from collections.abc import Mapping

from app.model.service import Service


def lookup_cluster(service: str, port: int, by_hostname: Mapping[str, Mapping[str, Service]]) -> tuple[str, str, str]:
    """istiod model.LookupCluster: (hostname, outbound cluster, error) of ``NAMESPACE/HOST``, or
    of ``HOST`` when one namespace has it."""
    if not service:
        return "", "", "service must not be empty"
    parts = service.split("/")
    svc: Service | None = None
    if len(parts) == 2:
        svc = by_hostname.get(parts[1], {}).get(parts[0])
    elif len(parts) == 1:
        namespaces = by_hostname.get(service, {})
        if len(namespaces) > 1:
            found = sorted(namespaces)
            return (
                "",
                "",
                (
                    f"found {service} in multiple namespaces {found}, specify the namespace explicitly "
                    "in the format of <Namespace>/<Hostname>"
                ),
            )
        svc = next(iter(namespaces.values()), None)
    if svc is None:
        return "", "", f"could not find service {service} in Istio service registry"
    return svc.hostname, f"outbound|{port}||{svc.hostname}", ""
