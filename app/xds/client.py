"""What Envoy says on an ADS stream, Delta or SotW, without I/O: the client side of the protocol,
for the ADS fetch (app/xds/fetch.py: ``compare-istiod``, the differential test) and the
benchmark's simulated proxies.

``AdsClient.start()`` gives the requests that open a stream; ``on_response()`` takes one response
and gives back the ACK plus whatever the response makes Envoy ask for next, in Envoy's order:

* CDS wildcard first; each CDS response makes Envoy (un)subscribe EDS for its EDS clusters
  (``Cluster.type == EDS``; the name is ``eds_cluster_config.service_name``, else the cluster's);
* LDS wildcard once CDS has initialised, i.e. after the first EDS response (or after the first
  CDS response when no cluster needs EDS);
* each LDS response makes it (un)subscribe RDS for the ``route_config_name`` of every
  HttpConnectionManager with ``rds`` (filter chains and the default filter chain).

An agent's stream (``agent=True``: pilot-agent's upstream, carrying its Envoy's types) also
subscribes to the NDS name table right after CDS, and is complete once that is ACKed too.
Only a stream's first request carries the node (as Istio's bootstrap has Envoy do). Delta: an
ACK is ``response_nonce`` alone; a subscription change is its own request of subscribe /
unsubscribe differences; ``removed_resources`` are dropped; a new stream re-subscribes every
type it had with ``initial_resource_versions`` of everything held. SotW: an ACK repeats
``version_info``, ``response_nonce`` and the subscribed names; a new stream re-requests every
type with the last accepted ``version_info``. Wildcard subscriptions are the legacy empty name
list, as Envoy sends them.

The clusters and listeners are decoded only to find those names, once per distinct resource
body (``Inspector``, shared by every client of a process), so 2,000 clients holding the same
clusters cost one decode each; names and versions are interned, so they hold one copy.
"""

from __future__ import annotations

import abc
import sys
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import json_format, struct_pb2

from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, NAME_TABLE, ROUTE, SHORT_NAMES

ENVOY_ORDER = (CLUSTER, ENDPOINT, LISTENER, ROUTE)  # what Envoy itself subscribes to, in ADS order
SHORT = {t: SHORT_NAMES[t] for t in (*ENVOY_ORDER, NAME_TABLE)}
_HCM_TYPE = "type.googleapis.com/" + hcm_pb2.HttpConnectionManager.DESCRIPTOR.full_name

Request: TypeAlias = discovery_pb2.DeltaDiscoveryRequest | discovery_pb2.DiscoveryRequest


def _eds_names(body: bytes) -> tuple[str, frozenset[str]]:
    """An encoded Cluster's name and the EDS name it makes Envoy subscribe to (if an EDS cluster)."""
    cluster = cluster_pb2.Cluster.FromString(body)
    if cluster.type != cluster_pb2.Cluster.EDS:
        return cluster.name, frozenset()
    return cluster.name, frozenset({cluster.eds_cluster_config.service_name or cluster.name})


def _route_names(body: bytes) -> tuple[str, frozenset[str]]:
    """An encoded Listener's name and every RDS route_config_name its HTTP connection managers name."""
    listener = listener_pb2.Listener.FromString(body)
    chains = list(listener.filter_chains)
    if listener.HasField("default_filter_chain"):
        chains.append(listener.default_filter_chain)
    names = set()
    for chain in chains:
        for f in chain.filters:
            if f.typed_config.type_url == _HCM_TYPE:
                manager = hcm_pb2.HttpConnectionManager.FromString(f.typed_config.value)
                if manager.HasField("rds"):
                    names.add(manager.rds.route_config_name)
    return listener.name, frozenset(names)


# parent type -> (the child type its resources make Envoy subscribe to, how to read the names)
_CHILDREN = {CLUSTER: (ENDPOINT, _eds_names), LISTENER: (ROUTE, _route_names)}
_PARENT = {child: parent for parent, (child, _) in _CHILDREN.items()}


class Inspector:
    """A cluster's or listener's name and child names (its EDS name, its listeners' RDS names),
    decoded once per distinct body; names are interned, so 2,000 clients share one copy."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[bytes, tuple[str, frozenset[str]]]] = {t: {} for t in _CHILDREN}

    def inspect(self, type_url: str, body: bytes) -> tuple[str, frozenset[str]]:
        seen = self._seen[type_url]
        found = seen.get(body)
        if found is None:
            name, children = _CHILDREN[type_url][1](body)
            found = seen[body] = (sys.intern(name), frozenset(sys.intern(c) for c in children))
        return found


def node(node_id: str, metadata: dict[str, Any]) -> base_pb2.Node:
    md = struct_pb2.Struct()
    json_format.ParseDict(metadata, md)
    return base_pb2.Node(id=node_id, metadata=md)


@dataclass(frozen=True, slots=True)
class Received:
    """One response as the statistics see it."""

    type_url: str
    resources: int
    removed: int


@dataclass
class _Held:
    """What the client holds of one type. ``names``: explicit subscriptions (EDS, RDS)."""

    versions: dict[str, str] = field(default_factory=dict)  # Delta: name -> version
    children: dict[str, frozenset[str]] = field(default_factory=dict)  # CDS / LDS: resource -> EDS / RDS names
    names: set[str] = field(default_factory=set)
    version_info: str = ""  # SotW: the last accepted version
    nonce: str = ""  # the last response's nonce


class AdsClient(abc.ABC):
    """The protocol-independent part: what is held, what is needed next, completeness."""

    def __init__(self, node: base_pb2.Node, inspector: Inspector, agent: bool = False) -> None:
        self._node = node
        self._inspector = inspector
        self.agent = agent
        self.held: dict[str, _Held] = {}  # types subscribed, ever (kept across streams)
        self.acked: set[str] = set()  # types whose first response was ACKed
        self._sent_node = False

    @property
    def complete(self) -> bool:
        """Envoy is initialised: CDS and LDS ACKed, and EDS / RDS too unless nothing needs them."""
        envoy = all(t in self.acked or (t in (ENDPOINT, ROUTE) and not self._needed(t)) for t in ENVOY_ORDER)
        return envoy and (not self.agent or NAME_TABLE in self.acked)

    def start(self) -> list[Request]:
        """The requests opening a new stream: CDS wildcard (and an agent's NDS) at first, else
        every held type again."""
        self._sent_node = False
        if not self.held:
            self.held[CLUSTER] = _Held()
            if self.agent:
                self.held[NAME_TABLE] = _Held()
            return [self._initial(t) for t in self.held]
        return [self._initial(t) for t in (*ENVOY_ORDER, NAME_TABLE) if t in self.held]

    def on_response(self, resp: Any) -> tuple[Received, list[Request]]:
        type_url = resp.type_url
        held = self.held.setdefault(type_url, _Held())
        held.nonce = resp.nonce
        received = self._apply(held, resp)
        self.acked.add(type_url)
        out: list[Request] = [self._ack(type_url, resp)]
        if type_url == CLUSTER:
            out += self._subscribe(ENDPOINT)
            if ENDPOINT not in self.held:  # no cluster needs EDS: CDS is initialised
                out += self._subscribe(LISTENER)
        elif type_url == ENDPOINT:
            out += self._subscribe(LISTENER)
        elif type_url == LISTENER:
            out += self._subscribe(ROUTE)
        return received, out

    def _needed(self, type_url: str) -> set[str]:
        """The EDS (RDS) names the clusters (listeners) held make Envoy subscribe to."""
        parent = self.held.get(_PARENT[type_url])
        return set().union(*parent.children.values()) if parent else set()

    def _subscribe(self, type_url: str) -> list[Request]:
        """The request (first or changed subscription) ``type_url`` needs now, if any."""
        if type_url == LISTENER:
            if LISTENER in self.held:
                return []
            self.held[LISTENER] = _Held()
            return [self._initial(LISTENER)]
        wanted = self._needed(type_url)
        held = self.held.get(type_url)
        if held is None:
            if not wanted:
                return []
            held = self.held[type_url] = _Held()
        elif wanted == held.names:
            return []
        request = self._change(type_url, held, wanted)
        held.names = wanted
        return [request]

    def _with_node(self) -> base_pb2.Node | None:
        if self._sent_node:
            return None
        self._sent_node = True
        return self._node

    @abc.abstractmethod
    def _initial(self, type_url: str) -> Request:
        """The request subscribing to ``type_url`` on a new stream (again, with what is held)."""

    @abc.abstractmethod
    def _apply(self, held: _Held, resp: Any) -> Received:
        """Take in a response's resources (and removals)."""

    @abc.abstractmethod
    def _ack(self, type_url: str, resp: Any) -> Request:
        """The ACK of ``resp``."""

    @abc.abstractmethod
    def _change(self, type_url: str, held: _Held, wanted: set[str]) -> Request:
        """The request changing the subscription of ``type_url`` from ``held.names`` to ``wanted``."""


class DeltaAdsClient(AdsClient):
    def _initial(self, type_url: str) -> discovery_pb2.DeltaDiscoveryRequest:
        held = self.held[type_url]
        return discovery_pb2.DeltaDiscoveryRequest(
            node=self._with_node(),
            type_url=type_url,
            resource_names_subscribe=held.names,
            initial_resource_versions=held.versions,
        )

    def _apply(self, held: _Held, resp: discovery_pb2.DeltaDiscoveryResponse) -> Received:
        type_url = resp.type_url
        intern = sys.intern
        if type_url in _CHILDREN:
            inspect = self._inspector.inspect
            for r in resp.resources:
                name = intern(r.name)
                held.versions[name] = intern(r.version)
                held.children[name] = inspect(type_url, r.resource.value)[1]
        else:
            held.versions.update({intern(r.name): intern(r.version) for r in resp.resources})
        for name in resp.removed_resources:
            held.versions.pop(name, None)
            held.children.pop(name, None)
        return Received(type_url, len(resp.resources), len(resp.removed_resources))

    def _ack(self, type_url: str, resp: discovery_pb2.DeltaDiscoveryResponse) -> discovery_pb2.DeltaDiscoveryRequest:
        return discovery_pb2.DeltaDiscoveryRequest(node=self._with_node(), type_url=type_url, response_nonce=resp.nonce)

    def _change(self, type_url: str, held: _Held, wanted: set[str]) -> discovery_pb2.DeltaDiscoveryRequest:
        gone = held.names - wanted
        for name in gone:  # Envoy forgets what it unsubscribes
            held.versions.pop(name, None)
        return discovery_pb2.DeltaDiscoveryRequest(
            node=self._with_node(),
            type_url=type_url,
            resource_names_subscribe=wanted - held.names,
            resource_names_unsubscribe=gone,
        )


class SotwAdsClient(AdsClient):
    def _initial(self, type_url: str) -> discovery_pb2.DiscoveryRequest:
        held = self.held[type_url]
        return discovery_pb2.DiscoveryRequest(
            node=self._with_node(),
            type_url=type_url,
            version_info=held.version_info,
            resource_names=held.names,
        )

    def _apply(self, held: _Held, resp: discovery_pb2.DiscoveryResponse) -> Received:
        type_url = resp.type_url
        held.version_info = resp.version_info
        if type_url in _CHILDREN:  # the full set
            inspect = self._inspector.inspect
            held.children = dict(inspect(type_url, r.value) for r in resp.resources)
        return Received(type_url, len(resp.resources), 0)

    def _ack(self, type_url: str, resp: discovery_pb2.DiscoveryResponse) -> discovery_pb2.DiscoveryRequest:
        return discovery_pb2.DiscoveryRequest(
            node=self._with_node(),
            type_url=type_url,
            version_info=resp.version_info,
            response_nonce=resp.nonce,
            resource_names=self.held[type_url].names,
        )

    def _change(self, type_url: str, held: _Held, wanted: set[str]) -> discovery_pb2.DiscoveryRequest:
        return discovery_pb2.DiscoveryRequest(
            node=self._with_node(),
            type_url=type_url,
            version_info=held.version_info,
            response_nonce=held.nonce,
            resource_names=wanted,
        )


def ads_client(protocol: str, node: base_pb2.Node, inspector: Inspector, agent: bool = False) -> AdsClient:
    kind = DeltaAdsClient if protocol == "delta" else SotwAdsClient
    return kind(node, inspector, agent)
