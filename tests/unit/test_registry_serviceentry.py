"""ServiceEntry / WorkloadEntry / selected Pods through the ServiceRegistry."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from app.model.service import Endpoint, HealthStatus, Protocol, Registry, Resolution, ServicePort
from app.registry.registry import RegistryDelta, ServiceRegistry
from app.registry.serviceentry import SOURCE_EXTERNAL, SOURCE_K8S_SELECTED
from tests.support.registry import add, delete, services_and_shards, update

UNKNOWN = HealthStatus.UNKNOWN  # what a ServiceEntry or WorkloadEntry endpoint reports (istiod's zero value)

STATIC_SE = """
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: payments
  namespace: shop
  creationTimestamp: "2024-02-01T00:00:00Z"
  labels: {team: pay}
spec:
  hosts: [pay.example.com, pay2.example.com]
  addresses: [240.0.0.1]
  location: MESH_INTERNAL
  resolution: STATIC
  exportTo: [".", istio-system]
  subjectAltNames: ["spiffe://cluster.local/ns/shop/sa/pay"]
  ports:
  - {number: 80, name: http, protocol: HTTP, targetPort: 8080}
  - {number: 443, name: https, protocol: https}
  - {number: 9000, name: tcp, protocol: TLS}  # two hosts: TCP could not tell them apart (istiod)
  endpoints:
  - address: 10.1.0.1
    ports: {http: 18080}
    labels: {version: v1, security.istio.io/tlsMode: istio}
    locality: us-west/us-west-2a
    weight: 5
    network: net-a
    serviceAccount: pay
  - address: 10.1.0.2
"""

PAY = ("pay.example.com", "shop")
PAY2 = ("pay2.example.com", "shop")


def test_static_service_entry_services() -> None:
    reg = ServiceRegistry()
    delta = add(reg, STATIC_SE)
    assert services_and_shards(delta) == RegistryDelta(frozenset({PAY, PAY2}), frozenset({PAY, PAY2}))
    svc = reg.service(*PAY)
    assert svc is not None
    assert svc.ports == (
        ServicePort("http", 80, Protocol.HTTP),
        ServicePort("https", 443, Protocol.HTTPS),
        ServicePort("tcp", 9000, Protocol.TLS),
    )
    assert svc.registry is Registry.EXTERNAL
    assert svc.name == "payments"
    assert svc.addresses == ("240.0.0.1",)
    assert svc.resolution is Resolution.CLIENT_SIDE_LB
    assert svc.mesh_external is False
    assert svc.export_to == frozenset({".", "istio-system"})
    assert dict(svc.labels) == {"team": "pay"}
    assert svc.selector is None
    assert svc.service_accounts == ("spiffe://cluster.local/ns/shop/sa/pay",)
    assert svc.creation_timestamp == "2024-02-01T00:00:00Z"
    assert [s.hostname for s in reg.services()] == ["pay.example.com", "pay2.example.com"]


def test_inline_endpoint_port_mapping() -> None:
    reg = ServiceRegistry()
    add(reg, STATIC_SE)
    eps = reg.endpoints(*PAY)
    # ports outer, endpoints inner; WE port by name > targetPort > port number
    assert [(e.address, e.service_port_name, e.port) for e in eps] == [
        ("10.1.0.1", "http", 18080),
        ("10.1.0.2", "http", 8080),
        ("10.1.0.1", "https", 443),
        ("10.1.0.2", "https", 443),
        ("10.1.0.1", "tcp", 9000),
        ("10.1.0.2", "tcp", 9000),
    ]
    assert eps[0] == Endpoint(
        address="10.1.0.1",
        port=18080,
        service_port_name="http",
        labels=MappingProxyType({"version": "v1", "security.istio.io/tlsMode": "istio"}),
        locality="us-west/us-west-2a",
        weight=5,
        health=HealthStatus.UNKNOWN,  # nothing reports a ServiceEntry endpoint's health (istiod's zero value)
        network="net-a",
        service_account="spiffe://cluster.local/ns/shop/sa/pay",
        namespace="shop",
        workload_name="payments-0",  # istiod: inline endpoint i is the workload NAME-i
        tls_mode="istio",
    )
    assert eps[1] == Endpoint(
        "10.1.0.2", 8080, "http", namespace="shop", workload_name="payments-1", health=HealthStatus.UNKNOWN
    )
    assert reg.endpoint_index.source_endpoints(*PAY, SOURCE_EXTERNAL) == eps


@pytest.mark.parametrize(
    ("written", "resolution"),
    [
        ("NONE", Resolution.PASSTHROUGH),
        ("STATIC", Resolution.CLIENT_SIDE_LB),
        ("DNS", Resolution.DNS_LB),
    ],
)
def test_resolutions(written: str, resolution: Resolution) -> None:
    reg = ServiceRegistry()
    text = STATIC_SE.replace("resolution: STATIC", f"resolution: {written}")
    if written == "NONE":  # istiod ValidateServiceEntry: no endpoints for resolution NONE
        text = text[: text.index("  endpoints:")]
    add(reg, text)
    svc = reg.service(*PAY)
    assert svc is not None
    assert svc.resolution is resolution


def test_dns_round_robin_resolution() -> None:
    # istiod allows at most one endpoint with DNS_ROUND_ROBIN, so build one without endpoints
    reg = ServiceRegistry()
    add(reg, DNS_SE.replace("resolution: DNS", "resolution: DNS_ROUND_ROBIN"))
    svc = next(s for s in reg.services() if s.resolution is Resolution.DNS_ROUND_ROBIN_LB)
    assert svc.mesh_external


DNS_SE = """
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: google, namespace: egress}
spec:
  hosts: [www.google.com, maps.google.com]
  resolution: DNS
  ports:
  - {number: 443, name: https, protocol: TLS}
  - {number: 80, name: http, protocol: HTTP, targetPort: 8080}
"""


def test_dns_service_entry_without_endpoints_uses_its_host() -> None:
    reg = ServiceRegistry()
    add(reg, DNS_SE)
    svc = reg.service("www.google.com", "egress")
    assert svc is not None
    assert svc.mesh_external is True  # location defaults to MESH_EXTERNAL
    assert svc.resolution is Resolution.DNS_LB
    assert reg.endpoints("www.google.com", "egress") == (
        # istiod convertServiceEntryToInstances: the host's endpoint is the entry's workload
        Endpoint("www.google.com", 443, "https", namespace="egress", workload_name="google", health=UNKNOWN),
        Endpoint("www.google.com", 8080, "http", namespace="egress", workload_name="google", health=UNKNOWN),
    )
    assert [e.address for e in reg.endpoints("maps.google.com", "egress")] == ["maps.google.com"] * 2
    # STATIC (or NONE) with no endpoints has none
    reg2 = ServiceRegistry()
    add(reg2, DNS_SE.replace("resolution: DNS", "resolution: NONE"))
    assert reg2.endpoints("www.google.com", "egress") == ()


SELECTOR_SE = """
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vms, namespace: vm}
spec:
  hosts: [legacy.vm.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {number: 80, name: http, protocol: HTTP, targetPort: 8080}
  workloadSelector:
    labels: {app: legacy}
"""

WE_A = """
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-a, namespace: vm}
spec:
  address: 172.16.0.1
  labels: {app: legacy, istio-locality: eu.eu-1}
  ports: {http: 18080}
  serviceAccount: legacy
  weight: 3
"""

WE_B = """
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-b, namespace: vm}
spec:
  address: 172.16.0.2
  labels: {app: legacy, security.istio.io/tlsMode: disabled}
  serviceAccount: legacy
"""

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: legacy-pod
  namespace: vm
  labels: {app: legacy, security.istio.io/tlsMode: istio}
spec:
  serviceAccountName: legacy-sa
  containers:
  - name: app
    ports: [{name: http, containerPort: 9999}]
status:
  podIP: 10.2.0.7
  conditions: [{type: Ready, status: "False"}]
"""

LEGACY = ("legacy.vm.internal", "vm")


def test_workload_selector_selects_workload_entries_and_pods() -> None:
    reg = ServiceRegistry()
    add(reg, SELECTOR_SE)
    svc = reg.service(*LEGACY)
    assert svc is not None and svc.selector is not None
    assert dict(svc.selector) == {"app": "legacy"}
    assert reg.endpoints(*LEGACY) == ()

    delta = add(reg, WE_A)
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({LEGACY}))
    add(reg, WE_B)
    delta = add(reg, POD)
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({LEGACY}))
    # other namespaces and non-matching labels are not selected
    assert add(reg, WE_A.replace("namespace: vm", "namespace: other")).empty
    assert add(reg, WE_A.replace("name: vm-a", "name: vm-c").replace("app: legacy", "app: nope")).empty
    no_ip = POD.replace("name: legacy-pod", "name: no-ip").replace("podIP: 10.2.0.7", "phase: Pending")
    assert services_and_shards(add(reg, no_ip)).empty  # no endpoint (its proxy's labels: a proxy update)

    eps = reg.endpoints(*LEGACY)
    assert eps == (
        Endpoint(
            address="172.16.0.1",
            port=18080,
            service_port_name="http",
            labels=MappingProxyType({"app": "legacy", "istio-locality": "eu.eu-1"}),
            locality="eu/eu-1",
            weight=3,
            health=HealthStatus.UNKNOWN,  # a WorkloadEntry: istiod sets no health
            service_account="spiffe://cluster.local/ns/vm/sa/legacy",
            namespace="vm",
            workload_name="vm-a",
            tls_mode="istio",  # a service account without a tlsMode label means a sidecar
        ),
        Endpoint(
            address="172.16.0.2",
            port=8080,
            service_port_name="http",
            labels=MappingProxyType({"app": "legacy", "security.istio.io/tlsMode": "disabled"}),
            health=HealthStatus.UNKNOWN,
            service_account="spiffe://cluster.local/ns/vm/sa/legacy",
            namespace="vm",
            workload_name="vm-b",
            tls_mode="disabled",
        ),
        Endpoint(
            address="10.2.0.7",
            port=9999,  # the Pod's container port named like the SE port
            service_port_name="http",
            labels=MappingProxyType({"app": "legacy", "security.istio.io/tlsMode": "istio"}),
            health=HealthStatus.UNHEALTHY,
            service_account="spiffe://cluster.local/ns/vm/sa/legacy-sa",
            namespace="vm",
            workload_name="legacy-pod",
            tls_mode="istio",
        ),
    )


def test_workload_entry_workload_name_is_its_group_or_workload_name_label() -> None:
    # istiod labels.WorkloadNameFromWorkloadEntry: the auto-registration group annotation, then
    # the service.istio.io/workload-name label, then the entry's name
    reg = ServiceRegistry()
    grouped = WE_A.replace(
        "metadata: {name: vm-a, namespace: vm}",
        "metadata: {name: vm-a, namespace: vm, annotations: {istio.io/autoRegistrationGroup: legacy-group}}",
    )
    labelled = WE_B.replace(
        "metadata: {name: vm-b, namespace: vm}",
        "metadata: {name: vm-b, namespace: vm, labels: {service.istio.io/workload-name: legacy-vm}}",
    )
    add(reg, SELECTOR_SE + "---" + grouped + "---" + labelled)
    assert [e.workload_name for e in reg.endpoints(*LEGACY)] == ["legacy-group", "legacy-vm"]


def test_workload_changes_are_endpoint_only() -> None:
    reg = ServiceRegistry()
    add(reg, SELECTOR_SE + "---" + WE_A + "---" + POD)
    services = reg.services()
    delta = update(reg, WE_A.replace("172.16.0.1", "172.16.0.99"))
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({LEGACY}))
    assert reg.endpoints(*LEGACY)[0].address == "172.16.0.99"
    delta = update(reg, POD.replace('status: "False"', 'status: "True"'))
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({LEGACY}))
    assert reg.endpoints(*LEGACY)[1].health is HealthStatus.HEALTHY
    # relabelled out of the selector: its endpoint goes
    delta = update(reg, WE_A.replace("app: legacy", "app: retired"))
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({LEGACY}))
    assert [e.address for e in reg.endpoints(*LEGACY)] == ["10.2.0.7"]
    assert reg.services() is services
    delta = delete(reg, POD)
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({LEGACY}))
    assert reg.endpoints(*LEGACY) == ()


KUBE_SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: ratings, namespace: vm}
spec:
  clusterIP: 10.96.5.5
  selector: {app: legacy}
  ports:
  - {name: http, port: 80, targetPort: 9080}
  - {name: grpc, port: 7070}
  - {name: named, port: 8443, targetPort: https-port}
  - {name: dns, port: 53, protocol: UDP}
"""
RATINGS = ("ratings.vm.svc.cluster.local", "vm")


def test_kubernetes_service_selects_workload_entries() -> None:
    reg = ServiceRegistry()
    add(reg, WE_A.replace("ports: {http: 18080}", "ports: {http: 18080, https-port: 8443}"))
    delta = add(reg, KUBE_SERVICE)
    assert services_and_shards(delta) == RegistryDelta(frozenset({RATINGS}), frozenset({RATINGS}))
    eps = reg.endpoints(*RATINGS)
    # http: WE port by service port name; grpc: numeric targetPort (defaults to port);
    # named targetPort: the WE port of that name; UDP ports are skipped
    assert [(e.address, e.service_port_name, e.port) for e in eps] == [
        ("172.16.0.1", "http", 18080),
        ("172.16.0.1", "grpc", 7070),
        ("172.16.0.1", "named", 8443),
    ]
    assert eps[0].workload_name == "vm-a"
    assert eps[0].service_account == "spiffe://cluster.local/ns/vm/sa/legacy"
    assert reg.endpoint_index.source_endpoints(*RATINGS, SOURCE_K8S_SELECTED) == eps

    # a second WE without the named port: no endpoint for that port
    delta = add(reg, WE_B)
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({RATINGS}))
    assert [(e.address, e.port) for e in reg.endpoints(*RATINGS)][3:] == [
        ("172.16.0.2", 9080),
        ("172.16.0.2", 7070),
    ]

    # targetPort change: the Service object is the same, endpoints are not
    delta = update(reg, KUBE_SERVICE.replace("targetPort: 9080", "targetPort: 9081"))
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({RATINGS}))
    assert reg.endpoints(*RATINGS)[3].port == 9081

    # a WE that is not an IP cannot back a Kubernetes Service
    assert add(reg, WE_B.replace("name: vm-b", "name: vm-dns").replace("172.16.0.2", "vm.example.com")).empty

    # a headless Service does not select WorkloadEntries
    delta = update(reg, KUBE_SERVICE.replace("clusterIP: 10.96.5.5", "clusterIP: None"))
    assert services_and_shards(delta) == RegistryDelta(frozenset({RATINGS}), frozenset({RATINGS}))
    assert reg.endpoints(*RATINGS) == ()
    update(reg, KUBE_SERVICE)
    assert len(reg.endpoints(*RATINGS)) == 5

    delta = delete(reg, WE_A)
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({RATINGS}))
    delta = delete(reg, KUBE_SERVICE)
    assert services_and_shards(delta) == RegistryDelta(frozenset({RATINGS}), frozenset({RATINGS}))
    assert reg.endpoints(*RATINGS) == ()


def test_service_entry_for_a_kubernetes_host_merges_endpoints_kubernetes_wins() -> None:
    reg = ServiceRegistry()
    add(reg, KUBE_SERVICE)
    se = """
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings-extra, namespace: vm}
spec:
  hosts: [ratings.vm.svc.cluster.local]
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: 192.168.9.9}]
"""
    delta = add(reg, se)
    assert services_and_shards(delta) == RegistryDelta(endpoints_changed=frozenset({RATINGS}))
    svc = reg.service(*RATINGS)
    assert svc is not None and svc.registry is Registry.KUBERNETES
    assert [e.address for e in reg.endpoints(*RATINGS)] == ["192.168.9.9"]
    # the Kubernetes Service goes: the ServiceEntry's Service takes over
    delta = delete(reg, KUBE_SERVICE)
    assert services_and_shards(delta) == RegistryDelta(frozenset({RATINGS}))
    svc = reg.service(*RATINGS)
    assert svc is not None and svc.registry is Registry.EXTERNAL


def test_oldest_service_entry_defines_a_shared_host() -> None:
    reg = ServiceRegistry()
    newer = STATIC_SE.replace("name: payments", "name: payments-new").replace(
        "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"
    )
    add(reg, newer.replace("10.1.0.2", "10.1.0.3"))
    add(reg, STATIC_SE)
    svc = reg.service(*PAY)
    assert svc is not None and svc.name == "payments"
    addresses = [e.address for e in reg.endpoints(*PAY) if e.service_port_name == "tcp"]
    assert addresses == ["10.1.0.1", "10.1.0.2", "10.1.0.1", "10.1.0.3"]
    delta = delete(reg, STATIC_SE)
    assert services_and_shards(delta) == RegistryDelta(frozenset({PAY, PAY2}), frozenset({PAY, PAY2}))
    svc = reg.service(*PAY)
    assert svc is not None and svc.name == "payments-new"


def _multi(name: str, created: str, port: int, *, resolution: str = "DNS", extra: str = "", labels: str = "{}") -> str:
    return f"""
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: ext, creationTimestamp: "{created}", labels: {labels}}}
spec:
  hosts: [multi.example.com]
  addresses: [240.0.0.{port // 1000}]
  location: MESH_EXTERNAL
  resolution: {resolution}
  ports: [{{number: {port}, name: p{port}, protocol: HTTP}}, {{number: 9999, name: shared, protocol: TCP}}]
  {extra}
"""


MULTI = ("multi.example.com", "ext")
OLDER = _multi("a-older", "2024-01-01T00:00:01Z", 7000)


def test_same_host_service_entries_in_one_namespace_merge_ports() -> None:
    # istiod: one Service per ServiceEntry; appendSidecarServices folds newer same-host services of
    # the namespace into the oldest when canMergeServices (same resolution, labels, selector, exportTo)
    reg = ServiceRegistry()
    add(reg, _multi("b-newer", "2024-01-01T00:00:02Z", 8000))
    delta = add(reg, OLDER)
    assert MULTI in delta.services_changed
    svc = reg.service(*MULTI)
    assert svc is not None
    assert (svc.name, svc.addresses, svc.resolution) == ("a-older", ("240.0.0.7",), Resolution.DNS_LB)
    assert [(p.port, p.name) for p in svc.ports] == [(7000, "p7000"), (9999, "shared"), (8000, "p8000")]
    assert sorted({e.port for e in reg.endpoints(*MULTI)}) == [7000, 8000, 9999]
    # the oldest goes: the newer one is the Service, with only its own ports
    delta = delete(reg, OLDER)
    assert MULTI in delta.services_changed
    svc = reg.service(*MULTI)
    assert svc is not None and svc.name == "b-newer"
    assert [p.port for p in svc.ports] == [8000, 9999]


@pytest.mark.parametrize(
    ("resolution", "extra", "labels"),
    [
        ("STATIC", "endpoints: [{address: 10.0.0.1}]", "{}"),
        ("DNS", "exportTo: ['.']", "{}"),
        ("DNS", "workloadSelector: {labels: {app: a}}", "{}"),
        ("DNS", "", "{team: b}"),
    ],
)
def test_same_host_service_entries_that_differ_do_not_merge(resolution: str, extra: str, labels: str) -> None:
    reg = ServiceRegistry()
    newer = _multi("b-newer", "2024-01-01T00:00:02Z", 8000, resolution=resolution, extra=extra, labels=labels)
    add(reg, OLDER + "---" + newer)
    svc = reg.service(*MULTI)
    assert svc is not None and svc.name == "a-older"
    assert [p.port for p in svc.ports] == [7000, 9999]


def test_service_entry_host_removal_and_delete() -> None:
    reg = ServiceRegistry()
    add(reg, STATIC_SE)
    delta = update(
        reg, STATIC_SE.replace("hosts: [pay.example.com, pay2.example.com]", "hosts: [pay.example.com]")
    )
    assert services_and_shards(delta) == RegistryDelta(frozenset({PAY2}), frozenset({PAY2}))
    assert reg.service(*PAY2) is None
    assert reg.endpoints(*PAY2) == ()
    delta = delete(reg, STATIC_SE)
    assert services_and_shards(delta) == RegistryDelta(frozenset({PAY}), frozenset({PAY}))
    assert reg.services() == ()
    assert len(reg.endpoint_index) == 0


def test_service_targets_for_a_workload_entry_ip() -> None:
    reg = ServiceRegistry()
    add(reg, SELECTOR_SE + "---" + KUBE_SERVICE + "---" + WE_A)
    targets = reg.service_targets("172.16.0.1")
    assert [(t[0].hostname, t[1].name, t[2].port) for t in targets] == [
        ("legacy.vm.internal", "http", 18080),
        ("ratings.vm.svc.cluster.local", "http", 18080),
        ("ratings.vm.svc.cluster.local", "grpc", 7070),
    ]
    update(reg, WE_A.replace("172.16.0.1", "172.16.0.50"))
    assert reg.service_targets("172.16.0.1") == []
    assert len(reg.service_targets("172.16.0.50")) == 3


def test_unix_socket_endpoint_has_port_zero() -> None:
    reg = ServiceRegistry()
    add(
        reg,
        """
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: uds, namespace: local}
spec:
  hosts: [uds.local]
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]
  endpoints: [{address: "unix:///var/run/app.sock"}]
""",
    )
    assert reg.endpoints("uds.local", "local") == (
        Endpoint("/var/run/app.sock", 0, "http", namespace="local", workload_name="uds-0", health=HealthStatus.UNKNOWN),
    )


def test_the_hosts_of_an_entry_share_its_endpoints_converted_once() -> None:
    """An entry's workload endpoints are the same for each of its hosts: every host of an entry
    alone on it holds the one tuple (256 hosts x 4,096 endpoints, within the CRD's bounds, were
    1M Endpoints built and held, 23 s on the event loop), and the IP index still names each."""
    hosts = [f"h{i}.example.com" for i in range(40)]
    endpoints = "".join(f"\n  - address: 10.2.{i // 250}.{i % 250}" for i in range(500))
    entry = f"""
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: wide, namespace: shop}}
spec:
  hosts: [{", ".join(hosts)}]
  resolution: STATIC
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  endpoints:{endpoints}
"""
    reg = ServiceRegistry()
    add(reg, entry)
    held = {id(reg.endpoints(h, "shop")) for h in hosts}
    assert len(held) == 1 and len(reg.endpoints(hosts[0], "shop")) == 500
    assert sorted(t[0].hostname for t in reg.service_targets("10.2.1.7")) == sorted(hosts)
    # another entry on one of the hosts: that host merges both, the rest still share
    add(reg, STATIC_SE.replace("pay.example.com", hosts[3]))
    assert len(reg.endpoints(hosts[3], "shop")) == 500 + 6  # its 2 endpoints on 3 ports
    assert len({id(reg.endpoints(h, "shop")) for h in hosts if h != hosts[3]}) == 1
    update(reg, entry.replace("10.2.1.7", "10.2.9.9"))
    assert reg.service_targets("10.2.1.7") == []
    assert len(reg.service_targets("10.2.9.9")) == 40


def test_dns_entry_endpoints_are_each_hosts_own() -> None:
    reg = ServiceRegistry()
    add(
        reg,
        """
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: dns, namespace: shop}
spec:
  hosts: [a.example.com, b.example.com]
  resolution: DNS
  ports: [{number: 80, name: http, protocol: HTTP}]
""",
    )
    assert [e.address for e in reg.endpoints("a.example.com", "shop")] == ["a.example.com"]
    assert [e.address for e in reg.endpoints("b.example.com", "shop")] == ["b.example.com"]
