"""A mesh config extension provider by name, and the outbound cluster of its service, as istiod's
fetchProvider and model.LookupCluster find them (ext_authz, access log and tracing providers)."""

from __future__ import annotations

from collections.abc import Mapping

from app.api.mesh import MeshConfig
from app.model.service import Service


def fetch_provider(mesh: MeshConfig, name: str) -> MeshConfig.ExtensionProvider | None:
    """istiod fetchProvider: the first provider of the name, matched in any case."""
    wanted = name.lower()
    return next((p for p in mesh.extension_providers if p.name.lower() == wanted), None)


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
