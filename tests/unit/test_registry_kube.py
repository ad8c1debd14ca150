"""Kubernetes Services, EndpointSlices and Pods through the ServiceRegistry."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from app.config.kube import KubeServicePort
from app.config.objects import ConfigObject
from app.model.service import Endpoint, HealthStatus, Protocol, Registry, Resolution, ServicePort
from app.registry.kube import KubeController, kube_port_protocol
from app.registry.registry import RegistryDelta, ServiceRegistry
from tests.support.registry import add, delete, objects, services_and_shards, update

HOST = "reviews.default.svc.cluster.local"
KEY = (HOST, "default")

SERVICE = """
apiVersion: v1
kind: Service
metadata:
  name: reviews
  namespace: default
  creationTimestamp: "2024-05-01T10:00:00Z"
  labels: {app: reviews}
  annotations:
    networking.istio.io/exportTo: " default , istio-system,."
spec:
  clusterIP: 10.96.0.10
  selector: {app: reviews}
  ports:
  - {name: http-web, port: 80, targetPort: 9080}
  - {name: grpc, port: 7070}
  - {name: metrics, port: 9090, appProtocol: http}
  - {name: h2, port: 8081, appProtocol: kubernetes.io/h2c}
  - {name: dns, port: 53, protocol: UDP}
  - {name: other, port: 5000}
"""

SLICE = """
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-abc
  namespace: default
  labels: {kubernetes.io/service-name: reviews}
addressType: IPv4
ports:
- {name: http-web, port: 9080}
- {name: not-in-service, port: 1234}
endpoints:
- addresses: [10.0.0.1]
  conditions: {ready: true}
  zone: zone-from-slice
  targetRef: {kind: Pod, name: reviews-v1, namespace: default}
- addresses: [10.0.0.2]
  conditions: {ready: false, terminating: true}
  targetRef: {kind: Pod, name: reviews-v2, namespace: default}
- addresses: [10.0.0.3]
  conditions: {ready: false, serving: false, terminating: false}
  zone: z3
"""

POD_V1 = """
apiVersion: v1
kind: Pod
metadata:
  name: reviews-v1
  namespace: default
  labels:
    app: reviews
    version: v1
    security.istio.io/tlsMode: istio
    istio-locality: us-east.us-east-1a.rack7
spec: {serviceAccountName: bookinfo-reviews}
status:
  podIP: 10.0.0.1
  conditions: [{type: Ready, status: "True"}]
"""

POD_V2 = """
apiVersion: v1
kind: Pod
metadata:
  name: reviews-v2
  namespace: default
  labels:
    app: reviews
    version: v2
    topology.kubernetes.io/region: eu-west
    topology.kubernetes.io/zone: eu-west-1b
  annotations: {sidecar.istio.io/status: '{"containers":["istio-proxy"]}'}
spec: {nodeName: node-b}
status: {podIP: 10.0.0.2}
"""

# the Node reviews-v2 runs on: its labels, not the Pod's own, are the Pod's locality
NODE_B = """
apiVersion: v1
kind: Node
metadata:
  name: node-b
  labels:
    topology.kubernetes.io/region: eu-central
    topology.kubernetes.io/zone: eu-central-1a
    kubernetes.io/os: linux
"""


def one(text: str) -> ConfigObject:
    objs = objects(text)
    assert len(objs) == 1
    return objs[0]


def test_service_conversion() -> None:
    reg = ServiceRegistry()
    delta = add(reg, SERVICE)
    assert services_and_shards(delta) == RegistryDelta(services_changed=frozenset({KEY}))
    svc = reg.service(HOST, "default")
    assert svc is not None
    assert svc.ports == (
        ServicePort("http-web", 80, Protocol.HTTP),
        ServicePort("grpc", 7070, Protocol.GRPC),
        ServicePort("metrics", 9090, Protocol.HTTP),  # appProtocol wins over the name
        ServicePort("h2", 8081, Protocol.HTTP2),
        ServicePort("dns", 53, Protocol.UDP),
        ServicePort("other", 5000, Protocol.UNSUPPORTED),
    )
    assert svc.registry is Registry.KUBERNETES
    assert svc.name == "reviews"
    assert svc.addresses == ("10.96.0.10",)
    assert svc.resolution is Resolution.CLIENT_SIDE_LB
    assert svc.mesh_external is False
    assert svc.export_to == frozenset({"default", "istio-system", "."})
    assert dict(svc.labels) == {"app": "reviews"}
    assert svc.selector is not None and dict(svc.selector) == {"app": "reviews"}
    assert svc.creation_timestamp == "2024-05-01T10:00:00Z"
    assert reg.services() == (svc,)


def test_domain_suffix_is_configurable() -> None:
    reg = ServiceRegistry(domain_suffix="corp.internal")
    add(reg, SERVICE)
    assert [s.hostname for s in reg.services()] == ["reviews.default.svc.corp.internal"]


def test_headless_service_is_passthrough_without_addresses() -> None:
    reg = ServiceRegistry()
    add(reg, SERVICE.replace("clusterIP: 10.96.0.10", "clusterIP: None"))
    svc = reg.service(HOST, "default")
    assert svc is not None
    assert svc.resolution is Resolution.PASSTHROUGH
    assert svc.addresses == ()


def test_external_name_service() -> None:
    reg = ServiceRegistry()
    delta = add(
        reg,
        """
apiVersion: v1
kind: Service
metadata: {name: db, namespace: data}
spec:
  type: ExternalName
  externalName: db.example.com
  ports: [{name: tcp-pg, port: 5432}, {name: http, port: 8080}]
""",
    )
    key = ("db.data.svc.cluster.local", "data")
    assert services_and_shards(delta) == RegistryDelta(frozenset({key}), frozenset({key}))
    svc = reg.service(*key)
    assert svc is not None
    assert svc.resolution is Resolution.DNS_LB
    assert svc.mesh_external is True
    assert svc.external_name == "db.example.com"
    assert svc.addresses == ()
    assert svc.export_to == frozenset()
    assert reg.endpoints(*key) == (
        Endpoint("db.example.com", 5432, "tcp-pg", namespace="data"),
        Endpoint("db.example.com", 8080, "http", namespace="data"),
    )


def test_slice_endpoints_carry_pod_data() -> None:
    reg = ServiceRegistry()
    add(reg, SERVICE)
    add(reg, POD_V1)
    add(reg, NODE_B)
    add(reg, POD_V2)
    delta = add(reg, SLICE)
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({KEY}))
    eps = reg.endpoints(HOST, "default")
    assert eps == (
        Endpoint(
            address="10.0.0.1",
            port=9080,
            service_port_name="http-web",
            labels=MappingProxyType(
                {
                    "app": "reviews",
                    "version": "v1",
                    "security.istio.io/tlsMode": "istio",
                    "istio-locality": "us-east.us-east-1a.rack7",
                }
            ),
            locality="us-east/us-east-1a/rack7",
            health=HealthStatus.HEALTHY,
            service_account="spiffe://cluster.local/ns/default/sa/bookinfo-reviews",
            namespace="default",
            workload_name="reviews-v1",
            tls_mode="istio",
        ),
        Endpoint(
            address="10.0.0.2",
            port=9080,
            service_port_name="http-web",
            labels=MappingProxyType(
                {
                    "app": "reviews",
                    "version": "v2",
                    "topology.kubernetes.io/region": "eu-west",
                    "topology.kubernetes.io/zone": "eu-west-1b",
                }
            ),
            locality="eu-central/eu-central-1a",  # its Node's (istiod getPodLocality)
            health=HealthStatus.TERMINATING,  # no persistent sessions: never sent
            service_account="spiffe://cluster.local/ns/default/sa/default",
            namespace="default",
            workload_name="reviews-v2",
            tls_mode="istio",
            node_name="node-b",  # its kubernetes.io/hostname topology label
        ),
        # no Pod: no labels, identity or locality (istiod's EndpointBuilder reads no slice zone)
        Endpoint(
            address="10.0.0.3",
            port=9080,
            service_port_name="http-web",
            health=HealthStatus.UNHEALTHY,
            namespace="default",
        ),
    )


def test_slice_before_service_and_pod_fills_in_later() -> None:
    reg = ServiceRegistry()
    assert add(reg, SLICE).empty  # no Service yet: no port names to match
    assert reg.endpoints(HOST, "default") == ()
    delta = add(reg, SERVICE)
    assert services_and_shards(delta) == RegistryDelta(frozenset({KEY}), frozenset({KEY}))
    # the endpoints naming a Pod not known yet wait for it (istiod getPod); 10.0.0.3 names none
    assert [e.address for e in reg.endpoints(HOST, "default")] == ["10.0.0.3"]
    delta = add(reg, POD_V1)
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({KEY}))
    assert [e.address for e in reg.endpoints(HOST, "default")] == ["10.0.0.1", "10.0.0.3"]
    assert reg.endpoints(HOST, "default")[0].workload_name == "reviews-v1"
    assert reg.endpoints(HOST, "default")[0].tls_mode == "istio"


def test_pod_relabel_changes_endpoints_only() -> None:
    reg = ServiceRegistry()
    add(reg, SERVICE + "---" + POD_V1 + "---" + SLICE)
    before = reg.services()
    delta = update(reg, POD_V1.replace("version: v1", "version: v1-canary"))
    assert delta.services_changed == frozenset()
    assert delta.endpoints_changed == frozenset({KEY})
    assert reg.endpoints(HOST, "default")[0].labels["version"] == "v1-canary"
    assert reg.services() is before  # the cached tuple survives an endpoint-only change


def test_pod_locality_change_changes_endpoints_only() -> None:
    reg = ServiceRegistry()
    add(reg, SERVICE + "---" + POD_V1 + "---" + SLICE)
    delta = update(
        reg, POD_V1.replace("istio-locality: us-east.us-east-1a.rack7", "istio-locality: ap-south")
    )
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({KEY}))
    assert reg.endpoints(HOST, "default")[0].locality == "ap-south"
    # a Pod update that changes nothing the endpoints carry produces no delta
    same = POD_V1.replace("istio-locality: us-east.us-east-1a.rack7", "istio-locality: ap-south")
    assert update(reg, same.replace("name: reviews-v1\n", "name: reviews-v1\n  resourceVersion: '9'\n")).empty


def test_a_pod_update_rebuilds_its_slices_only_when_what_they_take_from_it_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A slice's endpoints take labels, locality, identity and sidecar from their Pod, never its
    readiness, IP or ports (the slice's own): a readiness flip or a new port rebuilds nothing."""
    reg = ServiceRegistry()
    add(reg, SERVICE + "---" + POD_V1 + "---" + SLICE)
    built: list[tuple[str, str]] = []
    build = KubeController._build_slice

    def counting(self: KubeController, skey: tuple[str, str]) -> None:
        built.append(skey)
        build(self, skey)

    monkeypatch.setattr(KubeController, "_build_slice", counting)
    ready = 'conditions: [{type: Ready, status: "True"}]'
    unready = POD_V1.replace(ready, ready.replace("True", "False"))
    assert update(reg, unready).empty
    ported = unready.replace("spec: {serviceAccountName: bookinfo-reviews}", """spec:
  serviceAccountName: bookinfo-reviews
  containers: [{name: app, ports: [{name: http, containerPort: 9080}]}]""")
    assert update(reg, ported).empty
    assert built == []
    assert update(reg, ported.replace("version: v1", "version: v2")).endpoints_changed == {KEY}
    assert built == [("default", "reviews-abc")]


def test_pod_not_referenced_by_a_slice_changes_no_endpoint_only_its_proxys_labels() -> None:
    reg = ServiceRegistry()
    add(reg, SERVICE + "---" + SLICE)
    # a Pod that comes is a proxy update (istiod PodCache.addPod), its endpoints none
    unrelated = POD_V1.replace("name: reviews-v1", "name: unrelated")
    assert add(reg, unrelated) == RegistryDelta(relabeled_pods=frozenset({("default", "unrelated")}))
    assert update(reg, unrelated.replace("podIP: 10.0.0.1", "podIP: 10.0.0.9")).empty  # same labels


def test_slice_edit_changes_endpoints_only() -> None:
    reg = ServiceRegistry()
    add(reg, SERVICE + "---" + POD_V1 + "---" + POD_V2 + "---" + SLICE)
    delta = update(reg, SLICE.replace("{ready: false, serving: false, terminating: false}", "{ready: true}"))
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({KEY}))
    assert reg.endpoints(HOST, "default")[2].health is HealthStatus.HEALTHY


def test_two_slices_merge_and_deduplicate() -> None:
    reg = ServiceRegistry()
    add(reg, SERVICE + "---" + POD_V1 + "---" + POD_V2 + "---" + SLICE)
    second = (
        SLICE.replace("name: reviews-abc", "name: reviews-xyz")
        .replace("10.0.0.1", "10.0.0.9")
        .replace("{ready: false, serving: false, terminating: false}", "{ready: true}")
    )
    add(reg, second)
    eps = reg.endpoints(HOST, "default")
    # 10.0.0.2 and 10.0.0.3 appear in both slices once each; 10.0.0.3 is ready in the second
    assert [(e.address, e.health) for e in eps] == [
        ("10.0.0.1", HealthStatus.HEALTHY),
        ("10.0.0.2", HealthStatus.TERMINATING),
        ("10.0.0.3", HealthStatus.HEALTHY),
        ("10.0.0.9", HealthStatus.HEALTHY),
    ]


def test_disjoint_slices_concatenate_in_slice_name_order() -> None:
    reg = ServiceRegistry()
    add(reg, SERVICE + "---" + POD_V1 + "---" + POD_V2 + "---" + SLICE)
    first = SLICE.replace("name: reviews-abc", "name: reviews-aaa")
    for old, new in (("10.0.0.1", "10.0.1.1"), ("10.0.0.2", "10.0.1.2"), ("10.0.0.3", "10.0.1.3")):
        first = first.replace(old, new)
    add(reg, first)
    assert [e.address for e in reg.endpoints(HOST, "default")] == [
        "10.0.1.1",
        "10.0.1.2",
        "10.0.1.3",
        "10.0.0.1",
        "10.0.0.2",
        "10.0.0.3",
    ]


def test_service_port_rename_changes_service_and_endpoints() -> None:
    reg = ServiceRegistry()
    add(reg, SERVICE + "---" + SLICE)
    delta = update(reg, SERVICE.replace("name: http-web", "name: http-renamed"))
    assert services_and_shards(delta) == RegistryDelta(frozenset({KEY}), frozenset({KEY}))
    assert reg.endpoints(HOST, "default") == ()  # the slice's port name no longer matches


def test_annotation_only_service_update_is_no_change() -> None:
    reg = ServiceRegistry()
    add(reg, SERVICE)
    changed = SERVICE.replace(
        "  labels: {app: reviews}\n", "  labels: {app: reviews}\n  resourceVersion: '2'\n"
    )
    assert update(reg, changed).empty
    delta = update(reg, SERVICE.replace(" default , istio-system,.", "*"))
    assert services_and_shards(delta) == RegistryDelta(services_changed=frozenset({KEY}))
    svc = reg.service(HOST, "default")
    assert svc is not None and svc.export_to == frozenset({"*"})


def test_deletes() -> None:
    reg = ServiceRegistry()
    add(reg, SERVICE + "---" + POD_V1 + "---" + POD_V2 + "---" + SLICE)
    delta = delete(reg, SLICE)
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({KEY}))
    assert reg.endpoints(HOST, "default") == ()
    add(reg, SLICE)
    delta = delete(reg, SERVICE)
    assert services_and_shards(delta) == RegistryDelta(frozenset({KEY}), frozenset({KEY}))
    assert reg.service(HOST, "default") is None
    assert reg.services() == ()
    assert reg.endpoints(HOST, "default") == ()
    assert reg.service_targets("10.0.0.1") == []
    # the slice is still known: the Service coming back brings its endpoints back
    assert services_and_shards(add(reg, SERVICE)) == RegistryDelta(frozenset({KEY}), frozenset({KEY}))
    assert len(reg.endpoints(HOST, "default")) == 3
    # a Pod delete takes the endpoint naming it (it waits for the Pod again, as istiod's getPod)
    delta = delete(reg, POD_V1)
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({KEY}))
    assert [e.address for e in reg.endpoints(HOST, "default")] == ["10.0.0.2", "10.0.0.3"]


def test_service_targets() -> None:
    reg = ServiceRegistry()
    two_ports = SLICE.replace("- {name: not-in-service, port: 1234}", "- {name: grpc, port: 7070}")
    add(reg, SERVICE + "---" + POD_V1 + "---" + two_ports)
    targets = reg.service_targets("10.0.0.1")
    svc = reg.service(HOST, "default")
    assert svc is not None
    assert [(t[0], t[1], t[2].port) for t in targets] == [
        (svc, ServicePort("http-web", 80, Protocol.HTTP), 9080),
        (svc, ServicePort("grpc", 7070, Protocol.GRPC), 7070),
    ]
    assert reg.service_targets("10.9.9.9") == []


def test_namespace_labels_and_ignored_kinds() -> None:
    reg = ServiceRegistry()
    delta = add(
        reg,
        """
apiVersion: v1
kind: Namespace
metadata: {name: default, labels: {istio-injection: enabled}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: dr, namespace: default}
spec: {host: reviews}
""",
    )
    assert delta.empty
    assert dict(reg.namespace_labels("default")) == {"istio-injection": "enabled"}
    assert dict(reg.namespace_labels("missing")) == {}


@pytest.mark.parametrize(
    ("name", "protocol", "app_protocol", "expected"),
    [
        ("http", "TCP", "", Protocol.HTTP),
        ("HTTP2-x", "TCP", "", Protocol.HTTP2),
        ("grpc-web-ui", "TCP", "", Protocol.GRPC_WEB),
        ("tcp-db", "TCP", "", Protocol.TCP),
        ("web", "TCP", "", Protocol.UNSUPPORTED),
        ("web", "TCP", "https", Protocol.HTTPS),
        ("http", "TCP", "mysql", Protocol.MYSQL),
        ("web", "TCP", "kubernetes.io/ws", Protocol.HTTP),
        ("http", "UDP", "http", Protocol.UDP),
    ],
)
def test_kube_port_protocol(name: str, protocol: str, app_protocol: str, expected: Protocol) -> None:
    assert kube_port_protocol(KubeServicePort(name, 80, protocol, 80, app_protocol)) is expected


@pytest.mark.parametrize(
    ("conditions", "persistent", "health"),
    [
        ("{}", False, HealthStatus.HEALTHY),  # no condition: ready
        ("{ready: false, serving: false, terminating: false}", False, HealthStatus.UNHEALTHY),  # an unready pod
        # a condition not set reads as true: not ready and not said to be not terminating is
        # terminating (as the mirroring controller writes an Endpoints' notReadyAddresses)
        ("{ready: false}", False, HealthStatus.TERMINATING),
        ("{ready: false, terminating: true}", False, HealthStatus.TERMINATING),
        ("{ready: false}", True, HealthStatus.DRAINING),  # persistent sessions: drains while serving
        ("{ready: false, serving: true, terminating: true}", True, HealthStatus.DRAINING),
        ("{ready: false, serving: false, terminating: true}", True, HealthStatus.TERMINATING),
        ("{ready: false, terminating: false}", True, HealthStatus.UNHEALTHY),
    ],
)
def test_slice_endpoint_health_as_istiod_reads_the_conditions(
    conditions: str, persistent: bool, health: HealthStatus
) -> None:
    """istiod endpointHealthStatus; a terminating endpoint is never sent, even to count as
    unhealthy (filterIstioEndpoint)."""
    reg = ServiceRegistry()
    service = SERVICE.replace("labels: {app: reviews}", "labels: {app: reviews, istio.io/persistent-session: c}")
    edited = SLICE.replace("{ready: false, serving: false, terminating: false}", conditions)
    add(reg, (service if persistent else SERVICE) + "---" + edited)
    assert reg.endpoints(HOST, "default")[-1].health is health


def test_a_slice_endpoint_naming_a_pod_of_another_namespace_waits_for_that_pod() -> None:
    reg = ServiceRegistry()
    elsewhere = SLICE.replace("name: reviews-v1, namespace: default", "name: reviews-v1, namespace: other")
    add(reg, SERVICE + "---" + POD_V1 + "---" + elsewhere)
    assert [e.address for e in reg.endpoints(HOST, "default")] == ["10.0.0.3"]  # default/reviews-v1 is not it
    add(reg, POD_V1.replace("namespace: default", "namespace: other"))
    assert reg.endpoints(HOST, "default")[0].address == "10.0.0.1"
    assert reg.endpoints(HOST, "default")[0].namespace == "other"


def test_a_slice_endpoint_whose_target_ref_names_no_namespace_names_no_pod() -> None:
    # istiod getPod looks the Pod up by the targetRef's own namespace, "" here: none
    reg = ServiceRegistry()
    bare = SLICE.replace("name: reviews-v1, namespace: default", "name: reviews-v1")
    add(reg, SERVICE + "---" + POD_V1 + "---" + POD_V2 + "---" + bare)
    assert [e.address for e in reg.endpoints(HOST, "default")] == ["10.0.0.2", "10.0.0.3"]
