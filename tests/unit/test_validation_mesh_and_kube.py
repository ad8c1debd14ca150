"""MeshConfig checks as istiod's agent.ValidateMeshConfig (which it runs on the mesh config
merged over its defaults: ValidateConnectTimeout, ValidatePort, ValidateProtocolDetectionTimeout,
ValidateLocalityLbSetting, validateTrustDomainConfig, ValidateMeshTLSConfig), for the fields
pilotfish reads; WorkloadEntry (and ServiceEntry endpoint) labels as validateWorkloadEntry's
labels.Instance.Validate; and the Kubernetes objects' addresses as the API server validates
them (Service clusterIP(s), Pod podIP(s), EndpointSlice addresses per addressType)."""

from __future__ import annotations

import textwrap

import pytest

from app.config.loader import load_documents, load_mesh_file


def mesh_rejection(yaml_text: str) -> str:
    result = load_mesh_file(yaml_text, "mesh.yaml")
    if not result.rejected:
        return ""
    [r] = result.rejected
    prefix = "mesh.yaml: MeshConfig mesh: field "
    assert str(r.error).startswith(prefix), r.error
    return str(r.error).removeprefix(prefix)


@pytest.mark.parametrize(
    ("mesh", "field", "reason"),
    [
        ("connectTimeout: 0s", "connectTimeout", "duration must be greater than 1ms"),
        ("connectTimeout: -1s", "connectTimeout", "duration must be greater than 1ms"),
        ("connectTimeout: 1.5ms", "connectTimeout", "only durations to ms precision are supported"),
        ("connectTimeout: 2h", "connectTimeout", "must be between 1ms and 1h"),
        ("proxyListenPort: 70000", "proxyListenPort", "out of range"),
        ("proxyListenPort: 0", "proxyListenPort", "out of range"),
        ("protocolDetectionTimeout: 1.5ms", "protocolDetectionTimeout", "ms precision"),
        ("trustDomain: ''", "trustDomain", "empty domain name not allowed"),
        ("trustDomain: Bad_Domain.local", "trustDomain", "trust domain name 'Bad_Domain.local' invalid"),
        ("trustDomainAliases: [a.local, 'b c']", "trustDomainAliases[1]", "invalid"),
        ("localityLbSetting: {failover: [{from: a, to: a}]}", "localityLbSetting.failover[0]", "different regions"),
        (
            "localityLbSetting: {distribute: [{from: 'a/*', to: {'a/*': 60}}]}",
            "localityLbSetting.distribute[0].to",
            "weights must total 100",
        ),
        ("meshMTLS: {ecdhCurves: [P-256]}", "meshMTLS.ecdhCurves", "does not support ECDH curves"),
    ],
)
def test_validate_mesh_config(mesh: str, field: str, reason: str) -> None:
    got = mesh_rejection(mesh + "\n")
    assert got.startswith(f"{field}: ") and reason in got, got


def test_validate_mesh_config_accepts_istiod_defaults_and_valid_values() -> None:
    assert mesh_rejection("") == ""
    text = (
        "connectTimeout: 1h\nproxyListenPort: 15001\nprotocolDetectionTimeout: 0s\ntrustDomain: istio.io.\n"
        "trustDomainAliases: [old.local]\nlocalityLbSetting: {enabled: true, failover: [{from: a, to: b}]}\n"
        "tlsDefaults: {ecdhCurves: [P-256]}\n"
    )
    assert mesh_rejection(text) == ""


def test_validate_mesh_config_from_the_istio_configmap_keeps_the_last_good_mesh() -> None:
    configmap = """apiVersion: v1
kind: ConfigMap
metadata: {name: istio, namespace: istio-system}
data:
  mesh: |
    connectTimeout: 0s
"""
    [rejection] = load_documents(configmap, "cm.yaml").rejected
    assert rejection.key is not None and rejection.key.kind == "MeshConfig"  # keyed as the mesh config it held
    assert str(rejection.error) == (
        "cm.yaml (ConfigMap istio-system/istio): MeshConfig mesh: field connectTimeout: "
        "duration must be greater than 1ms"
    )


def doc(kind: str, body: str, api: str = "v1") -> str:
    return f"apiVersion: {api}\nkind: {kind}\nmetadata: {{name: x, namespace: ns}}\n{textwrap.dedent(body).strip()}\n"


def rejection(text: str) -> str:
    result = load_documents(text, "f.yaml")
    if not result.rejected:
        return ""
    [r] = result.rejected
    return str(r.error)


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        ("address: 10.0.0.1\nlabels: {'bad key!': a}", "labels", "invalid label key 'bad key!'"),
        ("address: 10.0.0.1\nlabels: {app: 'a b'}", "labels.app", "invalid label value 'a b'"),
        ("address: unix:///sock\nlabels: {'-x': a}", "labels", "invalid label key '-x'"),
    ],
)
def test_validate_workload_entry_labels(spec: str, field: str, reason: str) -> None:
    got = rejection(doc("WorkloadEntry", "spec:\n" + textwrap.indent(spec, "  "), "networking.istio.io/v1"))
    assert got.startswith(f"f.yaml: WorkloadEntry ns/x: field {field}: ") and reason in got, got


def test_validate_service_entry_endpoint_labels() -> None:
    spec = """
    spec:
      hosts: [a.example.com]
      ports: [{number: 80, name: http}]
      resolution: STATIC
      endpoints: [{address: 10.0.0.1}, {address: 10.0.0.2, labels: {'a/b/c': x}}]
    """
    got = rejection(doc("ServiceEntry", spec, "networking.istio.io/v1"))
    assert "field endpoints[1].labels: invalid label key 'a/b/c'" in got, got


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        ("clusterIP: banana", "spec.clusterIP", "'banana' is not a valid IP address"),
        ("clusterIP: 10.0.0.256", "spec.clusterIP", "not a valid IP address"),
        ("clusterIPs: [10.0.0.1, nope]", "spec.clusterIPs[1]", "'nope' is not a valid IP address"),
        ("clusterIPs: [None, 10.0.0.1]", "spec.clusterIPs", "'None' must be the only value"),
        ("clusterIPs: [10.0.0.1, '']", "spec.clusterIPs[1]", "'' is not a valid IP address"),
    ],
)
def test_service_cluster_ip_as_the_api_server(spec: str, field: str, reason: str) -> None:
    text = doc("Service", f"spec:\n  {spec}\n  ports: [{{port: 80}}]")
    got = rejection(text)
    assert got.startswith(f"f.yaml: Service ns/x: field {field}: ") and reason in got, got


@pytest.mark.parametrize("cluster_ip", ["None", "''", "10.0.0.1", "fd00::1"])
def test_service_cluster_ip_accepts_ips_none_and_empty(cluster_ip: str) -> None:
    assert rejection(doc("Service", f"spec:\n  clusterIP: {cluster_ip}\n  ports: [{{port: 80}}]")) == ""


@pytest.mark.parametrize(
    ("status", "field", "reason"),
    [
        ("{podIP: banana}", "status.podIP", "'banana' is not a valid IP address"),
        ("{podIP: 10.0.0.1, podIPs: [{ip: 10.0.0.1}, {ip: 'fd00::g'}]}", "status.podIPs[1].ip", "not a valid IP"),
    ],
)
def test_pod_ips_as_the_api_server(status: str, field: str, reason: str) -> None:
    got = rejection(doc("Pod", f"spec: {{containers: [{{name: a}}]}}\nstatus: {status}"))
    assert got.startswith(f"f.yaml: Pod ns/x: field {field}: ") and reason in got, got


@pytest.mark.parametrize(
    ("address_type", "address", "reason"),
    [
        ("IPv4", "banana", "'banana' is not a valid IP address"),
        ("IPv4", "fd00::1", "'fd00::1' is not a valid IPv4 address"),
        ("IPv6", "10.0.0.1", "'10.0.0.1' is not a valid IPv6 address"),
        ("FQDN", "10_0.example.com", "not a fully qualified domain name"),
        ("FQDN", "localhost", "not a fully qualified domain name"),
        ("FQDN", "DB.Example.com", "not a fully qualified domain name"),
    ],
)
def test_endpoint_slice_addresses_as_the_api_server(address_type: str, address: str, reason: str) -> None:
    body = f"""
    addressType: {address_type}
    endpoints: [{{addresses: [10.0.0.9], conditions: {{ready: true}}}}, {{addresses: ['{address}']}}]
    """
    if address_type != "IPv4":
        body = body.replace("10.0.0.9", "fd00::9" if address_type == "IPv6" else "a.example.com")
    text = doc("EndpointSlice", body, "discovery.k8s.io/v1").replace(
        "namespace: ns}", "namespace: ns, labels: {kubernetes.io/service-name: s}}"
    )
    got = rejection(text)
    assert got.startswith("f.yaml: EndpointSlice ns/x: field endpoints[1].addresses[0]: ") and reason in got, got


@pytest.mark.parametrize(
    ("address_type", "address"), [("IPv4", "10.0.0.1"), ("IPv6", "fd00::1"), ("FQDN", "db.example.com.")]
)
def test_endpoint_slice_addresses_of_their_type_are_taken(address_type: str, address: str) -> None:
    body = f"addressType: {address_type}\nendpoints: [{{addresses: ['{address}']}}]"
    text = doc("EndpointSlice", body, "discovery.k8s.io/v1").replace(
        "namespace: ns}", "namespace: ns, labels: {kubernetes.io/service-name: s}}"
    )
    assert rejection(text) == ""
