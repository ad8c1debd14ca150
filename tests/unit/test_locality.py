"""A Pod's locality as istiod's getPodLocality reads it: its locality label, else its Node's
topology labels; and a Node whose labels change re-locates the endpoints of its pods."""

from __future__ import annotations

import pytest
from envoy.config.core.v3 import base_pb2

from app.config.loader import load_documents
from app.model.proxy import build_proxy
from app.registry.locality import locality_label, node_locality
from app.registry.registry import RegistryDelta, ServiceRegistry
from app.xds.cache import ResourceCache
from app.xds.client import node as xds_node
from app.xds.generators.source import XdsGenerator
from app.xds.mesh_source import MeshSource
from tests.support.registry import add, delete, services_and_shards, update

REGION, ZONE = "topology.kubernetes.io/region", "topology.kubernetes.io/zone"
BETA_REGION, BETA_ZONE = "failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone"
SUBZONE = "topology.istio.io/subzone"


@pytest.mark.parametrize(
    ("labels", "locality"),
    [
        ({"istio-locality": "us-east.us-east-1a.rack7"}, "us-east/us-east-1a/rack7"),
        ({"topology.istio.io/locality": "eu.eu-1"}, "eu/eu-1"),
        # the newer label wins over the older
        ({"topology.istio.io/locality": "eu.eu-1", "istio-locality": "us.us-1"}, "eu/eu-1"),
        # present but empty, it still hides the older one (GetLocalityLabel): the Node decides
        ({"topology.istio.io/locality": "", "istio-locality": "us.us-1"}, ""),
        # a value holding '/' is taken as it is, dots and all (SanitizeLocalityLabel)
        ({"istio-locality": "us/us-1.a"}, "us/us-1.a"),
        # a Pod's own region/zone labels are no locality label
        ({REGION: "r1", ZONE: "z1"}, ""),
        ({}, ""),
    ],
)
def test_locality_label(labels: dict[str, str], locality: str) -> None:
    assert locality_label(labels) == locality


@pytest.mark.parametrize(
    ("labels", "locality"),
    [
        ({REGION: "r1", ZONE: "z1", SUBZONE: "s1"}, "r1/z1/s1"),
        ({REGION: "r1", ZONE: "z1"}, "r1/z1"),
        ({REGION: "r1", SUBZONE: "s1"}, "r1//s1"),
        ({ZONE: "z1"}, "/z1"),
        # the GA labels win; the failure-domain ones count where they are missing
        ({REGION: "r1", BETA_REGION: "old-r", BETA_ZONE: "old-z"}, "r1/old-z"),
        ({BETA_REGION: "old-r", BETA_ZONE: "old-z"}, "old-r/old-z"),
        ({REGION: "", BETA_REGION: "old-r"}, "old-r"),
        ({"kubernetes.io/hostname": "n1"}, ""),
    ],
)
def test_node_locality(labels: dict[str, str], locality: str) -> None:
    assert node_locality(labels) == locality


SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.20
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
"""
HOST = ("web.shop.svc.cluster.local", "shop")


def node(name: str, labels: str) -> str:
    return f"""
apiVersion: v1
kind: Node
metadata: {{name: {name}, labels: {{{labels}}}}}
"""


def pod(name: str, ip: str, node_name: str, labels: str = "") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: shop, labels: {{app: web{", " + labels if labels else ""}}}}}
spec: {{nodeName: {node_name}}}
status:
  podIP: {ip}
  conditions: [{{type: Ready, status: "True"}}]
"""


SLICE = """
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- {addresses: [10.0.1.1], zone: z-slice, targetRef: {kind: Pod, name: a, namespace: shop}}
- {addresses: [10.0.1.2], targetRef: {kind: Pod, name: b, namespace: shop}}
- {addresses: [10.0.1.3], targetRef: {kind: Pod, name: c, namespace: shop}}
"""

NODE_1 = node("node-1", f"{REGION}: us-east1, {ZONE}: us-east1-b, {SUBZONE}: rack-1")
NODE_2 = node("node-2", f"{BETA_REGION}: eu-west1, {BETA_ZONE}: eu-west1-a")
PODS = (
    # on node-1, with its own region/zone labels (istiod reads none of them)
    pod("a", "10.0.1.1", "node-1", f"{REGION}: pod-region, {ZONE}: pod-zone")
    + "---"
    + pod("b", "10.0.1.2", "node-2")
    # on node-1 but with a locality label of its own
    + "---"
    + pod("c", "10.0.1.3", "node-1", "istio-locality: ap-south1.ap-south1-a")
)


def localities(reg: ServiceRegistry) -> dict[str, str]:
    return {ep.address: ep.locality for ep in reg.endpoints(*HOST)}


def mesh() -> ServiceRegistry:
    reg = ServiceRegistry()
    add(reg, "---".join((SERVICE, NODE_1, NODE_2, PODS, SLICE)))
    return reg


def test_a_pod_takes_its_nodes_locality_unless_it_has_a_locality_label() -> None:
    assert localities(mesh()) == {
        "10.0.1.1": "us-east1/us-east1-b/rack-1",  # its Node's, not its own labels', not the slice's zone
        "10.0.1.2": "eu-west1/eu-west1-a",  # the failure-domain labels of an older Node
        "10.0.1.3": "ap-south1/ap-south1-a",  # its label wins over its Node
    }


def test_a_node_relabelled_relocates_its_pods_endpoints_only() -> None:
    reg = mesh()
    before = reg.services()
    delta = update(reg, node("node-1", f"{REGION}: us-central1, {ZONE}: us-central1-c"))
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({HOST}))
    assert reg.services() is before
    assert localities(reg) == {
        "10.0.1.1": "us-central1/us-central1-c",
        "10.0.1.2": "eu-west1/eu-west1-a",
        "10.0.1.3": "ap-south1/ap-south1-a",  # on node-1, but its label decides
    }


def test_a_node_change_that_leaves_its_topology_changes_nothing() -> None:
    reg = mesh()
    assert update(reg, NODE_1.replace("rack-1", "rack-1, kubernetes.io/os: linux")).empty
    assert update(reg, NODE_1).empty


def test_a_pod_whose_node_is_unknown_has_no_locality_until_the_node_comes() -> None:
    reg = ServiceRegistry()
    add(reg, "---".join((SERVICE, PODS, SLICE)))
    assert localities(reg)["10.0.1.1"] == ""  # istiod: "unable to get node", no locality
    delta = add(reg, NODE_1)
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({HOST}))
    assert localities(reg)["10.0.1.1"] == "us-east1/us-east1-b/rack-1"
    delta = delete(reg, NODE_1)
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({HOST}))
    assert localities(reg)["10.0.1.1"] == ""


def test_a_pod_that_moves_to_another_node_or_gains_a_label_leaves_its_old_node() -> None:
    reg = mesh()
    update(reg, pod("a", "10.0.1.1", "node-2"))
    assert localities(reg)["10.0.1.1"] == "eu-west1/eu-west1-a"
    # node-1 no longer decides a's locality: its relabelling reaches no endpoint
    assert update(reg, node("node-1", f"{REGION}: elsewhere")).empty
    update(reg, pod("b", "10.0.1.2", "node-2", "topology.istio.io/locality: sa.sa-1"))
    delta = update(reg, node("node-2", f"{REGION}: elsewhere"))
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({HOST}))
    assert localities(reg) == {
        "10.0.1.1": "elsewhere",
        "10.0.1.2": "sa/sa-1",
        "10.0.1.3": "ap-south1/ap-south1-a",
    }


SELECTING_SE = """
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: web-entry, namespace: shop}
spec:
  hosts: [web.shop.example]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]
  workloadSelector: {labels: {app: web}}
"""
ENTRY = ("web.shop.example", "shop")


def test_pods_a_service_entry_selects_take_their_nodes_locality_too() -> None:
    reg = ServiceRegistry()
    add(reg, "---".join((SELECTING_SE, NODE_1, NODE_2, PODS)))
    assert {ep.address: ep.locality for ep in reg.endpoints(*ENTRY)} == {
        "10.0.1.1": "us-east1/us-east1-b/rack-1",
        "10.0.1.2": "eu-west1/eu-west1-a",
        "10.0.1.3": "ap-south1/ap-south1-a",
    }
    delta = update(reg, node("node-2", f"{REGION}: eu-north1"))
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({ENTRY}))
    assert {ep.address: ep.locality for ep in reg.endpoints(*ENTRY)}["10.0.1.2"] == "eu-north1"


def test_a_proxy_is_where_its_pod_is_found_by_its_id_as_istiod_finds_it() -> None:
    reg = mesh()

    def located(proxy_id: str, namespace: str) -> str:
        node_id = f"sidecar~10.9.9.9~{proxy_id}~{namespace}.svc.cluster.local"
        return reg.with_workload_labels(build_proxy(node_id, {"NAMESPACE": namespace})).locality

    assert located("a.shop", "shop") == "us-east1/us-east1-b/rack-1"  # its Node's
    assert located("c.shop", "shop") == "ap-south1/ap-south1-a"  # its label's
    # podKeyByProxy: the id's namespace must be the proxy's; an unknown pod has none
    assert located("a.shop", "other") == ""
    assert located("nobody.shop", "shop") == ""


def test_the_registrys_locality_wins_over_the_xds_nodes_which_stays_where_it_has_none() -> None:
    """istiod setTopologyLabels: the locality the registry gives the proxy's labels, else the
    one its xDS node sends."""
    reg = mesh()
    source = MeshSource(XdsGenerator(ResourceCache()), None, reg.with_workload_labels)

    def located(pod: str, ip: str, sent: str) -> str:
        ident = xds_node(f"sidecar~{ip}~{pod}.shop~shop.svc.cluster.local", {"NAMESPACE": "shop"})
        if sent:
            region, _, zone = sent.partition("/")
            ident.locality.CopyFrom(base_pb2.Locality(region=region, zone=zone))
        return source.client(ident).locality

    assert located("a", "10.0.1.1", "") == "us-east1/us-east1-b/rack-1"
    assert located("a", "10.0.1.1", "eu-north1/eu-north1-a") == "us-east1/us-east1-b/rack-1"
    assert located("vm-1", "10.9.9.9", "eu-north1/eu-north1-a") == "eu-north1/eu-north1-a"  # no such pod
    update(reg, node("node-2", f"{REGION}: ''"))  # b's Node has no locality now: the xDS node's counts
    assert located("b", "10.0.1.2", "eu-north1/eu-north1-a") == "eu-north1/eu-north1-a"


def test_a_node_in_a_file_is_cluster_scoped_and_a_bad_one_is_refused_by_name_and_field() -> None:
    result = load_documents(
        """apiVersion: v1
kind: Node
metadata: {name: n1, labels: {topology.kubernetes.io/region: [us-east1]}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, namespace: shop, labels: {topology.kubernetes.io/zone: z1}}
""",
        "nodes.yaml",
    )
    assert [str(r.error) for r in result.rejected] == [
        "nodes.yaml#0: Node n1: field metadata.labels.topology.kubernetes.io/region: "
        "expected a string value, got a list"
    ]
    assert [(str(o.key), o.meta.namespace) for o in result.objects] == [("Node n2", "")]
