"""bookinfo behind a cached XdsGenerator in assertion mode, changed as the runtime changes it
(apply, then the push request's ``Discovery.push``: PushContext rebuild or endpoint fast path,
published, cache invalidated)."""

from __future__ import annotations

from collections.abc import Mapping

from envoy.config.listener.v3 import listener_pb2
from envoy.service.discovery.v3 import discovery_pb2

from app.config.loader import load_documents
from app.config.objects import ConfigEvent, EventType
from app.environment import Environment
from app.model.proxy import Proxy, build_proxy
from app.sources.files import FileSource
from app.translate.listener.for_proxy import route_names
from app.xds.cache import ResourceCache
from app.xds.connection import Connection
from app.xds.delta import DeltaSession
from app.xds.discovery import Discovery, Pushed
from app.xds.mesh_source import MeshSource
from app.xds.next_push import push_request
from app.xds.push_request import PushRequest
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, ROUTE
from app.xds.watch import counter_nonces
from tests.support.bookinfo import BOOKINFO, NODE

Req = discovery_pb2.DeltaDiscoveryRequest
DeltaConnection = Connection[
    Proxy, PushRequest, discovery_pb2.DeltaDiscoveryRequest, discovery_pb2.DeltaDiscoveryResponse
]


class Mesh:
    def __init__(self, *, queued: bool = False) -> None:
        """``queued``: pushes go to the connections made here through the push queue (after
        the filter's pre-check), not by hand."""
        self.env = Environment()
        self.env.apply(FileSource(BOOKINFO).load())
        self.connections: list[DeltaConnection] = []
        self.discovery: Discovery[DeltaConnection] = Discovery(
            self.env,
            ResourceCache(verify=True),
            streams=(lambda: self.connections) if queued else tuple,
            unaffected=lambda conn, request: conn.unaffected(request),
        )
        self.discovery.start()
        self.source = MeshSource(self.discovery.generator)
        self.pushed: Pushed | None = None  # what the latest change's push did

    def connect(
        self,
        node: str = NODE,
        *,
        listeners: bool = False,
        labels: Mapping[str, str] | None = None,
        service_cluster: str = "",
        metadata: Mapping[str, str] | None = None,
    ) -> tuple[DeltaConnection, list[str]]:
        """A Delta ADS stream subscribed as Envoy does (CDS, EDS for its clusters; with
        ``listeners`` LDS and RDS for the listeners' routes too), every response ACKed; returns
        it and its EDS names. ``labels``: the node's LABELS metadata; ``service_cluster``: its
        ``node.cluster``; ``metadata``: more of its metadata (string values, as pilot-agent's)."""
        node_metadata: dict[str, object] = {
            **(metadata or {}),
            **({"LABELS": dict(labels)} if labels is not None else {}),
        }
        proxy = build_proxy(node, node_metadata or None, service_cluster=service_cluster)
        conn: DeltaConnection = Connection("c", proxy, DeltaSession(counter_nonces(), None), self.source)
        self.connections.append(conn)

        def ask(req: discovery_pb2.DeltaDiscoveryRequest) -> list[discovery_pb2.DeltaDiscoveryResponse]:
            out = conn.on_request(req)
            for resp in out:
                conn.on_request(Req(type_url=resp.type_url, response_nonce=resp.nonce))
            return out

        [cds] = ask(Req(type_url=CLUSTER))
        eds_names = sorted(r.name for r in cds.resources if r.name.startswith("outbound|"))
        ask(Req(type_url=ENDPOINT, resource_names_subscribe=eds_names))
        if listeners:
            [lds] = ask(Req(type_url=LISTENER))
            found = [listener_pb2.Listener.FromString(r.body.value) for r in lds.resources]
            ask(Req(type_url=ROUTE, resource_names_subscribe=route_names(found)))
        return conn, eds_names

    def apply(self, text: str) -> PushRequest:
        """Add or replace the objects in ``text``; returns the push request the change makes."""
        return self._change(text, EventType.UPDATE)

    def delete(self, text: str) -> PushRequest:
        """Delete the objects in ``text``; returns the push request the change makes."""
        return self._change(text, EventType.DELETE)

    def _change(self, text: str, event: EventType) -> PushRequest:
        objects = load_documents(text, "change.yaml").objects
        events = [ConfigEvent(event, obj) for obj in objects]
        request = push_request(self.env.apply(events), len(events))
        assert request is not None, "the change made no push"
        self.pushed = self.discovery.push(request)
        return self.pushed.request
