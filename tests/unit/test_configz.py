"""``/debug/configz`` as istiod's (issue 24 item 5): the Istio config in force, one JSON array of
Kubernetes objects (pilot/pkg/xds/debug.go ``configz`` -> crd.ConvertConfig), each with its
apiVersion, kind, metadata (name, namespace, resourceVersion, labels, annotations,
creationTimestamp as it has them) and spec; a file's object, which has no resourceVersion, shows
a content hash; pilotfish's source and warnings are annotations, its rejections Events."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from app.config.loader import load_documents
from app.debug.configz import Configz, kube_object
from app.runtime import Runtime
from app.settings import Settings
from tests.support.runtime import running

RULE = """apiVersion: networking.istio.io/v1beta1
kind: DestinationRule
metadata:
  name: reviews
  namespace: shop
  labels: {team: a}
  annotations: {note: kept}
spec:
  host: reviews.shop.svc.cluster.local
  trafficPolicy:
    connectionPool: {tcp: {maxConnections: 7, connectTimeout: 5s}}
    loadBalancer: {simple: LEAST_REQUEST}
  subsets: [{name: v1, labels: {version: v1}}]
"""
ENTRY = """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: wiki
  namespace: shop
  resourceVersion: "4711"
  generation: 3
  creationTimestamp: "2026-01-02T03:04:05Z"
spec:
  hosts: [wiki.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
status:
  addresses: [{value: 240.240.0.1, host: wiki.example.com}]
"""
SERVICE = """apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080}]
"""
BAD = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: broken, namespace: shop}
spec:
  host: broken.shop.svc.cluster.local
  trafficPolicy: {connectionPool: {tcp: {maxConnections: -1}}}
"""


def objects(*texts: str) -> list[Any]:
    return [obj for text in texts for obj in load_documents(text, "cfg.yaml").objects]


def test_an_istio_object_is_shown_in_kubernetes_form_as_istiod_converts_it() -> None:
    [rule] = objects(RULE)
    shown = kube_object(rule)
    assert list(shown) == ["kind", "apiVersion", "metadata", "spec"]  # IstioKind's JSON order
    assert shown["kind"] == "DestinationRule" and shown["apiVersion"] == "networking.istio.io/v1beta1"
    meta = shown["metadata"]
    assert list(meta) == ["name", "namespace", "resourceVersion", "creationTimestamp", "labels", "annotations"]
    assert (meta["name"], meta["namespace"], meta["creationTimestamp"]) == ("reviews", "shop", None)
    assert meta["labels"] == {"team": "a"}
    assert meta["annotations"] == {"note": "kept", "pilotfish.io/source": "cfg.yaml"}
    # proto3 JSON as jsonpb writes it: camelCase, durations as text, enums by name, no defaults
    assert shown["spec"] == {
        "host": "reviews.shop.svc.cluster.local",
        "trafficPolicy": {
            "connectionPool": {"tcp": {"maxConnections": 7, "connectTimeout": "5s"}},
            "loadBalancer": {"simple": "LEAST_REQUEST"},
        },
        "subsets": [{"name": "v1", "labels": {"version": "v1"}}],
    }


# was: {"kind", "namespace", "name", "source", "resourceVersion": ""}: names only, and an empty
# version for every object read from a file
def test_a_file_object_gets_a_content_hash_as_its_version_stable_until_it_changes() -> None:
    [rule] = objects(RULE)
    version = kube_object(rule)["metadata"]["resourceVersion"]
    assert re.fullmatch(r"[0-9a-f]{16}", version)
    [again] = objects(RULE)  # read again (a restart, a rewrite of the same file)
    assert kube_object(again)["metadata"]["resourceVersion"] == version
    [moved] = load_documents(RULE, "elsewhere.yaml").objects  # where it comes from is no content
    assert kube_object(moved)["metadata"]["resourceVersion"] == version
    for changed in (RULE.replace("maxConnections: 7", "maxConnections: 8"), RULE.replace("team: a", "team: b")):
        [other] = objects(changed)
        assert kube_object(other)["metadata"]["resourceVersion"] != version


def test_an_object_keeps_the_version_generation_time_and_status_it_has() -> None:
    [entry] = objects(ENTRY)
    shown = kube_object(entry)
    meta = shown["metadata"]
    assert (meta["resourceVersion"], meta["generation"], meta["creationTimestamp"]) == (
        "4711",
        3,
        "2026-01-02T03:04:05Z",
    )
    assert shown["status"] == {"addresses": [{"value": "240.240.0.1", "host": "wiki.example.com"}]}


def test_configz_lists_the_istio_config_then_rejections_as_events() -> None:
    loaded = load_documents(BAD, "bad.yaml")
    [error] = [r.error for r in loaded.rejected]
    configz = Configz()
    items = configz(objects(ENTRY, SERVICE, RULE), [error])
    # Istio's kinds by kind, namespace, name (the Service is the registry's, as in istiod)
    assert [(o["kind"], o["metadata"]["name"]) for o in items] == [
        ("DestinationRule", "reviews"),
        ("ServiceEntry", "wiki"),
        ("Event", items[2]["metadata"]["name"]),
    ]
    event = items[2]
    assert (event["apiVersion"], event["type"], event["reason"]) == ("v1", "Warning", "Rejected")
    assert event["involvedObject"] == {"kind": "DestinationRule", "name": "broken", "namespace": "shop"}
    assert "maxConnections" in event["message"]
    assert event["metadata"]["annotations"] == {"pilotfish.io/source": "bad.yaml"}
    json.dumps(items)  # all of it is JSON


def test_configz_renders_an_object_once_while_it_is_in_force() -> None:
    configz = Configz()
    [rule] = objects(RULE)
    first = configz([rule], [])
    assert configz([rule], [])[0] is first[0]
    [changed] = objects(RULE.replace("maxConnections: 7", "maxConnections: 9"))
    assert configz([changed], [])[0]["spec"]["trafficPolicy"]["connectionPool"]["tcp"]["maxConnections"] == 9


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    config = tmp_path / "config"
    config.mkdir()
    (config / "rules.yaml").write_text(RULE + "---\n" + SERVICE)
    (config / "bad.yaml").write_text(BAD)
    settings = Settings(config_dir=config, xds_address="127.0.0.1:0", http_address="127.0.0.1:0", gc_freeze=False)
    async with running(settings) as rt:
        yield rt


async def test_debug_configz_serves_istiods_array(runtime: Runtime) -> None:
    url = f"http://127.0.0.1:{runtime.http.port}/debug/configz"
    async with aiohttp.ClientSession() as http:
        async with http.get(url) as resp:
            assert resp.status == 200 and resp.content_type == "application/json"
            items = await resp.json()
        async with http.get(url + "?pretty") as resp:
            pretty = await resp.text()
    assert isinstance(items, list)
    [rule] = [o for o in items if o["kind"] == "DestinationRule"]
    assert rule["metadata"]["annotations"]["pilotfish.io/source"].endswith("rules.yaml#0")  # its document
    assert re.fullmatch(r"[0-9a-f]{16}", rule["metadata"]["resourceVersion"])
    [event] = [o for o in items if o["kind"] == "Event"]
    assert event["involvedObject"]["name"] == "broken"
    assert pretty.startswith("[\n    {") and json.loads(pretty) == items
