"""RDS (istiod RdsGenerator): a sidecar class's route configurations by name, shared, each
built from its inputs value alone (``translate.route.sidecar``), so the class reuses the
configuration an earlier snapshot of its lineage built from an equal value; a gateway's, built
per proxy (they follow from the Gateways its labels select and its own targets)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from envoy.config.route.v3 import route_pb2
from google.protobuf.message import Message

from app.api.networking import DestinationRule
from app.model.envoy_filter import MergedPatches, PatchContext
from app.model.ident import Ident
from app.model.proxy import Proxy, ProxyType
from app.translate.allocated import consumes_allocated
from app.translate.envoy_filter.routes import PortMap, patch_route_configuration, patches_routes
from app.translate.route.gateway import gateway_port_map, gateway_routes
from app.translate.route.policy import load_balancer_view
from app.translate.route.sidecar import SidecarRouteInputs, build_sidecar_route_config, sidecar_route_inputs
from app.translate.route.virtual_host import ALLOW_ANY_NAME, BLOCK_ALL_NAME
from app.xds.cache import ResourceCache
from app.xds.generators.base import WholeTypeOnly, shared_named
from app.xds.generators.envoy_filters import PatchMemo
from app.xds.generators.state import ProxyClass, SnapshotState
from app.xds.resource import Resource, encode
from app.xds.watch import WatchedResource

# a route configuration, what it was built from, and the snapshot it was last built or kept in
_Built = tuple[SidecarRouteInputs, Resource, int]
_NONE: Mapping[str, _Built] = {}
_CATCH_ALL = frozenset((ALLOW_ANY_NAME, BLOCK_ALL_NAME))


@dataclass(slots=True)
class ClassRoutes:
    """A sidecar class's route configurations in one snapshot, and what each was built from."""

    # its lineage's in earlier snapshots, by name, until rebuilt here (then the earlier one goes)
    earlier: dict[str, _Built]
    version: int  # the snapshot's
    routes: dict[str, Resource] = field(default_factory=dict)
    inputs: dict[str, SidecarRouteInputs] = field(default_factory=dict)

    def reusable(self) -> Mapping[str, _Built]:
        if not self.inputs:
            return self.earlier
        built = {name: (inputs, self.routes[name], self.version) for name, inputs in self.inputs.items()}
        return {**self.earlier, **built}


@dataclass(slots=True)
class _RuleViews:
    """Per snapshot: ``load_balancer_view`` once per rule (every route configuration reads it
    for each of its hosts)."""

    found: dict[Ident[DestinationRule], bytes] = field(default_factory=dict)

    def view(self, rule: DestinationRule | None) -> bytes | None:
        if rule is None:
            return None
        found = self.found.get(Ident(rule))
        if found is None:
            found = self.found[Ident(rule)] = load_balancer_view(rule)
        return found


def _class_routes(cls: ProxyClass, version: int) -> ClassRoutes:
    earlier = cls.inherit(ClassRoutes, _NONE)
    assert isinstance(earlier, Mapping)
    return ClassRoutes(dict(earlier), version)  # a copy of its own: names are dropped from it as built


class RouteGenerator(WholeTypeOnly):
    def __init__(self, cache: ResourceCache) -> None:
        self.cache = cache
        self.patched = PatchMemo()

    def generate(self, state: SnapshotState, proxy: Proxy, watch: WatchedResource) -> list[Resource] | None:
        found = self._generate(state, proxy, watch)
        patches = state.proxy_class(proxy).patches
        if patches is None or not patches_routes(patches):
            return found
        # istiod ApplyRouteConfigurationPatches: a gateway's in the gateway context, with its
        # port map; a sidecar's (outbound) in the outbound context
        router = proxy.type is ProxyType.ROUTER
        context = PatchContext.GATEWAY if router else PatchContext.SIDECAR_OUTBOUND
        ports = gateway_port_map(proxy, state.push) if router else None
        return [self._patch(context, patches, r, ports) for r in found]

    def _patch(self, context: int, patches: MergedPatches, resource: Resource, ports: PortMap | None) -> Resource:
        extra = None if ports is None else tuple(sorted(ports.items()))
        found = self.patched.patched(
            patches,
            context,
            resource,
            route_pb2.RouteConfiguration.FromString,
            lambda rc: patch_route_configuration(context, patches, rc, ports),
            extra,
        )
        assert found is not None  # a route configuration is never removed
        return found

    def _generate(self, state: SnapshotState, proxy: Proxy, watch: WatchedResource) -> list[Resource]:
        push = state.push
        names = sorted(watch.names)
        if proxy.type is ProxyType.ROUTER:
            return [encode(r.name, r) for r in gateway_routes(proxy, push, names)]
        cls = state.proxy_class(proxy)
        scope = cls.scope
        sets = cls.part(ClassRoutes, lambda: _class_routes(cls, push.version))
        views = state.part(_RuleViews, _RuleViews)
        # what the lineage built in the snapshot just replaced holds as it is
        parent_built = push.version - 1 if state.unchanged_since_parent(cls) else None

        def allocates(p: Proxy) -> bool:
            return consumes_allocated(p, push.features)

        def build(name: str) -> tuple[Resource, bool]:
            """The configuration, and whether the class keeps it (and its inputs, for the next
            snapshot): not one with no virtual host but the catch-all (a name that is no port,
            or a port or host no service or VirtualService of the scope is on)."""
            earlier = sets.earlier.pop(name, None)
            if earlier is not None and earlier[2] == parent_built:
                sets.inputs[name] = earlier[0]
                return earlier[1], True
            inputs = sidecar_route_inputs(
                cls.traits.scope_proxy, push.mesh, scope, name, views.view, allocates(cls.traits.scope_proxy)
            )
            if earlier is not None and earlier[0] == inputs:
                sets.inputs[name] = inputs
                return earlier[1], True
            config = build_sidecar_route_config(inputs)
            keep = any(vh.name not in _CATCH_ALL for vh in config.virtual_hosts)
            if keep:
                sets.inputs[name] = inputs
            return encode(name, config), keep

        def own(name: str) -> Message:
            inputs = sidecar_route_inputs(proxy, push.mesh, scope, name, views.view, allocates(proxy))
            built: Message = build_sidecar_route_config(inputs)
            return built

        return shared_named(sets.routes, names, build, own if self.cache.verify else None)
