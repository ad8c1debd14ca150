"""The NDS name table, pinned to istiod's BuildNameTable (pkg/dns/server/name_table.go and its
name_table_test.go cases) and to when istiod pushes it (pilot/pkg/xds/nds.go,
serviceregistry/kube/controller/endpointslice.go)."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from app.config.loader import load_documents
from app.config.objects import ConfigEvent, ConfigKey, EventType, Kind
from app.environment import Environment
from app.model.features import Features
from app.model.proxy import Proxy, build_proxy
from app.model.push_context import PushContext
from app.translate.name_table import build_name_table
from tests.support.mesh import UNREADY, config_doc, endpoint_slice, kube_service, push_context, slice_endpoint


def table(push: PushContext, proxy: Proxy) -> dict[str, Any]:
    built = build_name_table(proxy, push, push.sidecar_scope(proxy).services)
    assert built is not None
    found: dict[str, Any] = json_format.MessageToDict(built).get("table", {})
    return found


def sidecar(ip: str = "10.1.0.9", ns: str = "default", **metadata: str) -> Proxy:
    return build_proxy(f"sidecar~{ip}~app-1.{ns}~{ns}.svc.cluster.local", {"INSTANCE_IPS": ip, **metadata})


def pod(name: str, ip: str, *, subdomain: str = "", hostname: str = "", ready: bool = True, ns: str = "default") -> str:
    extra = (f", subdomain: {subdomain}" if subdomain else "") + (f", hostname: {hostname}" if hostname else "")
    status = "True" if ready else "False"
    return f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}, labels: {{app: db}}}}
spec: {{containers: [{{name: app}}]{extra}}}
status: {{phase: Running, podIP: {ip}, conditions: [{{type: Ready, status: "{status}"}}]}}
"""


def headless(name: str = "db", ports: str = "[{name: tcp, port: 5432}]", *, publish: bool = False) -> str:
    text = kube_service(name, ports, cluster_ip="None", selector="app: db")
    return text + ("  publishNotReadyAddresses: true\n" if publish else "")


SLICE_PORTS = "[{name: tcp, port: 5432}]"


def test_kubernetes_service_vip_with_short_name_and_namespace() -> None:
    push = push_context(kube_service("web", "[{name: http, port: 80}]", cluster_ip="10.96.0.5"))
    assert table(push, sidecar()) == {
        "web.default.svc.cluster.local": {
            "ips": ["10.96.0.5"],
            "registry": "Kubernetes",
            "shortname": "web",
            "namespace": "default",
        }
    }


DUAL_STACK = (
    kube_service("web", "[{name: http, port: 80}]", cluster_ip="10.96.0.5") + "  clusterIPs: [10.96.0.5, fd00::5]\n"
)


def test_dual_stack_service_answers_the_proxy_ip_families() -> None:
    # getAllAddressesForProxy filters ClusterVIPs by the families the proxy has
    svc = DUAL_STACK
    push = push_context(svc)
    assert table(push, sidecar())["web.default.svc.cluster.local"]["ips"] == ["10.96.0.5"]
    assert table(push, sidecar("fd00::9"))["web.default.svc.cluster.local"]["ips"] == ["fd00::5"]
    dual = build_proxy("sidecar~10.1.0.9~app-1.default~default.svc.cluster.local", {"INSTANCE_IPS": "10.1.0.9,fd00::9"})
    assert table(push, dual)["web.default.svc.cluster.local"]["ips"] == ["10.96.0.5", "fd00::5"]


def test_vip_of_another_cluster_falls_back_to_the_default_address_of_the_proxy_family() -> None:
    svc = DUAL_STACK
    push = push_context(svc)
    assert table(push, sidecar(CLUSTER_ID="remote"))["web.default.svc.cluster.local"]["ips"] == ["10.96.0.5"]
    assert "web.default.svc.cluster.local" not in table(push, sidecar("fd00::9", CLUSTER_ID="remote"))


SE_ADDRESSES = config_doc(
    "ServiceEntry",
    "db",
    """
    hosts: [db.example.com]
    addresses: [192.0.2.10, 192.0.2.20/32, 198.51.100.0/24]
    ports: [{number: 5432, name: tcp, protocol: TCP}]
    resolution: STATIC
    endpoints: [{address: 192.0.2.10}]
    """,
)


def test_serviceentry_addresses_are_merged_and_cidrs_skipped() -> None:
    # one istiod Service per address: each IP joins the host's entry, a /32 counts as its IP,
    # a wider CIDR is no address to answer with; no short name outside Kubernetes
    push = push_context(SE_ADDRESSES)
    assert table(push, sidecar()) == {"db.example.com": {"ips": ["192.0.2.10", "192.0.2.20"], "registry": "External"}}


def auto_allocated(labels: str = "", resolution: str = "DNS") -> str:
    meta_labels = f", labels: {{{labels}}}" if labels else ""
    return f"""
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: api, namespace: default{meta_labels}}}
spec:
  hosts: [api.example.com]
  ports: [{{number: 443, name: tls, protocol: TLS}}]
  resolution: {resolution}
status:
  addresses: [{{host: api.example.com, value: 240.240.0.7}}, {{host: api.example.com, value: "2001:2::f0f0:7"}}]
"""


def test_auto_allocated_addresses_only_for_proxies_that_capture_dns() -> None:
    # nodeUsesAutoallocatedIPs: the address from status.addresses (the allocation controller),
    # used only when the agent captures DNS; without it the host has no address and no entry
    push = push_context(auto_allocated())
    assert table(push, sidecar()) == {}
    captured = table(push, sidecar(DNS_CAPTURE="true"))
    assert captured == {"api.example.com": {"ips": ["240.240.0.7"], "registry": "External"}}


def test_auto_allocated_addresses_opted_out_or_resolution_none_are_not_used() -> None:
    # shouldV2AutoAllocateIP: the enable-autoallocate-ip label "false" and resolution NONE opt out
    opted_out = push_context(auto_allocated(labels='networking.istio.io/enable-autoallocate-ip: "false"'))
    assert table(opted_out, sidecar(DNS_CAPTURE="true")) == {}
    none = push_context(auto_allocated(resolution="NONE"))
    assert table(none, sidecar(DNS_CAPTURE="true")) == {}


def test_auto_allocated_addresses_not_used_with_the_allocation_controller_off() -> None:
    result = load_documents(auto_allocated(), "se.yaml")
    env = Environment(features=Features(enable_ip_autoallocate=False))
    env.apply([ConfigEvent(EventType.ADD, obj) for obj in result.objects])
    push = env.build_push_context(None)
    assert table(push, sidecar(DNS_CAPTURE="true", DNS_AUTO_ALLOCATE="true")) == {}


def test_headless_service_pods_and_their_subdomain_records() -> None:
    # "headless service pods": the service answers with every ready endpoint, and a Pod with
    # spec.subdomain gets <hostname>.<subdomain>.<ns>.svc.<domain> (hostname defaults to its name)
    push = push_context(
        headless(),
        pod("db-0", "10.1.0.1", subdomain="db"),
        pod("db-1", "10.1.0.2", subdomain="db", hostname="replica"),
        pod("other", "10.1.0.3"),
        endpoint_slice(
            "db",
            SLICE_PORTS,
            slice_endpoint("10.1.0.1", "db-0"),
            slice_endpoint("10.1.0.2", "db-1"),
            slice_endpoint("10.1.0.3", "other"),
        ),
    )
    got = table(push, sidecar())
    assert got["db.default.svc.cluster.local"] == {
        "ips": ["10.1.0.1", "10.1.0.2", "10.1.0.3"],
        "registry": "Kubernetes",
        "shortname": "db",
        "namespace": "default",
    }
    assert got["db-0.db.default.svc.cluster.local"] == {
        "ips": ["10.1.0.1"],
        "registry": "Kubernetes",
        "shortname": "db-0.db",
        "namespace": "default",
    }
    assert got["replica.db.default.svc.cluster.local"]["ips"] == ["10.1.0.2"]
    assert len(got) == 3


def test_headless_service_skips_unready_endpoints_unless_publish_not_ready_addresses() -> None:
    pods = (pod("db-0", "10.1.0.1"), pod("db-1", "10.1.0.2", ready=False))
    eps = endpoint_slice(
        "db", SLICE_PORTS, slice_endpoint("10.1.0.1", "db-0"), slice_endpoint("10.1.0.2", "db-1", UNREADY)
    )
    push = push_context(headless(), *pods, eps)
    assert table(push, sidecar())["db.default.svc.cluster.local"]["ips"] == ["10.1.0.1"]
    published = push_context(headless(publish=True), *pods, eps)
    assert table(published, sidecar())["db.default.svc.cluster.local"]["ips"] == ["10.1.0.1", "10.1.0.2"]


def test_headless_service_with_network_isolation_keeps_same_network_endpoints() -> None:
    # "headless service pods with network isolation": endpoints of another network are left out
    net_pod = pod("db-1", "10.1.0.2").replace("labels: {app: db}", "labels: {app: db, topology.istio.io/network: nw2}")
    push = push_context(
        headless(),
        pod("db-0", "10.1.0.1"),
        net_pod,
        endpoint_slice("db", SLICE_PORTS, slice_endpoint("10.1.0.1", "db-0"), slice_endpoint("10.1.0.2", "db-1")),
    )
    assert table(push, sidecar(NETWORK="nw1"))["db.default.svc.cluster.local"]["ips"] == ["10.1.0.1"]
    # an endpoint without a network is in every network
    assert table(push, sidecar())["db.default.svc.cluster.local"]["ips"] == ["10.1.0.1", "10.1.0.2"]


def test_headless_service_without_ready_endpoints_has_no_entry() -> None:
    push = push_context(headless())
    assert table(push, sidecar()) == {}


def test_headless_serviceentry_endpoints_report_no_health_so_they_get_no_entry() -> None:
    # istiod BuildNameTable keeps only endpoints whose health is Healthy; a WorkloadEntry's carry
    # none (the zero value), so resolution NONE without addresses answers nothing
    entry = config_doc(
        "ServiceEntry",
        "db",
        """
        hosts: [db.example.com]
        ports: [{number: 5432, name: tcp, protocol: TCP}]
        resolution: NONE
        workloadSelector: {labels: {app: vm-db}}
        """,
    )
    vm = config_doc("WorkloadEntry", "vm-db", "address: 192.0.2.10\nlabels: {app: vm-db}")
    assert table(push_context(entry, vm), sidecar()) == {}


def test_kubernetes_service_takes_precedence_over_a_serviceentry_for_the_same_host() -> None:
    # a ServiceEntry in another namespace naming the Kubernetes host: the Kubernetes entry wins
    se = config_doc(
        "ServiceEntry",
        "decorate",
        """
        hosts: [web.default.svc.cluster.local]
        addresses: [10.200.0.1]
        ports: [{number: 80, name: http, protocol: HTTP}]
        resolution: STATIC
        """,
        namespace="other",
    )
    push = push_context(se, kube_service("web", "[{name: http, port: 80}]", cluster_ip="10.96.0.5"))
    assert table(push, sidecar())["web.default.svc.cluster.local"] == {
        "ips": ["10.96.0.5"],
        "registry": "Kubernetes",
        "shortname": "web",
        "namespace": "default",
    }


def test_scope_limits_the_table_to_the_services_the_sidecar_imports() -> None:
    sidecar_cfg = config_doc("Sidecar", "default", "egress: [{hosts: [./*]}]", namespace="default")
    other = kube_service("far", "[{name: http, port: 80}]", cluster_ip="10.96.0.9", namespace="other")
    push = push_context(sidecar_cfg, other, kube_service("near", "[{name: http, port: 80}]", cluster_ip="10.96.0.8"))
    assert set(table(push, sidecar())) == {"near.default.svc.cluster.local"}


def test_router_gets_no_name_table() -> None:
    push = push_context(kube_service("web", "[{name: http, port: 80}]", cluster_ip="10.96.0.5"))
    router = build_proxy("router~10.1.0.9~gw-1.default~default.svc.cluster.local")
    assert build_name_table(router, push, push.sidecar_scope(router).services) is None


def apply(env: Environment, text: str, kind: EventType = EventType.ADD) -> frozenset[ConfigKey]:
    result = load_documents(text, "doc.yaml")
    assert not result.rejected, result.rejected
    return env.apply([ConfigEvent(kind, obj) for obj in result.objects]).configs


def test_headless_endpoint_change_is_a_service_change_for_tcp_ports_and_a_dns_name_change_for_http() -> None:
    # endpointslice.go: a headless service's endpoints are a full push; an HTTP-only one pushes
    # only its DNS name (kind.DNSName, istio issue 48207)
    env = Environment()
    web = headless("web", "[{name: http, port: 80}]").replace("app: db", "app: web")
    pods = pod("db-0", "10.1.0.1") + pod("web-0", "10.1.0.2") + pod("web-1", "10.1.0.3")
    apply(env, headless() + web + pods)
    tcp = apply(env, endpoint_slice("db", SLICE_PORTS, slice_endpoint("10.1.0.1", "db-0")))
    assert tcp == {ConfigKey(Kind.SERVICE, "default", "db.default.svc.cluster.local")}
    web_0 = slice_endpoint("10.1.0.2", "web-0")
    apply(env, endpoint_slice("web", "[{name: http, port: 80}]", web_0))  # its service account: CDS too
    http = apply(env, endpoint_slice("web", "[{name: http, port: 80}]", web_0, slice_endpoint("10.1.0.3", "web-1")))
    assert http == {ConfigKey(Kind.DNS_NAME, "default", "web.default.svc.cluster.local")}


def test_endpoint_change_of_a_cluster_ip_service_stays_endpoint_only() -> None:
    env = Environment()
    apply(env, kube_service("web", "[{name: http, port: 80}]", cluster_ip="10.96.0.5", selector="app: web"))
    assert apply(env, endpoint_slice("web", "[{name: http, port: 80}]", slice_endpoint("10.1.0.2", "web-0"))) == set()
