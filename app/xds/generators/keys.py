"""Cache key parts and invalidation dependencies that several generators name alike."""

from __future__ import annotations

from collections.abc import Hashable

from app.config.objects import ConfigKey, Kind
from app.model.destination_rule import ConsolidatedDestinationRule
from app.model.ident import Ident, Idents
from app.model.service import Service
from app.model.sidecar_scope import SidecarScope
from app.translate.cluster.builder import AppliedDestinationRule
from app.xds.cache import Dep


def sidecar_inbound(scope: SidecarScope) -> object:
    """What a proxy's own inbound clusters read of its Sidecar, as a value (compared, never
    hashed): the ingress entries with the scope's name and namespace that name them, and the
    inbound connection pool. A Sidecar without either reads as none, so one that only narrows
    egress leaves every proxy's own clusters as they were."""
    sidecar = scope.sidecar
    if sidecar is None:
        return None
    pool = sidecar.inbound_connection_pool if sidecar.HasField("inbound_connection_pool") else None
    if not sidecar.ingress and pool is None:
        return None
    return (scope.name, scope.namespace, tuple(sidecar.ingress), pool)


def endpoints_dep(service: Service) -> Dep:
    return ("endpoints", service.hostname, service.namespace)


def rule_key(rule: AppliedDestinationRule | None) -> Hashable:
    """A DestinationRule as a key part: the objects merged into it, in order (what its spec,
    name and namespace are made from; istiod keys by the rule's sources too). The namespace that
    owns a rule and the namespaces it is exported to hold separate, equal consolidations of the
    same objects; keyed so, they share one entry."""
    if rule is None:
        return None
    if not isinstance(rule, ConsolidatedDestinationRule) or not rule.objects:
        return Ident(rule)
    return Idents(rule.objects)


def rule_deps(scope: SidecarScope, hostname: str) -> list[Dep]:
    """The DestinationRules a scope holds for a host (every candidate: any may be applied)."""
    return [key for cdr in scope.destination_rules.get(hostname, ()) for key in cdr.object_keys]


def service_deps(scope: SidecarScope, service: Service) -> list[Dep]:
    """What a service's outbound clusters and assignments are built from, as their cache
    entries record it: the Service, its endpoint shard and the scope's rules for its host (each
    the group of the objects merged into it)."""
    deps: list[Dep] = [ConfigKey(Kind.SERVICE, service.namespace, service.hostname), endpoints_dep(service)]
    deps.extend(cdr.object_keys for cdr in scope.destination_rules.get(service.hostname, ()))
    return deps
