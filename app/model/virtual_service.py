"""VirtualServices with names resolved and indexed by gateway and visibility (istiod's
virtualServiceIndex). Short hosts become FQDN in the VirtualService's namespace; gateway names
become ``ns/name`` (``mesh`` stays ``mesh``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from google.protobuf.internal.containers import RepeatedScalarFieldContainer

from app.api import networking as net
from app.config.host import is_wildcard, matches, resolve_short_name
from app.config.objects import ConfigKey, ConfigObject
from app.model.delegation import is_root, merge_delegates

MESH_GATEWAY = "mesh"
PRIVATE = "."
PUBLIC = "*"
NONE = "~"


def resolve_gateway_name(name: str, namespace: str) -> str:
    """``gw`` and ``./gw`` -> ``ns/gw``; legacy ``gw.ns[.svc...]`` -> ``ns/gw``; ``mesh`` unchanged."""
    if name == MESH_GATEWAY:
        return name
    if "/" in name:
        ns, _, gw = name.partition("/")
        return f"{namespace}/{gw}" if ns == "." else name
    if "." not in name:
        return f"{namespace}/{name}"
    gw, _, rest = name.partition(".")
    return f"{rest.split('.', 1)[0]}/{gw}"


@dataclass(frozen=True, slots=True)
class ResolvedVirtualService:
    obj: ConfigObject
    spec: net.VirtualService  # copy with hosts, gateways and destination hosts resolved
    # a root's delegates merged into ``spec``: every one it names, and the objects found
    delegates: tuple[tuple[str, str], ...] = ()
    merged: tuple[ConfigObject, ...] = ()

    @property
    def namespaced_name(self) -> str:
        return self.obj.namespaced_name

    @property
    def gateways(self) -> tuple[str, ...]:
        return tuple(self.spec.gateways) or (MESH_GATEWAY,)


def resolve_virtual_service(obj: ConfigObject, domain_suffix: str = "cluster.local") -> ResolvedVirtualService:
    ns = obj.meta.namespace
    spec = net.VirtualService()
    spec.CopyFrom(obj.spec)
    _replace(spec.hosts, lambda h: resolve_short_name(h, ns, domain_suffix))
    _replace(spec.gateways, lambda g: resolve_gateway_name(g, ns))
    for http in spec.http:
        for m in http.match:
            _replace(m.gateways, lambda g: resolve_gateway_name(g, ns))
        for d in http.route:
            d.destination.host = resolve_short_name(d.destination.host, ns, domain_suffix)
        if http.HasField("mirror"):
            http.mirror.host = resolve_short_name(http.mirror.host, ns, domain_suffix)
        for mp in http.mirrors:
            mp.destination.host = resolve_short_name(mp.destination.host, ns, domain_suffix)
    for tcp in spec.tcp:
        for l4 in tcp.match:
            _replace(l4.gateways, lambda g: resolve_gateway_name(g, ns))
    for tls in spec.tls:
        for tm in tls.match:
            _replace(tm.gateways, lambda g: resolve_gateway_name(g, ns))
    for route in _l4_routes(spec):
        route.destination.host = resolve_short_name(route.destination.host, ns, domain_suffix)
    return ResolvedVirtualService(obj, spec)


def _l4_routes(spec: net.VirtualService) -> list[net.RouteDestination]:
    return [d for r in spec.tcp for d in r.route] + [d for r in spec.tls for d in r.route]


def _replace(values: RepeatedScalarFieldContainer[str], fn: Callable[[str], str]) -> None:
    resolved = [fn(v) for v in values]
    del values[:]
    values.extend(resolved)


def _serves_source_namespace(route: net.HTTPRoute, namespace: str) -> bool:
    """False when the route's matches name source namespaces and none is ``namespace``.

    As istiod's check, a match without ``sourceNamespace`` does not count either way."""
    named = [m.source_namespace for m in route.match if m.source_namespace]
    return not named or namespace in named


def destination_hosts(vs: ResolvedVirtualService, source_namespace: str) -> dict[str, set[int]]:
    """Hosts the VirtualService routes to from ``source_namespace``, with the ports it names
    (empty set: no port named). HTTP routes that only match other source namespaces add none
    (istiod virtualServiceDestinationsFilteredBySourceNamespace; TCP and TLS routes are not
    filtered there)."""
    out: dict[str, set[int]] = {}

    def add(dest: net.Destination) -> None:
        ports = out.setdefault(dest.host, set())
        if dest.HasField("port") and dest.port.number:
            ports.add(dest.port.number)
        else:
            ports.add(0)

    for http in vs.spec.http:
        if not _serves_source_namespace(http, source_namespace):
            continue
        for d in http.route:
            add(d.destination)
        if http.HasField("mirror"):
            add(http.mirror)
        for mp in http.mirrors:
            add(mp.destination)
    for route in _l4_routes(vs.spec):
        add(route.destination)
    return out


@dataclass(frozen=True, slots=True)
class VirtualServiceIndex:
    private: Mapping[tuple[str, str], tuple[ResolvedVirtualService, ...]]  # (namespace, gateway)
    exported: Mapping[tuple[str, str], tuple[ResolvedVirtualService, ...]]  # (target namespace, gateway)
    public: Mapping[str, tuple[ResolvedVirtualService, ...]]  # gateway
    delegates: Mapping[tuple[str, str], ResolvedVirtualService]  # (namespace, name), VSs without hosts

    @classmethod
    def build(
        cls,
        objects: Iterable[ConfigObject],
        default_export_to: frozenset[str],
        domain_suffix: str = "cluster.local",
        previous: VirtualServiceIndex | None = None,
    ) -> VirtualServiceIndex:
        """The index of ``objects``; a VirtualService object unchanged since ``previous`` keeps its
        resolved form (and so its identity, which cache keys name)."""
        resolved = {} if previous is None else {id(vs.obj): vs for vs in previous.all()}
        private: dict[tuple[str, str], list[ResolvedVirtualService]] = {}
        exported: dict[tuple[str, str], list[ResolvedVirtualService]] = {}
        public: dict[str, list[ResolvedVirtualService]] = {}
        delegates: dict[tuple[str, str], ResolvedVirtualService] = {}
        roots: list[ResolvedVirtualService] = []
        for obj in sorted(objects, key=lambda o: (o.meta.creation_timestamp, o.meta.name, o.meta.namespace)):
            vs = resolved.get(id(obj))  # ids of the previous index's objects, alive with it
            if vs is None or vs.obj is not obj:
                vs = resolve_virtual_service(obj, domain_suffix)
            if not vs.spec.hosts:
                delegates[(obj.meta.namespace, obj.meta.name)] = vs
            else:
                roots.append(vs)

        def visible(ns: str, name: str, to: str) -> bool:
            export_to = frozenset(delegates[(ns, name)].spec.export_to) or default_export_to
            return PUBLIC in export_to or to in {ns if e == PRIVATE else e for e in export_to}

        for vs in roots:
            obj = vs.obj
            ns = obj.meta.namespace
            if vs.delegates or is_root(obj.spec):
                vs = _merged(vs, delegates, visible, domain_suffix)
            export_to = frozenset(vs.spec.export_to) or default_export_to
            for gw in vs.gateways:
                if PUBLIC in export_to:
                    public.setdefault(gw, []).append(vs)
                    continue
                if NONE in export_to:
                    continue
                for target in sorted({ns if e == PRIVATE else e for e in export_to}):
                    bucket = private if target == ns else exported
                    bucket.setdefault((target, gw), []).append(vs)
        return cls(
            {k: tuple(v) for k, v in private.items()},
            {k: tuple(v) for k, v in exported.items()},
            {k: tuple(v) for k, v in public.items()},
            delegates,
        )

    def roots_of(self, keys: Iterable[tuple[str, str]]) -> set[ConfigKey]:
        """The VirtualServices that delegate to any of ``keys`` (namespace, name)."""
        wanted = set(keys)
        return {vs.obj.key for vs in self.all() if wanted.intersection(vs.delegates)}

    def all(self) -> Iterable[ResolvedVirtualService]:
        """Every VirtualService in the index (one bound to several gateways more than once)."""
        for bucket in (self.private, self.exported, self.public):
            for found in bucket.values():
                yield from found
        yield from self.delegates.values()

    def for_gateway(self, namespace: str, gateway: str) -> list[ResolvedVirtualService]:
        """VirtualServices bound to ``gateway`` and visible from ``namespace``, in istiod's order."""
        return [
            *self.private.get((namespace, gateway), ()),
            *self.exported.get((namespace, gateway), ()),
            *self.public.get(gateway, ()),
        ]


def _merged(
    vs: ResolvedVirtualService,
    delegates: Mapping[tuple[str, str], ResolvedVirtualService],
    visible: Callable[[str, str, str], bool],
    domain_suffix: str,
) -> ResolvedVirtualService:
    """A root with its delegates merged; the one already merged while they are the same objects."""
    if vs.delegates:
        same = tuple(found.obj for key in vs.delegates if (found := delegates.get(key)) is not None)
        if len(same) == len(vs.merged) and all(a is b for a, b in zip(same, vs.merged, strict=True)):
            return vs
        vs = resolve_virtual_service(vs.obj, domain_suffix)

    def find(ns: str, name: str) -> net.VirtualService | None:
        found = delegates.get((ns, name))
        return None if found is None else found.spec

    spec, named = merge_delegates(vs.spec, vs.obj.meta.namespace, find, visible)
    objects = tuple(found.obj for key in named if (found := delegates.get(key)) is not None)
    return ResolvedVirtualService(vs.obj, spec, named, objects)


@dataclass(frozen=True, slots=True)
class VirtualServicesByHost:
    """VirtualServices in their order, looked up by a host they match without scanning them
    all: a sidecar's listeners ask once per service port, so a scan is services x VSs per push."""

    ordered: tuple[ResolvedVirtualService, ...]
    exact: Mapping[str, tuple[int, ...]]  # host -> positions in ``ordered``
    wildcard: tuple[int, ...]  # positions of those with a wildcard host

    @classmethod
    def build(cls, virtual_services: Iterable[ResolvedVirtualService]) -> VirtualServicesByHost:
        ordered = tuple(virtual_services)
        exact: dict[str, list[int]] = {}
        wildcard: list[int] = []
        for i, vs in enumerate(ordered):
            for h in vs.spec.hosts:
                if is_wildcard(h):
                    if not wildcard or wildcard[-1] != i:
                        wildcard.append(i)
                else:
                    exact.setdefault(h, []).append(i)
        return cls(ordered, {h: tuple(v) for h, v in exact.items()}, tuple(wildcard))

    def matching(self, hostname: str) -> list[ResolvedVirtualService]:
        """Those with a host that shares a name with ``hostname``, in order."""
        if is_wildcard(hostname):
            return [vs for vs in self.ordered if any(matches(h, hostname) for h in vs.spec.hosts)]
        positions = self.exact.get(hostname, ())
        if self.wildcard:
            found = set(positions)
            found.update(i for i in self.wildcard if any(matches(h, hostname) for h in self.ordered[i].spec.hosts))
            positions = tuple(sorted(found))
        return [self.ordered[i] for i in positions]
