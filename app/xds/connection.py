"""One xDS stream's logic between the wire and the generators, still without I/O.

A ``Connection`` pairs a proxy with its protocol session (SotW or Delta) and the injected
``ResourceSource`` it asks for resources. Given a request or a push it returns the responses
to write, in ADS order:
clusters before endpoints, listeners before routes, and the endpoints (routes) again
whenever a push re-sent clusters (listeners), which Envoy needs to finish warming them; the
endpoints of the clusters an answer to a request sent, too (a reconnect's CDS request may
come after its EDS request: ``_warm``).
A Delta subscription change of a type subscribed by name is answered from the names it adds
alone (``Outcome.subscribed``), so it costs what it names; an answer that generated a type's
whole set and sent nothing is paid from the stream's ``IdleAnswers`` (app/xds/watch.py).
The gRPC servicer (server.py) only feeds it and writes what it returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from envoy.config.core.v3 import base_pb2
from google.protobuf import json_format

from app.model.proxy import InvalidNodeError, Proxy, build_proxy, shown
from app.model.sidecar_scope import SidecarScope
from app.xds.delta import DeltaSession
from app.xds.generate import ResourceSource
from app.xds.needs_push import FOLLOWS, proxy_needs_push, types_to_push
from app.xds.push_request import PushRequest
from app.xds.resources import ADS_ORDER, CLUSTER, ENDPOINT, EXPLICIT_TYPES, SHORT_NAMES
from app.xds.watch import IdleAnswers, Outcome, RequestKind, Resource, WatchedResource

logger = logging.getLogger(__name__)


class Response(Protocol):
    """A response a session makes (DeltaResponse, SotwResponse): what it carries."""

    @property
    def resources(self) -> Sequence[Resource]: ...


Req = TypeVar("Req")
Resp = TypeVar("Resp", bound=Response)
_Req_contra = TypeVar("_Req_contra", contravariant=True)
_Resp_co = TypeVar("_Resp_co", bound=Response, covariant=True)

# child type -> the type whose push makes it follow (needs_push.FOLLOWS read backwards)
_LEADER = {child: parent for parent, child in FOLLOWS.items()}
# a type whose answer to a request brings the resources Envoy needs to warm what it sent: the
# endpoints of the clusters (istiod WarmingDependencies, pilot/pkg/model/context.go; Delta:
# processDeltaRequest -> forceEDSPush after any CDS answer, pilot/pkg/xds/delta.go). Routes need
# no such thing: a re-sent listener shares the RDS subscription it had, which is warm already.
_WARMING = {CLUSTER: ENDPOINT}


class Session(Protocol[_Req_contra, _Resp_co]):
    """SotwSession and DeltaSession."""

    @property
    def watches(self) -> dict[str, WatchedResource]: ...

    def on_request(self, req: _Req_contra) -> Outcome: ...

    def answer(self, type_url: str, resources: Sequence[Resource]) -> _Resp_co | None: ...

    def response(
        self,
        type_url: str,
        resources: Sequence[Resource],
        *,
        force: bool = False,
        force_names: Collection[str] = (),
        considered: Collection[str] | None = None,
    ) -> _Resp_co | None: ...


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
        return build_proxy(node.id, metadata, locality)
    except InvalidNodeError:
        raise
    except (ValueError, TypeError, AttributeError, KeyError) as e:  # a bug, but the client's stream only
        logger.warning("node %s: cannot be read", shown(node.id), exc_info=True)
        raise InvalidNodeError(f"node {shown(node.id)}: cannot be read ({type(e).__name__})") from None


class Connection(Generic[Req, Resp]):
    """One stream: its proxy, its protocol session, and the SidecarScope its last full push used
    (istiod keeps it as PrevSidecarScope, to push a proxy a change takes config away from)."""

    def __init__(
        self,
        conn_id: str,
        proxy: Proxy,
        session: Session[Req, Resp],
        source: ResourceSource,
        on_outcome: Callable[[Outcome, Proxy], None] | None = None,
        idle: IdleAnswers | None = None,
    ) -> None:
        """``on_outcome`` hears how each request was taken (an ACK, a NACK, a stale nonce, ...);
        ``idle`` pays for the requests that made it generate a whole type and send nothing."""
        self.id = conn_id
        self._on_outcome = on_outcome
        self._idle = idle
        self.proxy = proxy
        self.session = session
        self.source = source
        self.pushes = 0
        self.skipped = 0  # pushes the dependency filter answered with nothing
        # seconds the last push took to build each type's response (istiod pilot_xds_push_time)
        self.build_seconds: dict[str, float] = {}
        self.scope: SidecarScope | None = None

    @property
    def delta(self) -> bool:
        return isinstance(self.session, DeltaSession)

    def on_request(self, req: Req) -> list[Resp]:
        outcome = self.session.on_request(req)
        if self._on_outcome is not None:
            self._on_outcome(outcome, self.proxy)
        if outcome.kind is RequestKind.NACK:
            logger.warning(
                "%s NACK from %s (%s): %s",
                SHORT_NAMES.get(outcome.type_url, outcome.type_url),
                self.proxy.id,
                self.id,
                outcome.error,
            )
        if not outcome.respond:
            return []
        type_url = outcome.type_url
        watch = self.session.watches[type_url]
        if self.scope is None:
            self.scope = self.source.scope(self.proxy)
        subscribed = outcome.subscribed
        if subscribed is not None and type_url in EXPLICIT_TYPES and not watch.wildcard:
            # a Delta subscription change: the answer is what the names it added need, built
            # for those alone, whatever else the stream watches
            view = WatchedResource(type_url, False, subscribed)
            resources = self.source.generate(type_url, self.proxy, view)
            if resources is None:
                return []
            resp = self.session.response(type_url, resources, considered=subscribed)
        else:
            resources = self.source.generate(type_url, self.proxy, watch)
            if resources is None:
                return []
            resp = self.session.answer(type_url, resources)
            whole = watch.wildcard or type_url not in EXPLICIT_TYPES
            if resp is None and whole and outcome.kind is not RequestKind.INITIAL and self._idle is not None:
                self._idle.spend()  # the type's whole set generated for nothing
        if resp is None:
            return []
        dependent = _WARMING.get(outcome.type_url)
        follow = self._warm(dependent, resp) if dependent is not None else None
        return [resp] if follow is None else [resp, follow]

    def _warm(self, type_url: str, leader: Resp) -> Resp | None:
        """After an answer that sent clusters, their endpoints, even unchanged: Envoy warms a
        new or modified EDS cluster only on an assignment that arrives after it. On a reconnect
        the EDS request may come first (answered before the clusters it has to warm), and Envoy
        asks for nothing again (Delta) or only ACKs (SotW, same names). As istiod, whose Delta
        server pushes EDS after every CDS answer (delta.go forceEDSPush) and whose SotW server
        answers the next EDS request whatever it is (context.go NewWatchedResource sets
        AlwaysRespond); here, the endpoints of the clusters sent (SotW: the whole watched set),
        right away. Nothing when the stream does not watch endpoints (yet: its first EDS request
        gets everything it names, delta.NAMES_ONLY_ON_RECONNECT)."""
        watch = self.session.watches.get(type_url)
        sent = frozenset(r.name for r in leader.resources)
        if watch is None or not sent:
            return None
        resources = self.source.generate(type_url, self.proxy, watch)
        if resources is None:
            return None
        return self.session.response(type_url, resources, force_names=sent)

    def on_push(self, req: PushRequest) -> list[Resp]:
        """The responses a push needs, in ADS order; none when the change cannot affect this
        proxy (istiod ProxyNeedsPush: its scope, before or after, does not depend on it)."""
        previous = self.scope
        if req.full or self.scope is None:
            self.scope = self.source.scope(self.proxy)
        if not proxy_needs_push(self.proxy, req, previous, self.scope):
            self.skipped += 1
            return []
        self.pushes += 1
        out: list[Resp] = []
        watched = self.session.watches.keys()
        # what an ADS stream would push: a per-type EDS (RDS) stream cannot see whether the
        # client's CDS (LDS) stream re-sent clusters, so it resends whenever that could be so
        affected = types_to_push(self.proxy, req, watched | set(ADS_ORDER))
        elsewhere = set(affected) - watched
        sent: dict[str, frozenset[str]] = {}
        self.build_seconds = {}
        for type_url in (t for t in affected if t in watched):
            began = time.perf_counter()
            watch = self.session.watches[type_url]
            leader = _LEADER.get(type_url)
            # a re-sent cluster (listener) needs its endpoints (routes) to finish warming: the
            # same names, the others stay as they are. Envoy 1.40 keeps a modified EDS cluster
            # warming until an assignment for it arrives after the CDS response (Delta never
            # re-asks; with istiod's initial_fetch_timeout 0s it never warms on its own)
            force = req.forced or leader in elsewhere
            force_names = sent.get(leader, frozenset()) if leader else frozenset()
            partial = None
            if not force:
                partial = self.source.changes(type_url, self.proxy, watch, req, previous, force_names)
            # Delta can carry just what changed, and so can SotW for the explicitly subscribed
            # types (Envoy updates the assignments named and keeps the others, as with istiod's
            # incremental EDS); a SotW CDS/LDS response holds the whole set
            if partial is not None and (self.delta or type_url in EXPLICIT_TYPES):
                resources: Sequence[Resource] | None = partial.resources
                considered: frozenset[str] | None = partial.considered
            else:
                resources, considered = self.source.generate(type_url, self.proxy, watch), None
            if resources is None:
                continue
            resp = self.session.response(
                type_url, resources, force=force, force_names=force_names, considered=considered
            )
            if resp is not None:
                # what changed for the client: what a SotW response carries besides the
                # unchanged rest is what the partial found; a Delta response carries only that
                changed = partial.resources if partial is not None and not self.delta else resp.resources
                sent[type_url] = frozenset(r.name for r in changed)
                out.append(resp)
                self.build_seconds[type_url] = time.perf_counter() - began
        return out

    def watched(self) -> Iterable[WatchedResource]:
        return self.session.watches.values()
