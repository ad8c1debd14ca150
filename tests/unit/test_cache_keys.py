"""The cache key matrix: which proxies share encoded resources (the very same ``Resource``
objects, built once, or at least equal bytes) and which must not, by every trait a key holds.

Mirrors istiod's cluster cache key (pilot/pkg/networking/core/cluster_cache.go
``clusterCache.Key``: cluster name, proxy version, locality, proxy cluster ID, proxy type, IPv4
support, service, the DestinationRule's sources, EnvoyFilter keys, peer authentications, service
accounts, the endpoint builder), narrowed as DESIGN §1 "Push cost model" says: a key holds only
what changes the bytes. So the namespace matters only through the DestinationRule it makes a
proxy apply, labels only through workloadSelector rules, locality only where locality load
balancing is in force, and ISTIO_VERSION only where a builder reads it (istiod keys clusters by it
for EnvoyFilter patches, which pilotfish applies after the cache: a proxy's patches are part of its
class, tests/unit/test_envoy_filter.py). Then invalidation by changed keys, and
the push filter (istiod ``SidecarScope.DependsOnConfig``).

Every test builds a small mesh from YAML and generates through ``XdsGenerator`` as the server
does; pure, no I/O. Assertion mode is on unless a test says why not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2

from app.config.loader import load_documents
from app.config.objects import ConfigEvent, ConfigKey, ConfigObject, EventType, Kind
from app.environment import Environment
from app.model.proxy import Proxy, ProxyType, build_proxy
from app.model.push_context import PushContext
from app.translate.endpoint.for_proxy import eds_cluster_names
from app.xds.cache import CacheAssertionError, ResourceCache
from app.xds.discovery import Discovery
from app.xds.generators import endpoints as eds_generator
from app.xds.generators import state as generator_state
from app.xds.generators.reference import generate_clusters, generate_endpoints, generate_listeners
from app.xds.mesh_source import MeshSource
from app.xds.needs_push import proxy_needs_push, types_to_push
from app.xds.next_push import push_request
from app.xds.push_request import PushRequest
from app.xds.resource import Resource, encode
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER
from app.xds.watch import WatchedResource
from tests.support.mesh import UNREADY, config_doc, endpoint_slice, kube_pod, kube_service, slice_endpoint

ROOT = "istio-system"
WEB = "web.a.svc.cluster.local"
DB = "db.b.svc.cluster.local"
CACHE = "cache.c.svc.cluster.local"
KAFKA = "kafka.a.svc.cluster.local"
DB_HTTP = f"outbound|80||{DB}"
DB_DATA = f"outbound|9000||{DB}"  # a sniffed port (no protocol in its name)
WEB_HTTP = f"outbound|80||{WEB}"
CACHE_HTTP = f"outbound|80||{CACHE}"
T0 = "2026-01-01T00:00:00Z"
HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

HTTP = "[{name: http, port: 80, targetPort: 8080}]"
HTTP_SLICE = "[{name: http, port: 8080}]"


def _workload(name: str, namespace: str, vip: str, pods: Mapping[str, tuple[str, str]], *ports: str) -> str:
    """A Service selecting ``app: NAME`` at ``vip``, its pods ({pod: (ip, istio-locality label)})
    and its EndpointSlice; ``ports`` are the Service's and the slice's (plain HTTP if none)."""
    service_ports, slice_ports = ports or (HTTP, HTTP_SLICE)
    text = kube_service(name, service_ports, namespace=namespace, cluster_ip=vip, selector=f"app: {name}", created=T0)
    endpoints = []
    for pod, (pod_ip, locality) in pods.items():
        text += kube_pod(pod, pod_ip, f"app: {name}, istio-locality: {locality}", namespace=namespace)
        endpoints.append(slice_endpoint(pod_ip, pod, namespace=namespace))
    return text + endpoint_slice(name, slice_ports, *endpoints, namespace=namespace)


DB_PODS = {"db-0": ("10.0.2.1", "r1.z1"), "db-1": ("10.0.2.2", "r2.z2")}
DB_PORTS = "[{name: http, port: 80, targetPort: 8080}, {name: data, port: 9000}]"
DB_SLICE_PORTS = "[{name: http, port: 8080}, {name: data, port: 9000}]"
BASE = (
    _workload("web", "a", "10.96.0.10", {"web-0": ("10.0.1.1", "r1.z1"), "web-1": ("10.0.1.2", "r2.z2")})
    + _workload("db", "b", "10.96.0.20", DB_PODS, DB_PORTS, DB_SLICE_PORTS)
    + _workload("cache", "c", "10.96.0.30", {"cache-0": ("10.0.3.1", "r1.z1")})
)


def rule(name: str, namespace: str, spec: str, created: str = T0) -> str:
    return config_doc("DestinationRule", name, spec, namespace=namespace, created=created)


# a Sidecar that keeps namespace a to itself and the root namespace
SIDECAR_A = config_doc("Sidecar", "default", "egress:\n- hosts: [./*, istio-system/*]", namespace="a", created=T0)
DB_OUTLIER = rule(
    "db",
    "b",
    f"""
    host: {DB}
    trafficPolicy:
      outlierDetection: {{consecutive5xxErrors: 5, interval: 10s, baseEjectionTime: 30s}}
    """,
)


class Mesh:
    """A mesh behind a cached XdsGenerator, changed as the runtime changes it."""

    def __init__(self, *texts: str, verify: bool = True) -> None:
        self.env = Environment()
        events = [ConfigEvent(EventType.ADD, obj) for text in texts for obj in _objects(text)]
        self.env.apply(events)
        self.cache = ResourceCache(verify=verify)
        self.discovery: Discovery[object] = Discovery(self.env, self.cache)
        self.discovery.start()
        self.source = MeshSource(self.discovery.generator)

    @property
    def push(self) -> PushContext:
        return self.discovery.push_context()

    def apply(self, text: str, event: EventType = EventType.UPDATE) -> PushRequest:
        """Add, replace or delete the objects in ``text``; the push request the change makes,
        after ``Discovery.push`` rebuilt and served the snapshot and invalidated the cache."""
        change = self.env.apply([ConfigEvent(event, obj) for obj in _objects(text)])
        request = push_request(change, 1)
        assert request is not None, "the change made no push"
        return self.discovery.push(request).request

    def clusters(self, proxy: Proxy) -> dict[str, Resource]:
        return _by_name(self.source.generate(CLUSTER, proxy, WatchedResource(CLUSTER, True)))

    def assignments(self, proxy: Proxy) -> dict[str, Resource]:
        return _by_name(self.source.generate(ENDPOINT, proxy, WatchedResource(ENDPOINT, True)))

    def listeners(self, proxy: Proxy) -> dict[str, Resource]:
        return _by_name(self.source.generate(LISTENER, proxy, WatchedResource(LISTENER, True)))


def _objects(text: str) -> list[ConfigObject]:
    result = load_documents(text, "test.yaml")
    assert result.rejected == [], result.rejected
    return result.objects


def _by_name(resources: list[Resource] | None) -> dict[str, Resource]:
    assert resources is not None
    return {r.name: r for r in resources}


def proxy(
    pod: str,
    ip: str,
    labels: Mapping[str, str] | None = None,
    *,
    locality: str = "",
    version: str = "",
    kind: str = "sidecar",
) -> Proxy:
    """The proxy of pod ``NAME.NAMESPACE`` as Envoy identifies itself: node id and metadata."""
    namespace = pod.rsplit(".", 1)[1]
    metadata: dict[str, object] = {"LABELS": dict(labels or {})}
    if version:
        metadata["ISTIO_VERSION"] = version
    return build_proxy(f"{kind}~{ip}~{pod}~{namespace}.svc.cluster.local", metadata, locality)


def cluster(r: Resource) -> cluster_pb2.Cluster:
    return cluster_pb2.Cluster.FromString(r.body.value)


def assignment(r: Resource) -> endpoint_pb2.ClusterLoadAssignment:
    return endpoint_pb2.ClusterLoadAssignment.FromString(r.body.value)


def max_connections(r: Resource) -> int:
    thresholds = cluster(r).circuit_breakers.thresholds
    return thresholds[0].max_connections.value if thresholds else 0


def priorities(r: Resource) -> dict[str, int]:
    """Locality (region/zone) -> priority in an assignment."""
    return {f"{g.locality.region}/{g.locality.zone}": g.priority for g in assignment(r).endpoints}


def downstream_protocol(r: Resource) -> bool:
    """Whether a cluster speaks to the upstream whatever protocol the downstream spoke."""
    found = cluster(r).typed_extension_protocol_options.get(HTTP_OPTIONS)
    if found is None:
        return False
    options = http_protocol_options_pb2.HttpProtocolOptions()
    assert found.Unpack(options)
    return bool(options.HasField("use_downstream_protocol_config"))


def outbound(resources: Mapping[str, Resource]) -> dict[str, Resource]:
    return {n: r for n, r in resources.items() if n.startswith("outbound|")}


# --- sharing within a class --------------------------------------------------------------------


def test_proxies_of_one_namespace_share_clusters_and_assignments_built_once() -> None:
    mesh = Mesh(BASE)
    first = proxy("client-0.c", "10.0.9.1", {"app": "one"})
    second = proxy("client-1.c", "10.0.9.2", {"app": "two", "version": "v2"})
    clusters, assignments = mesh.clusters(first), mesh.assignments(first)
    built, entries = mesh.cache.misses, len(mesh.cache)
    assert built > 0 and entries == built

    again, again_eds = mesh.clusters(second), mesh.assignments(second)
    assert outbound(clusters).keys() == outbound(again).keys() >= {DB_HTTP, WEB_HTTP, CACHE_HTTP}
    assert all(again[n] is r for n, r in outbound(clusters).items())  # the very same objects
    assert assignments.keys() == again_eds.keys() and all(again_eds[n] is r for n, r in assignments.items())
    assert (mesh.cache.misses, len(mesh.cache)) == (built, entries)  # nothing built for the second


def test_namespaces_share_what_no_rule_tells_apart() -> None:
    # the namespace is no trait of a cluster: without a DestinationRule to apply, a service's
    # clusters and assignments are one entry for every namespace
    mesh = Mesh(BASE)
    in_a, in_c = proxy("client.a", "10.0.9.1"), proxy("client.c", "10.0.9.3")
    a, c = mesh.clusters(in_a), mesh.clusters(in_c)
    assert a[DB_HTTP] is c[DB_HTTP] and a[CACHE_HTTP] is c[CACHE_HTTP]
    assert mesh.assignments(in_a)[DB_HTTP] is mesh.assignments(in_c)[DB_HTTP]


# --- DestinationRule exportTo and workloadSelector ---------------------------------------------


def test_dr_exported_only_to_its_namespace_changes_only_that_namespaces_clusters() -> None:
    private = rule(
        "db-private",
        "a",
        f"""
        host: {DB}
        exportTo: ["."]
        trafficPolicy: {{connectionPool: {{tcp: {{maxConnections: 7}}}}}}
        """,
    )
    mesh = Mesh(BASE, private)
    in_a = mesh.clusters(proxy("client.a", "10.0.9.1"))
    in_b1 = mesh.clusters(proxy("client-0.b", "10.0.9.2"))
    in_b2 = mesh.clusters(proxy("client-1.b", "10.0.9.3"))
    in_c = mesh.clusters(proxy("client.c", "10.0.9.4"))
    assert max_connections(in_a[DB_HTTP]) == 7
    assert max_connections(in_b1[DB_HTTP]) != 7
    assert in_a[DB_HTTP].body.value != in_b1[DB_HTTP].body.value
    assert in_a[DB_HTTP].version != in_b1[DB_HTTP].version
    assert in_b1[DB_HTTP] is in_b2[DB_HTTP]
    assert in_b1[DB_HTTP] is in_c[DB_HTTP]  # b and c apply the same (no) rule
    assert in_a[WEB_HTTP] is in_b1[WEB_HTTP]  # the rule is for db only


def test_workload_selector_dr_changes_only_the_selected_workloads_clusters() -> None:
    selected_only = rule(
        "db-special",
        "c",
        f"""
        host: {DB}
        workloadSelector: {{matchLabels: {{app: special}}}}
        trafficPolicy: {{connectionPool: {{tcp: {{maxConnections: 9}}}}}}
        """,
    )
    mesh = Mesh(BASE, selected_only)
    selected = mesh.clusters(proxy("client-0.c", "10.0.9.1", {"app": "special"}))
    plain = mesh.clusters(proxy("client-1.c", "10.0.9.2", {"app": "plain"}))
    other = mesh.clusters(proxy("client-2.c", "10.0.9.3", {"app": "other", "version": "v1"}))
    assert max_connections(selected[DB_HTTP]) == 9
    assert selected[DB_HTTP].body.value != plain[DB_HTTP].body.value
    # labels are read for the rule's choice only: the unselected share the one built cluster
    assert plain[DB_HTTP] is other[DB_HTTP]
    assert selected[WEB_HTTP] is plain[WEB_HTTP]
    # the selector is private to its namespace: a selected-looking proxy elsewhere is not
    elsewhere = mesh.clusters(proxy("client.b", "10.0.9.4", {"app": "special"}))
    assert elsewhere[DB_HTTP] is plain[DB_HTTP]


def test_a_rule_is_one_entry_for_its_namespace_and_those_it_is_exported_to() -> None:
    # the owner namespace and the others hold separate consolidations of the same rule objects;
    # istiod keys by the rule's sources, and so does pilotfish: one build, shared
    mesh = Mesh(BASE, DB_OUTLIER)
    owner, other = proxy("client.b", "10.0.9.1"), proxy("client.c", "10.0.9.2")
    assert cluster(mesh.clusters(owner)[DB_HTTP]).HasField("outlier_detection")
    assert mesh.clusters(owner)[DB_HTTP] is mesh.clusters(other)[DB_HTTP]
    assert mesh.assignments(owner)[DB_HTTP] is mesh.assignments(other)[DB_HTTP]


# --- Sidecar scope ------------------------------------------------------------------------------


def test_sidecar_resource_narrows_its_namespace_and_shares_the_rest() -> None:
    mesh = Mesh(BASE, SIDECAR_A)
    scoped, unscoped = proxy("client.a", "10.0.9.1"), proxy("client.c", "10.0.9.2")
    a, c = mesh.clusters(scoped), mesh.clusters(unscoped)
    assert set(outbound(a)) == {WEB_HTTP}
    assert {DB_HTTP, DB_DATA, WEB_HTTP, CACHE_HTTP} <= set(outbound(c))
    assert a[WEB_HTTP] is c[WEB_HTTP]  # the scopes differ, the cluster they both have does not
    eds_a = mesh.assignments(scoped)
    assert set(eds_a) == {WEB_HTTP} and eds_a[WEB_HTTP] is mesh.assignments(unscoped)[WEB_HTTP]
    listeners_a, listeners_c = mesh.listeners(scoped), mesh.listeners(unscoped)
    assert "10.96.0.20_9000" not in listeners_a and "10.96.0.20_9000" in listeners_c  # db's sniffed port


# --- proxy type ---------------------------------------------------------------------------------


def test_a_router_and_a_sidecar_of_one_namespace_share_nothing_type_dependent() -> None:
    mesh = Mesh(BASE)
    sidecar = mesh.clusters(proxy("client.c", "10.0.9.1", {"istio": "ingressgateway"}))
    router = mesh.clusters(proxy("gw.c", "10.0.9.2", {"istio": "ingressgateway"}, kind="router"))
    # istiod BuildClusters: gateways get no passthrough or inbound clusters
    assert {"BlackHoleCluster", "PassthroughCluster", "InboundPassthroughCluster"} <= set(sidecar)
    assert "BlackHoleCluster" in router
    assert "PassthroughCluster" not in router and "InboundPassthroughCluster" not in router
    assert set(outbound(router)) == set(outbound(sidecar))
    # a sniffed port: the sidecar speaks what the downstream spoke, the gateway does not
    assert sidecar[DB_DATA].body.value != router[DB_DATA].body.value
    assert downstream_protocol(sidecar[DB_DATA]) and not downstream_protocol(router[DB_DATA])
    # the proxy type is in every key (istiod clusterCache.proxyType), equal bytes or not
    assert not any(sidecar[n] is r for n, r in outbound(router).items())
    router_listeners = mesh.listeners(proxy("gw.c", "10.0.9.2", {"istio": "ingressgateway"}, kind="router"))
    assert "virtualOutbound" not in router_listeners and "virtualInbound" not in router_listeners


# --- locality -----------------------------------------------------------------------------------


def test_locality_splits_assignments_only_where_failover_is_in_force() -> None:
    near = proxy("client-0.c", "10.0.9.1", locality="r1/z1")
    far = proxy("client-1.c", "10.0.9.2", locality="r2/z2")
    near_too = proxy("client-2.c", "10.0.9.3", locality="r1/z1")

    # the mesh default enables locality LB, but failover needs outlier detection: no priorities
    mesh = Mesh(BASE)
    a, b = mesh.assignments(near), mesh.assignments(far)
    assert set(priorities(a[DB_HTTP]).values()) == {0}
    assert a[DB_HTTP].body.value == b[DB_HTTP].body.value

    mesh = Mesh(BASE, DB_OUTLIER)
    a, b, a2 = mesh.assignments(near), mesh.assignments(far), mesh.assignments(near_too)
    # istiod applyLocalityFailover: another region is priority 3, compacted to the next one
    assert priorities(a[DB_HTTP]) == {"r1/z1": 0, "r2/z2": 1}
    assert priorities(b[DB_HTTP]) == {"r1/z1": 1, "r2/z2": 0}
    assert a[DB_HTTP].body.value != b[DB_HTTP].body.value
    assert a2[DB_HTTP] is a[DB_HTTP]  # one locality, one assignment
    # without the rule web's assignment is the same for every locality
    assert a[WEB_HTTP].body.value == b[WEB_HTTP].body.value

    # EDS clusters carry no endpoints: locality is no trait of theirs
    ca, cb = mesh.clusters(near), mesh.clusters(far)
    assert cluster(ca[DB_HTTP]).HasField("outlier_detection")
    assert ca[DB_HTTP] is cb[DB_HTTP]

    # outlier detection with locality load balancing turned off in the rule: no priorities
    off = rule(
        "db",
        "b",
        f"""
        host: {DB}
        trafficPolicy:
          loadBalancer: {{localityLbSetting: {{enabled: false}}}}
          outlierDetection: {{consecutive5xxErrors: 5, interval: 10s, baseEjectionTime: 30s}}
        """,
    )
    mesh = Mesh(BASE, off)
    a, b = mesh.assignments(near), mesh.assignments(far)
    assert set(priorities(a[DB_HTTP]).values()) == {0}
    assert a[DB_HTTP].body.value == b[DB_HTTP].body.value


# --- ISTIO_VERSION ------------------------------------------------------------------------------


def test_istio_version_changes_nothing_generated() -> None:
    """No generator reads ISTIO_VERSION (istiod master's inbound retry policy is not gated on
    it either: BuildDefaultHTTPInboundRoute), so proxies of every version share what they
    get; istiod keys clusters by the version only because EnvoyFilter patches may match on
    it, and pilotfish applies those to the cached clusters, per class."""
    mesh = Mesh(BASE)
    old_0 = proxy("web-0.a", "10.0.1.1", {"app": "web"}, version="1.23.2")
    old_1 = proxy("web-1.a", "10.0.1.2", {"app": "web"}, version="1.23.2")
    new_1 = proxy("web-1.a", "10.0.1.2", {"app": "web"}, version="1.24.0")
    c_old, c_new = mesh.clusters(old_1), mesh.clusters(new_1)
    assert all(c_new[n] is r for n, r in outbound(c_old).items())
    e_old, e_new = mesh.assignments(old_1), mesh.assignments(new_1)
    assert e_old.keys() == e_new.keys() and all(e_new[n] is r for n, r in e_old.items())

    l_old_0, l_old_1, l_new = mesh.listeners(old_0), mesh.listeners(old_1), mesh.listeners(new_1)
    assert b"reset-before-request" in l_old_1["virtualInbound"].body.value
    assert l_old_1["virtualInbound"].body.value == l_new["virtualInbound"].body.value
    assert l_old_0["virtualInbound"].body.value == l_old_1["virtualInbound"].body.value
    assert l_old_1["virtualOutbound"] is l_new["virtualOutbound"]
    assert l_old_1["0.0.0.0_80"] is l_new["0.0.0.0_80"]


# --- IP family ----------------------------------------------------------------------------------


def test_ip_family_is_a_trait_of_dns_clusters() -> None:
    external = config_doc(
        "ServiceEntry",
        "ext",
        "hosts: [api.example.com]\nports: [{number: 443, name: tls, protocol: TLS}]\nresolution: DNS",
        namespace="c",
        created=T0,
    )
    mesh = Mesh(BASE, external)
    name = "outbound|443||api.example.com"
    v4 = mesh.clusters(proxy("client-0.c", "10.0.9.1"))
    v4_too = mesh.clusters(proxy("client-1.c", "10.0.9.2"))
    v6 = mesh.clusters(proxy("client-2.c", "fd00::9"))
    assert cluster(v4[name]).dns_lookup_family == cluster_pb2.Cluster.V4_ONLY
    assert cluster(v6[name]).dns_lookup_family == cluster_pb2.Cluster.V6_ONLY
    assert v4[name] is v4_too[name]


# --- headless services: the proxy's own address ------------------------------------------------

KAFKA_PORTS = "[{name: tcp, port: 9092}]"
HEADLESS = (
    kube_service("kafka", KAFKA_PORTS, namespace="a", cluster_ip="None", selector="app: kafka")
    + kube_pod("kafka-0", "10.0.1.21", "app: kafka", namespace="a")
    + kube_pod("kafka-1", "10.0.1.22", "app: kafka", namespace="a")
    + endpoint_slice(
        "kafka",
        KAFKA_PORTS,
        slice_endpoint("10.0.1.21", "kafka-0", namespace="a"),
        slice_endpoint("10.0.1.22", "kafka-1", namespace="a"),
        namespace="a",
    )
)


def test_a_headless_pod_gets_no_outbound_listener_to_itself_and_others_still_share() -> None:
    # istiod listener.go skips the endpoint at node.IPAddresses[0]: each pod's listener set differs
    # from its peers', while proxies at no such address share one set
    mesh = Mesh(BASE, HEADLESS, verify=False)  # plain generation is the reference below
    kafka_0 = proxy("kafka-0.a", "10.0.1.21", {"app": "kafka"})
    kafka_1 = proxy("kafka-1.a", "10.0.1.22", {"app": "kafka"})
    client_0, client_1 = proxy("client-0.a", "10.0.9.1"), proxy("client-1.a", "10.0.9.2")
    got = {p.id: mesh.listeners(p) for p in (client_0, kafka_0, kafka_1, client_1)}
    assert {"10.0.1.21_9092", "10.0.1.22_9092"} <= set(got[client_0.id])
    assert "10.0.1.21_9092" not in got[kafka_0.id] and "10.0.1.22_9092" in got[kafka_0.id]
    assert "10.0.1.22_9092" not in got[kafka_1.id] and "10.0.1.21_9092" in got[kafka_1.id]
    assert all(got[client_1.id][n] is r for n, r in got[client_0.id].items() if n != "virtualInbound")
    for p in (client_0, kafka_0, kafka_1):
        plain = {m.name: encode(m.name, m) for m in generate_listeners(p, mesh.push)}
        assert {n: r.version for n, r in got[p.id].items()} == {n: r.version for n, r in plain.items()}


@pytest.mark.parametrize(
    ("egress", "listener"),
    [
        # an explicit port: the headless service listens on the wildcard, per port
        ("[{port: {number: 9092, protocol: TCP, name: tcp}, hosts: [./*]}]", "0.0.0.0_9092"),
        # a catch-all that does not capture binds localhost, per port
        ("[{captureMode: NONE, hosts: [./*, istio-system/*]}]", "127.0.0.1_9092"),
    ],
)
def test_a_headless_pod_shares_its_class_where_no_listener_binds_endpoints(egress: str, listener: str) -> None:
    # only a capturing catch-all egress listener without a bind gives a headless TCP service one
    # listener per endpoint (translate.listener.plan); elsewhere a proxy at an endpoint's address
    # reads nothing of its own IP and shares its class's listeners
    sidecar = config_doc("Sidecar", "default", f"egress: {egress}", namespace="a")
    mesh = Mesh(BASE, HEADLESS, sidecar)
    kafka_0 = proxy("kafka-0.a", "10.0.1.21", {"app": "kafka"})
    client = proxy("client-0.a", "10.0.9.1")
    own, shared = mesh.listeners(kafka_0), mesh.listeners(client)
    assert listener in own and not any(name.startswith("10.0.1.2") for name in own)
    assert own.keys() == shared.keys()
    assert all(r is shared[name] for name, r in own.items() if name != "virtualInbound")


def test_canonical_service_splits_listeners_by_their_tracing_tags_and_nothing_else() -> None:
    # istiod's tracing tags name the proxy's canonical service: proxies that differ in it get
    # their own outbound listeners, and still share every cluster
    mesh = Mesh(BASE)
    canonical = "service.istio.io/canonical-name"
    web_0 = proxy("web-0.c", "10.0.9.1", {canonical: "web", "pod": "0"})
    web_1 = proxy("web-1.c", "10.0.9.2", {canonical: "web", "pod": "1"})
    api = proxy("api-0.c", "10.0.9.3", {canonical: "api"})
    web, same, other = mesh.listeners(web_0), mesh.listeners(web_1), mesh.listeners(api)
    assert web["0.0.0.0_80"] is same["0.0.0.0_80"]
    assert web["0.0.0.0_80"].version != other["0.0.0.0_80"].version
    for p, got in ((web_0, web), (api, other)):
        assert got["0.0.0.0_80"].version == encode_listener(p, mesh, "0.0.0.0_80")
    assert all(mesh.clusters(api)[n] is r for n, r in outbound(mesh.clusters(web_0)).items())


def encode_listener(p: Proxy, mesh: Mesh, name: str) -> str:
    [found] = [m for m in generate_listeners(p, mesh.push) if m.name == name]
    return encode(found.name, found).version


# --- shared output equals plain generation, whatever the order ----------------------------------


def test_every_proxy_gets_what_plain_generation_builds_for_it() -> None:
    # no assertion mode: the comparison is made here, for the first proxy of every class too,
    # which may be served entries other classes built
    private = rule("db-private", "a", f'host: {DB}\nexportTo: ["."]\ntrafficPolicy: {{tls: {{mode: DISABLE}}}}')
    selector = rule(
        "db-special",
        "c",
        f"host: {DB}\nworkloadSelector: {{matchLabels: {{app: special}}}}\n"
        "trafficPolicy: {connectionPool: {tcp: {maxConnections: 9}}}",
    )
    mesh = Mesh(BASE, HEADLESS, DB_OUTLIER, private, selector, verify=False)
    proxies = [
        proxy("client-0.c", "10.0.9.1", locality="r2/z2"),
        proxy("client-1.c", "10.0.9.2", {"app": "special"}, locality="r1/z1"),
        proxy("client.b", "10.0.9.3", locality="r1/z1", version="1.22.0"),
        proxy("kafka-0.a", "10.0.1.21", {"app": "kafka"}),
        proxy("web-0.a", "10.0.1.1", {"app": "web"}, locality="r1/z1", version="1.24.0"),
        proxy("gw.c", "10.0.9.5", {"istio": "ingressgateway"}, locality="r1/z1", kind="router"),
        proxy("client-2.c", "fd00::9", {"app": "special"}, locality="r2/z2"),
    ]
    for p in proxies:
        clusters = generate_clusters(p, mesh.push)
        want = {c.name: encode(c.name, c).version for c in clusters}
        assert {n: r.version for n, r in mesh.clusters(p).items()} == want, p.id
        names = eds_cluster_names(clusters)
        want_eds = {a.cluster_name: encode(a.cluster_name, a).version for a in generate_endpoints(p, mesh.push, names)}
        assert {n: r.version for n, r in mesh.assignments(p).items()} == want_eds, p.id
        want_lds = {m.name: encode(m.name, m).version for m in generate_listeners(p, mesh.push)}
        assert {n: r.version for n, r in mesh.listeners(p).items()} == want_lds, p.id


def test_assertion_mode_checks_the_first_proxy_of_a_class_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # a key that misses a trait (here: the proxy type of outbound clusters) serves a new class
    # another class's entry; assertion mode compares it with the proxy's own build at once
    real = generator_state.traits

    def without_type(p: Proxy, *args: bool) -> Any:
        traits = real(p, *args)
        return replace(traits, outbound=replace(traits.outbound, type=ProxyType.SIDECAR))

    monkeypatch.setattr(generator_state, "traits", without_type)
    mesh = Mesh(BASE)
    mesh.clusters(proxy("client.c", "10.0.9.1"))
    with pytest.raises(CacheAssertionError):
        mesh.clusters(proxy("gw.c", "10.0.9.2", kind="router"))


# --- invalidation by changed keys ---------------------------------------------------------------


def test_a_changed_rule_rebuilds_its_hosts_clusters_once_and_keeps_the_rest() -> None:
    mesh = Mesh(BASE, DB_OUTLIER)
    proxies = [proxy("client-0.c", "10.0.9.1"), proxy("client.b", "10.0.9.2"), proxy("client-1.c", "10.0.9.3")]
    before = [mesh.clusters(p) for p in proxies]
    misses = mesh.cache.misses
    request = mesh.apply(DB_OUTLIER.replace("consecutive5xxErrors: 5", "consecutive5xxErrors: 7"))
    assert request.full and ConfigKey(Kind.DESTINATION_RULE, "b", "db") in request.configs_updated
    after = [mesh.clusters(p) for p in proxies]
    for old, new in zip(before, after, strict=True):
        assert old.keys() == new.keys()
        for name, r in outbound(new).items():
            if name.endswith(DB):
                assert r is not old[name] and r.version != old[name].version
                assert cluster(r).outlier_detection.consecutive_5xx.value == 7
            else:
                assert r is old[name], name  # served from the cache
    assert after[0][DB_HTTP] is after[1][DB_HTTP] is after[2][DB_HTTP]
    assert mesh.cache.misses == misses + 1  # db's clusters, rebuilt once for everyone


def test_an_endpoint_change_rebuilds_only_that_services_assignments() -> None:
    mesh = Mesh(BASE)
    client = proxy("client.c", "10.0.9.1")
    before, clusters_before = mesh.assignments(client), mesh.clusters(client)
    only_db_0 = endpoint_slice("db", DB_SLICE_PORTS, slice_endpoint("10.0.2.1", "db-0", namespace="b"), namespace="b")
    request = mesh.apply(only_db_0)
    assert not request.full and request.endpoint_services == {(DB, "b")}
    after, clusters_after = mesh.assignments(client), mesh.clusters(client)
    assert after.keys() == before.keys()
    for name, r in after.items():
        if name.endswith(DB):
            assert r is not before[name] and r.version != before[name].version
            assert len(assignment(r).endpoints) == 1
        else:
            assert r is before[name], name
    # db's clusters were looked at again (their SANs read the endpoints) but did not change
    assert clusters_after[DB_HTTP].version == clusters_before[DB_HTTP].version
    assert clusters_after[WEB_HTTP] is clusters_before[WEB_HTTP]


def test_a_rule_setting_min_health_percent_rebuilds_the_assignments_without_unready_endpoints() -> None:
    # istiod supportsUnhealthyEndpoints: the rule decides whether db-1 (not ready) is sent
    db_1_unready = endpoint_slice(
        "db",
        DB_SLICE_PORTS,
        slice_endpoint("10.0.2.1", "db-0", namespace="b"),
        slice_endpoint("10.0.2.2", "db-1", UNREADY, namespace="b"),
        namespace="b",
    )
    mesh = Mesh(BASE, DB_OUTLIER, db_1_unready)
    client = proxy("client.c", "10.0.9.1")

    def sent() -> list[str]:
        la = assignment(mesh.assignments(client)[DB_HTTP])
        return [e.endpoint.address.socket_address.address for g in la.endpoints for e in g.lb_endpoints]

    assert sent() == ["10.0.2.1", "10.0.2.2"]
    request = mesh.apply(DB_OUTLIER.replace("consecutive5xxErrors: 5", "consecutive5xxErrors: 5, minHealthPercent: 50"))
    assert ENDPOINT in types_to_push(client, request, [CLUSTER, ENDPOINT])
    assert sent() == ["10.0.2.1"]
    mesh.apply(DB_OUTLIER)
    assert sent() == ["10.0.2.1", "10.0.2.2"]


def test_invalidation_drops_only_the_entries_built_from_a_key() -> None:
    cache = ResourceCache()
    a, b = ConfigKey(Kind.DESTINATION_RULE, "b", "db"), ConfigKey(Kind.SERVICE, "c", CACHE)
    built: list[str] = []

    def build(name: str) -> str:
        built.append(name)
        return name

    cache.get("x", lambda: build("x"), [a])
    cache.get("y", lambda: build("y"), [a, b])
    cache.get("z", lambda: build("z"), [b])
    assert (cache.misses, len(cache)) == (3, 3)
    assert cache.invalidate([a]) == 2
    assert len(cache) == 1 and cache.evictions == 2
    cache.get("z", lambda: build("z"), [b])
    cache.get("x", lambda: build("x"), [a])
    assert built == ["x", "y", "z", "x"] and cache.hits == 1
    assert cache.invalidate([b]) == 1  # y went with a: b no longer names it
    assert len(cache) == 1  # x


def test_a_group_of_keys_is_recorded_once_and_invalidated_by_any_of_its_members() -> None:
    cache = ResourceCache()
    rules = [ConfigKey(Kind.DESTINATION_RULE, "b", f"r{i}") for i in range(3)]
    merged, alone = frozenset(rules[:2]), frozenset(rules[2:])
    service = ConfigKey(Kind.SERVICE, "c", CACHE)
    cache.get("x", lambda: "x", [service, merged])
    cache.get("y", lambda: "y", [merged])
    cache.get("z", lambda: "z", [alone])
    # an equal group made apart (an exported copy of the same merged rule) is the same dependency
    cache.get("w", lambda: "w", [frozenset(rules[:2])])
    assert cache.invalidate([rules[1]]) == 3 and len(cache) == 1  # z stays
    assert cache.invalidate([service]) == 0  # x went with the group
    # nothing records the group any more: its members no longer lead to it
    assert cache.invalidate([merged]) == 0
    assert cache.invalidate([rules[2]]) == 1 and len(cache) == 0
    assert cache._by_dep == {} and cache._groups == {}


# --- DependsOnConfig: which proxies a change pushes ---------------------------------------------


def _pushed(mesh: Mesh, change: str, proxies: Mapping[str, Proxy], event: EventType = EventType.UPDATE) -> set[str]:
    """The proxies (by name) the change's push request reaches, as the push filter decides."""
    previous = {name: mesh.push.sidecar_scope(p) for name, p in proxies.items()}
    request = mesh.apply(change, event)
    return {
        name for name, p in proxies.items() if proxy_needs_push(p, request, previous[name], mesh.push.sidecar_scope(p))
    }


def _scoped_mesh() -> tuple[Mesh, dict[str, Proxy]]:
    proxies = {
        "scoped": proxy("client.a", "10.0.9.1"),  # Sidecar: ./* and istio-system/* only
        "b": proxy("client.b", "10.0.9.2"),
        "c": proxy("client.c", "10.0.9.3"),
    }
    return Mesh(BASE, SIDECAR_A), proxies


def test_changes_in_a_namespace_a_sidecar_does_not_import_do_not_push_it() -> None:
    mesh, proxies = _scoped_mesh()
    assert _pushed(mesh, DB_OUTLIER, proxies) == {"b", "c"}
    vs = config_doc(
        "VirtualService",
        "db",
        f"hosts: [{DB}]\nhttp:\n- timeout: 3s\n  route:\n  - destination: {{host: {DB}}}",
        namespace="b",
        created=T0,
    )
    assert _pushed(mesh, vs, proxies) == {"b", "c"}
    more_ports = kube_service(
        "db",
        DB_PORTS.replace("]", ", {name: grpc, port: 90}]"),
        namespace="b",
        cluster_ip="10.96.0.20",
        selector="app: db",
    )
    assert _pushed(mesh, more_ports, proxies) == {"b", "c"}
    fewer = endpoint_slice("db", HTTP_SLICE, slice_endpoint("10.0.2.1", "db-0", namespace="b"), namespace="b")
    assert _pushed(mesh, fewer, proxies) == {"b", "c"}


def test_changes_in_its_own_namespace_push_a_scoped_proxy() -> None:
    mesh, proxies = _scoped_mesh()
    web_rule = rule("web", "a", f"host: {WEB}\ntrafficPolicy: {{connectionPool: {{tcp: {{maxConnections: 3}}}}}}")
    assert "scoped" in _pushed(mesh, web_rule, proxies)
    vs = config_doc(
        "VirtualService",
        "web",
        f"hosts: [{WEB}]\nhttp:\n- timeout: 3s\n  route:\n  - destination: {{host: {WEB}}}",
        namespace="a",
        created=T0,
    )
    assert "scoped" in _pushed(mesh, vs, proxies)
    one_pod = endpoint_slice("web", HTTP_SLICE, slice_endpoint("10.0.1.1", "web-0", namespace="a"), namespace="a")
    assert _pushed(mesh, one_pod, proxies) == {"scoped", "b", "c"}  # everyone sees web
    narrowed = SIDECAR_A.replace("./*, istio-system/*", "./web.a.svc.cluster.local")
    assert _pushed(mesh, narrowed, proxies) == {"scoped"}  # a Sidecar change: its own proxies


def test_a_root_namespace_catch_all_rule_pushes_everyone() -> None:
    mesh, proxies = _scoped_mesh()
    catch_all = rule("default", ROOT, 'host: "*"\ntrafficPolicy: {connectionPool: {http: {maxRetries: 3}}}')
    assert _pushed(mesh, catch_all, proxies) == {"scoped", "b", "c"}
    changed = catch_all.replace("maxRetries: 3", "maxRetries: 4")
    assert _pushed(mesh, changed, proxies) == {"scoped", "b", "c"}
    # taken away: only the scopes before the change held it
    assert _pushed(mesh, changed, proxies, EventType.DELETE) == {"scoped", "b", "c"}


def test_a_namespace_rule_shadows_the_root_rule_for_its_host() -> None:
    # once every host a scope sees has a closer rule, the root rule is no dependency of it
    web_rule = rule("web", "a", f"host: {WEB}\ntrafficPolicy: {{connectionPool: {{tcp: {{maxConnections: 3}}}}}}")
    catch_all = rule("default", ROOT, 'host: "*"\ntrafficPolicy: {connectionPool: {http: {maxRetries: 3}}}')
    mesh = Mesh(BASE, SIDECAR_A, web_rule, catch_all)
    proxies = {"scoped": proxy("client.a", "10.0.9.1"), "c": proxy("client.c", "10.0.9.3")}
    assert _pushed(mesh, catch_all.replace("maxRetries: 3", "maxRetries: 5"), proxies) == {"c"}


def test_gateways_follow_istiods_proxy_dependent_on_config() -> None:
    # pilot/pkg/xds/proxy_dependencies.go: a router depends on every kind but Sidecar, and on
    # a service (ServiceEntry key) only when its scope sees it, before or after the change
    mesh, proxies = _scoped_mesh()
    gateway = {"gw": proxy("gw.a", "10.0.9.9", {"istio": "ingressgateway"}, kind="router")}
    request_reaches = _pushed(mesh, DB_OUTLIER, {**proxies, **gateway})
    assert "gw" in request_reaches and "scoped" not in request_reaches
    assert "gw" not in _pushed(mesh, SIDECAR_A.replace("./*, istio-system/*", "./*"), gateway)
    one_pod = endpoint_slice("db", HTTP_SLICE, slice_endpoint("10.0.2.1", "db-0", namespace="b"), namespace="b")
    assert "gw" in _pushed(mesh, one_pod, gateway)
    hidden = config_doc(
        "ServiceEntry",
        "hidden",
        'hosts: [hidden.example]\nexportTo: ["."]\nports: [{number: 80, name: http, protocol: HTTP}]\n'
        "resolution: STATIC\nendpoints: [{address: 10.9.9.9}]",
        namespace="c",
        created=T0,
    )
    assert _pushed(mesh, hidden, {**proxies, **gateway}) == {"c"}
    assert _pushed(mesh, hidden.replace("10.9.9.9", "10.9.9.8"), {**proxies, **gateway}) == {"c"}


def test_forced_and_everything_changed_requests_push_everyone() -> None:
    mesh, proxies = _scoped_mesh()
    scope = mesh.push.sidecar_scope(proxies["scoped"])
    for request in (PushRequest(full=True), PushRequest(full=True, configs_updated=frozenset(), forced=True)):
        assert proxy_needs_push(proxies["scoped"], request, scope, scope)
    unrelated = PushRequest(full=True, configs_updated=frozenset({ConfigKey(Kind.DESTINATION_RULE, "b", "db")}))
    assert not proxy_needs_push(proxies["scoped"], unrelated, scope, scope)


def test_the_hosts_of_a_service_entry_share_one_assignment_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosts whose assignments differ only in their names are built once per class and
    snapshot (the name a prefix to the same bytes), byte for byte what plain generation builds;
    a rule on one host sets its assignments apart."""
    hosts = [f"h{i}.wide.example" for i in range(30)]
    endpoints = "".join(f"\n  - {{address: 10.7.0.{i}, locality: r{i % 2}/z1}}" for i in range(1, 60))
    entry = f"""
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: wide, namespace: c}}
spec:
  hosts: [{", ".join(hosts)}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  endpoints:{endpoints}
"""
    subsets = rule("h3", "c", f"host: {hosts[3]}\nsubsets: [{{name: r0, labels: {{}}}}]")
    mesh = Mesh(entry, subsets, verify=False)
    built: list[str] = []
    real = eds_generator.build_assignment
    monkeypatch.setattr(eds_generator, "build_assignment", lambda name, *rest: built.append(name) or real(name, *rest))
    client = proxy("client.c", "10.0.9.1", locality="r1/z1")
    got = mesh.assignments(client)
    wide = {n: r for n, r in got.items() if n.endswith(".wide.example")}
    assert len(wide) == 31 and len(built) == 3  # the plain hosts once, h3 once, its subset once
    names = eds_cluster_names(generate_clusters(client, mesh.push))
    want = {a.cluster_name: encode(a.cluster_name, a) for a in generate_endpoints(client, mesh.push, names)}
    assert {n: r.entry for n, r in wide.items()} == {n: want[n].entry for n in wide}
