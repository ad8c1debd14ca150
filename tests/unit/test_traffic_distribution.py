"""A Service's traffic distribution (spec.trafficDistribution, or the
networking.istio.io/traffic-distribution annotation of the service or its namespace), as istiod
applies it (model.GetTrafficDistribution, loadbalancer.GetEffectiveLbSetting): locality load
balancing by network, region, zone (and subzone, node for PreferSameNode) without needing
outlier detection, and unready endpoints always sent."""

from __future__ import annotations

from dataclasses import replace

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import health_check_pb2

from app.config.loader import load_documents
from app.config.objects import ConfigEvent, EventType
from app.model.push_context import PushContext
from app.model.service import TrafficDistribution, traffic_distribution
from app.registry.endpoint_index import EndpointIndex
from app.registry.kube import KubeController
from app.registry.registry import ServiceRegistry
from app.xds.generators.reference import generate_clusters
from tests.support.mesh import push_context
from tests.unit.test_eds import KUBE, PROXY, REVIEWS, REVIEWS_WORKLOADS, dr, one, priorities, reviews_service

CLUSTER = f"outbound|9080||{REVIEWS}"
SAME_ZONE = TrafficDistribution.PREFER_SAME_ZONE
SAME_NODE = TrafficDistribution.PREFER_SAME_NODE


@pytest.mark.parametrize(
    ("spec", "annotations", "namespace", "want"),
    [
        ("PreferClose", {}, {}, SAME_ZONE),
        ("PreferSameNode", {"networking.istio.io/traffic-distribution": "PreferClose"}, {}, SAME_NODE),
        # the spec's values are exact; an annotation's any case
        ("preferclose", {}, {}, TrafficDistribution.ANY),
        ("", {"networking.istio.io/traffic-distribution": "prefersamenode"}, {}, SAME_NODE),
        ("", {}, {"networking.istio.io/traffic-distribution": "PreferSameZone"}, SAME_ZONE),
        # an unknown service annotation is Any, whatever the namespace says
        ("", {"networking.istio.io/traffic-distribution": "Nearby"},
         {"networking.istio.io/traffic-distribution": "PreferClose"}, TrafficDistribution.ANY),
    ],
)  # fmt: skip
def test_where_the_distribution_comes_from(
    spec: str, annotations: dict[str, str], namespace: dict[str, str], want: TrafficDistribution
) -> None:
    assert traffic_distribution(spec, annotations, namespace) is want


def reviews_cluster(push: PushContext) -> cluster_pb2.Cluster:
    [found] = [c for c in generate_clusters(PROXY, push) if c.name == CLUSTER]
    return found


def with_distribution(value: str) -> str:
    return reviews_service().replace("\nspec:", f"\nspec:\n  trafficDistribution: {value}", 1) + REVIEWS_WORKLOADS


def test_prefer_close_ranks_endpoints_by_zone_then_region_without_outlier_detection() -> None:
    la = one(push_context(with_distribution("PreferClose")), CLUSTER)
    assert priorities(la) == {
        "us-east1/us-east1-b": 0,
        "us-east1/us-east1-c": 1,
        "eu-west1/eu-west1-a": 2,
        "us-west1/us-west1-a": 2,
    }
    # the same service without it: one priority (failover needs outlier detection)
    assert set(priorities(one(push_context(KUBE), CLUSTER)).values()) == {0}
    assert reviews_cluster(push_context(with_distribution("PreferClose"))).common_lb_config.HasField(
        "locality_weighted_lb_config"
    )


def test_unready_endpoints_are_sent_and_panic_mode_stays_off_whatever_the_rule_says() -> None:
    rule = dr("trafficPolicy: {outlierDetection: {consecutive5xxErrors: 3, minHealthPercent: 50}}")
    health = [e.health_status for g in one(push_context(with_distribution("PreferClose"), rule), CLUSTER).endpoints
              for e in g.lb_endpoints]  # fmt: skip
    assert health_check_pb2.UNHEALTHY in health
    without = [e.health_status for g in one(push_context(KUBE, rule), CLUSTER).endpoints for e in g.lb_endpoints]
    assert health_check_pb2.UNHEALTHY not in without
    cluster = reviews_cluster(push_context(with_distribution("PreferClose"), rule))
    assert cluster.HasField("outlier_detection") and cluster.common_lb_config.healthy_panic_threshold.value == 0
    assert reviews_cluster(push_context(KUBE, rule)).common_lb_config.healthy_panic_threshold.value == 50


def test_a_rule_locality_setting_wins_and_disabling_it_turns_the_distribution_off() -> None:
    off = dr("trafficPolicy: {loadBalancer: {localityLbSetting: {enabled: false}}}")
    assert set(priorities(one(push_context(with_distribution("PreferClose"), off), CLUSTER)).values()) == {0}


def test_prefer_same_node_puts_the_proxys_node_first() -> None:
    on_node = with_distribution("PreferSameNode").replace(
        "spec: {serviceAccountName: reviews, containers: [{name: app}]}\nstatus: {phase: Running, podIP: 10.1.0.1,",
        "spec: {serviceAccountName: reviews, nodeName: node-a, containers: [{name: app}]}\n"
        "status: {phase: Running, podIP: 10.1.0.1,",
    )
    assert "nodeName: node-a" in on_node
    proxy = replace(PROXY, labels={**PROXY.labels, "kubernetes.io/hostname": "node-a"})
    la = one(push_context(on_node), CLUSTER, proxy)
    first = [e.endpoint.address.socket_address.address for g in la.endpoints if g.priority == 0 for e in g.lb_endpoints]
    assert first == ["10.1.0.1"]  # its zone's other endpoints come next


def test_a_namespace_annotation_reaches_its_services_when_it_changes() -> None:
    namespace = "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: default, annotations: {%s}}\n"
    annotated = namespace % "networking.istio.io/traffic-distribution: PreferClose"
    push = push_context(KUBE, annotated)
    assert set(priorities(one(push, CLUSTER)).values()) == {0, 1, 2}
    assert set(priorities(one(push_context(KUBE, namespace % ""), CLUSTER)).values()) == {0}


def test_a_namespace_event_converts_its_services_again() -> None:
    kube = KubeController(EndpointIndex())
    for obj in load_documents(reviews_service(), "svc.yaml").objects:
        kube.apply(ConfigEvent(EventType.ADD, obj))
    ns = load_documents(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: default, annotations: "
        "{networking.istio.io/traffic-distribution: PreferSameNode}}\n", "ns.yaml"
    ).objects[0]
    changes = kube.apply(ConfigEvent(EventType.ADD, ns))
    assert changes.services == {(REVIEWS, "default")}
    assert kube.service(REVIEWS, "default").traffic_distribution is SAME_NODE  # type: ignore[union-attr]


def test_a_service_entry_takes_its_own_annotation_else_its_namespaces() -> None:
    entry = """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: default%s}
spec:
  hosts: [api.example.com]
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: 10.2.0.1}]
"""
    reg = ServiceRegistry()
    reg.apply(ConfigEvent(EventType.ADD, load_documents(entry % "", "se.yaml").objects[0]))
    assert reg.service("api.example.com", "default").traffic_distribution is TrafficDistribution.ANY  # type: ignore[union-attr]
    ns = load_documents(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: default, annotations: "
        "{networking.istio.io/traffic-distribution: PreferClose}}\n", "ns.yaml"
    ).objects[0]
    delta = reg.apply(ConfigEvent(EventType.ADD, ns))  # the namespace's annotation comes later
    assert ("api.example.com", "default") in delta.services_changed
    assert reg.service("api.example.com", "default").traffic_distribution is SAME_ZONE  # type: ignore[union-attr]
    own = entry % ", annotations: {networking.istio.io/traffic-distribution: PreferSameNode}"
    reg.apply(ConfigEvent(EventType.UPDATE, load_documents(own, "se.yaml").objects[0]))
    assert reg.service("api.example.com", "default").traffic_distribution is SAME_NODE  # type: ignore[union-attr]
