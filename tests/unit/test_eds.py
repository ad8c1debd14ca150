"""The EDS generator against istiod's EndpointBuilder (pilot/pkg/xds/endpoints/endpoint_builder.go)
and locality load balancing (pilot/pkg/networking/core/loadbalancer/loadbalancer.go), over push
contexts built from YAML; the last test has a real Envoy validate the assignments."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import health_check_pb2
from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment as CLA
from google.protobuf import json_format

from app.model.proxy import Proxy, ProxyType
from app.model.push_context import PushContext
from app.translate.cluster.builder import parse_cluster_name
from app.translate.endpoint.for_proxy import eds_cluster_names
from app.xds.generators.reference import generate_clusters, generate_endpoints
from tests.support.envoy import agent_bootstrap, validate_bootstrap
from tests.support.mesh import (
    UNREADY,
    config_doc,
    endpoint_slice,
    kube_pod,
    kube_service,
    push_context,
    sidecar_proxy,
    slice_endpoint,
)

REVIEWS = "reviews.default.svc.cluster.local"
PAY = "pay.example.com"


def pod(name: str, ip: str, labels: str, *, sidecar: bool = True) -> str:
    return kube_pod(name, ip, f"app: reviews, {labels}", service_account="reviews", sidecar=sidecar)


def reviews_service(labels: str = "") -> str:
    ports = "[{name: http, port: 9080, targetPort: 8080}, {name: grpc, port: 9090, targetPort: 9091}]"
    return kube_service("reviews", ports, cluster_ip="10.96.0.20", selector="app: reviews", labels=labels)


REVIEWS_WORKLOADS = (
    pod("reviews-v1", "10.1.0.1", "version: v1, istio-locality: us-east1.us-east1-b")
    + pod("reviews-v2", "10.1.0.2", "version: v2, istio-locality: us-east1.us-east1-c", sidecar=False)
    + pod("reviews-v3", "10.1.0.3", "version: v3, istio-locality: us-west1.us-west1-a")
    + pod("reviews-eu", "10.1.0.4", "version: v1, istio-locality: eu-west1.eu-west1-a")
    + pod("reviews-down", "10.1.0.5", "version: v1, istio-locality: us-east1.us-east1-b")
    + pod("reviews-old", "10.1.0.6", "version: v1, istio-locality: us-east1.us-east1-b")
    + endpoint_slice(
        "reviews",
        "[{name: http, port: 8080}, {name: grpc, port: 9091}]",
        slice_endpoint("10.1.0.1", "reviews-v1"),
        slice_endpoint("10.1.0.2", "reviews-v2"),
        slice_endpoint("10.1.0.3", "reviews-v3"),
        slice_endpoint("10.1.0.4", "reviews-eu"),
        slice_endpoint("10.1.0.5", "reviews-down", UNREADY),
        slice_endpoint("10.1.0.6", "reviews-old", "{ready: false, terminating: true}"),
    )
)
KUBE = reviews_service() + REVIEWS_WORKLOADS


def dr(spec: str) -> str:
    """The DestinationRule ``reviews`` with ``spec`` below its host."""
    return config_doc("DestinationRule", "reviews", "host: reviews\n" + spec.strip())


SUBSETS_DR = dr("""
subsets:
- {name: v1, labels: {version: v1}}
- {name: v2, labels: {version: v2}, trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}}
""")

SERVICE_ENTRY = """
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: payments, namespace: default}
spec:
  hosts: [pay.example.com]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]
  endpoints:
  - {address: 10.2.0.1, locality: us-east1/us-east1-b, weight: 5, labels: {version: v1}}
  - {address: 10.2.0.2, locality: us-east1/us-east1-b, weight: 3, labels: {version: v2}}
  - {address: 10.2.0.3, locality: eu-west1/eu-west1-a, labels: {version: v1}}
  - {address: 10.2.0.4, locality: us-east1/us-east1-c, ports: {http: 9999}, serviceAccount: pay}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vms, namespace: default}
spec:
  hosts: [vm.example.com]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 7000, name: tcp, protocol: TCP}]
  workloadSelector: {labels: {app: vm}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-1, namespace: default}
spec:
  address: 10.3.0.1
  labels: {app: vm, version: v1}
  serviceAccount: vm
  locality: us-east1/us-east1-b
  weight: 2
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: other-1, namespace: default}
spec: {address: 10.3.0.9, labels: {app: other}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: external-dns, namespace: default}
spec:
  hosts: [db.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 5432, name: tcp, protocol: TCP}]
  endpoints: [{address: db1.example.com}]
"""

PROXY = sidecar_proxy("productpage-1.default", "10.1.9.9", {"app": "productpage"}, locality="us-east1/us-east1-b")


def one(push: PushContext, name: str, proxy: Proxy = PROXY) -> CLA:
    [la] = generate_endpoints(proxy, push, [name])
    assert la.cluster_name == name
    return la


def addresses(la: CLA) -> list[list[str]]:
    return [[e.endpoint.address.socket_address.address for e in g.lb_endpoints] for g in la.endpoints]


def localities(la: CLA) -> list[str]:
    return ["/".join((g.locality.region, g.locality.zone)) for g in la.endpoints]


def priorities(la: CLA) -> dict[str, int]:
    return dict(zip(localities(la), (g.priority for g in la.endpoints), strict=True))


def tls_matched(la: CLA) -> list[bool]:
    return ["envoy.transport_socket_match" in e.metadata.filter_metadata for g in la.endpoints for e in g.lb_endpoints]


# --- names and the empty assignment --------------------------------------------------------


def test_cluster_names_parse_like_istiod() -> None:
    key = parse_cluster_name(f"outbound|9080|v1|{REVIEWS}")
    assert (key.direction, key.port, key.subset, key.hostname) == ("outbound", 9080, "v1", REVIEWS)
    assert not key.sni_dnat
    sni = parse_cluster_name(f"outbound_.9080_.v1_.{REVIEWS}")
    assert (sni.port, sni.subset, sni.hostname, sni.sni_dnat) == (9080, "v1", REVIEWS, True)
    assert parse_cluster_name("inbound|8080||").hostname == ""
    assert parse_cluster_name("BlackHoleCluster").hostname == ""
    assert parse_cluster_name("outbound|80|a|b|c").hostname == ""  # an extra part voids the host
    assert parse_cluster_name(f"outbound|http|v1|{REVIEWS}").port == 0


def test_unresolvable_names_get_an_assignment_with_only_the_cluster_name() -> None:
    push = push_context(KUBE, SERVICE_ENTRY)
    names = [
        "outbound|9080||nope.default.svc.cluster.local",  # unknown service
        f"outbound|1234||{REVIEWS}",  # unknown port
        "inbound|8080||",
        "BlackHoleCluster",
        "outbound|5432||db.example.com",  # a DNS cluster carries its endpoints itself
        "garbage",
    ]
    out = generate_endpoints(PROXY, push, names)
    assert [la.cluster_name for la in out] == sorted(names)
    assert all(la == CLA(cluster_name=la.cluster_name) for la in out)


def test_output_is_sorted_and_deduplicated() -> None:
    push = push_context(KUBE, SUBSETS_DR)
    names = [f"outbound|9080|v1|{REVIEWS}", f"outbound|9080||{REVIEWS}", f"outbound|9080|v1|{REVIEWS}"]
    assert [la.cluster_name for la in generate_endpoints(PROXY, push, names)] == sorted(set(names))


def test_a_service_the_sidecar_scope_does_not_import_is_unknown() -> None:
    sidecar = """
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: default}
spec: {egress: [{hosts: [istio-system/*]}]}
"""
    push = push_context(KUBE, sidecar)
    assert one(push, f"outbound|9080||{REVIEWS}") == CLA(cluster_name=f"outbound|9080||{REVIEWS}")


# --- endpoints of a Kubernetes Service -----------------------------------------------------


def test_unready_endpoints_are_sent_unhealthy_unless_outlier_detection_sets_min_health_percent() -> None:
    # istiod supportsUnhealthyEndpoints: minHealthPercent > 0 would let Envoy's panic mode route
    # to the unhealthy hosts, so they are left out of that cluster
    sent = one(push_context(KUBE), f"outbound|9080||{REVIEWS}")
    health = {
        e.endpoint.address.socket_address.address: e.health_status for g in sent.endpoints for e in g.lb_endpoints
    }
    assert health["10.1.0.5"] == health_check_pb2.UNHEALTHY
    assert health["10.1.0.1"] == health_check_pb2.HEALTHY
    assert "10.1.0.6" not in health  # terminating: never sent
    guarded = dr("trafficPolicy: {outlierDetection: {minHealthPercent: 50}}")
    la = one(push_context(KUBE, guarded), f"outbound|9080||{REVIEWS}")
    assert addresses(la) == [["10.1.0.4"], ["10.1.0.1"], ["10.1.0.2"], ["10.1.0.3"]]
    zero = dr("trafficPolicy: {outlierDetection: {minHealthPercent: 0, consecutive5xxErrors: 3}}")
    assert "10.1.0.5" in addresses(one(push_context(KUBE, zero), f"outbound|9080||{REVIEWS}"))[1]


def test_min_health_percent_on_a_subset_applies_to_that_subset_only() -> None:
    rule = dr("""
subsets:
- {name: v1, labels: {version: v1}, trafficPolicy: {outlierDetection: {minHealthPercent: 10}}}
- {name: all, labels: {app: reviews}}
""")
    push = push_context(KUBE, rule)
    assert "10.1.0.5" not in addresses(one(push, f"outbound|9080|v1|{REVIEWS}"))[1]
    assert "10.1.0.5" in addresses(one(push, f"outbound|9080|all|{REVIEWS}"))[1]


def test_plain_cluster_from_service_endpointslice_and_pods() -> None:
    la = one(push_context(KUBE), f"outbound|9080||{REVIEWS}")
    assert localities(la) == [
        "eu-west1/eu-west1-a",
        "us-east1/us-east1-b",
        "us-east1/us-east1-c",
        "us-west1/us-west1-a",
    ]
    # the not-ready 10.1.0.5 is sent UNHEALTHY (PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS is on by
    # default); the terminating 10.1.0.6 is not
    assert addresses(la) == [["10.1.0.4"], ["10.1.0.1", "10.1.0.5"], ["10.1.0.2"], ["10.1.0.3"]]
    assert la.endpoints[1].lb_endpoints[1].health_status == health_check_pb2.UNHEALTHY
    v1 = la.endpoints[1].lb_endpoints[0]
    assert v1.endpoint.address.socket_address.port_value == 8080  # the target port
    assert v1.health_status == health_check_pb2.HEALTHY
    assert v1.load_balancing_weight.value == 1
    assert la.endpoints[1].load_balancing_weight.value == 2  # istiod counts the unready one too
    assert la.endpoints[1].priority == 0
    md = json_format.MessageToDict(v1.metadata)["filterMetadata"]
    assert md == {
        "envoy.transport_socket_match": {"tlsMode": "istio"},
        "istio": {"workload": "reviews-v1;default;reviews;v1;Kubernetes"},
    }
    v2 = la.endpoints[2].lb_endpoints[0]  # no sidecar: auto mTLS must not match it
    assert "envoy.transport_socket_match" not in v2.metadata.filter_metadata


def test_port_filtering_takes_only_the_named_ports_endpoints() -> None:
    la = one(push_context(KUBE), f"outbound|9090||{REVIEWS}")
    ports = {e.endpoint.address.socket_address.port_value for g in la.endpoints for e in g.lb_endpoints}
    assert ports == {9091}
    assert sum(len(g.lb_endpoints) for g in la.endpoints) == 5  # 4 ready, 1 unready


def test_subset_filters_by_the_rules_labels_and_uses_the_subsets_tls_mode() -> None:
    push = push_context(KUBE, SUBSETS_DR)
    v1 = one(push, f"outbound|9080|v1|{REVIEWS}")
    assert addresses(v1) == [["10.1.0.4"], ["10.1.0.1", "10.1.0.5"]]
    v2 = one(push, f"outbound|9080|v2|{REVIEWS}")
    assert addresses(v2) == [["10.1.0.2"]]
    # ISTIO_MUTUAL on the subset, but the workload has no sidecar: still no tlsMode (istiod
    # writes the endpoint's own tlsMode label only)
    assert "envoy.transport_socket_match" not in v2.endpoints[0].lb_endpoints[0].metadata.filter_metadata


def test_rule_tls_mode_disable_turns_off_the_tls_mode_match() -> None:
    push = push_context(KUBE, dr("trafficPolicy: {tls: {mode: DISABLE}}\nsubsets: [{name: v1, labels: {version: v1}}]"))
    la = one(push, f"outbound|9080||{REVIEWS}")
    # istiod's mtlsChecker (tlsModeForDestinationRule) reads a subset's own policy, and the
    # rule's when the subset sets none for the port (tests/differential checks it against istiod)
    assert tls_matched(one(push, f"outbound|9080|v1|{REVIEWS}")) == [False, False, False]
    assert tls_matched(one(push_context(KUBE), f"outbound|9080||{REVIEWS}")) == [True, True, True, False, True]
    assert tls_matched(la) == [False, False, False, False, False]


def test_subset_missing_from_the_rule_selects_every_endpoint_as_istiod_does() -> None:
    # istiod getSubSetLabels returns no labels for an unknown subset, so nothing is filtered out;
    # CDS never builds such a cluster, so only a stale subscription sees this
    push = push_context(KUBE, SUBSETS_DR)
    la = one(push, f"outbound|9080|v9|{REVIEWS}")
    assert sum(len(g.lb_endpoints) for g in la.endpoints) == 5


STICKY = reviews_service("istio.io/persistent-session: sid") + REVIEWS_WORKLOADS


def test_draining_endpoints_go_only_to_persistent_session_services() -> None:
    la = one(push_context(STICKY), f"outbound|9080||{REVIEWS}")
    b = la.endpoints[1]
    # the not-ready endpoint goes out UNHEALTHY either way
    assert [e.endpoint.address.socket_address.address for e in b.lb_endpoints] == ["10.1.0.1", "10.1.0.5", "10.1.0.6"]
    health = [health_check_pb2.HEALTHY, health_check_pb2.UNHEALTHY, health_check_pb2.DRAINING]
    assert [e.health_status for e in b.lb_endpoints] == health
    assert b.load_balancing_weight.value == 3


def test_the_draining_label_marks_an_endpoint_draining() -> None:
    labelled = KUBE.replace("version: v3, istio-locality", "version: v3, istio.io/draining: 'true', istio-locality")
    assert labelled != KUBE
    la = one(push_context(labelled), f"outbound|9080||{REVIEWS}")
    assert "10.1.0.3" not in [a for group in addresses(la) for a in group]


def test_headless_service_endpoints_are_sent_though_only_gateways_subscribe() -> None:
    # istiod skips only DNS services; a sidecar's headless cluster is ORIGINAL_DST, a gateway's EDS
    push = push_context(KUBE.replace("clusterIP: 10.96.0.20", "clusterIP: None", 1))
    name = f"outbound|9080||{REVIEWS}"
    assert sum(len(g.lb_endpoints) for g in one(push, name).endpoints) == 5
    gateway = replace(PROXY, type=ProxyType.ROUTER, id="gw-1.istio-system", namespace="istio-system")
    assert name in eds_cluster_names(generate_clusters(gateway, push))
    assert name not in eds_cluster_names(generate_clusters(PROXY, push))


# --- ServiceEntry and WorkloadEntry --------------------------------------------------------


def test_service_entry_static_endpoints_grouped_by_locality_with_weights() -> None:
    la = one(push_context(SERVICE_ENTRY), f"outbound|80||{PAY}")
    assert localities(la) == ["eu-west1/eu-west1-a", "us-east1/us-east1-b", "us-east1/us-east1-c"]
    assert addresses(la) == [["10.2.0.3"], ["10.2.0.1", "10.2.0.2"], ["10.2.0.4"]]
    assert [g.load_balancing_weight.value for g in la.endpoints] == [1, 8, 1]
    assert [e.load_balancing_weight.value for e in la.endpoints[1].lb_endpoints] == [5, 3]
    assert la.endpoints[2].lb_endpoints[0].endpoint.address.socket_address.port_value == 9999
    assert la.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value == 8080
    # a WorkloadEntry-style endpoint with an identity is taken to run a sidecar
    assert "envoy.transport_socket_match" in la.endpoints[2].lb_endpoints[0].metadata.filter_metadata
    # nothing reports their health: UNKNOWN (Envoy takes it as healthy), as istiod sends them
    assert {e.health_status for g in la.endpoints for e in g.lb_endpoints} == {health_check_pb2.UNKNOWN}


def test_service_entry_selecting_workload_entries() -> None:
    la = one(push_context(SERVICE_ENTRY), "outbound|7000||vm.example.com")
    assert addresses(la) == [["10.3.0.1"]]
    ep = la.endpoints[0].lb_endpoints[0]
    assert ep.endpoint.address.socket_address.port_value == 7000
    assert ep.load_balancing_weight.value == 2 and la.endpoints[0].load_balancing_weight.value == 2
    assert ep.metadata.filter_metadata["istio"].fields["workload"].string_value == "vm-1;default;vm;v1;Kubernetes"
    assert ep.health_status == health_check_pb2.UNKNOWN  # a WorkloadEntry's, as istiod


# --- locality load balancing ---------------------------------------------------------------

FAILOVER = """
trafficPolicy:
  outlierDetection: {consecutive5xxErrors: 3}
  loadBalancer:
    localityLbSetting:
      failover: [{from: us-east1, to: eu-west1}]
"""


def test_failover_priorities_follow_the_proxy_locality_with_outlier_detection() -> None:
    la = one(push_context(KUBE, dr(FAILOVER)), f"outbound|9080||{REVIEWS}")
    # own zone, own region, the failover region, then anywhere else
    assert priorities(la) == {
        "us-east1/us-east1-b": 0,
        "us-east1/us-east1-c": 1,
        "eu-west1/eu-west1-a": 2,
        "us-west1/us-west1-a": 3,
    }


def test_failover_without_explicit_regions_ranks_by_closeness() -> None:
    od_only = dr("trafficPolicy: {outlierDetection: {consecutive5xxErrors: 3}}")
    la = one(push_context(KUBE, od_only), f"outbound|9080||{REVIEWS}")
    # the mesh default turns locality LB on; other regions share the last priority
    assert priorities(la) == {
        "us-east1/us-east1-b": 0,
        "us-east1/us-east1-c": 1,
        "eu-west1/eu-west1-a": 2,
        "us-west1/us-west1-a": 2,
    }
    west = replace(PROXY, locality="us-west1/us-west1-a")
    la_west = one(push_context(KUBE, od_only), f"outbound|9080||{REVIEWS}", west)
    assert priorities(la_west) == {
        "us-west1/us-west1-a": 0,
        "eu-west1/eu-west1-a": 1,
        "us-east1/us-east1-b": 1,
        "us-east1/us-east1-c": 1,
    }


def test_no_failover_priorities_without_outlier_detection_or_when_disabled() -> None:
    no_od = dr("trafficPolicy: {loadBalancer: {localityLbSetting: {failover: [{from: us-east1, to: eu-west1}]}}}")
    assert {g.priority for g in one(push_context(KUBE, no_od), f"outbound|9080||{REVIEWS}").endpoints} == {0}
    od = dr("trafficPolicy: {outlierDetection: {consecutive5xxErrors: 3}}")
    off = push_context(KUBE, od, mesh="localityLbSetting: {enabled: false}")
    assert {g.priority for g in one(off, f"outbound|9080||{REVIEWS}").endpoints} == {0}
    rule_off = dr("""
trafficPolicy:
  outlierDetection: {consecutive5xxErrors: 3}
  loadBalancer: {localityLbSetting: {enabled: false}}
""")
    assert {g.priority for g in one(push_context(KUBE, rule_off), f"outbound|9080||{REVIEWS}").endpoints} == {0}


def test_subset_policy_outlier_detection_enables_failover_for_that_subset_only() -> None:
    rule = dr("""
subsets:
- {name: v1, labels: {version: v1}, trafficPolicy: {outlierDetection: {consecutive5xxErrors: 1}}}
- {name: all, labels: {app: reviews}}
""")
    push = push_context(KUBE, rule)
    v1 = one(push, f"outbound|9080|v1|{REVIEWS}")
    assert [g.priority for g in v1.endpoints] == [1, 0]  # eu-west1, then us-east1-b
    assert {g.priority for g in one(push, f"outbound|9080|all|{REVIEWS}").endpoints} == {0}


DISTRIBUTE = """
trafficPolicy:
  loadBalancer:
    localityLbSetting:
      distribute:
      - from: us-east1/us-east1-b/*
        to: {"us-east1/*": 80, "eu-west1/eu-west1-a": 20}
"""


def test_distribute_sets_locality_weights_and_empties_the_rest() -> None:
    rule = dr(DISTRIBUTE)
    la = one(push_context(KUBE, rule), f"outbound|9080||{REVIEWS}")
    weights = {
        loc: (g.load_balancing_weight.value, len(g.lb_endpoints))
        for loc, g in zip(localities(la), la.endpoints, strict=True)
    }
    # 80 split over the two us-east1 zones by their weights (2:1, the unready endpoint counts as
    # in istiod), rounded up
    assert weights == {
        "eu-west1/eu-west1-a": (20, 1),
        "us-east1/us-east1-b": (54, 2),
        "us-east1/us-east1-c": (27, 1),
        "us-west1/us-west1-a": (1, 0),
    }
    assert {g.priority for g in la.endpoints} == {0}
    elsewhere = replace(PROXY, locality="eu-west1/eu-west1-a")
    untouched = one(push_context(KUBE, rule), f"outbound|9080||{REVIEWS}", elsewhere)
    assert [g.load_balancing_weight.value for g in untouched.endpoints] == [1, 2, 1, 1]


def test_failover_priority_labels_split_localities_by_shared_labels() -> None:
    rule = dr("""
trafficPolicy:
  outlierDetection: {consecutive5xxErrors: 3}
  loadBalancer:
    localityLbSetting:
      failoverPriority: [version=v1, topology.kubernetes.io/region]
""")
    la = one(push_context(KUBE, rule), f"outbound|9080||{REVIEWS}")
    got = sorted((g.priority, a) for g, group in zip(la.endpoints, addresses(la), strict=True) for a in group)
    # both labels match: 0; version matches but region does not: 1; version differs: 2
    assert got == [(0, "10.1.0.1"), (0, "10.1.0.5"), (1, "10.1.0.4"), (2, "10.1.0.2"), (2, "10.1.0.3")]
    assert all(g.load_balancing_weight.value == len(g.lb_endpoints) for g in la.endpoints)


def test_failover_priority_labels_then_region_failover_within_each_priority() -> None:
    rule = dr("""
trafficPolicy:
  outlierDetection: {consecutive5xxErrors: 3}
  loadBalancer:
    localityLbSetting:
      failoverPriority: [version=v1]
      failover: [{from: us-east1, to: eu-west1}]
""")
    la = one(push_context(KUBE, rule), f"outbound|9080||{REVIEWS}")
    got = sorted((g.priority, a) for g, group in zip(la.endpoints, addresses(la), strict=True) for a in group)
    # label priority is the major key: v1 here, then the failover region; then the others
    assert got == [(0, "10.1.0.1"), (0, "10.1.0.5"), (1, "10.1.0.4"), (2, "10.1.0.2"), (3, "10.1.0.3")]


def test_sni_dnat_names_keep_only_mtls_endpoints() -> None:
    la = one(push_context(KUBE), f"outbound_.9080_._.{REVIEWS}")
    assert addresses(la) == [["10.1.0.4"], ["10.1.0.1", "10.1.0.5"], [], ["10.1.0.3"]]
    assert not la.endpoints[2].HasField("load_balancing_weight")


# --- with CDS, and a real Envoy ------------------------------------------------------------


def test_eds_cluster_names_are_what_envoy_subscribes_to() -> None:
    push = push_context(KUBE, SUBSETS_DR, SERVICE_ENTRY)
    clusters = generate_clusters(PROXY, push)
    names = eds_cluster_names(clusters)
    assert names == sorted(
        c.name for c in clusters if c.type == cluster_pb2.Cluster.EDS
    )  # service_name is the cluster name
    assert f"outbound|9080|v1|{REVIEWS}" in names and f"outbound|80||{PAY}" in names
    assert "outbound|5432||db.example.com" not in names and "PassthroughCluster" not in names
    out = generate_endpoints(PROXY, push, names)
    assert [la.cluster_name for la in out] == names
    assert all(len(la.endpoints) > 0 for la in out)
    renamed = cluster_pb2.Cluster(name="a", type=cluster_pb2.Cluster.EDS)
    renamed.eds_cluster_config.service_name = "b"
    assert eds_cluster_names([renamed]) == ["b"]


def test_real_envoy_accepts_the_assignments(tmp_path: Path) -> None:
    push = push_context(KUBE, SUBSETS_DR, SERVICE_ENTRY)
    assignments = generate_endpoints(PROXY, push, eds_cluster_names(generate_clusters(PROXY, push)))
    assignments += generate_endpoints(PROXY, push_context(STICKY), [f"outbound|9080||{REVIEWS}"])  # DRAINING
    for spec in (FAILOVER, DISTRIBUTE):
        names = [f"outbound|9080||{REVIEWS}", f"outbound_.9090_._.{REVIEWS}"]
        assignments += generate_endpoints(PROXY, push_context(KUBE, dr(spec)), names)
    clusters = []
    for i, la in enumerate(assignments):
        c = cluster_pb2.Cluster(name=f"{i}-{la.cluster_name}", type=cluster_pb2.Cluster.STATIC)
        c.connect_timeout.seconds = 1
        c.common_lb_config.locality_weighted_lb_config.SetInParent()
        c.load_assignment.CopyFrom(la)
        c.load_assignment.cluster_name = c.name
        clusters.append(c)
    assert any(g.priority > 0 for la in assignments for g in la.endpoints)
    node_id = "sidecar~10.1.9.9~productpage-1.default~default.svc.cluster.local"
    validate_bootstrap(agent_bootstrap(node_id, clusters), tmp_path)
