"""A proxy's labels and locality from its pod, as istiod's SetWorkloadLabels and
setTopologyLabels give them, and a relabelled pod's proxy pushed with its new labels alone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2

from app.config.loader import load_documents
from app.config.objects import ConfigEvent, ConfigKey, EventType, Kind
from app.environment import Environment
from app.model.proxy import Proxy, build_proxy
from app.registry.kube import Workload
from app.registry.proxy_labels import pod_key_by_proxy, with_workload
from app.registry.registry import RegistryDelta
from app.sources.files import FileSource
from app.xds.cache import ResourceCache
from app.xds.client import node as xds_node
from app.xds.connection import Connection
from app.xds.delta import DeltaSession
from app.xds.discovery import Discovery
from app.xds.mesh_source import MeshSource
from app.xds.next_push import push_request
from app.xds.push_request import PushRequest, TriggerReason
from app.xds.type_urls import CLUSTER, LISTENER
from app.xds.watch import counter_nonces
from tests.support.bookinfo import BOOKINFO

NODE = "sidecar~10.1.0.10~productpage-v1-0.bookinfo~bookinfo.svc.cluster.local"
TOPOLOGY = {"topology.istio.io/cluster": "Kubernetes"}  # every proxy's (its CLUSTER_ID)


def proxy(metadata: Mapping[str, Any] | None = None, node_id: str = NODE, locality: str = "") -> Proxy:
    return build_proxy(node_id, {"NAMESPACE": "bookinfo", **(metadata or {})}, locality)


def pod(labels: Mapping[str, str], locality: str = "") -> Workload:
    return Workload("productpage-v1-0", "bookinfo", "10.1.0.10", labels, {}, locality=locality)


def test_the_pods_labels_are_the_proxys_not_what_its_node_sent() -> None:
    found = with_workload(proxy({"LABELS": {"app": "stale", "version": "v0"}}), pod({"app": "productpage"}))
    assert found.labels == {"app": "productpage", **TOPOLOGY}


def test_without_its_pod_a_proxy_keeps_its_metadata_labels() -> None:
    found = with_workload(proxy({"LABELS": {"app": "stale"}}), None)
    assert found.labels == {"app": "stale", **TOPOLOGY}


def test_a_vm_keeps_its_metadata_labels_even_beside_a_pod_of_its_name() -> None:
    vm = {"app": "legacy", "istio.io/test-vm": "true"}
    found = with_workload(proxy({"LABELS": vm}), pod({"app": "productpage"}))
    assert found.labels == {**vm, **TOPOLOGY}


def test_static_labels_join_the_pods_and_the_pod_wins_a_key_both_have() -> None:
    """SetWorkloadLabels writes ISTIO_METAJSON_LABELS first, then the pod's labels over them."""
    static = {"team": "books", "app": "from-metajson"}
    found = with_workload(
        proxy({"LABELS": {"app": "stale", **static}, "STATIC_LABELS": static}), pod({"app": "productpage"})
    )
    assert found.labels == {"app": "productpage", "team": "books", **TOPOLOGY}
    # without the pod, the metadata labels (which hold the static ones already) stand
    assert with_workload(proxy({"LABELS": {**static, "app": "x"}, "STATIC_LABELS": static}), None).labels == {
        "app": "x",
        "team": "books",
        **TOPOLOGY,
    }


def test_the_locality_is_the_pods_else_the_metadata_labels_else_the_xds_nodes() -> None:
    sent = proxy({"LABELS": {}}, locality="eu/eu-1")
    located = with_workload(sent, pod({"app": "productpage"}, locality="us-east1/us-east1-b/rack-1"))
    assert located.locality == "us-east1/us-east1-b/rack-1"
    assert located.labels == {
        "app": "productpage",
        "topology.kubernetes.io/region": "us-east1",
        "topology.kubernetes.io/zone": "us-east1-b",
        "topology.istio.io/subzone": "rack-1",
        **TOPOLOGY,
    }
    # a pod without locality: the xDS node's, which the labels then carry
    assert with_workload(sent, pod({})).locality == "eu/eu-1"
    assert with_workload(sent, pod({})).labels["topology.kubernetes.io/zone"] == "eu-1"
    # no pod: the metadata labels' locality label, over the xDS node's (localityFromProxyLabels)
    assert (
        with_workload(proxy({"LABELS": {"istio-locality": "ap.ap-1"}}, locality="eu/eu-1"), None).locality == "ap/ap-1"
    )
    assert with_workload(proxy({"LABELS": {}}, locality="eu/eu-1"), None).locality == "eu/eu-1"


def test_the_topology_labels_name_the_cluster_node_and_network_a_pod_label_winning_the_network() -> None:
    metadata = {"CLUSTER_ID": "east", "NODE_NAME": "worker-1", "NETWORK": "net-a"}
    found = with_workload(proxy(metadata), pod({"app": "productpage"}))
    assert found.labels == {
        "app": "productpage",
        "topology.istio.io/cluster": "east",
        "kubernetes.io/hostname": "worker-1",
        "topology.istio.io/network": "net-a",
    }
    on_net_b = with_workload(proxy(metadata), pod({"topology.istio.io/network": "net-b"}))
    assert on_net_b.labels["topology.istio.io/network"] == "net-b"


def test_a_proxys_pod_is_named_by_its_id_in_its_own_namespace() -> None:
    assert pod_key_by_proxy(proxy()) == ("bookinfo", "productpage-v1-0")
    assert pod_key_by_proxy(proxy({"NAMESPACE": "other"})) is None  # podKeyByProxy: namespaces differ
    assert pod_key_by_proxy(proxy(node_id="router~10.0.0.1~gateway~bookinfo.svc.cluster.local")) is None


# --- the registry, and a relabel pushed to the proxy of that pod alone ------------------------

# bookinfo's productpage pod, relabelled with canary: "yes"
PRODUCTPAGE = """apiVersion: v1
kind: Pod
metadata:
  name: productpage-v1-0
  namespace: bookinfo
  labels: {app: productpage, version: v1, security.istio.io/tlsMode: istio, canary: "yes"}
spec:
  nodeName: worker-us-east1-b
  serviceAccountName: bookinfo-productpage
  containers:
  - name: productpage
    ports: [{containerPort: 9080, name: http}]
status:
  phase: Running
  podIP: 10.1.0.10
  conditions: [{type: Ready, status: "True"}]
"""
# a Sidecar for canary workloads only: they see their own namespace's details, nothing else
CANARY_SIDECAR = """apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: canary, namespace: bookinfo}
spec:
  workloadSelector: {labels: {canary: "yes"}}
  egress: [{hosts: [./details.bookinfo.svc.cluster.local]}]
"""
REVIEWS = "outbound|9080||reviews.bookinfo.svc.cluster.local"
DETAILS = "outbound|9080||details.bookinfo.svc.cluster.local"
Req = discovery_pb2.DeltaDiscoveryRequest
DeltaConnection = Connection[Proxy, PushRequest, Req, discovery_pb2.DeltaDiscoveryResponse]


class Mesh:
    """bookinfo served to Delta streams whose proxies take their pod's labels."""

    def __init__(self) -> None:
        self.env = Environment()
        self.env.apply(FileSource(BOOKINFO).load())
        self.discovery: Discovery[DeltaConnection] = Discovery(self.env, ResourceCache(verify=True))
        self.discovery.start()
        self.source = MeshSource(self.discovery.generator, None, self.env.registry.with_workload_labels)

    def connect(self, node_id: str, labels: Mapping[str, str]) -> DeltaConnection:
        """A stream subscribed to clusters and listeners, its responses ACKed."""
        client = self.source.client(xds_node(node_id, {"NAMESPACE": "bookinfo", "LABELS": dict(labels)}))
        conn: DeltaConnection = Connection("c", client, DeltaSession(counter_nonces(), None), self.source)
        for type_url in (CLUSTER, LISTENER):
            for resp in conn.on_request(Req(type_url=type_url)):
                conn.on_request(Req(type_url=resp.type_url, response_nonce=resp.nonce))
        return conn

    def change(self, text: str) -> PushRequest:
        events = [ConfigEvent(EventType.UPDATE, obj) for obj in load_documents(text, "change.yaml").objects]
        request = push_request(self.env.apply(events), len(events))
        assert request is not None
        return self.discovery.push(request).request


def test_a_relabelled_pod_is_a_proxy_update_of_that_pod() -> None:
    mesh = Mesh()
    delta = mesh.env.registry.apply_all(
        ConfigEvent(EventType.UPDATE, obj) for obj in load_documents(PRODUCTPAGE, "pod.yaml").objects
    )
    assert delta.relabeled_pods == {("bookinfo", "productpage-v1-0")}
    # the same labels again (a status change): no proxy update
    again = PRODUCTPAGE.replace("phase: Running", "phase: Running\n  hostIP: 10.0.0.1")
    assert (
        mesh.env.registry.apply_all(
            ConfigEvent(EventType.UPDATE, obj) for obj in load_documents(again, "pod.yaml").objects
        )
        == RegistryDelta()
    )


def test_a_relabel_pushes_that_proxy_everything_for_its_new_labels_and_nobody_else() -> None:
    mesh = Mesh()
    mesh.change(CANARY_SIDECAR)
    # the node's metadata says canary (stale): the pod, not yet a canary, wins
    page = mesh.connect(NODE, {"app": "productpage", "canary": "yes"})
    details = mesh.connect("sidecar~10.1.0.20~details-v1-0.bookinfo~bookinfo.svc.cluster.local", {"app": "details"})
    assert "canary" not in page.client.labels
    before = page.client
    state = mesh.discovery.generator._state()
    assert state.proxy_class(before).scope.name != "bookinfo/canary"

    request = mesh.change(PRODUCTPAGE)  # the pod is relabelled canary: "yes"
    assert request.relabeled_pods == {("bookinfo", "productpage-v1-0")}
    assert not details.on_push(request)  # its pod did not change: nothing for it
    sent = {resp.type_url: resp for resp in page.on_push(request)}

    assert page.client.labels["canary"] == "yes"  # the stream keeps the recomputed proxy
    assert page.client.locality == before.locality == "us-east1/us-east1-b"
    state = mesh.discovery.generator._state()  # the snapshot the push published
    assert state.proxy_class(page.client).scope.name == "bookinfo/canary"
    assert all(held.obj is not before for held in state.proxy_classes)  # the old proxy's class entry went
    # the canary Sidecar's scope: reviews' cluster goes, details' stays (forced: sent again)
    assert REVIEWS in sent[CLUSTER].removed_resources
    assert DETAILS in {r.name for r in sent[CLUSTER].resources}
    assert LISTENER in sent  # every watched type of a forced push


def test_a_pod_relabel_alone_is_a_proxy_push_without_a_snapshot_rebuild() -> None:
    mesh = Mesh()
    unrelated = PRODUCTPAGE.replace("productpage-v1-0", "lonely-0").replace("10.1.0.10", "10.1.9.9")
    events = [ConfigEvent(EventType.ADD, obj) for obj in load_documents(unrelated, "pod.yaml").objects]
    request = push_request(mesh.env.apply(events), len(events))
    assert request is not None
    assert not request.full
    assert request.relabeled_pods == {("bookinfo", "lonely-0")}
    assert dict(request.reasons) == {TriggerReason.PROXY: 1}


def test_an_xds_node_of_a_known_pod_gets_the_pods_labels_on_connect() -> None:
    mesh = Mesh()
    node = xds_node(NODE, {"NAMESPACE": "bookinfo", "LABELS": {"app": "wrong"}})
    node.locality.CopyFrom(base_pb2.Locality(region="eu"))
    client = mesh.source.client(node)
    assert client.labels["app"] == "productpage"
    assert client.labels["version"] == "v1"
    assert client.locality == "us-east1/us-east1-b"  # its pod's Node's, not the node's "eu"


def test_the_push_filter_runs_once_per_request_and_proxy_class() -> None:
    """The streams of a class are filtered alike (twice each: before the push is queued and when
    it is written), so the plan is worked out once per request and class; a proxy whose own
    addresses' targets changed is planned apart, and the next request afresh."""
    mesh = Mesh()
    ratings = [
        mesh.connect(f"sidecar~10.1.7.{i}~ratings-{i}.bookinfo~bookinfo.svc.cluster.local", {"app": "ratings"})
        for i in (1, 2, 3)
    ]
    assert ratings[0].note is ratings[1].note is ratings[2].note  # one class, one scope

    def plan(conn: DeltaConnection, req: PushRequest) -> Any:
        return mesh.source.push(conn.client, conn.note, req, conn.session.watches.keys()).types

    reviews = ConfigKey(Kind.SERVICE, "bookinfo", "reviews.bookinfo.svc.cluster.local")
    changed = PushRequest(full=True, configs_updated=frozenset({reviews}))
    first, second = plan(ratings[0], changed), plan(ratings[1], changed)
    assert first is second and {step.type_url for step in first} == {CLUSTER, LISTENER}
    again = PushRequest(full=True, configs_updated=frozenset({reviews}))
    assert plan(ratings[0], again) == first and plan(ratings[0], again) is not first

    endpoints = PushRequest(
        full=False, endpoint_services=frozenset({(reviews.name, "bookinfo")}), proxy_ips=frozenset({"10.1.7.3"})
    )
    assert plan(ratings[0], endpoints) == plan(ratings[1], endpoints) == ()  # they watch no endpoints
    assert {step.type_url for step in plan(ratings[2], endpoints)} == {CLUSTER, LISTENER}  # its inbound config
