"""The resource source: (type, proxy, what it watches, the push) -> encoded resources, built once
and shared (DESIGN §1 "Push cost model"; go-control-plane's ConfigWatcher plays this role).

The transport (``Connection``, the servers) asks an injected ``ResourceSource`` and knows
nothing of PushContext. ``XdsGenerator`` answers from two layers of sharing:

* the ``ResourceCache`` (across pushes and proxies): every outbound cluster set of a service and
  every ClusterLoadAssignment, keyed by exactly what its builder reads. The builder gets a
  *narrowed* Proxy made from the key's traits only (proxy type, IP family; locality, labels,
  cluster and network only where locality load balancing reads them), so the key cannot miss a
  proxy input; the Service and the endpoints are named by identity, the DestinationRule the
  proxy applies by the objects merged into it (so its own namespace and those it is exported to
  share the entry, as istiod's key by the rule's sources does).
* a per-snapshot class memo: proxies with the same SidecarScope and the same traits get the
  same CDS/EDS/LDS/RDS sets, assembled once per PushContext version. Labels are a trait only
  for scopes whose config reads them (workloadSelector DestinationRules, sourceLabels); the
  first IP only for a proxy at an address the scope's headless-service listeners bind (it gets
  no listener for itself).

Assertion mode compares what every proxy is served, the first of its class too, with what the
plain generators build for that very proxy.

What depends on the proxy's own workload (inbound clusters, ``virtualInbound``, a gateway's
listeners and routes) is built per proxy. Generators stay synchronous and pure.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from envoy.config.cluster.v3 import cluster_pb2
from google.protobuf.message import Message

from app.api.networking import DestinationRule
from app.config.mesh import MeshConfig
from app.config.model import EMPTY_LABELS, ConfigKey, Kind
from app.model.destination_rule import ConsolidatedDestinationRule
from app.model.proxy import Proxy, ProxyType
from app.model.push_context import PushContext
from app.model.service import Protocol as PortProtocol
from app.model.service import Service
from app.model.sidecar_scope import SidecarScope
from app.xds.cache import CacheAssertionError, Dep, Ident, ResourceCache
from app.xds.envoy.cluster import AppliedDestinationRule
from app.xds.envoy.listener_tcp import TCP_PROTOCOLS
from app.xds.envoy.route_policy import load_balancer_view
from app.xds.envoy.tracing import TRACING_LABELS
from app.xds.generators.cds import proxy_clusters, service_clusters
from app.xds.generators.eds import build_assignment, eds_cluster_names, resolve_assignment
from app.xds.generators.lds import scope_listener_plan, scope_listeners, workload_listeners
from app.xds.generators.nds import build_name_table, uses_allocated_addresses
from app.xds.generators.rds import generate_routes, sidecar_route_key
from app.xds.generators.sds import generate_secrets
from app.xds.generators.view import proxy_service_targets
from app.xds.push_request import PushRequest
from app.xds.resource import Resource, encode
from app.xds.source import Partial
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, NAME_TABLE, ROUTE, SECRET
from app.xds.watch import WatchedResource

M = TypeVar("M", bound=Message)


def _family_ips(ips: Sequence[str]) -> tuple[str, ...]:
    """One placeholder address per IP family the proxy has: all that outbound config reads."""
    v4 = any(":" not in ip for ip in ips)
    v6 = any(":" in ip for ip in ips)
    return (*(("0.0.0.0",) if v4 else ()), *(("::",) if v6 else ()))


def _scope_ips(ips: Sequence[str], own_read: bool) -> tuple[str, ...]:
    """What scope-wide config reads of the proxy's IPs: the families, and the first IP itself
    when it is one that the scope's outbound listeners bind (``_listener_addresses``)."""
    families = _family_ips(ips)
    if not own_read or not ips:
        return families
    own = ips[0]
    return (own, *(p for p in families if (":" in p) != (":" in own)))


def _listener_addresses(scope: SidecarScope, push: PushContext) -> frozenset[str]:
    """The endpoint addresses the scope's outbound listeners may bind one listener each to (the
    TCP and sniffed ports of headless services). A proxy at one of them gets no listener for
    itself (istiod listener.go skips ``node.IPAddresses[0]``), so its first IP is then a trait
    of its class; other proxies share the set built without it."""
    out: set[str] = set()
    for svc in scope.headless_services:
        ports = {p.name for p in svc.ports if p.protocol in TCP_PROTOCOLS or p.protocol is PortProtocol.UNSUPPORTED}
        if ports:
            eps = push.endpoints(svc.hostname, svc.namespace)
            out.update(ep.address for ep in eps if ep.service_port_name in ports)
    return frozenset(out)


def _labels_read(scope: SidecarScope, mesh: MeshConfig) -> bool:
    """Whether config in this scope reads the proxy's labels: the scope's own rules and
    VirtualServices (``SidecarScope.reads_labels``) or mesh-wide locality failoverPriority."""
    return scope.reads_labels or bool(len(mesh.locality_lb_setting.failover_priority))


def _proxy_key(p: Proxy) -> tuple[Hashable, ...]:
    """Every field of a (narrowed) proxy, hashable."""
    return (
        p.type,
        p.id,
        p.ip_addresses,
        p.namespace,
        p.dns_domain,
        tuple(sorted(p.labels.items())),
        p.cluster_id,
        p.mesh_id,
        p.network,
        p.istio_version,
        p.interception_mode,
        p.locality,
    )


@dataclass(frozen=True, slots=True)
class _Traits:
    """The narrowed proxies the class memo and the cache build with."""

    scope_proxy: Proxy  # what scope-wide config (outbound listeners, routes) reads
    outbound: Proxy  # what an EDS-type outbound cluster reads
    located: Proxy  # what locality load balancing reads (DNS clusters, assignments)


def _traits(proxy: Proxy, labels_read: bool, own_ip_read: bool = False) -> _Traits:
    labels = proxy.labels if labels_read else EMPTY_LABELS
    outbound = Proxy(
        type=proxy.type, id="", ip_addresses=_family_ips(proxy.ip_addresses), namespace="", dns_domain="", cluster_id=""
    )
    located = replace(
        outbound,
        labels=labels,
        cluster_id=proxy.cluster_id,
        network=proxy.network,
        locality=proxy.locality,
    )
    # every HTTP connection manager's tracing tags name the proxy's canonical service and mesh
    tracing_labels = {k: proxy.labels[k] for k in TRACING_LABELS if k in proxy.labels}
    scope_proxy = replace(
        outbound,
        ip_addresses=_scope_ips(proxy.ip_addresses, own_ip_read),
        namespace=proxy.namespace,
        dns_domain=proxy.dns_domain,
        labels=labels if labels_read else tracing_labels,
        cluster_id=proxy.cluster_id,
        mesh_id=proxy.mesh_id,
        network=proxy.network,
        interception_mode=proxy.interception_mode,
    )  # no ISTIO_VERSION: only virtualInbound reads it, built per proxy
    return _Traits(scope_proxy, outbound, located)


def _class_traits(traits: _Traits) -> tuple[Hashable, Hashable]:
    return _proxy_key(traits.scope_proxy), _proxy_key(traits.located)


def _lineage(scope: SidecarScope, traits: _Traits) -> Hashable:
    """A class across snapshots: its scope's name and namespace (the scope object is replaced
    when what it holds changes) and its traits."""
    return (scope.name, scope.namespace, *_class_traits(traits))


def _same_items(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _own_key(proxy: Proxy, push: PushContext, scope: SidecarScope) -> Hashable:
    """What ``proxy_clusters`` reads: the proxy, the mesh config, the feature flags, the
    proxy's Sidecar (its ingress entries and inbound pools), its service targets and the
    DestinationRule each target service applies inbound, all by identity."""
    targets = proxy_service_targets(proxy, push)
    services = {Ident(service): service for service, _, _ in targets}
    return (
        Ident(proxy),
        Ident(push.mesh),
        Ident(push.features),
        Ident(scope.sidecar),
        tuple((Ident(service), Ident(port), Ident(endpoint)) for service, port, endpoint in targets),
        tuple(_rule_key(scope.inbound_destination_rule(service)) for service in services.values()),
    )


def _endpoints_dep(service: Service) -> Dep:
    return ("endpoints", service.hostname, service.namespace)


def _rule_key(rule: AppliedDestinationRule | None) -> Hashable:
    """A DestinationRule as a key part: the objects merged into it, in order (what its spec,
    name and namespace are made from; istiod keys by the rule's sources too). The namespace that
    owns a rule and the namespaces it is exported to hold separate, equal consolidations of the
    same objects; keyed so, they share one entry."""
    if rule is None:
        return None
    if not isinstance(rule, ConsolidatedDestinationRule) or not rule.objects:
        return Ident(rule)
    return tuple(Ident(obj) for obj in rule.objects)


def _rule_deps(scope: SidecarScope, hostname: str) -> list[Dep]:
    """The DestinationRules a scope holds for a host (every candidate: any may be applied)."""
    return [obj.key for cdr in scope.destination_rules.get(hostname, ()) for obj in cdr.objects]


@dataclass(frozen=True, slots=True)
class _ServiceClusters:
    """A service's outbound clusters, encoded, and the EDS names Envoy asks for them by."""

    resources: tuple[Resource, ...]
    eds_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _OwnClusters:
    """The clusters a proxy's own workload and type add, and what they were built from (the
    proxy, the mesh config, its service targets and the rules applied to them, by identity);
    its stream keeps them and reuses them while the key holds."""

    key: Hashable
    resources: tuple[Resource, ...]


@dataclass(frozen=True, slots=True)
class _Synced:
    """What the client was last brought to for a type made of a class-shared set and the
    proxy's own resources (kept in ``WatchedResource.synced``): the next push sends the
    difference to the class's current set instead of diffing every resource."""

    shared: Mapping[str, Resource]
    own: frozenset[str]  # the names of the own clusters sent (those the shared set lacks)
    built: _OwnClusters


@dataclass(frozen=True, slots=True)
class _Reusable:
    """A class's route configurations and listeners from an earlier snapshot, by what each was
    built from: equal inputs build equal bytes, so any earlier snapshot's serve (inputs are
    named by identity, and the entries hold them alive)."""

    routes: Mapping[str, tuple[Hashable, Resource]]
    listeners: Mapping[Hashable, Resource]


_NOTHING_REUSABLE = _Reusable({}, {})


@dataclass(slots=True)
class _ClassSets:
    """One proxy class's resources in one snapshot, filled as first asked for."""

    scope: SidecarScope
    mesh: MeshConfig
    clusters: dict[str, Resource] | None = None  # the scope's outbound clusters, sorted by name
    names_by_host: dict[str, tuple[str, ...]] = field(default_factory=dict)  # their names by service
    eds_by_host: dict[str, tuple[str, ...]] = field(default_factory=dict)  # their EDS names by service
    assignments: dict[str, Resource] = field(default_factory=dict)
    listeners: list[Resource] | None = None
    listener_inputs: dict[Hashable, Resource] = field(default_factory=dict)  # ``listeners`` by what each is built from
    earlier: _Reusable = _NOTHING_REUSABLE  # the class's in the snapshots before, for RDS and LDS

    def reusable(self) -> _Reusable:
        """What the class's next snapshot may reuse: its own builds, else those it inherited."""
        routes = self.earlier.routes
        if self.route_keys:
            routes = {**routes, **{n: (key, self.routes[n]) for n, key in self.route_keys.items()}}
        return _Reusable(routes, self.listener_inputs or self.earlier.listeners)
    routes: dict[str, Resource] = field(default_factory=dict)
    route_keys: dict[str, Hashable] = field(default_factory=dict)  # what each of ``routes`` was built from


@dataclass(slots=True)
class _SnapshotState:
    """Generation's state for one snapshot: made when the snapshot is published and replaced with
    it (one reference, ``XdsGenerator._current``), so none of it is ever read against another
    snapshot and nothing needs resetting."""

    push: PushContext
    # the class sets of the snapshot this one replaced, by class lineage (scope name and traits),
    # and the request between the two: a class's clusters are patched from its parent's
    parents: Mapping[Hashable, _ClassSets] = field(default_factory=dict)
    parent_request: PushRequest | None = None
    # what classes may reuse, by lineage: not only from the snapshot just replaced (an
    # endpoint push between two config pushes generates no listeners or routes)
    reusable: Mapping[Hashable, _Reusable] = field(default_factory=dict)
    memo: dict[Hashable, _ClassSets] = field(default_factory=dict)
    lineage: dict[Hashable, _ClassSets] = field(default_factory=dict)  # the class sets by lineage
    # each proxy's class: a push asks for it once per type and more
    proxy_classes: dict[Ident[Proxy], tuple[SidecarScope, _Traits, _ClassSets]] = field(default_factory=dict)
    listener_addresses: dict[Ident[SidecarScope], frozenset[str]] = field(default_factory=dict)
    name_tables: dict[Hashable, Resource] = field(default_factory=dict)  # see _name_table
    rule_views: dict[Ident[DestinationRule], bytes | None] = field(default_factory=dict)  # see _rule_view
    differences: dict[Hashable, tuple[list[Resource], list[str]]] = field(default_factory=dict)
    hosts: dict[Hashable, set[str] | None] = field(default_factory=dict)  # _changed_hosts per request and scopes

    def next_reusable(self) -> Mapping[Hashable, _Reusable]:
        """What the classes of the next snapshot may reuse: this one's builds; when no proxy
        asked for anything in this snapshot, what it inherited."""
        if not self.lineage:
            return self.reusable
        return {lineage: sets.reusable() for lineage, sets in self.lineage.items()}


class XdsGenerator:
    """The ResourceSource of the control plane: cached, shared generation over the snapshot
    published last (``publish``; ``push``, when given, is published at once)."""

    def __init__(self, cache: ResourceCache, push: PushContext | None = None) -> None:
        self.cache = cache
        self._current = None if push is None else _SnapshotState(push)

    def publish(self, push: PushContext, request: PushRequest | None = None) -> None:
        """Serve ``push`` from now on, with generation state of its own made now, and drop the
        cache entries built from the configs or endpoint shards ``request`` (the change from
        the snapshot served so far to ``push``; None for the first) changed. A push naming no
        keys, or a mesh config change, drops everything (every entry reads it); any other keeps
        the class sets of the snapshot replaced, for ``push``'s to be patched from."""
        previous = self._current
        state = _SnapshotState(push)
        if previous is not None:
            state.reusable = previous.next_reusable()
        self._current = state
        if request is None:
            return
        keys = list(request.configs_updated)
        if request.all_kinds or any(key.kind in _EVERYTHING_KINDS for key in keys):
            # every entry reads these (a PeerAuthentication: the mode auto mTLS follows, keyed by
            # value, so the entries it made stale would otherwise only linger)
            self.cache.clear()
            return
        deps: list[Dep] = list(keys)
        deps.extend(("endpoints", h, ns) for h, ns in request.endpoint_services)
        self.cache.invalidate(deps)
        if previous is not None and previous.push.version == push.version - 1:
            # built from the snapshot replaced: its class sets are the parents of push's
            state.parents, state.parent_request = previous.lineage, request

    def push_context(self) -> PushContext:
        """The snapshot served."""
        return self._state().push

    def _state(self) -> _SnapshotState:
        if self._current is None:
            raise RuntimeError("no PushContext before the first build")
        return self._current

    # --- ResourceSource -------------------------------------------------------------------

    def scope(self, proxy: Proxy) -> SidecarScope:
        return self._state().push.sidecar_scope(proxy)

    def generate(self, type_url: str, proxy: Proxy, watch: WatchedResource) -> list[Resource] | None:
        push = self._state().push
        if type_url == CLUSTER:
            synced = watch.synced
            shared, own, built = self._cluster_parts(proxy, push, synced.built if isinstance(synced, _Synced) else None)
            watch.synced = _Synced(shared, frozenset(r.name for r in own), built)
            return [r for r in _merge_sorted(shared, own) if watch.wants(r.name)]
        if type_url == ENDPOINT:
            names = sorted(watch.names) if not watch.wildcard else self._eds_names(proxy, push)
            return self._assignments(proxy, push, names)
        if type_url == LISTENER:
            return [r for r in self._listeners(proxy, push) if watch.wants(r.name)]
        if type_url == ROUTE:
            return self._routes(proxy, push, sorted(watch.names))
        if type_url == NAME_TABLE:
            return self._name_table(proxy, push)
        if type_url == SECRET:
            # a handful per gateway, each a few KB: built per ask, never shared between proxies
            # nothing to send is no response at all, as istiod's pushXds has it for SDS
            found = generate_secrets(proxy, lambda ns, name: push.secrets.get((ns, name)), sorted(watch.names))
            return [encode(s.name, s) for s in found] or None
        return None

    def changes(
        self,
        type_url: str,
        proxy: Proxy,
        watch: WatchedResource,
        request: PushRequest,
        previous: SidecarScope | None,
        also: Collection[str],
    ) -> Partial | None:
        if proxy.type is not ProxyType.SIDECAR or request.forced or request.all_kinds:
            return None
        push = self._state().push
        if type_url == CLUSTER:
            partial = self._cluster_changes(proxy, push, watch)
        elif type_url == ENDPOINT:
            partial = self._assignment_changes(proxy, push, watch, request, previous, also)
        else:
            return None
        if partial is not None and self.cache.verify:
            self._check_partial(type_url, proxy, watch, partial)
        return partial

    def _check_partial(self, type_url: str, proxy: Proxy, watch: WatchedResource, partial: Partial) -> None:
        """Assertion mode: every resource a partial answer carries is the current one."""
        full = self.generate(type_url, proxy, watch) or []
        current = {r.name: r for r in full}
        for r in partial.resources:
            if current.get(r.name) != r:
                raise CacheAssertionError(f"{type_url} {r.name}: a partial push carries a stale or unknown resource")
        carried = {r.name for r in partial.resources}
        for name in partial.considered:
            if name in current and name not in carried:
                raise CacheAssertionError(f"{type_url} {name}: considered by a partial push but left out")

    # --- the class memo ---------------------------------------------------------------------

    def forget(self, proxy: Proxy) -> None:
        """A proxy's stream ended: its class entry goes (a snapshot may outlive many proxies)."""
        if self._current is not None:
            self._current.proxy_classes.pop(Ident(proxy), None)

    def _class(self, proxy: Proxy, push: PushContext) -> tuple[SidecarScope, _Traits, _ClassSets]:
        state = self._state()
        assert state.push is push
        found = state.proxy_classes.get(Ident(proxy))
        if found is None:
            found = state.proxy_classes[Ident(proxy)] = self._find_class(proxy, state)
        return found

    def _find_class(self, proxy: Proxy, state: _SnapshotState) -> tuple[SidecarScope, _Traits, _ClassSets]:
        push = state.push
        scope = push.sidecar_scope(proxy)
        ident = Ident(scope)
        labels_read = _labels_read(scope, push.mesh)
        addresses = state.listener_addresses.get(ident)
        if addresses is None:
            addresses = state.listener_addresses[ident] = _listener_addresses(scope, push)
        own_ip_read = bool(proxy.ip_addresses) and proxy.ip_addresses[0] in addresses
        traits = _traits(proxy, labels_read, own_ip_read)
        key = (ident, *_class_traits(traits))
        sets = state.memo.get(key)
        if sets is None:
            lineage = _lineage(scope, traits)
            earlier = state.reusable.get(lineage, _NOTHING_REUSABLE)
            sets = state.memo[key] = _ClassSets(scope, push.mesh, earlier=earlier)
            state.lineage[lineage] = sets
        return scope, traits, sets

    def _check(self, what: str, built: Sequence[Resource], reference: Sequence[Message]) -> None:
        """Assertion mode: a class-shared set must equal this proxy's own, built uncached."""
        fresh = [encode(_name(m), m) for m in reference]
        if [(r.name, r.body.value) for r in built] != [(r.name, r.body.value) for r in fresh]:
            raise CacheAssertionError(f"{what}: the shared set differs from this proxy's own")

    # --- CDS ----------------------------------------------------------------------------------

    def _cluster_parts(
        self, proxy: Proxy, push: PushContext, previous: _OwnClusters | None = None
    ) -> tuple[Mapping[str, Resource], list[Resource], _OwnClusters]:
        """The class's outbound clusters (by name, sorted), what the proxy's own workload and
        type add (names the class has are left out: a name built twice keeps the first), and
        the own clusters built (``previous`` when its key still holds)."""
        scope, shared = self._class_clusters(proxy, push)
        key = _own_key(proxy, push, scope)
        if previous is not None and previous.key == key:
            built = previous
            if self.cache.verify:
                self._check("the proxy's own clusters", built.resources, proxy_clusters(proxy, push, scope))
        else:
            built = _OwnClusters(key, tuple(encode(c.name, c) for c in proxy_clusters(proxy, push, scope)))
        return shared, [r for r in built.resources if r.name not in shared], built

    def _class_clusters(self, proxy: Proxy, push: PushContext) -> tuple[SidecarScope, dict[str, Resource]]:
        """The proxy's scope and its class's outbound clusters (filling the EDS names too)."""
        scope, traits, sets = self._class(proxy, push)
        if sets.clusters is None:
            parent = self._state().parents.get(_lineage(scope, traits))
            if parent is None or parent.clusters is None or parent.mesh is not push.mesh:
                self._fill_clusters(sets, traits, push, scope.services, {})
            else:
                self._patch_clusters(sets, parent, traits, push)
        clusters = sets.clusters
        assert clusters is not None
        if self.cache.verify:
            # every serve, the first of a class too: its entries may come from other classes
            for service in scope.services:
                rule = scope.destination_rule(proxy, service)
                eps = push.endpoints(service.hostname, service.namespace)
                mode = push.peer_authentications.namespace_mode(service.namespace)
                own = service_clusters(proxy, push.mesh, service, rule, eps, mode)
                self._check(f"clusters of {service.hostname}", [clusters[c.name] for c in own], own)
                if tuple(eds_cluster_names(own)) != sets.eds_by_host.get(service.hostname, ()):
                    raise CacheAssertionError(f"EDS names of {service.hostname} differ from the shared ones")
        return scope, clusters

    def _fill_clusters(
        self,
        sets: _ClassSets,
        traits: _Traits,
        push: PushContext,
        services: Iterable[Service],
        outbound: dict[str, Resource],
    ) -> None:
        """Add the clusters of ``services`` to ``outbound`` and make it the class's set, sorted."""
        scope = sets.scope
        for service in services:
            built = self._service_clusters(traits, push, scope, service)
            for r in built.resources:
                outbound.setdefault(r.name, r)
            sets.names_by_host[service.hostname] = tuple(r.name for r in built.resources)
            if built.eds_names:
                sets.eds_by_host[service.hostname] = built.eds_names
        sets.clusters = {name: outbound[name] for name in sorted(outbound)}

    def _patch_clusters(self, sets: _ClassSets, parent: _ClassSets, traits: _Traits, push: PushContext) -> None:
        """The class's clusters from its parent's in the snapshot just replaced: the services
        whose object, applied DestinationRules or endpoints differ are rebuilt, the rest kept
        (a cluster reads nothing else; the traits and mesh are the same by the lineage)."""
        request = self._state().parent_request
        assert parent.clusters is not None and request is not None
        old, new = parent.scope, sets.scope
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
        self._fill_clusters(sets, traits, push, changed, outbound)

    def _cluster_changes(self, proxy: Proxy, push: PushContext, watch: WatchedResource) -> Partial | None:
        """The class set's difference to what the client was last brought to, and the proxy's
        own clusters in full (a handful)."""
        synced = watch.synced
        if not isinstance(synced, _Synced) or not watch.wildcard:
            return None
        shared, own, built = self._cluster_parts(proxy, push, synced.built)
        changed, removed = self._difference(synced.shared, shared)
        own_names = frozenset(r.name for r in own)
        watch.synced = _Synced(shared, own_names, built)
        considered = frozenset((*(r.name for r in changed), *removed, *own_names, *synced.own))
        return Partial([*changed, *own], considered)

    def _difference(self, old: Mapping[str, Resource], new: Mapping[str, Resource]) -> tuple[list[Resource], list[str]]:
        """(resources of ``new`` that ``old`` lacks or has in another version, names only ``old``
        has), computed once per pair of sets and shared by every proxy of the class."""
        if old is new:
            return [], []
        key = (Ident(old), Ident(new))
        differences = self._state().differences
        found = differences.get(key)
        if found is None:
            changed = [r for name, r in new.items() if (was := old.get(name)) is None or was.version != r.version]
            removed = [name for name in old if name not in new]
            found = differences[key] = (changed, removed)
        return found

    def _service_clusters(
        self, traits: _Traits, push: PushContext, scope: SidecarScope, service: Service
    ) -> _ServiceClusters:
        rule = scope.destination_rule(traits.scope_proxy, service)
        endpoints = push.endpoints(service.hostname, service.namespace)
        dns = service.resolution.name.startswith("DNS")
        narrowed = traits.located if dns else traits.outbound
        mesh = push.mesh
        mode = push.peer_authentications.namespace_mode(service.namespace)
        key = (
            "clusters",
            _proxy_key(narrowed),
            Ident(service),
            _rule_key(rule),
            Ident(mesh),
            Ident(endpoints),
            mode,
        )
        deps = [ConfigKey(Kind.SERVICE, service.namespace, service.hostname), _endpoints_dep(service)]
        deps.extend(_rule_deps(scope, service.hostname))

        def build() -> _ServiceClusters:
            built = service_clusters(narrowed, mesh, service, rule, endpoints, mode)
            return _ServiceClusters(tuple(encode(c.name, c) for c in built), tuple(eds_cluster_names(built)))

        return self.cache.get(key, build, deps)

    def _eds_names(self, proxy: Proxy, push: PushContext) -> list[str]:
        """A wildcard EDS watch: the EDS names of every cluster the proxy gets (the scope's
        known per service, the proxy's own decoded here)."""
        _, own, _ = self._cluster_parts(proxy, push)
        _, _, sets = self._class(proxy, push)
        names = {n for found in sets.eds_by_host.values() for n in found}
        return sorted(names.union(_eds_names(own)))

    # --- EDS ----------------------------------------------------------------------------------

    def _assignment_changes(
        self,
        proxy: Proxy,
        push: PushContext,
        watch: WatchedResource,
        request: PushRequest,
        previous: SidecarScope | None,
        also: Collection[str],
    ) -> Partial | None:
        """The assignments of the watched clusters whose service, DestinationRule or endpoints
        the request names (an assignment reads nothing else), and of ``also``."""
        if watch.wildcard:
            return None
        scope, _, sets = self._class(proxy, push)
        key = (Ident(request), Ident(scope), None if previous is None else Ident(previous))
        memo = self._state().hosts
        if key not in memo:
            memo[key] = _changed_hosts(request, (scope, previous))
        hosts = memo[key]
        if hosts is None:
            return None
        self._class_clusters(proxy, push)  # fills the class's EDS names
        names = {n for n in also if n in watch.names}
        names.update(n for h in hosts for n in sets.eds_by_host.get(h, ()) if n in watch.names)
        ordered = sorted(names)
        return Partial(self._assignments(proxy, push, ordered), frozenset(ordered))

    def _assignments(self, proxy: Proxy, push: PushContext, names: Iterable[str]) -> list[Resource]:
        scope, traits, sets = self._class(proxy, push)

        def own(name: str) -> Message:
            target = resolve_assignment(name, proxy, scope)
            eps = push.endpoints(target.service.hostname, target.service.namespace) if target else ()
            built: Message = build_assignment(name, proxy, push.mesh, target, eps)
            return built

        return self._shared(sets.assignments, names, lambda name: self._assignment(traits, push, scope, name), own)

    def _shared(
        self,
        memo: dict[str, Resource],
        names: Iterable[str],
        build: Callable[[str], Resource],
        own: Callable[[str], Message],
    ) -> list[Resource]:
        """Named resources from a class memo, built on first ask; in assertion mode every
        ask is compared with ``own`` (built for this very proxy)."""
        out = []
        for name in names:
            found = memo.get(name)
            if found is None:
                found = memo[name] = build(name)
            if self.cache.verify:
                self._check(name, [found], [own(name)])
            out.append(found)
        return out

    def _assignment(self, traits: _Traits, push: PushContext, scope: SidecarScope, name: str) -> Resource:
        target = resolve_assignment(name, traits.scope_proxy, scope)
        mesh = push.mesh
        if target is None:
            return encode(name, build_assignment(name, traits.outbound, mesh, None, ()))
        endpoints = push.endpoints(target.service.hostname, target.service.namespace)
        narrowed = traits.located
        key = (
            "assignment",
            name,
            _proxy_key(narrowed),
            Ident(target.service),
            target.port,
            _rule_key(target.rule),
            Ident(mesh),
            Ident(endpoints),
        )
        service = target.service
        deps = [ConfigKey(Kind.SERVICE, service.namespace, service.hostname), _endpoints_dep(service)]
        deps.extend(_rule_deps(scope, service.hostname))

        def build() -> Resource:
            return encode(name, build_assignment(name, narrowed, mesh, target, endpoints))

        return self.cache.get(key, build, deps)

    # --- LDS ----------------------------------------------------------------------------------

    def _listeners(self, proxy: Proxy, push: PushContext) -> list[Resource]:
        scope, traits, sets = self._class(proxy, push)
        if sets.listeners is None:
            # a listener built from the same inputs in an earlier snapshot is reused
            previous = sets.earlier.listeners
            built = []
            for inputs, build in scope_listener_plan(traits.scope_proxy, push, scope):
                found = None if inputs is None else previous.get(inputs)
                if found is None:
                    listener = build()
                    found = encode(listener.name, listener)
                if inputs is not None:
                    sets.listener_inputs[inputs] = found
                built.append(found)
            sets.listeners = built
        if self.cache.verify:
            self._check("scope listeners", sets.listeners, scope_listeners(proxy, push, scope))
        own = [encode(m.name, m) for m in workload_listeners(proxy, push, scope)]
        unique: dict[str, Resource] = {}
        for r in (*sets.listeners, *own):
            unique.setdefault(r.name, r)
        return [unique[name] for name in sorted(unique)]

    # --- RDS ----------------------------------------------------------------------------------

    def _routes(self, proxy: Proxy, push: PushContext, names: list[str]) -> list[Resource]:
        if proxy.type is ProxyType.ROUTER:
            # a gateway's routes follow from the Gateways its labels select and its own targets
            return [encode(r.name, r) for r in generate_routes(proxy, push, names)]
        scope, traits, sets = self._class(proxy, push)

        def build(name: str) -> Resource:
            # the class's configuration in an earlier snapshot, when built from the same inputs
            key = sets.route_keys[name] = sidecar_route_key(traits.scope_proxy, push, scope, name, self._rule_view)
            earlier = sets.earlier.routes.get(name)
            if earlier is not None and earlier[0] == key:
                return earlier[1]
            return encode(name, generate_routes(traits.scope_proxy, push, [name])[0])

        return self._shared(sets.routes, names, build, lambda name: generate_routes(proxy, push, [name])[0])


    def _rule_view(self, rule: DestinationRule | None) -> bytes | None:
        """``load_balancer_view`` once per rule and snapshot (route keys read it per host)."""
        if rule is None:
            return None
        views = self._state().rule_views
        found = views.get(Ident(rule))
        if found is None:
            found = views[Ident(rule)] = load_balancer_view(rule)
        return found

    # --- NDS ----------------------------------------------------------------------------------

    def _name_table(self, proxy: Proxy, push: PushContext) -> list[Resource]:
        """The proxy's name table (one unnamed resource; none for a router), built once per
        snapshot for all proxies that read the same of it: the services their scopes see (by
        identity: namespaces that import the same services share it, not only a class), the
        endpoints of those (fixed in a snapshot), the proxy's cluster, network and IP families
        and whether it uses auto-allocated addresses."""
        if proxy.type is not ProxyType.SIDECAR:
            return []
        scope = self._class(proxy, push)[0]
        key = (
            tuple(map(id, scope.services)),  # the snapshot holds them, so their ids are stable
            proxy.cluster_id,
            proxy.network,
            _family_ips(proxy.ip_addresses),
            uses_allocated_addresses(proxy, push.features),
        )
        tables = self._state().name_tables
        found = tables.get(key)
        if found is None:
            table = build_name_table(proxy, push, scope.services)
            assert table is not None
            found = tables[key] = encode("", table)
        if self.cache.verify:
            own = build_name_table(proxy, push, scope.services)
            if own is None or found.body.value != encode("", own).body.value:
                raise CacheAssertionError("name table: the shared table differs from this proxy's own")
        return [found]


def _by_name(r: Resource) -> str:
    return r.name


def _merge_sorted(shared: Mapping[str, Resource], own: Sequence[Resource]) -> list[Resource]:
    # two sorted runs: the sort merges them in linear time
    return sorted((*shared.values(), *own), key=_by_name)


# kinds whose change may alter any cached entry: the cache is cleared and nothing is patched
_EVERYTHING_KINDS = frozenset({Kind.MESH_CONFIG, Kind.CONFIG_MAP, Kind.PEER_AUTHENTICATION})

# kinds that never change which service or DestinationRule a hostname resolves to in a scope
# (a DNS name change comes with its endpoints, named in ``endpoint_services``)
# (a PeerAuthentication changes clusters' TLS, not assignments; their re-sent clusters bring
# their assignments along anyway)
_ROUTING_KINDS = frozenset({Kind.VIRTUAL_SERVICE, Kind.GATEWAY, Kind.DNS_NAME, Kind.PEER_AUTHENTICATION})


def _changed_hosts(request: PushRequest, scopes: Iterable[SidecarScope | None]) -> set[str] | None:
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


def _eds_names(clusters: Iterable[Resource]) -> list[str]:
    """The EDS names (service name, else the cluster's own) of the EDS clusters among these."""
    out = []
    for r in clusters:
        c = cluster_pb2.Cluster.FromString(r.body.value)
        if c.type == cluster_pb2.Cluster.EDS:
            out.append(c.eds_cluster_config.service_name or c.name)
    return out


def _name(msg: Message) -> str:
    return str(getattr(msg, "name", "") or getattr(msg, "cluster_name", ""))
