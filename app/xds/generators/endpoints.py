"""EDS (istiod EdsGenerator): ClusterLoadAssignments by cluster name, built once per class and
snapshot, each a ``ResourceCache`` entry keyed by what it reads (the narrowed proxy locality
load balancing reads, the service, port, rule, mesh config and endpoints). A push that names
only hosts answers with the assignments of the watched clusters of those hosts."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from google.protobuf.message import Message

from app.config.objects import Kind
from app.model.ident import Ident
from app.model.proxy import Proxy
from app.model.push_context import PushContext
from app.model.sidecar_scope import SidecarScope
from app.translate.cluster.builder import parse_cluster_name
from app.translate.endpoint.for_proxy import build_assignment, resolve_assignment
from app.xds.cache import ResourceCache
from app.xds.generators.base import shared_named
from app.xds.generators.clusters import ClusterGenerator
from app.xds.generators.keys import rule_key, service_deps
from app.xds.generators.state import ProxyClass, SnapshotState
from app.xds.generators.traits import proxy_key
from app.xds.push_request import PushRequest
from app.xds.resource import Resource, encode, encode_serialized, field_bytes
from app.xds.source import Partial
from app.xds.type_urls import ENDPOINT
from app.xds.watch import WatchedResource

# kinds that never change which service or DestinationRule a hostname resolves to in a scope
# (a DNS name change comes with its endpoints, named in ``endpoint_services``)
# (a PeerAuthentication changes clusters' TLS, not assignments; their re-sent clusters bring
# their assignments along anyway)
_ROUTING_KINDS = frozenset({Kind.VIRTUAL_SERVICE, Kind.GATEWAY, Kind.DNS_NAME, Kind.PEER_AUTHENTICATION})


@dataclass(slots=True)
class ClassAssignments:
    """A class's assignments in one snapshot, by cluster name."""

    by_name: dict[str, Resource] = field(default_factory=dict)


@dataclass(slots=True)
class _Unnamed:
    """A class's assignments in one snapshot without their cluster name, serialized, by what
    they are built from but the name: the hosts of one ServiceEntry share its endpoints, and
    their assignments differ only in the name (256 hosts of 4,096 endpoints were 1M endpoints
    built on the event loop, 16 s; built once, each name is a prefix to the same bytes)."""

    by_inputs: dict[Hashable, bytes] = field(default_factory=dict)


@dataclass(slots=True)
class _ClassChanges:
    """A class's partial answers to the latest push request, by the previous scope and the
    watched names: the streams of a class watch the same (shared) name set, so an endpoint
    added to a service is worked out once per class, not once per proxy."""

    request: PushRequest | None = None
    found: dict[Hashable, Partial] = field(default_factory=dict)


@dataclass(slots=True)
class _ChangedHosts:
    """Per snapshot: ``changed_hosts`` per request and pair of scopes."""

    found: dict[Hashable, set[str] | None] = field(default_factory=dict)


def changed_hosts(request: PushRequest, scopes: Iterable[SidecarScope | None]) -> set[str] | None:
    """The hostnames whose service, applied DestinationRule or endpoints the request may have
    changed, looked up in the scope before and after; None when some change is not about
    hosts (a Sidecar, mesh config, a namespace: any assignment may differ)."""
    hosts = {host for host, _ in request.endpoint_services}
    rules = set()
    for key in request.configs_updated:
        if key.kind is Kind.SERVICE:
            hosts.add(key.name)
        elif key.kind is Kind.DESTINATION_RULE:
            rules.add(key)
        elif key.kind not in _ROUTING_KINDS:
            return None
    if rules:
        for scope in scopes:
            if scope is None:
                continue
            for host, found in scope.destination_rules.items():
                if any(obj.key in rules for cdr in found for obj in cdr.objects):
                    hosts.add(host)
    return hosts


class EndpointGenerator:
    def __init__(self, cache: ResourceCache, clusters: ClusterGenerator) -> None:
        self.cache = cache
        self.clusters = clusters  # a wildcard watch asks for the EDS names of the proxy's clusters

    def generate(self, state: SnapshotState, proxy: Proxy, watch: WatchedResource) -> list[Resource] | None:
        names = sorted(watch.names) if not watch.wildcard else self.clusters.eds_names(state, proxy)
        return self.assignments(state, proxy, names)

    def changes(
        self,
        state: SnapshotState,
        proxy: Proxy,
        watch: WatchedResource,
        request: PushRequest,
        previous: SidecarScope | None,
        also: Collection[str],
    ) -> Partial | None:
        """The assignments of the watched clusters whose service, DestinationRule or endpoints
        the request names (an assignment reads nothing else), and of ``also``; when the request
        is not about hosts alone, of every watched cluster the proxy still has."""
        if watch.wildcard:
            return None
        cls = state.proxy_class(proxy)
        if also or not isinstance(watch.names, frozenset):
            return self._changes(state, proxy, cls.scope, watch.names, request, previous, also)
        memo = cls.part(_ClassChanges, _ClassChanges)
        if memo.request is not request:
            memo.request, memo.found = request, {}
        key = (None if previous is None else Ident(previous), watch.names)
        found = memo.found.get(key)
        if found is None:
            found = memo.found[key] = self._changes(state, proxy, cls.scope, watch.names, request, previous, also)
        return found

    def _changes(
        self,
        state: SnapshotState,
        proxy: Proxy,
        scope: SidecarScope,
        watched: AbstractSet[str],
        request: PushRequest,
        previous: SidecarScope | None,
        also: Collection[str],
    ) -> Partial:
        key = (Ident(request), Ident(scope), None if previous is None else Ident(previous))
        memo = state.part(_ChangedHosts, _ChangedHosts).found
        if key not in memo:
            memo[key] = changed_hosts(request, (scope, previous))
        hosts = memo[key]
        names = {n for n in also if n in watched}
        if hosts is None:
            # any assignment may differ: those of the clusters the proxy has now. A watched name
            # whose cluster left the scope is not answered (istiod skips EDS on a Sidecar
            # change): its CDS removal makes Envoy drop the assignment and unsubscribe.
            names.update(self.clusters.eds_set(state, proxy).intersection(watched))
        else:
            eds_by_host = self.clusters.class_clusters(state, proxy).eds_by_host
            names.update(n for h in hosts for n in eds_by_host.get(h, ()) if n in watched)
        ordered = sorted(names)
        return Partial(self.assignments(state, proxy, ordered), frozenset(ordered))

    def assignments(self, state: SnapshotState, proxy: Proxy, names: Iterable[str]) -> list[Resource]:
        push = state.push
        cls = state.proxy_class(proxy)
        scope = cls.scope

        def own(name: str) -> Message:
            target = resolve_assignment(name, proxy, scope)
            eps = push.endpoints(target.service.hostname, target.service.namespace) if target else ()
            built: Message = build_assignment(name, proxy, push.mesh, target, eps)
            return built

        memo = cls.part(ClassAssignments, ClassAssignments).by_name
        return shared_named(
            memo, names, lambda name: self._assignment(cls, push, name), own if self.cache.verify else None
        )

    def _assignment(self, cls: ProxyClass, push: PushContext, name: str) -> tuple[Resource, bool]:
        """The assignment, and whether the class keeps it: not one for a name that resolves to
        no cluster of the scope (empty, and the client's to make up)."""
        scope, traits = cls.scope, cls.traits
        target = resolve_assignment(name, traits.scope_proxy, scope)
        mesh = push.mesh
        if target is None:
            return encode(name, build_assignment(name, traits.outbound, mesh, None, ())), False
        endpoints = push.endpoints(target.service.hostname, target.service.namespace)
        narrowed = traits.located
        key = (
            "assignment",
            name,
            proxy_key(narrowed),
            Ident(target.service),
            target.port,
            rule_key(target.rule),
            Ident(mesh),
            Ident(endpoints),
        )
        service = target.service
        deps = service_deps(scope, service)
        unnamed = cls.part(_Unnamed, _Unnamed).by_inputs

        def build() -> Resource:
            # what the assignment reads but its name: the name's subset and SNI-DNAT prefix, what
            # it reads of the service (its namespace, an endpoint's default; its persistent-session
            # opt-in, resolution and traffic distribution; of its ports the target's, in ``key``),
            # and the rest of ``key``; checked against a plain build in assertion mode. Not the
            # whole port list: hashing it for each of a service's clusters grew with the square
            # of its ports
            parsed = parse_cluster_name(name)
            inputs = (key[2], service.namespace, service.supports_draining_endpoints, service.resolution,
                      service.traffic_distribution, parsed.subset, parsed.sni_dnat, *key[4:])  # fmt: skip
            found = unnamed.get(inputs)
            if found is None:
                built = build_assignment(name, narrowed, mesh, target, endpoints)
                built.ClearField("cluster_name")
                found = unnamed[inputs] = built.SerializeToString(deterministic=True)
            # cluster_name is field 1: deterministic serialization writes it first
            return encode_serialized(name, ENDPOINT, field_bytes(1, name.encode()) + found)

        return self.cache.get(key, build, deps), True
