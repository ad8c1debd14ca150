"""One xDS stream's logic between the wire and the generators, still without I/O.

A ``Connection`` pairs a proxy with its protocol session (SotW or Delta). Given a request
or a push and the current PushContext it returns the responses to write, in ADS order:
clusters before endpoints, listeners before routes, and the endpoints (routes) again
whenever clusters (listeners) were re-sent, which Envoy needs to finish warming them.
The gRPC servicer (server.py) only feeds it and writes what it returns.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from envoy.config.core.v3 import base_pb2
from google.protobuf import json_format

from app.model.proxy import Proxy, build_proxy
from app.model.push_context import PushContext
from app.xds.delta import DeltaSession
from app.xds.generate import generator_for
from app.xds.needs_push import FOLLOWS, types_to_push
from app.xds.push import PushRequest
from app.xds.resources import ADS_ORDER, SHORT_NAMES
from app.xds.watch import Outcome, RequestKind, Resource, WatchedResource

logger = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")
_Req_contra = TypeVar("_Req_contra", contravariant=True)
_Resp_co = TypeVar("_Resp_co", covariant=True)

# child type -> the type whose push makes it follow (needs_push.FOLLOWS read backwards)
_LEADER = {child: parent for parent, child in FOLLOWS.items()}


class Session(Protocol[_Req_contra, _Resp_co]):
    """SotwSession and DeltaSession."""

    @property
    def watches(self) -> dict[str, WatchedResource]: ...

    def on_request(self, req: _Req_contra) -> Outcome: ...

    def answer(self, type_url: str, resources: Sequence[Resource]) -> _Resp_co | None: ...

    def response(self, type_url: str, resources: Sequence[Resource], *, force: bool = False) -> _Resp_co | None: ...


def proxy_from_node(node: base_pb2.Node) -> Proxy:
    """The Proxy an xDS node describes; raises InvalidNodeError."""
    metadata: dict[str, Any] = json_format.MessageToDict(node.metadata) if node.HasField("metadata") else {}
    loc = node.locality
    locality = "/".join((loc.region, loc.zone, loc.sub_zone)).rstrip("/") if node.HasField("locality") else ""
    return build_proxy(node.id, metadata, locality)


class Connection(Generic[Req, Resp]):
    def __init__(self, conn_id: str, proxy: Proxy, session: Session[Req, Resp]) -> None:
        self.id = conn_id
        self.proxy = proxy
        self.session = session
        self.pushes = 0
        self.push_version = 0  # the PushContext version of the last responses sent

    @property
    def delta(self) -> bool:
        return isinstance(self.session, DeltaSession)

    def on_request(self, req: Req, push: PushContext) -> list[Resp]:
        outcome = self.session.on_request(req)
        if outcome.kind is RequestKind.NACK:
            logger.warning(
                "%s NACK from %s (%s): %s",
                SHORT_NAMES.get(outcome.type_url, outcome.type_url),
                self.proxy.id,
                self.id,
                outcome.error,
            )
        generator = generator_for(outcome.type_url)
        if not outcome.respond or generator is None:
            return []
        watch = self.session.watches[outcome.type_url]
        resp = self.session.answer(outcome.type_url, generator(self.proxy, push, watch))
        return self._sent([resp] if resp is not None else [], push)

    def on_push(self, push: PushContext, req: PushRequest) -> list[Resp]:
        self.pushes += 1
        sent: set[str] = set()
        out: list[Resp] = []
        watched = self.session.watches.keys()
        # what an ADS stream would push: a per-type EDS (RDS) stream cannot see whether the
        # client's CDS (LDS) stream re-sent clusters, so it resends whenever that could be so
        affected = types_to_push(self.proxy, req, watched | set(ADS_ORDER))
        elsewhere = set(affected) - watched
        for type_url in (t for t in affected if t in watched):
            generator = generator_for(type_url)
            if generator is None:
                continue
            watch = self.session.watches[type_url]
            leader = _LEADER.get(type_url)
            force = req.forced or leader in sent or leader in elsewhere
            resp = self.session.response(type_url, generator(self.proxy, push, watch), force=force)
            if resp is not None:
                sent.add(type_url)
                out.append(resp)
        return self._sent(out, push)

    def _sent(self, responses: list[Resp], push: PushContext) -> list[Resp]:
        if responses:
            self.push_version = push.version
        return responses

    def watched(self) -> Iterable[WatchedResource]:
        return self.session.watches.values()
