"""``pilotfish explain`` offline, on the bookinfo example and on a generated mesh, and the
attribution core against the keys the cache and the push filter use."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from app.cli import main
from app.config.loader import load_object
from app.config.objects import ConfigEvent, ConfigKey, EventType
from app.environment import Environment
from app.model.proxy import build_proxy
from app.sources.files import FileSource
from app.xds.cache import ResourceCache, expand
from app.xds.explain import NotServed, explain_resource
from app.xds.generators.source import XdsGenerator
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, ROUTE
from bench.mesh import Mesh, MeshSpec, sidecars

BOOKINFO = Path(__file__).parents[2] / "examples" / "bookinfo"
PRODUCTPAGE = "sidecar~10.1.0.10~productpage-v1-0.bookinfo~bookinfo.svc.cluster.local"
REVIEWS_V2 = "outbound|9080|v2|reviews.bookinfo.svc.cluster.local"


def explain(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["explain", *args, "-o", "json"]) == 0
    found: dict[str, Any] = json.loads(capsys.readouterr().out)
    return found


def configs(found: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(c["kind"], c["namespace"], c["name"]) for c in found["configs"]}


def test_a_subset_cluster_names_its_destination_rule_service_and_endpoints_with_their_files(
    capsys: pytest.CaptureFixture[str],
) -> None:
    found = explain(capsys, "--config-dir", str(BOOKINFO), "--proxy", PRODUCTPAGE, "--type", "cds", REVIEWS_V2)
    assert configs(found) == {("DestinationRule", "bookinfo", "reviews"), ("Service", "bookinfo", "reviews")}
    rule = next(c for c in found["configs"] if c["kind"] == "DestinationRule")
    assert rule["file"].endswith("traffic.yaml#1")
    assert [s["hostname"] for s in found["services"]] == ["reviews.bookinfo.svc.cluster.local"]
    assert found["endpointShards"] == [
        {"hostname": "reviews.bookinfo.svc.cluster.local", "namespace": "bookinfo", "endpoints": 3}
    ]
    # its endpoints come from the same keys
    eds = explain(capsys, "--config-dir", str(BOOKINFO), "--proxy", PRODUCTPAGE, "--type", "eds", REVIEWS_V2)
    assert configs(eds) == configs(found) and eds["endpointShards"] == found["endpointShards"]


def test_a_route_configuration_names_the_virtual_service_and_the_text_form_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    found = explain(capsys, "--config-dir", str(BOOKINFO), "--proxy", PRODUCTPAGE, "--type", "rds", "9080")
    assert ("VirtualService", "bookinfo", "reviews") in configs(found)
    assert ("DestinationRule", "bookinfo", "reviews") in configs(found)  # a route may read its hash policy
    assert (
        main(["explain", "--config-dir", str(BOOKINFO), "--proxy", PRODUCTPAGE, "--type", "lds", "virtualInbound"]) == 0
    )
    text = capsys.readouterr().out
    assert text.startswith("lds virtualInbound for productpage-v1-0.bookinfo:")
    assert f"Service bookinfo/productpage  ({BOOKINFO / 'workloads.yaml'}#0)" in text


def test_a_gateways_routes_name_its_gateway_and_the_virtual_services_bound_to_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gateway = "router~10.1.0.50~istio-ingressgateway-0.istio-system~istio-system.svc.cluster.local"
    args = ["--config-dir", str(BOOKINFO), "--proxy", gateway, "--labels", "istio=ingressgateway"]
    found = configs(explain(capsys, *args, "--type", "rds", "http.8080"))
    assert {("Gateway", "bookinfo", "bookinfo-gateway"), ("VirtualService", "bookinfo", "bookinfo")} <= found


def test_a_resource_the_proxy_is_not_served_is_an_error_saying_what_it_is_served(
    capsys: pytest.CaptureFixture[str],
) -> None:
    wrong = "outbound|9080||reviews.default.svc.cluster.local"
    assert main(["explain", "--config-dir", str(BOOKINFO), "--proxy", PRODUCTPAGE, "--type", "cds", wrong]) == 2
    err = capsys.readouterr().err
    assert f"no cds resource {wrong!r}" in err and REVIEWS_V2 in err
    assert main(["explain", "--config-dir", str(BOOKINFO), "--proxy", PRODUCTPAGE, "--type", "xds", "x"]) == 2
    assert "type 'xds': want one of" in capsys.readouterr().err


def test_on_a_generated_mesh_every_resource_is_explained_by_keys_the_push_filter_and_cache_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = MeshSpec(services=40, namespaces=4)
    Mesh(spec, tmp_path).write()
    identity = sidecars(spec, 1)[0]
    env = Environment()
    env.apply(FileSource(tmp_path).load())
    proxy = build_proxy(identity.node_id, identity.metadata())
    generator = XdsGenerator(ResourceCache(), env.build_push_context(None))
    scope = generator.scope(proxy)
    clusters = generator.names(CLUSTER, proxy)
    assert "outbound|80|v1|svc-0.ns-0.svc.cluster.local" in clusters
    for type_url, names in (
        (CLUSTER, clusters),
        (ENDPOINT, generator.names(ENDPOINT, proxy)),
        (LISTENER, generator.names(LISTENER, proxy)),
        (ROUTE, ["80"]),
    ):
        for name in names:
            for dep in generator.deps(type_url, proxy, name):
                # a change of any key named would push this proxy (istiod DependsOnConfig)
                assert not isinstance(dep, ConfigKey) or scope.depends_on(dep), (type_url, name, dep)
    # an outbound cluster's keys are exactly what its cache entry records
    recorded = {dep for _, deps in generator.cache._entries.values() for dep in expand(deps)}
    served = {dep for name in clusters if name.startswith("outbound") for dep in generator.deps(CLUSTER, proxy, name)}
    assert served <= recorded
    found = explain(
        capsys,
        "--config-dir", str(tmp_path), "--proxy", identity.node_id, "--metadata-json", json.dumps(identity.metadata()),
        "--type", "cds", "outbound|80|v1|svc-0.ns-0.svc.cluster.local",
    )  # fmt: skip
    assert configs(found) == {("DestinationRule", "ns-0", "svc-0"), ("Service", "ns-0", "svc-0")}
    assert found["configs"][0]["file"].startswith(str(tmp_path))
    routes = explain(
        capsys,
        "--config-dir", str(tmp_path), "--proxy", identity.node_id, "--metadata-json", json.dumps(identity.metadata()),
        "--type", "rds", "80",
    )  # fmt: skip
    assert ("VirtualService", "ns-0", "svc-0") in configs(routes)


def test_an_object_from_kubernetes_is_named_with_its_resource_version() -> None:
    env = Environment()
    env.apply(FileSource(BOOKINFO).load())
    raw = {
        "apiVersion": "networking.istio.io/v1",
        "kind": "DestinationRule",
        "metadata": {"name": "reviews", "namespace": "bookinfo", "resourceVersion": "4711"},
        "spec": {"host": "reviews", "subsets": [{"name": "v2", "labels": {"version": "v2"}}]},
    }
    [obj] = load_object(raw, "kube:destinationrules").objects
    env.apply([ConfigEvent(EventType.UPDATE, obj)])
    generator = XdsGenerator(ResourceCache(), env.build_push_context(None))
    proxy = build_proxy(PRODUCTPAGE, {})
    found = explain_resource(generator, proxy, CLUSTER, REVIEWS_V2, env.config_object).json()
    rule = next(c for c in found["configs"] if c["kind"] == "DestinationRule")
    assert rule == {"kind": "DestinationRule", "namespace": "bookinfo", "name": "reviews", "resourceVersion": "4711"}
    # the workload's own listener: the PeerAuthentication its inbound mode composes
    strict = {
        "apiVersion": "security.istio.io/v1",
        "kind": "PeerAuthentication",
        "metadata": {"name": "strict", "namespace": "bookinfo", "resourceVersion": "12"},
        "spec": {"mtls": {"mode": "STRICT"}},
    }
    [policy] = load_object(strict, "kube:peerauthentications").objects
    env.apply([ConfigEvent(EventType.ADD, policy)])
    generator = XdsGenerator(ResourceCache(), env.build_push_context(None))
    inbound = explain_resource(generator, proxy, LISTENER, "virtualInbound", env.config_object).json()
    assert {"kind": "PeerAuthentication", "namespace": "bookinfo", "name": "strict", "resourceVersion": "12"} in (
        inbound["configs"]
    )
    # an endpoint name no cluster of the proxy has is not served
    with pytest.raises(NotServed, match=re.escape("no eds resource 'outbound|9080||nope'")):
        explain_resource(generator, proxy, ENDPOINT, "outbound|9080||nope")
