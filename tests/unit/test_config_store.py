"""ConfigStore: what counts as a change. A write that changes only the resourceVersion (what
controllers and status writers do all day) is none, so it makes no push."""

from __future__ import annotations

from dataclasses import replace

from app.config.loader import load_documents
from app.config.objects import ConfigEvent, EventType
from app.config.store import ConfigStore

RULE = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: cart, namespace: shop, resourceVersion: "7"}
spec: {host: cart, trafficPolicy: {connectionPool: {tcp: {maxConnections: 5}}}}
"""


def test_a_new_resource_version_alone_is_no_change() -> None:
    [obj] = load_documents(RULE, "a.yaml").objects
    store = ConfigStore()
    assert store.apply(ConfigEvent(EventType.ADD, obj))
    rewritten = replace(obj, meta=replace(obj.meta, resource_version="8"))
    assert not store.apply(ConfigEvent(EventType.UPDATE, rewritten, obj))
    [changed] = load_documents(RULE.replace("maxConnections: 5", "maxConnections: 6"), "a.yaml").objects
    assert store.apply(ConfigEvent(EventType.UPDATE, changed, obj))
    relabelled = replace(changed, meta=replace(changed.meta, labels={"team": "shop"}))
    assert store.apply(ConfigEvent(EventType.UPDATE, relabelled, changed))
