"""Which dependency keys one served resource was built from (issue 28 "explain a resource").

The keys are the ones the cache records per entry and the push filter tests (``Dep``: a config
object's key, or an endpoint shard ``("endpoints", host, namespace)``), derived as each
generator derives them, so what ``explain`` names is exactly what would make that resource be
rebuilt and pushed:

* an outbound cluster or assignment: ``keys.service_deps`` (what its cache entry records);
* a scope-wide listener or a sidecar's route configuration: what its inputs value holds (the
  builder reads nothing else, DESIGN §7 rule 3): the services, VirtualServices and the rules of
  the hosts it reads;
* what a proxy's own workload adds (inbound clusters, ``virtualInbound``): its service targets,
  the rules applied to them inbound, its Sidecar and the policies selecting it;
* what has no narrower key (a gateway's listeners and routes, which istiod pushes on any change
  but a Sidecar's): the dependencies of the proxy's scope, the push filter's own set.

Nothing here runs while serving: the generators record nothing extra, and explaining rebuilds
only the inputs values (never a resource). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.api.networking import DestinationRule
from app.config.labels import selector_matches
from app.config.objects import ConfigKey, Kind
from app.model.envoy_filter import ApplyTo
from app.model.proxy import Proxy, ProxyType
from app.model.push_context import PushContext
from app.model.sidecar_scope import SidecarScope
from app.model.virtual_service import ResolvedVirtualService
from app.translate.allocated import consumes_allocated
from app.translate.cluster.builder import parse_cluster_name
from app.translate.envoy_filter.listeners import LISTENER_TYPES
from app.translate.envoy_filter.routes import ROUTE_TYPES
from app.translate.listener.builder import build_scope_listener
from app.translate.listener.for_proxy import scope_listener_inputs
from app.translate.listener.inputs import LOCK, OutboundListenerInputs, ScopeListenerInputs
from app.translate.route.policy import load_balancer_view
from app.translate.route.sidecar import SidecarRouteInputs, sidecar_route_inputs
from app.translate.view import proxy_service_targets
from app.xds.cache import Dep, expand
from app.xds.generators.keys import rule_deps, service_deps
from app.xds.generators.listeners import ClassListeners
from app.xds.generators.routes import ClassRoutes
from app.xds.generators.state import SnapshotState
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, NAME_TABLE, ROUTE, SECRET

_SECRET_PREFIX = "kubernetes://"
# what EnvoyFilter patches each type
_PATCHED_BY = {
    CLUSTER: (ApplyTo.CLUSTER,),
    LISTENER: (*LISTENER_TYPES, *ROUTE_TYPES),
    ROUTE: ROUTE_TYPES,
}


def resource_deps(state: SnapshotState, proxy: Proxy, type_url: str, name: str) -> frozenset[Dep]:
    """The dependency keys of the resource ``name`` of ``type_url`` as ``proxy`` is served it
    from ``state``'s snapshot (the caller checks the proxy is served such a resource), and the
    EnvoyFilters that patch the type for the proxy."""
    patches = state.proxy_class(proxy).patches
    patched = _PATCHED_BY.get(type_url, ())
    filters = () if patches is None else {p.key for t in patched for p in patches.of(t)}
    keys = (ConfigKey(Kind.ENVOY_FILTER, *key.split("/", 1)) for key in sorted(filters))
    return _built_from(state, proxy, type_url, name) | frozenset(keys)


def _built_from(state: SnapshotState, proxy: Proxy, type_url: str, name: str) -> frozenset[Dep]:
    cls = state.proxy_class(proxy)
    scope, push = cls.scope, state.push
    if proxy.type is ProxyType.ROUTER and type_url in (LISTENER, ROUTE):
        return _gateway_deps(proxy, push, scope)
    if type_url in (CLUSTER, ENDPOINT):
        return _cluster_deps(proxy, push, scope, name)
    if type_url == LISTENER:
        return _listener_deps(state, proxy, name)
    if type_url == ROUTE:
        served = cls.parts.get(ClassRoutes)
        inputs = served.inputs.get(name) if isinstance(served, ClassRoutes) else None
        if inputs is None:  # not served to the class yet: made as the generator makes it
            allocates = consumes_allocated(cls.traits.scope_proxy, push.features)
            inputs = sidecar_route_inputs(cls.traits.scope_proxy, push.mesh, scope, name, _rule_view, allocates)
        return _route_deps(inputs, scope)
    if type_url == NAME_TABLE:
        return frozenset(_services(scope, (s.hostname for s in scope.services)))
    if type_url == SECRET and name.startswith(_SECRET_PREFIX):
        ns, _, secret = name.removeprefix(_SECRET_PREFIX).rpartition("/")
        return frozenset({ConfigKey(Kind.SECRET, ns or proxy.namespace, secret.removesuffix("-cacert"))})
    return frozenset()


def _rule_view(rule: DestinationRule | None) -> bytes | None:
    return None if rule is None else load_balancer_view(rule)


def _services(scope: SidecarScope, hosts: Iterable[str]) -> list[Dep]:
    out: list[Dep] = []
    for host in hosts:
        service = scope.services_by_host.get(host)
        if service is not None:
            out.append(ConfigKey(Kind.SERVICE, service.namespace, service.hostname))
    return out


def _virtual_service_deps(vs: ResolvedVirtualService) -> list[Dep]:
    # a delegating root reads its delegates too (SidecarScope.dependencies names them alike)
    return [vs.obj.key, *(ConfigKey(Kind.VIRTUAL_SERVICE, ns, n) for ns, n in vs.delegates)]


def _sidecar_dep(scope: SidecarScope) -> list[Dep]:
    if scope.name is None:
        return []
    ns, _, name = scope.name.partition("/")
    return [ConfigKey(Kind.SIDECAR, ns, name)]


def _cluster_deps(proxy: Proxy, push: PushContext, scope: SidecarScope, name: str) -> frozenset[Dep]:
    """An outbound cluster (or its assignment) by the service its name resolves to in the
    scope, as ``ClusterGenerator._service_clusters`` keys it; anything else is the proxy's own."""
    parsed = parse_cluster_name(name)
    if parsed.direction == "outbound" and (service := scope.services_by_host.get(parsed.hostname)) is not None:
        return frozenset(expand(service_deps(scope, service)))
    if parsed.direction == "inbound":
        return _own_deps(proxy, push, scope, parsed.port)
    return frozenset()  # BlackHoleCluster, PassthroughCluster: the mesh config only


def _own_deps(proxy: Proxy, push: PushContext, scope: SidecarScope, port: int | None) -> frozenset[Dep]:
    """What the proxy's own workload reads (clusters._own_key): its Sidecar, its service targets
    (on ``port``, None: all) and the rules applied to them inbound."""
    deps: list[Dep] = _sidecar_dep(scope)
    for service, service_port, endpoint in proxy_service_targets(proxy, push):
        if port is not None and port not in (service_port.port, endpoint.port):
            continue
        deps.append(ConfigKey(Kind.SERVICE, service.namespace, service.hostname))
        rule = scope.inbound_destination_rule(service)
        if rule is not None:
            deps.extend(obj.key for obj in rule.objects)
    return frozenset(deps)


def _listener_deps(state: SnapshotState, proxy: Proxy, name: str) -> frozenset[Dep]:
    cls = state.proxy_class(proxy)
    push, scope = state.push, cls.scope
    served = cls.parts.get(ClassListeners)
    built = served.by_inputs if isinstance(served, ClassListeners) and served.by_name is not None else {}
    for inputs in built or scope_listener_inputs(cls.traits.scope_proxy, push, scope):
        found = built.get(inputs) if built else None
        if (found[1].name if found is not None else build_scope_listener(inputs).name) == name:
            return _scope_listener_deps(inputs, scope)
    # virtualInbound (and a Sidecar's ingress listeners): the workload's own
    deps = set(_own_deps(proxy, push, scope, None))
    authz = push.authorization_policies.for_workload(proxy.namespace, proxy.labels)
    deps.update(obj.key for obj in (*authz.allow, *authz.deny, *authz.audit, *authz.custom))
    deps.update(obj.key for obj in push.request_authentications.for_workload(proxy.namespace, proxy.labels))
    deps.update(_peer_authentication_deps(push, proxy))
    return frozenset(deps)


def _peer_authentication_deps(push: PushContext, proxy: Proxy) -> list[Dep]:
    """The PeerAuthentications a workload's inbound mode composes (``workload_mode``): the
    mesh's, its namespace's and the oldest workload policy selecting it."""
    policies = push.peer_authentications
    found = [policies.mesh, policies.by_namespace.get(proxy.namespace)]
    for obj in policies.workloads.get(proxy.namespace, ()):
        if selector_matches(obj.spec.selector.match_labels, proxy.labels):
            found.append(obj)
            break
    return [obj.key for obj in found if obj is not None]


def _scope_listener_deps(inputs: ScopeListenerInputs, scope: SidecarScope) -> frozenset[Dep]:
    """What an outbound listener's inputs hold: the services offered to it, the VirtualServices
    its TCP chains read and the services and rules of the hosts their routes name."""
    deps: list[Dep] = _sidecar_dep(scope)
    if isinstance(inputs, OutboundListenerInputs):
        for add in inputs.adds:
            if add == LOCK or isinstance(add, str):
                continue
            deps.extend(_services(scope, (add.hostname,)))
            for vs in add.virtual_services:
                deps.extend(_virtual_service_deps(vs.obj))
            for host, _, _ in add.reads:
                deps.extend(_services(scope, (host,)))
                deps.extend(rule_deps(scope, host))
    return frozenset(deps)


def _route_deps(inputs: SidecarRouteInputs, scope: SidecarScope) -> frozenset[Dep]:
    """What a sidecar's route configuration's inputs hold: its port's services and
    VirtualServices, and the rules of every host a route may read a hash policy of."""
    deps: list[Dep] = _sidecar_dep(scope)
    port = inputs.port
    if port is not None:
        deps.extend(_services(scope, (s.obj.hostname for s in port.services)))
        for vs in port.virtual_services:
            deps.extend(_virtual_service_deps(vs.obj))
        for host, _ in port.rules:
            deps.extend(rule_deps(scope, host))
    return frozenset(deps)


def _gateway_deps(proxy: Proxy, push: PushContext, scope: SidecarScope) -> frozenset[Dep]:
    """A gateway's listeners and routes: the Gateways selecting it, the VirtualServices bound
    to them (by ``ns/name``, a bare name in the VirtualService's namespace) and the scope's
    keys (istiod pushes a gateway on any change but a Sidecar's)."""
    deps: set[Dep] = set(scope.dependencies)
    selecting = [g for g in push.gateways if selector_matches(g.spec.selector, proxy.labels)]
    deps.update(g.key for g in selecting)
    names = {g.namespaced_name for g in selecting}
    for vs in push.inputs.virtual_services:
        bound = {ref if "/" in ref else f"{vs.meta.namespace}/{ref}" for ref in vs.spec.gateways}
        if bound & names:
            deps.add(vs.key)
    deps.update(_own_deps(proxy, push, scope, None))
    return frozenset(deps)
