"""One xDS stream's logic between the wire and the resource source, still without I/O.

A ``Connection`` pairs a client (opaque here: the source made it of the stream's node) with its
protocol session (SotW or Delta) and the injected ``ResourceSource`` it asks for resources
(app/xds/source.py). Given a request or a push it returns the responses to write, in the order
the source's push plan gives (ADS order: clusters before endpoints, listeners before routes),
and a type again by the names its leader re-sent (endpoints whenever a push re-sent clusters,
which Envoy needs to finish warming them); the endpoints of the clusters an answer to a request
sent, too (a reconnect's CDS request may come after its EDS request: ``_warm``).
A Delta subscription change of a type subscribed by name is answered from the names it adds
alone (``Outcome.subscribed``), so it costs what it names; an answer that generated a type's
whole set and sent nothing is paid from the stream's ``IdleAnswers`` (app/xds/limits.py).
The gRPC servicer (server.py) only feeds it and writes what it returns.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

from app.xds.cause import Cause
from app.xds.delta import DeltaSession
from app.xds.limits import ANSWER_PART, IdleAnswers
from app.xds.resource import Resource
from app.xds.source import C, P, ResourceSource
from app.xds.type_urls import CLUSTER, ENDPOINT, EXPLICIT_TYPES, SHORT_NAMES
from app.xds.watch import Outcome, RequestKind, WatchedResource

logger = logging.getLogger(__name__)


class Response(Protocol):
    """A response a session makes (DeltaResponse, SotwResponse): what it carries."""

    @property
    def resources(self) -> Sequence[Resource]: ...


Req = TypeVar("Req")
Resp = TypeVar("Resp", bound=Response)
_Req_contra = TypeVar("_Req_contra", contravariant=True)
_Resp_co = TypeVar("_Resp_co", bound=Response, covariant=True)

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


class Connection(Generic[C, P, Req, Resp]):
    """One stream: its client, its protocol session, and the source's note for it (the mesh's
    source keeps there the scope the last full push used, istiod's PrevSidecarScope, to push a
    proxy a change takes config away from)."""

    def __init__(
        self,
        conn_id: str,
        client: C,
        session: Session[Req, Resp],
        source: ResourceSource[C, P],
        on_outcome: Callable[[Outcome, C], None] | None = None,
        idle: IdleAnswers | None = None,
    ) -> None:
        """``on_outcome`` hears how each request was taken (an ACK, a NACK, a stale nonce, ...);
        ``idle`` pays for the requests that made it generate a whole type and send nothing."""
        self.id = conn_id
        self._on_outcome = on_outcome
        self._idle = idle
        self.client = client
        self.session = session
        self.source = source
        self.pushes = 0
        self.skipped = 0  # pushes the source's filter answered with nothing
        # seconds the last push took to build each type's response (istiod pilot_xds_push_time)
        self.build_seconds: dict[str, float] = {}
        self.note: object = None  # the source's, handed back to it on every push
        self.last_outcome: Outcome | None = None  # how the latest request was taken

    def _causes(self, outcome: Outcome) -> tuple[Cause, ...]:
        """The source's word on what the rejected resources were made from; a source that
        fails to say costs the NACK its causes, never the stream."""
        watch = self.session.watches.get(outcome.type_url)
        if watch is None:
            return ()
        try:
            return tuple(self.source.rejected(self.client, outcome.type_url, outcome.error, watch))
        except Exception:
            logger.exception("%s: the causes of a NACK could not be found", self.client.id)
            return ()

    @property
    def delta(self) -> bool:
        return isinstance(self.session, DeltaSession)

    def on_request(self, req: Req) -> list[Resp]:
        return list(self.answers(req))

    def answers(self, req: Req) -> Iterator[Resp]:
        """The responses to ``req``, each built as it is taken: the server writes one before
        the next is built, so an answer of many parts holds up the event loop no longer than
        a part (``_in_parts``)."""
        outcome = self.session.on_request(req)
        if outcome.kind is RequestKind.NACK:
            outcome = dataclasses.replace(outcome, causes=self._causes(outcome))
            # the objects first: Envoy's message may run over many lines
            made = ", made from " + ", ".join(map(str, outcome.causes)) if outcome.causes else ""
            logger.warning(
                "%s NACK from %s (%s)%s: %s",
                SHORT_NAMES.get(outcome.type_url, outcome.type_url),
                self.client.id,
                self.id,
                made,
                outcome.error,
            )
        self.last_outcome = outcome
        if self._on_outcome is not None:
            self._on_outcome(outcome, self.client)
        if not outcome.respond:
            return
        type_url = outcome.type_url
        watch = self.session.watches[type_url]
        if self.note is None:
            self.note = self.source.note(self.client)
        subscribed = outcome.subscribed
        named = type_url in EXPLICIT_TYPES and not watch.wildcard
        asked = subscribed if subscribed is not None else watch.names
        if named and len(asked) > ANSWER_PART:
            yield from self._in_parts(type_url, asked)
            return
        if subscribed is not None and named:
            # a Delta subscription change: the answer is what the names it added need, built
            # for those alone, whatever else the stream watches
            view = WatchedResource(type_url, False, subscribed)
            resources = self.source.generate(type_url, self.client, view)
            if resources is None:
                return
            resp = self.session.response(type_url, resources, considered=subscribed)
        else:
            resources = self.source.generate(type_url, self.client, watch)
            if resources is None:
                return
            resp = self.session.answer(type_url, resources)
            whole = watch.wildcard or type_url not in EXPLICIT_TYPES
            if resp is None and whole and outcome.kind is not RequestKind.INITIAL and self._idle is not None:
                self._idle.spend()  # the type's whole set generated for nothing
        if resp is None:
            return
        yield resp
        dependent = _WARMING.get(outcome.type_url)
        follow = self._warm(dependent, resp) if dependent is not None else None
        if follow is not None:
            yield follow

    def _in_parts(self, type_url: str, names: Collection[str]) -> Iterator[Resp]:
        """An answer to a request naming more than ``ANSWER_PART`` resources of a type
        subscribed by name, in responses of that many names each, each what a whole answer
        would send of its names. Envoy takes each EDS or RDS response for the resources it
        names and keeps the others it watches, in SotW as in Delta; istiod builds such an answer
        in the stream's own goroutine, where it holds up no other stream, and one request for
        100,000 names here took the event loop 3 s in one go."""
        ordered = sorted(names)
        for start in range(0, len(ordered), ANSWER_PART):
            part = frozenset(ordered[start : start + ANSWER_PART])
            resources = self.source.generate(type_url, self.client, WatchedResource(type_url, False, part))
            if resources is None:
                return
            # SotW sends what it is asked for even when unchanged, Delta what the client lacks
            resp = self.session.response(type_url, resources, force=not self.delta, considered=part)
            if resp is not None:
                yield resp

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
        if watch is None or not leader.resources:
            return None
        sent = frozenset(r.name for r in leader.resources)
        resources = self.source.generate(type_url, self.client, watch)
        if resources is None:
            return None
        return self.session.response(type_url, resources, force_names=sent)

    def unaffected(self, req: P) -> bool:
        """Whether the source's filter says the push changes nothing for this client (istiod
        ProxyNeedsPush); if so the push is done here, as ``on_push`` would do it (the note
        moves on), and nothing needs queueing. For a connection no push waits or runs for."""
        plan = self.source.push(self.client, self.note, req, self.session.watches.keys())
        if plan.types is not None:
            return False
        self.client = plan.client
        self.note = plan.note
        self.skipped += 1
        return True

    def on_push(self, req: P) -> list[Resp]:
        """The responses a push needs, in the source's order; none when the source's filter
        says the change cannot affect this client (istiod ProxyNeedsPush)."""
        plan = self.source.push(self.client, self.note, req, self.session.watches.keys())
        self.client = plan.client
        self.note = plan.note
        if plan.types is None:
            self.skipped += 1
            return []
        self.pushes += 1
        out: list[Resp] = []
        sent: dict[str, frozenset[str]] = {}
        self.build_seconds = {}
        for step in plan.types:
            began = time.perf_counter()
            type_url = step.type_url
            watch = self.session.watches[type_url]
            # a re-sent cluster (listener) needs its endpoints (routes) to finish warming: the
            # same names, the others stay as they are. Envoy 1.40 keeps a modified EDS cluster
            # warming until an assignment for it arrives after the CDS response (Delta never
            # re-asks; with istiod's initial_fetch_timeout 0s it never warms on its own)
            force_names = sent.get(step.leader, frozenset()) if step.leader else frozenset()
            # Delta can carry just what changed, and so can SotW for the explicitly subscribed
            # types (Envoy updates the assignments named and keeps the others, as with istiod's
            # incremental EDS); a SotW CDS/LDS response holds the whole set
            answer = plan.answer(step, watch, force_names, self.delta or type_url in EXPLICIT_TYPES)
            if answer is None:
                continue
            resp = self.session.response(
                type_url,
                answer.resources,
                force=step.force,
                force_names=force_names,
                considered=answer.considered,
            )
            if resp is not None:
                # what changed for the client: what a SotW response carries besides the
                # unchanged rest is what the partial found; a Delta response carries only that
                changed = answer.changed if answer.changed is not None and not self.delta else resp.resources
                sent[type_url] = frozenset(r.name for r in changed)
                out.append(resp)
                self.build_seconds[type_url] = time.perf_counter() - began
        return out

    def watched(self) -> Iterable[WatchedResource]:
        return self.session.watches.values()
