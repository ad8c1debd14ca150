"""The mesh's side of the seam (app/xds/source.py): proxies, the push filter, the generator.

``MeshSource`` turns a stream's node into a ``Proxy`` (its labels and locality its pod's, as the
registry knows it, istiod SetWorkloadLabels), answers the secure port's questions about it, and
answers requests and pushes from an ``XdsGenerator``. A push that names the proxy's pod as
relabelled recomputes them and is forced for it (istiod ProxyUpdate: computeProxyState, then
every watched type); the stream keeps the new proxy, which finds its own proxy class.

A push is filtered here as istiod's ProxyNeedsPush does (app/xds/needs_push.py): against the
SidecarScope the proxy's last full push used, which is the stream's note (the transport keeps it
and knows nothing of it), and the scope now. The types a push sends, which of them are forced
and which follow a re-sent type (endpoints after clusters) are the push filter's tables.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Collection, Hashable
from dataclasses import dataclass
from typing import Any

from envoy.config.core.v3 import base_pb2
from google.protobuf import json_format

from app.errors import shown
from app.model.proxy import InvalidNodeError, Proxy, build_proxy
from app.model.sidecar_scope import SidecarScope
from app.security.authn import Caller, SpiffeId, verified_identity
from app.xds.cause import Cause
from app.xds.errors import InvalidNode, Unauthorized
from app.xds.explain import Explanation, Find, contributors, explain_resource
from app.xds.generators.source import XdsGenerator
from app.xds.needs_push import (
    FOLLOWS,
    WorkloadLabels,
    own_targets_changed,
    proxy_needs_push,
    proxy_update,
    types_to_push,
)
from app.xds.push_request import PushRequest
from app.xds.resource import Resource
from app.xds.server import Stream
from app.xds.source import PushAnswer, TypePush
from app.xds.type_urls import ADS_ORDER
from app.xds.watch import WatchedResource

logger = logging.getLogger(__name__)

# a NACK whose message names none of a by-name watch's resources blames all of them, up to this
_MAX_UNNAMED = 20
# what separates the names in Envoy's NACK messages ("Error adding/updating cluster(s) A, B: ...",
# or the rejected resource as text, 'name: "A"'); names hold none of these
_WORDS = re.compile(r'[\s",;()\[\]{}]+')

# a stream of a mesh proxy, as the runtime and the debug endpoints read it
MeshStream = Stream[Proxy, PushRequest]

# child type -> the type whose push makes it follow (needs_push.FOLLOWS read backwards)
_LEADER = {child: parent for parent, child in FOLLOWS.items()}


def proxy_from_node(node: base_pb2.Node) -> Proxy:
    """The Proxy an xDS node describes; raises InvalidNodeError, for whatever in the node
    cannot be read (the server ends the stream with INVALID_ARGUMENT and this short message)."""
    try:
        metadata: dict[str, Any] = json_format.MessageToDict(node.metadata) if node.HasField("metadata") else {}
    except (ValueError, TypeError, json_format.Error) as e:
        # a Struct may hold what JSON cannot: Infinity, NaN
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InvalidNodeError(f"node {shown(node.id)}: unreadable metadata: {shown(reason, 120)}") from None
    loc = node.locality
    locality = "/".join((loc.region, loc.zone, loc.sub_zone)).rstrip("/") if node.HasField("locality") else ""
    try:
        return build_proxy(node.id, metadata, locality, node.cluster)
    except InvalidNodeError:
        raise
    except (ValueError, TypeError, AttributeError, KeyError) as e:  # a bug, but the client's stream only
        logger.warning("node %s: cannot be read", shown(node.id), exc_info=True)
        raise InvalidNodeError(f"node {shown(node.id)}: cannot be read ({type(e).__name__})") from None


def _scope(note: object) -> SidecarScope | None:
    """The scope a stream's note holds (None: the stream was never answered)."""
    return note if isinstance(note, SidecarScope) else None


@dataclass(frozen=True, slots=True)
class MeshPush:
    """What one push does to one proxy's stream (a ``PushPlan``)."""

    note: SidecarScope
    types: tuple[TypePush, ...] | None
    generator: XdsGenerator
    client: Proxy
    request: PushRequest
    previous: SidecarScope | None

    def answer(
        self, step: TypePush, watch: WatchedResource, force_names: Collection[str], partial: bool
    ) -> PushAnswer | None:
        changes = None
        if not step.force:
            changes = self.generator.changes(
                step.type_url, self.client, watch, self.request, self.previous, force_names
            )
        if changes is not None and partial:
            return PushAnswer(changes.resources, changes.considered, changes.resources)
        whole = self.generator.generate(step.type_url, self.client, watch)
        if whole is None:
            return None
        return PushAnswer(whole, None, changes.resources if changes is not None else None)


class MeshSource:
    """The ``ServedSource`` of the mesh's proxies (app/xds/source.py), over ``generator``;
    ``find`` tells where a config object came from (``Environment.config_object``), for the
    objects a rejection or an explanation names; ``workload_labels`` gives a proxy the labels and
    locality of its pod (``ServiceRegistry.with_workload_labels``), which win over the node's."""

    def __init__(
        self, generator: XdsGenerator, find: Find | None = None, workload_labels: WorkloadLabels | None = None
    ) -> None:
        self.generator = generator
        self.find = find
        self.workload_labels = workload_labels
        # the last request's push plans by proxy class (``_types``)
        self._plans: tuple[PushRequest | None, dict[Hashable, tuple[object, object, tuple[TypePush, ...] | None]]] = (
            None,
            {},
        )

    def client(self, node: base_pb2.Node) -> Proxy:
        try:
            proxy = proxy_from_node(node)
        except InvalidNodeError as e:
            raise InvalidNode(str(e)) from None
        # istiod initializeProxy: the pod's labels and locality (the registry's), else the node's
        return self.workload_labels(proxy) if self.workload_labels is not None else proxy

    def authorize(self, client: Proxy, caller: Caller) -> tuple[Proxy, SpiffeId]:
        # istiod authorize: the identity must be the proxy's namespace (and account)
        found = verified_identity(caller, client.namespace, client.service_account)
        if isinstance(found, str):
            raise Unauthorized(f"authorization failed: {found}", client.id)
        return dataclasses.replace(client, verified=True), found

    def secret_access(self, client: Proxy, denied: str) -> Proxy:
        return client if client.secrets_denied == denied else dataclasses.replace(client, secrets_denied=denied)

    def note(self, client: Proxy) -> SidecarScope:
        return self.generator.scope(client)

    def generate(self, type_url: str, client: Proxy, watch: WatchedResource) -> list[Resource] | None:
        return self.generator.generate(type_url, client, watch)

    def explain(self, client: Proxy, type_url: str, name: str) -> Explanation:
        """What the resource the client is served now was made from (raises NotServed)."""
        return explain_resource(self.generator, client, type_url, name, self.find)

    def rejected(self, client: Proxy, type_url: str, error: str, watch: WatchedResource) -> tuple[Cause, ...]:
        """The config objects the client's rejected resources were made from: the resources
        of the type it is served now that Envoy's message names (Envoy names the clusters and
        listeners it refused), else, for a type watched by name, the few it watches."""
        served = self.generator.names(type_url, client, watch.names)
        # Envoy quotes a refused resource's name, or names it before a colon
        words = {w for word in _WORDS.split(error) for w in (word, word.rstrip(":")) if w}
        rejected = [name for name in served if name in words]
        if not rejected and not watch.wildcard and len(served) <= _MAX_UNNAMED:
            rejected = served
        deps = {dep for name in rejected for dep in self.generator.deps(type_url, client, name)}
        configs, _, _ = contributors(self.generator.push_context(), deps, self.find)
        return tuple(configs)

    def push(self, client: Proxy, note: object, request: PushRequest, watched: Collection[str]) -> MeshPush:
        previous = _scope(note)
        updated = proxy_update(client, request, self.workload_labels) if self.workload_labels is not None else None
        if updated is not None:
            self.generator.forget(client)  # the new proxy finds its own class
            client, request = updated  # a request of its own: forced, nothing to share
            scope = self.generator.scope(client)
            types = _plan_types(client, request, previous, scope, watched)
        else:
            full = request.full or request.forced
            scope = self.generator.scope(client) if full or previous is None else previous
            types = self._types(client, request, previous, scope, watched)
        return MeshPush(scope, types, self.generator, client, request, previous)

    def _types(
        self,
        client: Proxy,
        request: PushRequest,
        previous: SidecarScope | None,
        scope: SidecarScope,
        watched: Collection[str],
    ) -> tuple[TypePush, ...] | None:
        """What the push sends this proxy: None when the filter finds nothing it changes. The
        same for every proxy of a class (its scopes, its type, whether its own addresses' targets
        changed, the types it watches), so worked out once per request and class: the filter runs
        for each stream before its push is queued and again when it is written, 2 x 400 streams
        for an endpoint added. The memo holds the scopes it is keyed by (by identity) and goes
        with the next request."""
        memo_request, memo = self._plans
        if memo_request is not request:
            memo = {}
            self._plans = (request, memo)
        own = own_targets_changed(client, request)
        key = (id(scope), id(previous), client.type, own, tuple(watched))
        found = memo.get(key)
        if found is None:
            found = memo[key] = (scope, previous, _plan_types(client, request, previous, scope, watched))
        return found[2]


def _plan_types(
    client: Proxy, request: PushRequest, previous: SidecarScope | None, scope: SidecarScope, watched: Collection[str]
) -> tuple[TypePush, ...] | None:
    if not proxy_needs_push(client, request, previous, scope):
        return None
    # what an ADS stream would push: a per-type EDS (RDS) stream cannot see whether the
    # client's CDS (LDS) stream re-sent clusters, so it resends whenever that could be so
    affected = types_to_push(client, request, {*watched, *ADS_ORDER})
    elsewhere = set(affected).difference(watched)
    return tuple(
        TypePush(t, request.forced or _LEADER.get(t) in elsewhere, _LEADER.get(t)) for t in affected if t in watched
    )
