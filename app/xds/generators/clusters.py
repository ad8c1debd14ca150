"""CDS (istiod CdsGenerator): a class's outbound clusters, shared, and what each proxy's own
workload and type add.

Every outbound cluster set of a service is a ``ResourceCache`` entry keyed by exactly what its
builder reads: a narrowed proxy (``traits.py``), the Service and its endpoints by identity, the
DestinationRule the class applies by the objects merged into it, the mesh config and the
namespace's mTLS mode. A class's set is patched from its parent's in the snapshot just replaced
(only services whose object, rules or endpoints differ are rebuilt). A stream's note
(``WatchedResource.synced``) says what it was last brought to, so a push sends the difference
to the class's current set instead of diffing every resource.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from envoy.config.cluster.v3 import cluster_pb2

from app.model.envoy_filter import ApplyTo, MergedPatches, PatchContext
from app.model.ident import Ident
from app.model.proxy import Proxy, ProxyType
from app.model.push_context import PushContext
from app.model.service import Service
from app.model.sidecar_ingress import sidecar_ingress
from app.model.sidecar_scope import SidecarScope
from app.translate.cluster.builder import parse_cluster_name
from app.translate.cluster.for_proxy import ingress_stand_in, proxy_clusters, service_clusters
from app.translate.endpoint.for_proxy import eds_cluster_names
from app.translate.envoy_filter.clusters import inserted_clusters, patch_cluster
from app.translate.view import proxy_service_targets
from app.xds.cache import CacheAssertionError, ResourceCache
from app.xds.generators.base import check, class_difference
from app.xds.generators.envoy_filters import PatchMemo, encoded, patch_all
from app.xds.generators.keys import rule_key, service_deps, sidecar_inbound
from app.xds.generators.state import ProxyClass, SnapshotState
from app.xds.generators.traits import Traits, proxy_key
from app.xds.push_request import PushRequest
from app.xds.resource import Resource, encode
from app.xds.source import Partial
from app.xds.watch import WatchedResource


@dataclass(frozen=True, slots=True)
class _ServiceClusters:
    """A service's outbound clusters, encoded, and the EDS names Envoy asks for them by."""

    resources: tuple[Resource, ...]
    eds_names: tuple[str, ...]


@dataclass(slots=True)
class ClassClusters:
    """A class's outbound clusters in one snapshot, and their names and EDS names by service."""

    clusters: dict[str, Resource] | None = None  # sorted by name
    names_by_host: dict[str, tuple[str, ...]] = field(default_factory=dict)
    eds_by_host: dict[str, tuple[str, ...]] = field(default_factory=dict)
    eds_names: frozenset[str] | None = None  # all of eds_by_host's, once asked for


@dataclass(slots=True)
class _PatchedClusters:
    """A class's outbound clusters with its EnvoyFilter CLUSTER patches applied, by name (sorted)."""

    clusters: dict[str, Resource] | None = None


@dataclass(frozen=True, slots=True)
class _OwnClusters:
    """The clusters a proxy's own workload and type add, and what they were built from (the
    proxy, the mesh config, its service targets and the rules applied to them, by identity);
    its stream keeps them and reuses them while the key holds."""

    key: object
    resources: tuple[Resource, ...]


@dataclass(frozen=True, slots=True)
class _Synced:
    """A stream's note: the class set and own clusters the client was last brought to."""

    shared: Mapping[str, Resource]
    own: frozenset[str]  # the names of the own clusters sent (those the shared set lacks)
    built: _OwnClusters


def _own_key(proxy: Proxy, push: PushContext, scope: SidecarScope) -> object:
    """What ``proxy_clusters`` reads: the proxy, the mesh config, the feature flags, its
    service targets and the DestinationRule each target service applies inbound, by identity;
    the proxy's Sidecar's ingress entries and inbound pools, by value, and the rule of their
    stand-in service. Compared, never hashed."""
    targets = proxy_service_targets(proxy, push)
    services = {Ident(service): service for service, _, _ in targets}
    rules = [scope.inbound_destination_rule(service) for service in services.values()]
    ingress = sidecar_ingress(scope.name, scope.namespace, scope.sidecar, proxy, push.features)
    if ingress is not None:
        rules.append(scope.inbound_destination_rule(ingress_stand_in(ingress)))
    return (
        Ident(proxy),
        Ident(push.mesh),
        Ident(push.features),
        sidecar_inbound(scope),
        tuple((Ident(service), Ident(port), Ident(endpoint)) for service, port, endpoint in targets),
        tuple(map(rule_key, rules)),
    )


def _outbound_context(proxy: Proxy) -> int:
    return PatchContext.GATEWAY if proxy.type is ProxyType.ROUTER else PatchContext.SIDECAR_OUTBOUND


def _same_items(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


_by_name = operator.attrgetter("name")


def eds_names(clusters: Iterable[Resource]) -> list[str]:
    """The EDS names (service name, else the cluster's own) of the EDS clusters among these."""
    out = []
    for r in clusters:
        c = cluster_pb2.Cluster.FromString(r.body.value)
        if c.type == cluster_pb2.Cluster.EDS:
            out.append(c.eds_cluster_config.service_name or c.name)
    return out


class ClusterGenerator:
    def __init__(self, cache: ResourceCache) -> None:
        self.cache = cache
        self.patched = PatchMemo()

    def generate(self, state: SnapshotState, proxy: Proxy, watch: WatchedResource) -> list[Resource] | None:
        synced = watch.synced
        shared, own, built = self.parts(state, proxy, synced.built if isinstance(synced, _Synced) else None)
        watch.synced = _Synced(shared, frozenset(r.name for r in own), built)
        # two sorted runs: the sort merges them in linear time
        merged = sorted((*shared.values(), *own), key=_by_name)
        return [r for r in merged if watch.wants(r.name)]

    def changes(
        self,
        state: SnapshotState,
        proxy: Proxy,
        watch: WatchedResource,
        request: PushRequest,
        previous: SidecarScope | None,
        also: Collection[str],
    ) -> Partial | None:
        """The class set's difference to what the client was last brought to, and the proxy's
        own clusters in full (a handful)."""
        synced = watch.synced
        if not isinstance(synced, _Synced) or not watch.wildcard:
            return None
        shared, own, built = self.parts(state, proxy, synced.built)
        changed, removed = class_difference(state, synced.shared, shared)
        own_names = frozenset(r.name for r in own)
        watch.synced = _Synced(shared, own_names, built)
        considered = frozenset((*(r.name for r in changed), *removed, *own_names, *synced.own))
        return Partial([*changed, *own], considered)

    def parts(
        self, state: SnapshotState, proxy: Proxy, previous: _OwnClusters | None = None
    ) -> tuple[Mapping[str, Resource], list[Resource], _OwnClusters]:
        """The class's outbound clusters (by name, sorted), what the proxy's own workload and
        type add (names the class has are left out: a name built twice keeps the first), and
        the own clusters built (``previous`` when its key still holds)."""
        push = state.push
        found = self.class_clusters(state, proxy)
        shared: Mapping[str, Resource] | None = found.clusters
        assert shared is not None
        scope = state.proxy_class(proxy).scope
        key = _own_key(proxy, push, scope)
        if previous is not None and previous.key == key:
            built = previous
            if self.cache.verify:
                check("the proxy's own clusters", built.resources, proxy_clusters(proxy, push, scope))
        else:
            built = _OwnClusters(key, tuple(encode(c.name, c) for c in proxy_clusters(proxy, push, scope)))
        own = [r for r in built.resources if r.name not in shared]
        patches = state.proxy_class(proxy).patches
        if patches is not None and patches.of(ApplyTo.CLUSTER):
            shared = self._patched_class(state, proxy, patches)
            own = self._patched_own(state, proxy, patches, own)
        return shared, own, built

    def _patched_class(self, state: SnapshotState, proxy: Proxy, patches: MergedPatches) -> Mapping[str, Resource]:
        """The class's outbound clusters patched in the outbound (gateway) context, and the
        clusters that context's patches add (istiod buildOutboundClusters, insertedClusters)."""
        cls = state.proxy_class(proxy)
        found = cls.part(_PatchedClusters, _PatchedClusters)
        if found.clusters is None:
            context = _outbound_context(proxy)
            clusters = self.class_clusters(state, proxy).clusters
            assert clusters is not None
            patch = functools.partial(patch_cluster, context, patches)
            kept = patch_all(self.patched, patches, context, clusters.values(), cluster_pb2.Cluster.FromString, patch)
            by_name = {r.name: r for r in kept}
            for r in encoded(inserted_clusters(context, patches)):
                by_name.setdefault(r.name, r)
            found.clusters = {name: by_name[name] for name in sorted(by_name)}
        return found.clusters

    def _patched_own(
        self, state: SnapshotState, proxy: Proxy, patches: MergedPatches, own: Sequence[Resource]
    ) -> list[Resource]:
        """The proxy's own clusters patched: the black hole and passthrough ones in the outbound
        (gateway) context, the inbound ones in the inbound context with their services' hosts,
        and the clusters the inbound context's patches add (istiod buildClusters)."""
        outbound = _outbound_context(proxy)
        hosts: dict[int, tuple[str, ...]] = {}
        for service, _, endpoint in proxy_service_targets(proxy, state.push):
            hosts.setdefault(endpoint.port, ())
            hosts[endpoint.port] += (service.hostname,)
        out = []
        for r in own:
            inbound = r.name.startswith(("inbound|", "InboundPassthroughCluster"))
            context = PatchContext.SIDECAR_INBOUND if inbound else outbound
            port_hosts = hosts.get(parse_cluster_name(r.name).port, ()) if r.name.startswith("inbound|") else ()
            patch = functools.partial(patch_cluster, context, patches, hosts=port_hosts)
            found = self.patched.patched(patches, context, r, cluster_pb2.Cluster.FromString, patch, port_hosts)
            if found is not None:
                out.append(found)
        if proxy.type is ProxyType.SIDECAR:
            out.extend(encoded(inserted_clusters(PatchContext.SIDECAR_INBOUND, patches)))
        return out

    def class_clusters(self, state: SnapshotState, proxy: Proxy) -> ClassClusters:
        """The proxy's class's outbound clusters (their EDS names filled too)."""
        push = state.push
        cls = state.proxy_class(proxy)
        sets = cls.part(ClassClusters, ClassClusters)
        if sets.clusters is None:
            parent = state.parents.get(cls.lineage)
            parent_sets = None if parent is None else parent.parts.get(ClassClusters)
            if (
                parent is None
                or not isinstance(parent_sets, ClassClusters)
                or parent_sets.clusters is None
                or parent.mesh is not push.mesh
            ):
                self._fill(sets, cls, push, cls.scope.services, {})
            else:
                self._patch(state, sets, parent.scope, parent_sets, cls, push)
        if self.cache.verify:
            self._verify(sets, cls.scope, proxy, push)
        return sets

    def _verify(self, sets: ClassClusters, scope: SidecarScope, proxy: Proxy, push: PushContext) -> None:
        # every serve, the first of a class too: its entries may come from other classes
        clusters = sets.clusters
        assert clusters is not None
        for service in scope.services:
            rule = scope.destination_rule(proxy, service)
            eps = push.endpoints(service.hostname, service.namespace)
            mode = push.peer_authentications.namespace_mode(service.namespace)
            own = service_clusters(proxy, push.mesh, service, rule, eps, mode)
            check(f"clusters of {service.hostname}", [clusters[c.name] for c in own], own)
            if tuple(eds_cluster_names(own)) != sets.eds_by_host.get(service.hostname, ()):
                raise CacheAssertionError(f"EDS names of {service.hostname} differ from the shared ones")

    def _fill(
        self,
        sets: ClassClusters,
        cls: ProxyClass,
        push: PushContext,
        services: Iterable[Service],
        outbound: dict[str, Resource],
    ) -> None:
        """Add the clusters of ``services`` to ``outbound`` and make it the class's set, sorted."""
        for service in services:
            built = self._service_clusters(cls.traits, push, cls.scope, service)
            for r in built.resources:
                outbound.setdefault(r.name, r)
            sets.names_by_host[service.hostname] = tuple(r.name for r in built.resources)
            if built.eds_names:
                sets.eds_by_host[service.hostname] = built.eds_names
        sets.clusters = {name: outbound[name] for name in sorted(outbound)}

    def _patch(
        self,
        state: SnapshotState,
        sets: ClassClusters,
        old: SidecarScope,
        parent: ClassClusters,
        cls: ProxyClass,
        push: PushContext,
    ) -> None:
        """The class's clusters from its parent's in the snapshot just replaced: the services
        whose object, applied DestinationRules or endpoints differ are rebuilt, the rest kept
        (a cluster reads nothing else; the traits and mesh are the same by the lineage)."""
        request = state.parent_request
        assert parent.clusters is not None and request is not None
        new = cls.scope
        hosts = {host for host, _ in request.endpoint_services}
        if old is not new:
            old_services, new_services = old.services_by_host, new.services_by_host
            hosts.update(h for h, svc in new_services.items() if old_services.get(h) is not svc)
            hosts.update(h for h in old_services if h not in new_services)
            old_rules, new_rules = old.destination_rules, new.destination_rules
            hosts.update(h for h, found in new_rules.items() if not _same_items(old_rules.get(h, ()), found))
            hosts.update(h for h in old_rules if h not in new_rules)
        outbound = dict(parent.clusters)
        sets.names_by_host = dict(parent.names_by_host)
        sets.eds_by_host = dict(parent.eds_by_host)
        for host in hosts:
            for name in sets.names_by_host.pop(host, ()):
                outbound.pop(name, None)
            sets.eds_by_host.pop(host, None)
        changed = [svc for h in hosts if (svc := new.services_by_host.get(h)) is not None]
        self._fill(sets, cls, push, changed, outbound)

    def _service_clusters(
        self, traits: Traits, push: PushContext, scope: SidecarScope, service: Service
    ) -> _ServiceClusters:
        rule = scope.destination_rule(traits.scope_proxy, service)
        endpoints = push.endpoints(service.hostname, service.namespace)
        dns = service.resolution.name.startswith("DNS")
        narrowed = traits.located if dns else traits.outbound
        mesh = push.mesh
        mode = push.peer_authentications.namespace_mode(service.namespace)
        key = ("clusters", proxy_key(narrowed), Ident(service), rule_key(rule), Ident(mesh), Ident(endpoints), mode)
        deps = service_deps(scope, service)

        def build() -> _ServiceClusters:
            built = service_clusters(narrowed, mesh, service, rule, endpoints, mode)
            return _ServiceClusters(tuple(encode(c.name, c) for c in built), tuple(eds_cluster_names(built)))

        return self.cache.get(key, build, deps)

    def eds_names(self, state: SnapshotState, proxy: Proxy) -> list[str]:
        """A wildcard EDS watch: the EDS names of every cluster the proxy gets."""
        return sorted(self.eds_set(state, proxy))

    def eds_set(self, state: SnapshotState, proxy: Proxy) -> frozenset[str]:
        """The EDS names of the proxy's clusters: its class's, a set made once per class and
        snapshot. The proxy's own clusters have none (inbound clusters are STATIC or
        ORIGINAL_DST, the black hole STATIC, the passthroughs ORIGINAL_DST): the assertion mode
        checks it, since building them here would cost every push a rebuild per proxy."""
        self.class_clusters(state, proxy)
        sets = state.proxy_class(proxy).part(ClassClusters, ClassClusters)
        if sets.eds_names is None:
            sets.eds_names = frozenset(n for found in sets.eds_by_host.values() for n in found)
        if self.cache.verify:
            _, own, _ = self.parts(state, proxy)
            if eds_names(own):
                raise CacheAssertionError(f"{proxy.id}: own EDS clusters {eds_names(own)}")
        return sets.eds_names
