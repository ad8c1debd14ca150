"""Services by visibility, as istiod's ServiceIndex: private per namespace, exported to named
namespaces, public. ``exportTo`` empty means the mesh's defaultServiceExportTo."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from app.model.service import Registry, Service

PRIVATE = "."
PUBLIC = "*"
NONE = "~"


def _order(svc: Service) -> tuple[str, str, str, str]:
    # istiod's SortServicesByCreationTime: oldest first, then Attributes.Name (a Kubernetes
    # Service's name, a ServiceEntry's host: istiod names a ServiceEntry's services by their
    # hosts), then namespace; ServiceEntries created in the same second for one host are told
    # apart by namespace, not by their own names
    name = svc.name if svc.registry is Registry.KUBERNETES else svc.hostname
    return (svc.creation_timestamp, name, svc.namespace, svc.hostname)


@dataclass(frozen=True, slots=True)
class ServiceIndex:
    by_hostname: Mapping[str, Mapping[str, Service]]  # hostname -> namespace -> service
    private_by_namespace: Mapping[str, tuple[Service, ...]]
    exported_to_namespace: Mapping[str, tuple[Service, ...]]
    public: tuple[Service, ...]
    default_export_to: frozenset[str]

    @classmethod
    def build(cls, services: Iterable[Service], default_export_to: frozenset[str]) -> ServiceIndex:
        by_hostname: dict[str, dict[str, Service]] = {}
        for svc in sorted(services, key=_order):
            existing = by_hostname.get(svc.hostname, {}).get(svc.namespace)
            # the oldest wins, but a Kubernetes Service beats a ServiceEntry for the same name
            kube_over_entry = existing is not None and (
                existing.registry is not Registry.KUBERNETES and svc.registry is Registry.KUBERNETES
            )
            if existing is None or kube_over_entry:
                by_hostname.setdefault(svc.hostname, {})[svc.namespace] = svc
        private: dict[str, list[Service]] = {}
        exported: dict[str, list[Service]] = {}
        public: list[Service] = []
        winners = sorted((s for byns in by_hostname.values() for s in byns.values()), key=_order)
        for svc in winners:
            export_to = svc.export_to or default_export_to
            if PUBLIC in export_to:
                public.append(svc)
                continue
            if NONE in export_to:
                continue
            targets = {svc.namespace if e == PRIVATE else e for e in export_to}
            for target in sorted(targets):
                if target == svc.namespace:
                    private.setdefault(target, []).append(svc)
                else:
                    exported.setdefault(target, []).append(svc)
        return cls(
            {h: dict(v) for h, v in by_hostname.items()},
            {k: tuple(v) for k, v in private.items()},
            {k: tuple(v) for k, v in exported.items()},
            tuple(public),
            default_export_to,
        )

    def exported_to(self, namespace: str) -> list[Service]:
        """Every service visible from ``namespace``: private, then exported to it, then public."""
        return [
            *self.private_by_namespace.get(namespace, ()),
            *self.exported_to_namespace.get(namespace, ()),
            *self.public,
        ]

    def is_visible(self, svc: Service, namespace: str) -> bool:
        export_to = svc.export_to or self.default_export_to
        if PUBLIC in export_to:
            return True
        if NONE in export_to:
            return False
        return namespace in export_to or (PRIVATE in export_to and svc.namespace == namespace)

    def service(self, hostname: str, namespace: str) -> Service | None:
        return self.by_hostname.get(hostname, {}).get(namespace)
