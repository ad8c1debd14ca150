"""What a proxy would receive, as JSON-ready dicts: backs ``pilotfish config-dump`` (and later
``/debug/config_dump`` and ``/debug/sidecarz``). Envoy resources use proto3 JSON with Envoy's
camelCase field names; Istio objects use Istio's."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from app.model.destination_rule import ConsolidatedDestinationRule
from app.model.proxy import Proxy
from app.model.push_context import PushContext
from app.model.sidecar_scope import SidecarScope
from app.xds.generators.cds import generate_clusters


def to_json(msg: Message) -> dict[str, Any]:
    return json_format.MessageToDict(msg, preserving_proto_field_name=False)


def dump_clusters(proxy: Proxy, push: PushContext) -> dict[str, Any]:
    clusters = sorted(generate_clusters(proxy, push), key=lambda c: c.name)
    return {"clusters": [to_json(c) for c in clusters]}


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
