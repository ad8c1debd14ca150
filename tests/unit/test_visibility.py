"""Service and VirtualService visibility (exportTo), gateway name and short host resolution.

Checked against istio/istio pilot/pkg/model/push_context.go (initServiceRegistry,
servicesExportedToNamespace, SortServicesByCreationTime, initVirtualServices,
VirtualServicesForGateway), virtualservice.go (resolveVirtualServiceShortnames), config.go
(resolveGatewayName, ResolveShortnameToFQDN) and push_context_test.go TestServiceWithExportTo /
TestVirtualServiceWithExportTo.
"""

from __future__ import annotations

import textwrap

import pytest

from app.config.loader import load_documents
from app.config.objects import ConfigEvent, EventType
from app.environment import Environment
from app.model.proxy import build_proxy
from app.model.push_context import PushContext
from app.model.service import Registry
from app.model.virtual_service import MESH_GATEWAY, resolve_gateway_name
from tests.support.mesh import config_doc, kube_service, mesh_config_map, push_context

T0 = "2024-01-01T00:00:00Z"


def doc(kind: str, ns: str, name: str, spec: str, created: str = T0) -> str:
    return config_doc(kind, name, spec, namespace=ns, created=created)


def service(ns: str, name: str, ip: str, ports: str) -> str:
    return kube_service(name, ports, namespace=ns, cluster_ip=ip, created=T0)


def se(ns: str, name: str, host: str, created: str, export_to: str = "") -> str:
    spec = f"hosts: [{host}]\nports: [{{number: 80, name: http, protocol: HTTP}}]\nresolution: DNS\n{export_to}"
    return doc("ServiceEntry", ns, name, spec, created)


def vs(ns: str, name: str, spec: str, created: str = T0) -> str:
    return doc("VirtualService", ns, name, spec, created)


def visible_hosts(push: PushContext, namespace: str) -> list[str]:
    return [s.hostname for s in push.service_index.exported_to(namespace)]


def mesh_vs_hosts(push: PushContext, namespace: str, gateway: str = MESH_GATEWAY) -> list[str]:
    return [h for v in push.virtual_service_index.for_gateway(namespace, gateway) for h in v.spec.hosts]


# --- Services ---------------------------------------------------------------------------


# push_context_test.go TestServiceWithExportTo (istiod rejects "*" mixed with other values, so svc3
# is plain "*" here)
EXPORT_WORLD = (
    se("test1", "svc1", "svc1.example.com", "2024-01-01T00:00:01Z", 'exportTo: [".", ns1]'),
    se("test2", "svc2", "svc2.example.com", "2024-01-01T00:00:02Z", "exportTo: [test1, ns1, test2]"),
    se("test3", "svc3", "svc3.example.com", "2024-01-01T00:00:03Z", 'exportTo: ["*"]'),
    se("test4", "svc4", "svc4.example.com", "2024-01-01T00:00:04Z"),
    se("test1", "svc-none", "none.example.com", "2024-01-01T00:00:00Z", 'exportTo: ["~"]'),
)


@pytest.mark.parametrize(
    ("namespace", "want"),
    [
        ("test1", ["svc1", "svc2", "svc3", "svc4"]),
        ("test2", ["svc2", "svc3", "svc4"]),
        ("ns1", ["svc1", "svc2", "svc3", "svc4"]),
        ("random", ["svc3", "svc4"]),
    ],
)
def test_service_export_to(namespace: str, want: list[str]) -> None:
    push = push_context(*EXPORT_WORLD)
    assert visible_hosts(push, namespace) == [f"{s}.example.com" for s in want]


def test_service_exported_to_none_is_visible_nowhere_not_even_its_namespace() -> None:
    push = push_context(*EXPORT_WORLD)
    svc = push.service_index.service("none.example.com", "test1")
    assert svc is not None
    assert not push.service_index.is_visible(svc, "test1")
    assert "none.example.com" not in visible_hosts(push, "test1")


def test_private_then_exported_then_public_regardless_of_age() -> None:
    push = push_context(
        se("ns-a", "old-public", "old-public.example.com", "2020-01-01T00:00:00Z"),
        se("ns-b", "mid-exported", "mid-exported.example.com", "2021-01-01T00:00:00Z", "exportTo: [ns-a]"),
        se("ns-a", "new-private", "new-private.example.com", "2022-01-01T00:00:00Z", 'exportTo: ["."]'),
        se("ns-a", "newest-public", "newest-public.example.com", "2023-01-01T00:00:00Z"),
    )
    assert visible_hosts(push, "ns-a") == [
        "new-private.example.com",
        "mid-exported.example.com",
        "old-public.example.com",
        "newest-public.example.com",
    ]


def test_kubernetes_service_export_to_annotation() -> None:
    service = textwrap.dedent(
        """\
        ---
        apiVersion: v1
        kind: Service
        metadata:
          name: reviews
          namespace: bookinfo
          annotations: {networking.istio.io/exportTo: "., partner"}
        spec:
          clusterIP: 10.0.0.1
          ports: [{name: http, port: 9080}]
        """
    )
    push = push_context(service)
    assert visible_hosts(push, "bookinfo") == ["reviews.bookinfo.svc.cluster.local"]
    assert visible_hosts(push, "partner") == ["reviews.bookinfo.svc.cluster.local"]
    assert visible_hosts(push, "other") == []


def test_mesh_default_service_export_to() -> None:
    docs = (
        se("ns-a", "defaulted", "defaulted.example.com", "2024-01-01T00:00:01Z"),
        se("ns-a", "public", "public.example.com", "2024-01-01T00:00:02Z", 'exportTo: ["*"]'),
    )
    private = push_context(mesh_config_map('defaultServiceExportTo: ["."]'), *docs)
    assert visible_hosts(private, "ns-a") == ["defaulted.example.com", "public.example.com"]
    assert visible_hosts(private, "ns-b") == ["public.example.com"]
    assert visible_hosts(push_context(*docs), "ns-b") == ["defaulted.example.com", "public.example.com"]


def test_kubernetes_service_beats_an_older_service_entry_for_the_same_name() -> None:
    push = push_context(
        se("bookinfo", "squatter", "reviews.bookinfo.svc.cluster.local", "2020-01-01T00:00:00Z"),
        service("bookinfo", "reviews", "10.0.0.1", "[{name: http, port: 9080}]"),
    )
    svc = push.service_index.service("reviews.bookinfo.svc.cluster.local", "bookinfo")
    assert svc is not None and svc.registry is Registry.KUBERNETES
    # what a proxy sees (istiod's appendSidecarServices replaces the ServiceEntry by the Service)
    scope = push.sidecar_scope(build_proxy("sidecar~10.1.0.7~pod-1.other~other.svc.cluster.local"))
    assert [(s.hostname, s.registry) for s in scope.services] == [
        ("reviews.bookinfo.svc.cluster.local", Registry.KUBERNETES)
    ]


def test_services_created_together_are_ordered_by_name_then_namespace() -> None:
    ports = "[{name: http, port: 80}]"
    push = push_context(service("ns", "a-b", "10.0.0.2", ports), service("ns", "a", "10.0.0.1", ports))
    assert visible_hosts(push, "ns") == ["a.ns.svc.cluster.local", "a-b.ns.svc.cluster.local"]


# --- VirtualServices: exportTo --------------------------------------------------------------


def route(host: str) -> str:
    return f"http: [{{route: [{{destination: {{host: {host}}}}}]}}]"


# push_context_test.go TestVirtualServiceWithExportTo (names lower-cased; rule3 uses plain "*")
VS_WORLD = (
    vs("test1", "rule1", f'hosts: [rule1.com]\nexportTo: [".", ns1]\n{route("a")}'),
    vs("test2", "rule2", f"hosts: [rule2.com]\nexportTo: [test2, ns1, test1]\n{route('a')}"),
    vs(
        "test2",
        "rule2gw",
        f"gateways: [default/gateway, mesh]\nhosts: [rule2gw.com]\nexportTo: [test2, ns1, test1]\n{route('a')}",
    ),
    vs("test3", "rule3", f'gateways: [mesh]\nhosts: [rule3.com]\nexportTo: ["*"]\n{route("a")}'),
    vs("test3", "rule3gw", f'gateways: [default/gateway]\nhosts: [rule3gw.com]\nexportTo: ["*"]\n{route("a")}'),
    vs("zzz", "zzz", f"hosts: [rootns.com]\n{route('a')}"),
)


@pytest.mark.parametrize(
    ("namespace", "gateway", "want"),
    [
        ("test1", MESH_GATEWAY, ["rule1.com", "rule2.com", "rule2gw.com", "rule3.com", "rootns.com"]),
        ("test2", MESH_GATEWAY, ["rule2.com", "rule2gw.com", "rule3.com", "rootns.com"]),
        ("ns1", MESH_GATEWAY, ["rule1.com", "rule2.com", "rule2gw.com", "rule3.com", "rootns.com"]),
        ("random", MESH_GATEWAY, ["rule3.com", "rootns.com"]),
        ("test1", "default/gateway", ["rule2gw.com", "rule3gw.com"]),
        ("test2", "default/gateway", ["rule2gw.com", "rule3gw.com"]),
        ("ns1", "default/gateway", ["rule2gw.com", "rule3gw.com"]),
        ("random", "default/gateway", ["rule3gw.com"]),
    ],
)
def test_virtual_service_export_to(namespace: str, gateway: str, want: list[str]) -> None:
    assert mesh_vs_hosts(push_context(*VS_WORLD), namespace, gateway) == want


def test_virtual_services_private_then_exported_then_public_by_creation_time() -> None:
    push = push_context(
        vs("ns-a", "public-new", f"hosts: [public-new.com]\n{route('a')}", "2024-03-01T00:00:00Z"),
        vs("ns-a", "public-old", f"hosts: [public-old.com]\n{route('a')}", "2024-01-01T00:00:00Z"),
        vs("ns-b", "exported", f"hosts: [exported.com]\nexportTo: [ns-a]\n{route('a')}", "2024-01-02T00:00:00Z"),
        vs("ns-a", "private-new", f'hosts: [private-new.com]\nexportTo: ["."]\n{route("a")}', "2024-05-01T00:00:00Z"),
        vs("ns-a", "private-old", f'hosts: [private-old.com]\nexportTo: ["."]\n{route("a")}', "2024-04-01T00:00:00Z"),
    )
    assert mesh_vs_hosts(push, "ns-a") == [
        "private-old.com",
        "private-new.com",
        "exported.com",
        "public-old.com",
        "public-new.com",
    ]
    assert mesh_vs_hosts(push, "ns-c") == ["public-old.com", "public-new.com"]


def test_mesh_default_virtual_service_export_to() -> None:
    docs = (
        vs("ns-a", "defaulted", f"hosts: [defaulted.com]\n{route('a')}"),
        vs("ns-a", "public", f'hosts: [public.com]\nexportTo: ["*"]\n{route("a")}', "2024-02-01T00:00:00Z"),
    )
    push = push_context(mesh_config_map('defaultVirtualServiceExportTo: ["."]'), *docs)
    assert mesh_vs_hosts(push, "ns-a") == ["defaulted.com", "public.com"]
    assert mesh_vs_hosts(push, "ns-b") == ["public.com"]


def test_delegate_virtual_services_are_not_bound_to_the_mesh() -> None:
    push = push_context(vs("ns-a", "delegate", route("a")), vs("ns-a", "normal", f"hosts: [x.com]\n{route('a')}"))
    assert mesh_vs_hosts(push, "ns-a") == ["x.com"]
    assert list(push.virtual_service_index.delegates) == [("ns-a", "delegate")]


# --- gateway names ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("gw", "app/gw"),
        ("./gw", "app/gw"),
        ("edge/gw", "edge/gw"),
        ("gw.edge.svc.cluster.local", "edge/gw"),  # legacy FQDN
        ("gw.edge", "edge/gw"),
        ("mesh", "mesh"),
    ],
)
def test_resolve_gateway_name(name: str, want: str) -> None:
    assert resolve_gateway_name(name, "app") == want


def test_virtual_service_gateways_are_resolved_everywhere() -> None:
    spec = """
    hosts: [shop.example.com]
    gateways: [gw, ./gw2, istio-system/ingress, legacy.edge.svc.cluster.local, mesh]
    http:
    - match: [{gateways: [gw, legacy.edge]}]
      route: [{destination: {host: shop}}]
    tcp:
    - match: [{gateways: [./gw2]}]
      route: [{destination: {host: shop}}]
    """
    push = push_context(vs("app", "shop", spec))
    resolved = push.virtual_service_index.for_gateway("app", "app/gw")[0]
    assert list(resolved.spec.gateways) == ["app/gw", "app/gw2", "istio-system/ingress", "edge/legacy", "mesh"]
    assert list(resolved.spec.http[0].match[0].gateways) == ["app/gw", "edge/legacy"]
    assert list(resolved.spec.tcp[0].match[0].gateways) == ["app/gw2"]
    for gateway in ("app/gw", "app/gw2", "istio-system/ingress", "edge/legacy", MESH_GATEWAY):
        assert [v.namespaced_name for v in push.virtual_service_index.for_gateway("app", gateway)] == ["app/shop"]
    assert push.virtual_service_index.for_gateway("app", "app/legacy") == []


# --- short host names -------------------------------------------------------------------


def test_virtual_service_short_hosts_become_fqdn_in_its_namespace() -> None:
    spec = """
    hosts: [reviews, ratings.other, "*.example.com"]
    http:
    - route:
      - destination: {host: reviews}
        weight: 50
      - destination: {host: reviews.other.svc.cluster.local}
        weight: 50
      mirror: {host: shadow}
    tcp:
    - route: [{destination: {host: db}}]
    tls:
    - match: [{sniHosts: [reviews.bookinfo.svc.cluster.local]}]
      route: [{destination: {host: tlsdest}}]
    """
    push = push_context(vs("bookinfo", "reviews", spec))
    resolved = push.virtual_service_index.for_gateway("bookinfo", MESH_GATEWAY)[0].spec
    assert list(resolved.hosts) == ["reviews.bookinfo.svc.cluster.local", "ratings.other", "*.example.com"]
    assert [d.destination.host for d in resolved.http[0].route] == [
        "reviews.bookinfo.svc.cluster.local",
        "reviews.other.svc.cluster.local",
    ]
    assert resolved.http[0].mirror.host == "shadow.bookinfo.svc.cluster.local"
    assert resolved.tcp[0].route[0].destination.host == "db.bookinfo.svc.cluster.local"
    assert resolved.tls[0].route[0].destination.host == "tlsdest.bookinfo.svc.cluster.local"
    # the stored object keeps what the user wrote
    assert list(push.virtual_service_index.for_gateway("bookinfo", MESH_GATEWAY)[0].obj.spec.hosts) == [
        "reviews",
        "ratings.other",
        "*.example.com",
    ]


def test_short_hosts_use_the_cluster_domain_suffix() -> None:
    docs = (
        service("bookinfo", "reviews", "10.0.0.1", "[{name: http, port: 80}]"),
        doc("DestinationRule", "bookinfo", "reviews", "host: reviews\nsubsets: [{name: v1}]"),
        vs("bookinfo", "reviews", f"hosts: [reviews]\n{route('reviews')}"),
    )
    result = load_documents("".join(docs), "world.yaml")
    env = Environment(domain_suffix="corp.example")
    env.apply([ConfigEvent(EventType.ADD, o) for o in result.objects])
    push = env.build_push_context(None)
    fqdn = "reviews.bookinfo.svc.corp.example"
    resolved = push.virtual_service_index.for_gateway("bookinfo", MESH_GATEWAY)[0].spec
    assert (list(resolved.hosts), resolved.http[0].route[0].destination.host) == ([fqdn], fqdn)
    scope = push.sidecar_scope(build_proxy("sidecar~10.1.0.7~pod-1.other~other.svc.corp.example"))
    assert [r.name for r in scope.destination_rules[fqdn]] == ["reviews"]
