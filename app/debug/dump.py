"""What a proxy would receive, as JSON-ready dicts: backs ``pilotfish config-dump``,
``/debug/config_dump`` and ``/debug/sidecarz``. Envoy resources use proto3 JSON with Envoy's
camelCase field names, each list sorted by name; Istio objects use Istio's field names; the
NDS name table is proto3 JSON with its hosts sorted."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from google.protobuf import json_format
from google.protobuf.message import Message

from app.api.nds import NameTable
from app.model.destination_rule import ConsolidatedDestinationRule
from app.model.proxy import Proxy
from app.model.push_context import PushContext
from app.model.sidecar_scope import SidecarScope
from app.translate.endpoint.for_proxy import eds_cluster_names
from app.translate.listener.for_proxy import route_names
from app.xds.generators.reference import (
    generate_clusters,
    generate_endpoints,
    generate_listeners,
    generate_name_table,
    generate_routes,
    reference_source,
)
from app.xds.generators.source import XdsGenerator
from app.xds.mesh_source import MeshSource
from app.xds.resource import Resource
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, NAME_TABLE, ROUTE
from app.xds.watch import WatchedResource


def to_json(msg: Message) -> dict[str, Any]:
    return json_format.MessageToDict(msg, preserving_proto_field_name=False)


def _name_table_json(table: NameTable | None) -> dict[str, Any] | None:
    """The NameTable as proto3 JSON, hosts sorted (None for a proxy that gets none)."""
    if table is None:
        return None
    found = to_json(table).get("table", {})
    return {"table": {host: found[host] for host in sorted(found)}}


def _json(messages: Iterable[Message]) -> list[dict[str, Any]]:
    # generators return their resources sorted by name
    return [to_json(m) for m in messages]


def dump_clusters(proxy: Proxy, push: PushContext, source: XdsGenerator | None = None) -> dict[str, Any]:
    return {"clusters": _json(generate_clusters(proxy, push, source))}


def dump_endpoints(proxy: Proxy, push: PushContext, source: XdsGenerator | None = None) -> dict[str, Any]:
    """The assignment of every EDS cluster the proxy gets (what Envoy subscribes to)."""
    return {"endpoints": _json(generate_endpoints(proxy, push, source=source))}


def dump_listeners(proxy: Proxy, push: PushContext, source: XdsGenerator | None = None) -> dict[str, Any]:
    return {"listeners": _json(generate_listeners(proxy, push, source))}


def dump_name_table(proxy: Proxy, push: PushContext, source: XdsGenerator | None = None) -> dict[str, Any]:
    """The DNS name table the proxy's agent would be served (null for a router)."""
    return {"nameTable": _name_table_json(generate_name_table(proxy, push, source))}


def dump_routes(proxy: Proxy, push: PushContext, source: XdsGenerator | None = None) -> dict[str, Any]:
    """Every route configuration the proxy's listeners name (what Envoy subscribes to)."""
    return {"routes": _json(generate_routes(proxy, push, source=source))}


_DECODE = {
    CLUSTER: cluster_pb2.Cluster,
    ENDPOINT: endpoint_pb2.ClusterLoadAssignment,
    LISTENER: listener_pb2.Listener,
    ROUTE: route_pb2.RouteConfiguration,
    NAME_TABLE: NameTable,
}


def served(proxy: Proxy, source: MeshSource, type_url: str, watch: WatchedResource) -> Sequence[Resource]:
    """What a connected proxy is served of a type now, read from the shared cache (no regeneration)."""
    return source.generate(type_url, proxy, watch) or []


def decoded(type_url: str, resources: Sequence[Resource]) -> list[Any]:
    return [_DECODE[type_url].FromString(r.body.value) for r in resources]


def served_routes(proxy: Proxy, source: MeshSource, listeners: Sequence[Any]) -> Sequence[Resource]:
    """The route configurations the proxy's listeners name (what Envoy subscribes to)."""
    return served(proxy, source, ROUTE, WatchedResource(ROUTE, False, set(route_names(listeners))))


def dump_served(proxy: Proxy, source: MeshSource) -> dict[str, Any]:
    """What a connected proxy is served now: every cluster and listener, the EDS clusters'
    assignments and the listeners' routes."""

    def messages(type_url: str, watch: WatchedResource) -> list[Any]:
        return decoded(type_url, served(proxy, source, type_url, watch))

    clusters = messages(CLUSTER, WatchedResource(CLUSTER, True))
    listeners = messages(LISTENER, WatchedResource(LISTENER, True))
    tables = messages(NAME_TABLE, WatchedResource(NAME_TABLE, True))
    return {
        "clusters": _json(clusters),
        "endpoints": _json(messages(ENDPOINT, WatchedResource(ENDPOINT, False, set(eds_cluster_names(clusters))))),
        "listeners": _json(listeners),
        "routes": _json(decoded(ROUTE, served_routes(proxy, source, listeners))),
        "nameTable": _name_table_json(tables[0] if tables else None),
    }


def dump_all(proxy: Proxy, push: PushContext, source: XdsGenerator | None = None) -> dict[str, Any]:
    """Every type the proxy would be served of ``push``, generated once through one source."""
    source = source or reference_source(push)
    return {
        **dump_clusters(proxy, push, source),
        **dump_endpoints(proxy, push, source),
        **dump_listeners(proxy, push, source),
        **dump_routes(proxy, push, source),
        **dump_name_table(proxy, push, source),
    }


def _rule_json(cdr: ConsolidatedDestinationRule) -> dict[str, Any]:
    rule = cdr.rule
    return {
        "name": cdr.name,
        "namespace": cdr.namespace,
        "from": list(cdr.sources),
        "subsets": [{"name": s.name, "labels": dict(sorted(s.labels.items()))} for s in rule.subsets],
        "trafficPolicy": to_json(rule.traffic_policy) if rule.HasField("traffic_policy") else None,
    }


def scope_json(proxy: Proxy, scope: SidecarScope) -> dict[str, Any]:
    """The SidecarScope as istiod's /debug/sidecarz shows its essentials."""
    rules: dict[str, Any] = {}
    for svc in scope.services:
        cdr = scope.destination_rule(proxy, svc)
        if cdr is not None:
            rules[svc.hostname] = _rule_json(cdr)
    return {
        "sidecar": scope.name,
        "namespace": scope.namespace,
        "outboundTrafficPolicy": scope.outbound_traffic_policy,
        "services": [
            {
                "hostname": s.hostname,
                "namespace": s.namespace,
                "ports": [{"name": p.name, "port": p.port, "protocol": str(p.protocol)} for p in s.ports],
            }
            for s in scope.services
        ],
        "virtualServices": [vs.namespaced_name for vs in scope.virtual_services],
        "destinationRules": rules,
    }


def dump_scope(proxy: Proxy, push: PushContext) -> dict[str, Any]:
    return {"scope": scope_json(proxy, push.sidecar_scope(proxy))}
