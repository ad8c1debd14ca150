"""A proxy's service targets (its inbound clusters, listeners' chains and a gateway's ports) come
from its own namespace only, as istiod's GetProxyServiceTargets: the kube registry resolves the
pod by the proxy id in the proxy's namespace (else the namespace's services selecting its labels),
the ServiceEntry registry keeps instances of the proxy's namespace. A proxy in ``demo`` claiming
the IP of bookinfo's productpage pod (INSTANCE_IPS is the client's word) gets none of
productpage's inbound config, through the plain generators and through the cached source that
``pilotfish serve`` answers with."""

from __future__ import annotations

from typing import Any

from envoy.config.listener.v3 import listener_pb2

from app.environment import Environment
from app.model.proxy import Proxy, build_proxy
from app.model.push_context import PushContext
from app.sources.files import FileSource
from app.translate.view import proxy_service_targets
from app.xds.cache import ResourceCache
from app.xds.generators.reference import generate_clusters, generate_listeners
from app.xds.generators.source import XdsGenerator
from app.xds.type_urls import CLUSTER, LISTENER
from app.xds.watch import WatchedResource
from tests.support.bookinfo import BOOKINFO, NODE
from tests.support.mesh import config_doc, push_context

PRODUCTPAGE_IP = "10.1.0.10"
SPOOFER = f"sidecar~{PRODUCTPAGE_IP}~sleep-1.demo~demo.svc.cluster.local"


def environment() -> tuple[Environment, PushContext]:
    env = Environment()
    env.apply(FileSource(BOOKINFO).load())
    return env, env.build_push_context(None)


def demo_proxy(**metadata: Any) -> Proxy:
    return build_proxy(SPOOFER, {"NAMESPACE": "demo", "INSTANCE_IPS": PRODUCTPAGE_IP, **metadata})


def inbound_ports(listeners: list[listener_pb2.Listener]) -> set[int]:
    [virtual] = [listener for listener in listeners if listener.name == "virtualInbound"]
    return {c.filter_chain_match.destination_port.value for c in virtual.filter_chains} - {0, 15006}


def test_the_real_pod_gets_its_inbound_config() -> None:
    _, push = environment()
    proxy = build_proxy(NODE)
    assert [(s.hostname, p.port) for s, p, _ in proxy_service_targets(proxy, push)] == [
        ("productpage.bookinfo.svc.cluster.local", 9080)
    ]
    assert "inbound|9080||" in {c.name for c in generate_clusters(proxy, push)}
    assert 9080 in inbound_ports(generate_listeners(proxy, push))


def test_a_demo_proxy_claiming_a_bookinfo_pods_ip_gets_no_bookinfo_inbound_config() -> None:
    _, push = environment()
    proxy = demo_proxy()
    assert proxy.namespace == "demo" and proxy.ip_addresses == (PRODUCTPAGE_IP,)
    assert proxy_service_targets(proxy, push) == []
    clusters = generate_clusters(proxy, push)
    assert not [c.name for c in clusters if c.name.startswith("inbound|") and c.name != "inbound|15006||"]
    assert "bookinfo" not in str([c.metadata for c in clusters if c.name.startswith("inbound|")])
    assert inbound_ports(generate_listeners(proxy, push)) == set()


def test_nor_through_the_cached_source_after_the_real_pod_was_served() -> None:
    _, push = environment()
    source = XdsGenerator(ResourceCache(verify=True), push)
    real = build_proxy(NODE)
    assert "inbound|9080||" in {r.name for r in source.generate(CLUSTER, real, WatchedResource(CLUSTER, True)) or []}
    spoofer = demo_proxy(LABELS={"app": "productpage", "version": "v1"})
    clusters = {r.name for r in source.generate(CLUSTER, spoofer, WatchedResource(CLUSTER, True)) or []}
    assert "inbound|9080||" not in clusters
    listeners = source.generate(LISTENER, spoofer, WatchedResource(LISTENER, True)) or []
    decoded = []
    for r in listeners:
        listener = listener_pb2.Listener()
        assert r.body.Unpack(listener)
        decoded.append(listener)
    assert inbound_ports(decoded) == set()


def test_a_service_entry_workload_of_another_namespace_is_not_a_target() -> None:
    entry = """
hosts: [vm.bookinfo.example]
location: MESH_INTERNAL
resolution: STATIC
ports: [{number: 7000, name: tcp, protocol: TCP}]
endpoints: [{address: 10.5.0.1}]
"""
    push = push_context(config_doc("ServiceEntry", "vm", entry, namespace="bookinfo"))
    other = build_proxy("sidecar~10.5.0.1~vm-1.demo~demo.svc.cluster.local", {"NAMESPACE": "demo"})
    own = build_proxy("sidecar~10.5.0.1~vm-1.bookinfo~bookinfo.svc.cluster.local", {"NAMESPACE": "bookinfo"})
    assert proxy_service_targets(other, push) == []
    assert [(s.hostname, p.port) for s, p, _ in proxy_service_targets(own, push)] == [("vm.bookinfo.example", 7000)]
    assert "inbound|7000||" not in {c.name for c in generate_clusters(other, push)}
    assert "inbound|7000||" in {c.name for c in generate_clusters(own, push)}
