"""The preview itself: the push a change would make, computed and never published.

The change is applied to a private Environment, the request it makes and the snapshot after the
one served are built as ``Discovery`` builds them (app/xds/next_push.py), and each proxy is put
through the push filter (``proxy_needs_push``, ``types_to_push``) against the SidecarScope its
last push used; the proxy of a relabelled pod is recomputed and forced as the server does
(app/xds/mesh_source.py). For every type the push would send, what the served generator gives
the proxy now is compared by resource version with what a generator of the new snapshot gives
it: added, modified, removed, and the bytes the added and modified resources take on the wire.
EDS and RDS follow CDS and LDS as Envoy does: after the change the proxy asks for the endpoints
of its new EDS clusters and the routes its new listeners name.

Nothing served changes: the new snapshot is published to a generator of its own, over a copy of
the served cache that the publish invalidates as the real one would; the served generator is
only asked for what it serves (its cache may fill, with what serving would put there). The
Environment given is changed, so it must be the caller's own copy.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.listener.v3 import listener_pb2
from google.protobuf import json_format

from app.environment import Environment
from app.model.proxy import Proxy
from app.preview.change import Proposal
from app.preview.proxies import Watching
from app.translate.endpoint.for_proxy import eds_cluster_names
from app.translate.listener.for_proxy import route_names
from app.xds.generators.source import XdsGenerator
from app.xds.needs_push import proxy_needs_push, proxy_update, types_to_push
from app.xds.next_push import next_push_context, push_request
from app.xds.resource import Resource, set_version
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, ROUTE
from app.xds.watch import WatchedResource

# a child type's names, read from the parent type's resources (what Envoy subscribes to)
_NAMES_FROM: dict[str, tuple[str, Callable[[list[Resource]], list[str]]]] = {
    ENDPOINT: (CLUSTER, lambda rs: eds_cluster_names(cluster_pb2.Cluster.FromString(r.body.value) for r in rs)),
    ROUTE: (LISTENER, lambda rs: route_names(listener_pb2.Listener.FromString(r.body.value) for r in rs)),
}


@dataclass(frozen=True, slots=True)
class TypeDiff:
    """What a push would change of one type for one proxy; ``diffs``: a unified diff of each
    modified resource's proto3 JSON (when asked for)."""

    added: tuple[str, ...]
    modified: tuple[str, ...]
    removed: tuple[str, ...]
    bytes: int
    diffs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProxyDiff:
    id: str
    types: dict[str, TypeDiff]


@dataclass(frozen=True, slots=True)
class Preview:
    """The change, the proxies it reaches (in the order given) and how many it leaves alone."""

    proposal: Proposal
    proxies: tuple[ProxyDiff, ...]
    unaffected: int


class _Names:
    """A child type's subscribed names from a generator's parent resources, once per distinct
    parent set (proxies of a class share it)."""

    def __init__(self, generator: XdsGenerator) -> None:
        self._generator = generator
        self._memo: dict[tuple[str, str], frozenset[str]] = {}

    def __call__(self, type_url: str, proxy: Proxy) -> frozenset[str]:
        parent, names = _NAMES_FROM[type_url]
        found = self._generator.generate(parent, proxy, WatchedResource(parent, True)) or []
        key = (type_url, set_version(found))
        out = self._memo.get(key)
        if out is None:
            out = self._memo[key] = frozenset(names(found))
        return out


def _watch(w: Watching, type_url: str, names: _Names, follow: bool, proxy: Proxy) -> WatchedResource:
    """The proxy's watch of ``type_url``; with ``follow``, an EDS or RDS watch subscribed to
    what its wildcard CDS or LDS watch is served to ``proxy`` (as Envoy subscribes)."""
    watch = w.watches[type_url]
    found = _NAMES_FROM.get(type_url)
    if not follow or found is None:
        return watch
    leader = w.watches.get(found[0])
    if leader is None or not leader.wildcard:
        return watch
    return WatchedResource(type_url, watch.wildcard, names(type_url, proxy))


def _json(resource: Resource) -> list[str]:
    text = json_format.MessageToJson(resource.body, indent=2, sort_keys=True)
    return text.splitlines(keepends=True)


def _compare(type_url: str, old: list[Resource], new: list[Resource], show_diff: bool) -> TypeDiff | None:
    before = {r.name: r for r in old}
    after = {r.name: r for r in new}
    added = tuple(sorted(after.keys() - before.keys()))
    removed = tuple(sorted(before.keys() - after.keys()))
    modified = tuple(sorted(n for n in after.keys() & before.keys() if after[n].version != before[n].version))
    if not (added or removed or modified):
        return None
    size = sum(len(after[n].entry) for n in (*added, *modified))
    diffs: tuple[str, ...] = ()
    if show_diff:
        diffs = tuple(
            "".join(difflib.unified_diff(_json(before[n]), _json(after[n]), f"{type_url} {n}", f"{type_url} {n}"))
            for n in modified
        )
    return TypeDiff(added, modified, removed, size, diffs)


def preview(
    env: Environment,
    served: XdsGenerator,
    watching: Sequence[Watching],
    proposal: Proposal,
    *,
    show_diff: bool = False,
) -> Preview:
    """The push ``proposal`` would make to the proxies ``watching``, from the snapshot ``served``
    serves, ``env`` holding the config it was built from (changed here: the caller's copy)."""
    change = env.apply(proposal.events)
    request = push_request(change, len(proposal.events))
    if request is None:
        return Preview(proposal, (), len(watching))
    previous_push = served.push_context()
    # the push as Discovery makes it, published to a generator of its own over a copy of the
    # served cache: the copy is invalidated as the served one would be, and keeps the rest
    after = XdsGenerator(served.cache.copy(), previous_push)
    after.publish(next_push_context(previous_push, env, request)(), request)
    old_names, new_names = _Names(served), _Names(after)
    # proxies of a class are served the very same Resource objects: one comparison per class
    # (the lists are kept with it, so the ids in the key stay theirs)
    compared: dict[tuple[str, tuple[int, ...], tuple[int, ...]], tuple[TypeDiff | None, object]] = {}
    reached = []
    for w in watching:
        proxy = w.proxy
        # a relabelled pod's proxy recomputed and forced, as the server does (MeshSource.push)
        now, asked = proxy_update(proxy, request, env.registry.with_workload_labels) or (proxy, request)
        previous = w.scope if w.scope is not None else served.scope(proxy)
        if not proxy_needs_push(now, asked, previous, after.scope(now)):
            continue
        types = {}
        for type_url in types_to_push(now, asked, w.watches):
            old = served.generate(type_url, proxy, _watch(w, type_url, old_names, w.synced, proxy)) or []
            new = after.generate(type_url, now, _watch(w, type_url, new_names, True, now)) or []
            key = (type_url, tuple(map(id, old)), tuple(map(id, new)))
            hit = compared.get(key)
            if hit is None:
                hit = compared[key] = (_compare(type_url, old, new, show_diff), (old, new))
            found = hit[0]
            if found is not None:
                types[type_url] = found
        if types:
            reached.append(ProxyDiff(proxy.id, types))
    return Preview(proposal, tuple(reached), len(watching) - len(reached))
