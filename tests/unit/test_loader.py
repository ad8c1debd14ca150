"""Loading YAML documents into validated config objects (app/config/loader.py, schema.py, istio.py).

Validation expectations are checked against istio/istio pkg/config/validation/validation.go
(ValidateDestinationRule, ValidateVirtualService, ValidateServiceEntry, ValidateGateway,
validateExportTo) and pkg/config/validation/agent (ValidateWildcardDomain); the mesh ConfigMap
against pkg/config/mesh (DefaultMeshConfig, ApplyMeshConfig).
"""

from __future__ import annotations

import textwrap

import pytest
from google.protobuf import duration_pb2

from app.api import mesh_pb2
from app.api import networking_pb2 as net
from app.config.loader import LoadResult, load_documents
from app.config.model import ConfigKey, Kind


def doc(kind: str, spec: str, *, name: str = "obj", ns: str = "ns", api: str = "networking.istio.io/v1") -> str:
    body = textwrap.indent(textwrap.dedent(spec).strip(), "  ")
    return f"---\napiVersion: {api}\nkind: {kind}\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{body}\n"


def load(*docs: str) -> LoadResult:
    return load_documents("".join(docs), "cfg.yaml")


def only_rejection(result: LoadResult) -> tuple[ConfigKey | None, str, str, str, str, str]:
    """(key, source, kind, name, field, reason) of the single rejection."""
    assert result.objects == []
    (rejection,) = result.rejected
    e = rejection.error
    return rejection.key, e.source, e.kind, e.name, e.field, e.reason


def rejected_field(*docs: str) -> str:
    result = load(*docs)
    assert len(result.rejected) == 1, f"want one rejection, loaded {[o.meta.name for o in result.objects]}"
    return result.rejected[0].error.field


# --- a good object -----------------------------------------------------------------------


def test_valid_destination_rule_loads_with_metadata() -> None:
    text = textwrap.dedent(
        """\
        apiVersion: networking.istio.io/v1beta1
        kind: DestinationRule
        metadata:
          name: reviews
          namespace: bookinfo
          creationTimestamp: 2024-05-01T10:00:00Z
          labels: {team: a}
          resourceVersion: "42"
          generation: 3
        spec:
          host: reviews
          trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}
          subsets: [{name: v1, labels: {version: v1}}]
        """
    )
    result = load_documents(text, "bookinfo/dr.yaml")
    assert result.rejected == [] and result.parsed and result.ignored == 0
    (obj,) = result.objects
    assert obj.key == ConfigKey(Kind.DESTINATION_RULE, "bookinfo", "reviews")
    assert (obj.source, obj.api_version) == ("bookinfo/dr.yaml", "networking.istio.io/v1beta1")
    assert obj.meta.creation_timestamp == "2024-05-01T10:00:00Z"  # unquoted YAML timestamp kept as RFC 3339
    assert (dict(obj.meta.labels), obj.meta.resource_version, obj.meta.generation) == ({"team": "a"}, "42", 3)
    assert isinstance(obj.spec, net.DestinationRule)
    assert obj.spec.host == "reviews"  # short names are resolved later, not by the loader
    assert obj.spec.traffic_policy.load_balancer.simple == net.LoadBalancerSettings.LEAST_REQUEST
    assert dict(obj.spec.subsets[0].labels) == {"version": "v1"}


def test_namespace_defaults_to_default() -> None:
    text = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: r}\nspec: {host: a}\n"
    (obj,) = load_documents(text, "f.yaml").objects
    assert obj.meta.namespace == "default"


# --- rejections name file, kind, object, field and reason -----------------------------------


def test_rejection_names_file_kind_object_field_and_reason() -> None:
    bad = doc("DestinationRule", "host: a\ntrafficPolicy: {loadBalancer: {simple: FASTEST}}", name="r", ns="shop")
    key, source, kind, name, field, reason = only_rejection(load(bad))
    assert key == ConfigKey(Kind.DESTINATION_RULE, "shop", "r")
    assert (source, kind, name, field) == ("cfg.yaml", "DestinationRule", "shop/r", "trafficPolicy.loadBalancer.simple")
    assert "FASTEST" in reason
    message = str(load(bad).rejected[0].error)
    for part in ("cfg.yaml", "DestinationRule", "shop/r", "trafficPolicy.loadBalancer.simple", "FASTEST"):
        assert part in message


def test_other_documents_of_the_file_still_load() -> None:
    result = load(
        doc("DestinationRule", "host: a", name="first"),
        doc("DestinationRule", "host: b\nbogus: 1", name="second"),
        doc("VirtualService", "hosts: [c]\nhttp: [{route: [{destination: {host: c}}]}]", name="third"),
    )
    assert [o.meta.name for o in result.objects] == ["first", "third"]
    (rejection,) = result.rejected
    assert rejection.key == ConfigKey(Kind.DESTINATION_RULE, "ns", "second")
    assert (rejection.error.source, rejection.error.field, rejection.error.reason) == (
        "cfg.yaml#1",
        "bogus",
        "unknown field",
    )


def test_unknown_field_is_reported_with_its_full_path() -> None:
    bad = doc(
        "DestinationRule",
        "host: a\nsubsets:\n- name: v1\n- name: v2\n  trafficPolicy: {tls: {mode: SIMPLE, sniHost: x}}",
    )
    assert only_rejection(load(bad))[4:] == ("subsets[1].trafficPolicy.tls.sniHost", "unknown field")


def test_snake_case_field_names_are_rejected() -> None:
    bad = doc("DestinationRule", "host: a\ntraffic_policy: {loadBalancer: {simple: RANDOM}}")
    assert only_rejection(load(bad))[4:] == ("traffic_policy", "unknown field")
    nested = doc("DestinationRule", "host: a\ntrafficPolicy: {load_balancer: {simple: RANDOM}}")
    assert only_rejection(load(nested))[4:] == ("trafficPolicy.load_balancer", "unknown field")


def test_wrong_types_are_rejected() -> None:
    assert only_rejection(load(doc("DestinationRule", "host: a\nsubsets: v1")))[4:] == (
        "subsets",
        "expected a list, got str",
    )
    assert only_rejection(load(doc("DestinationRule", "host: a\ntrafficPolicy: [RANDOM]")))[4:] == (
        "trafficPolicy",
        "expected an object, got a list",
    )
    assert rejected_field(
        doc("DestinationRule", "host: a\ntrafficPolicy: {connectionPool: {tcp: {maxConnections: many}}}")
    ) == ("trafficPolicy.connectionPool.tcp.maxConnections")


def test_wrong_type_inside_a_list_is_reported_at_its_index() -> None:
    vs = doc(
        "VirtualService",
        "hosts: [a]\nhttp: [{route: [{destination: {host: a}, weight: 10}, {destination: {host: b}, weight: x}]}]",
    )
    assert rejected_field(vs) == "http[0].route[1].weight"
    se = doc("ServiceEntry", "hosts: [a.example.com]\nports: [{number: eighty, name: http}]")
    assert rejected_field(se) == "ports[0].number"
    dr = doc("DestinationRule", "host: a\nsubsets: [{name: v1}, {name: v2, labels: {version: 2}}]")
    assert rejected_field(dr) == "subsets[1].labels.version"


def test_enums_are_read_by_name() -> None:
    (dr,) = load(doc("DestinationRule", "host: a\ntrafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}")).objects
    assert dr.spec.traffic_policy.load_balancer.simple == net.LoadBalancerSettings.LEAST_REQUEST
    bad = doc("DestinationRule", "host: a\ntrafficPolicy: {tls: {mode: SIMPLEX}}")
    field, reason = only_rejection(load(bad))[4:]
    assert field == "trafficPolicy.tls.mode"
    assert "SIMPLEX" in reason


@pytest.mark.parametrize(
    ("written", "seconds", "nanos"),
    [("5s", 5, 0), ("5m", 300, 0), ("1h30m", 5400, 0), ("250ms", 0, 250_000_000), ("1.5s", 1, 500_000_000)],
)
def test_durations_accept_go_style_units(written: str, seconds: int, nanos: int) -> None:
    (dr,) = load(
        doc("DestinationRule", f"host: a\ntrafficPolicy: {{outlierDetection: {{interval: {written}}}}}")
    ).objects
    assert dr.spec.traffic_policy.outlier_detection.interval == duration_pb2.Duration(seconds=seconds, nanos=nanos)


def test_bad_duration_names_its_field() -> None:
    bad = doc("DestinationRule", "host: a\ntrafficPolicy: {outlierDetection: {interval: 5x}}")
    assert rejected_field(bad) == "trafficPolicy.outlierDetection.interval"


@pytest.mark.parametrize("host", ["re*views", "a..b", "-a.example.com", "*.*.example.com", "foo.123"])
def test_bad_destination_rule_hosts_are_rejected(host: str) -> None:
    assert rejected_field(doc("DestinationRule", f'host: "{host}"')) == "host"


@pytest.mark.parametrize(
    "host", ["*", "*.example.com", "reviews", "reviews.bookinfo.svc.cluster.local", "*-x.example.com"]
)
def test_good_destination_rule_hosts_load(host: str) -> None:
    assert len(load(doc("DestinationRule", f'host: "{host}"')).objects) == 1


def test_duplicate_port_names_are_rejected() -> None:
    se = doc(
        "ServiceEntry",
        "hosts: [a.example.com]\nports: [{number: 80, name: http}, {number: 8080, name: http}]",
    )
    assert only_rejection(load(se))[4:] == ("ports[1].name", "duplicate port name 'http'")
    svc = (
        "---\napiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: ns}\n"
        "spec: {ports: [{name: http, port: 80}, {name: http, port: 81}]}\n"
    )
    assert only_rejection(load(svc))[4:] == ("spec.ports[1].name", "duplicate port name 'http'")


def test_ip_address_hosts_are_allowed_in_a_virtual_service() -> None:
    vs = doc("VirtualService", 'hosts: ["10.0.0.1", "2001:db8::1"]\nhttp: [{route: [{destination: {host: a}}]}]')
    assert len(load(vs).objects) == 1


def test_overlapping_virtual_service_hosts_are_rejected() -> None:
    vs = doc("VirtualService", 'hosts: ["*.example.com", api.example.com]\nhttp: [{route: [{destination: {host: a}}]}]')
    assert rejected_field(vs) == "hosts[1]"


def test_duplicate_gateway_port_names_on_the_same_number() -> None:
    gw = doc(
        "Gateway",
        """
        servers:
        - port: {number: 443, name: https, protocol: HTTPS}
          hosts: [a.example.com]
          tls: {mode: SIMPLE, credentialName: a}
        - port: {number: 443, name: https, protocol: HTTPS}
          hosts: [b.example.com]
          tls: {mode: SIMPLE, credentialName: b}
        """,
    )
    assert rejected_field(gw) == "servers[1].port.name"


def test_duplicate_subset_names_in_one_rule_are_rejected() -> None:
    dr = doc("DestinationRule", "host: a\nsubsets: [{name: v1, labels: {v: a}}, {name: v1, labels: {v: b}}]")
    assert rejected_field(dr) == "subsets[1].name"


def test_dns_round_robin_allows_one_endpoint() -> None:
    se = doc(
        "ServiceEntry",
        "hosts: [a.example.com]\nresolution: DNS_ROUND_ROBIN\nports: [{number: 80, name: http}]\n"
        "endpoints: [{address: a1.example.com}, {address: a2.example.com}]",
    )
    assert rejected_field(se) == "endpoints"


def test_export_to_none_only_for_service_entries() -> None:
    vs = doc("VirtualService", 'hosts: [a]\nexportTo: ["~"]\nhttp: [{route: [{destination: {host: a}}]}]')
    assert load(vs).objects == []
    assert load(doc("DestinationRule", 'host: a\nexportTo: ["~"]')).objects == []


def test_export_to_dot_and_own_namespace_is_a_duplicate() -> None:
    assert load(doc("DestinationRule", 'host: a\nexportTo: [".", ns]')).objects == []


def test_workload_selector_rule_cannot_be_exported() -> None:
    spec = "host: a\nworkloadSelector: {matchLabels: {app: x}}\nexportTo: [other]"
    assert load(doc("DestinationRule", spec)).objects == []


# --- API versions, kinds, identity --------------------------------------------------------


@pytest.mark.parametrize(
    "api", ["networking.istio.io/v1", "networking.istio.io/v1beta1", "networking.istio.io/v1alpha3"]
)
def test_served_api_versions(api: str) -> None:
    (obj,) = load(doc("DestinationRule", "host: a", api=api)).objects
    assert obj.api_version == api


@pytest.mark.parametrize(
    "api", ["networking.istio.io/v2", "networking.istio.io/v1alpha2", "security.istio.io/v1", "v1"]
)
def test_other_api_versions_are_rejected(api: str) -> None:
    key, _, kind, name, field, reason = only_rejection(load(doc("DestinationRule", "host: a", api=api)))
    assert (key, kind, name, field) == (
        ConfigKey(Kind.DESTINATION_RULE, "ns", "obj"),
        "DestinationRule",
        "ns/obj",
        "apiVersion",
    )
    assert api in reason


def test_unknown_kinds_are_ignored() -> None:
    result = load(doc("Deployment", "replicas: 1", api="apps/v1"), doc("DestinationRule", "host: a"))
    assert [o.kind for o in result.objects] == [Kind.DESTINATION_RULE]
    assert (result.rejected, result.ignored) == ([], 1)


def test_missing_name_is_rejected_without_a_key() -> None:
    result = load_documents(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {}\nspec: {host: a}\n", "f.yaml"
    )
    (rejection,) = result.rejected
    assert (rejection.key, rejection.error.kind, rejection.error.field) == (None, "DestinationRule", "metadata.name")


def test_missing_spec_is_rejected() -> None:
    text = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: r, namespace: ns}\n"
    assert only_rejection(load_documents(text, "f.yaml"))[4:] == ("spec", "is required")


def test_invalid_yaml_rejects_the_whole_file() -> None:
    result = load_documents("apiVersion: v1\nkind: [unclosed\n", "broken.yaml")
    assert (result.parsed, result.objects) == (False, [])
    (rejection,) = result.rejected
    assert rejection.key is None
    assert rejection.error.source == "broken.yaml"
    assert rejection.error.reason.startswith("invalid YAML")


# --- the mesh ConfigMap ---------------------------------------------------------------------


MESH_CM = """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: {name}, namespace: {ns}}}
data:
  mesh: |-
    rootNamespace: my-root
    defaultServiceExportTo: ["."]
    defaultVirtualServiceExportTo: [".", "istio-system"]
    defaultDestinationRuleExportTo: ["*"]
    outboundTrafficPolicy: {{mode: REGISTRY_ONLY}}
    connectTimeout: 5s
    enableAutoMtls: false
    accessLogFile: /dev/stdout
"""


def test_istio_configmap_in_istio_system_yields_mesh_config() -> None:
    result = load_documents(MESH_CM.format(name="istio", ns="istio-system"), "mesh.yaml")
    assert (result.rejected, result.ignored) == ([], 0)
    (obj,) = result.objects
    assert obj.key == ConfigKey(Kind.MESH_CONFIG, "", "mesh")
    assert "istio-system/istio" in obj.source
    mesh = obj.spec
    assert isinstance(mesh, mesh_pb2.MeshConfig)
    assert mesh.root_namespace == "my-root"
    assert list(mesh.default_service_export_to) == ["."]
    assert list(mesh.default_virtual_service_export_to) == [".", "istio-system"]
    assert list(mesh.default_destination_rule_export_to) == ["*"]
    assert mesh.outbound_traffic_policy.mode == mesh_pb2.MeshConfig.OutboundTrafficPolicy.REGISTRY_ONLY
    assert mesh.connect_timeout == duration_pb2.Duration(seconds=5)
    assert mesh.enable_auto_mtls.value is False


def test_mesh_config_defaults_fill_unset_fields() -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: istio, namespace: istio-system}\n"
        "data:\n  mesh: 'accessLogFile: /dev/stdout'\n"
    )
    (obj,) = load_documents(text, "mesh.yaml").objects
    mesh = obj.spec
    assert mesh.root_namespace == "istio-system"
    assert mesh.connect_timeout == duration_pb2.Duration(seconds=10)
    assert mesh.enable_auto_mtls.value is True
    assert mesh.outbound_traffic_policy.mode == mesh_pb2.MeshConfig.OutboundTrafficPolicy.ALLOW_ANY
    assert list(mesh.default_service_export_to) == []


@pytest.mark.parametrize(("name", "ns"), [("istio", "other"), ("istio-sidecar-injector", "istio-system")])
def test_other_configmaps_are_ignored(name: str, ns: str) -> None:
    result = load_documents(MESH_CM.format(name=name, ns=ns), "cm.yaml")
    assert (result.objects, result.rejected, result.ignored) == ([], [], 1)


def test_mesh_configmap_in_a_custom_system_namespace() -> None:
    result = load_documents(MESH_CM.format(name="istio", ns="mesh-system"), "cm.yaml", system_namespace="mesh-system")
    assert [o.kind for o in result.objects] == [Kind.MESH_CONFIG]


def test_bad_mesh_config_is_rejected_with_its_field() -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: istio, namespace: istio-system}\n"
        "data:\n  mesh: 'outboundTrafficPolicy: {mode: SOMETIMES}'\n"
    )
    result = load_documents(text, "mesh.yaml")
    assert result.objects == []
    (rejection,) = result.rejected
    assert rejection.key == ConfigKey(Kind.MESH_CONFIG, "", "mesh")
    assert rejection.error.field == "outboundTrafficPolicy.mode"
