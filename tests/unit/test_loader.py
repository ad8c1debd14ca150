"""Loading YAML documents into validated config objects (app/config/loader.py, schema.py, validation/).

Validation expectations are checked against istio/istio pkg/config/validation/validation.go
(ValidateDestinationRule, ValidateVirtualService, ValidateServiceEntry, ValidateGateway,
validateExportTo) and pkg/config/validation/agent (ValidateWildcardDomain); the mesh ConfigMap
against pkg/config/mesh (DefaultMeshConfig, ApplyMeshConfig).
"""

from __future__ import annotations

import pathlib
import textwrap

import pytest
import yaml
from google.protobuf import duration_pb2
from google.protobuf.message import Message

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.config import loader
from app.config.loader import KubeYamlLoader, LoadResult, load_documents
from app.config.objects import ConfigKey, Kind
from app.config.schema import build_message, merge_message, parse_message
from app.config.validation.spec import istio_warnings
from app.errors import FieldError
from app.sources.files import next_file_state
from bench.parse_config import make_yaml


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


def test_istio_kinds_istiod_applies_and_pilotfish_does_not_are_named_not_skipped_silently() -> None:
    result = load(
        doc("EnvoyFilter", "configPatches: []", name="lua", api="networking.istio.io/v1alpha3"),
        doc("WasmPlugin", "url: oci://x", name="auth", api="extensions.istio.io/v1alpha1"),
        doc("Deployment", "replicas: 1", name="app", api="apps/v1"),
        doc("DestinationRule", "host: a", name="first"),
    )
    assert [o.meta.name for o in result.objects] == ["lua", "first"] and result.rejected == []
    assert result.ignored == 2
    assert result.unsupported == [
        "cfg.yaml#1: WasmPlugin 'ns/auth': not applied (istiod adds its Wasm filter; pilotfish applies no WasmPlugin)",
    ]


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
        "expected a list, got a string",
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
    assert only_rejection(load(se))[4:] == ("ports[1].name", "service entry port name 'http' already defined")
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


@pytest.mark.parametrize("api", ["networking.istio.io/v2", "networking.istio.io/v1alpha2"])
def test_other_api_versions_are_rejected(api: str) -> None:
    key, _, kind, name, field, reason = only_rejection(load(doc("DestinationRule", "host: a", api=api)))
    assert (key, kind, name, field) == (
        ConfigKey(Kind.DESTINATION_RULE, "ns", "obj"),
        "DestinationRule",
        "ns/obj",
        "apiVersion",
    )
    assert api in reason


@pytest.mark.parametrize(
    ("api", "kind"),
    [
        ("security.istio.io/v1", "DestinationRule"),
        ("v1", "DestinationRule"),
        ("gateway.networking.k8s.io/v1", "Gateway"),  # Gateway API's, not Istio's
        ("networking.istio.io/v1", "Service"),
        ("serving.knative.dev/v1", "Service"),
    ],
)
def test_a_kind_is_told_by_its_api_group_and_another_group_s_is_ignored(api: str, kind: str) -> None:
    # istiod's file source finds a schema by group, version and kind: a kind of the same name in
    # another group is not one it reads, and is skipped (before: "apiVersion not served for Gateway")
    result = load(doc(kind, "gatewayClassName: istio", api=api))
    assert (result.objects, result.rejected, result.ignored) == ([], [], 1)


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


def test_documents_are_named_by_their_index_in_a_multi_document_file() -> None:
    one = doc("DestinationRule", "host: a")
    assert [o.source for o in load_documents(one, "f.yaml").objects] == ["f.yaml"]
    assert [o.source for o in load_documents("---\n" + one, "f.yaml").objects] == ["f.yaml#1"]
    two = load_documents(one + "---\n" + doc("DestinationRule", "host: b", name="b"), "f.yaml")
    assert [o.source for o in two.objects] == ["f.yaml#0", "f.yaml#2"]


def test_invalid_yaml_after_good_documents_still_rejects_the_whole_file() -> None:
    result = load_documents(doc("DestinationRule", "host: a") * 3 + "---\nkind: [unclosed\n", "f.yaml")
    assert (result.parsed, result.objects, len(result.rejected)) == (False, [], 1)


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
    assert isinstance(mesh, MeshConfig)
    assert mesh.root_namespace == "my-root"
    assert list(mesh.default_service_export_to) == ["."]
    assert list(mesh.default_virtual_service_export_to) == [".", "istio-system"]
    assert list(mesh.default_destination_rule_export_to) == ["*"]
    assert mesh.outbound_traffic_policy.mode == MeshConfig.OutboundTrafficPolicy.REGISTRY_ONLY
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
    assert mesh.outbound_traffic_policy.mode == MeshConfig.OutboundTrafficPolicy.ALLOW_ANY
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


MESH_GOOD = (
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: istio, namespace: istio-system}\n"
    "data:\n  mesh: 'connectTimeout: 7s'\n"
)


@pytest.mark.parametrize(
    ("data", "field", "reason"),
    [
        ("data:\n  mesh: 'connectTimeout: [7s'\n", "data.mesh", "invalid YAML at line 2, column 1: did not find"),
        ("data: [mesh]\n", "data", "expected an object, got a list"),
        ("data:\n  mesh: {rootNamespace: x}\n", "data.mesh", "expected a string value, got an object"),
        ("data:\n  mesh: '[a, b]'\n", "", "mesh config must be an object, got a list"),
    ],
)
def test_a_rejected_mesh_configmap_keeps_the_last_good_mesh_config(data: str, field: str, reason: str) -> None:
    # istiod keeps the previous mesh config: the rejection is keyed as the MeshConfig the
    # ConfigMap held, so the file source keeps that in force
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: istio, namespace: istio-system}\n" + data
    result = load_documents(text, "mesh.yaml")
    (rejection,) = result.rejected
    assert rejection.key == ConfigKey(Kind.MESH_CONFIG, "", "mesh")
    assert (rejection.error.field, "\n" in str(rejection.error)) == (field, False)
    assert rejection.error.reason.startswith(reason), rejection.error
    good = next_file_state(None, load_documents(MESH_GOOD, "mesh.yaml"))
    after = next_file_state(good, result)
    [mesh] = after.objects.values()
    assert mesh.spec.connect_timeout == duration_pb2.Duration(seconds=7)


@pytest.mark.parametrize(
    ("metadata", "field", "reason"),
    [
        ("{name: Bad_Name, namespace: ns}", "metadata.name", "'Bad_Name' is not a valid name"),
        ("{name: ok, namespace: 'two words'}", "metadata.namespace", "'two words' is not a valid namespace name"),
        ('{name: ok, namespace: "a\\nb"}', "metadata.namespace", "'a\\nb' is not a valid namespace name"),
    ],
)
def test_names_and_namespaces_are_kubernetes_names(metadata: str, field: str, reason: str) -> None:
    text = f"apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {metadata}\nspec: {{host: a}}\n"
    (rejection,) = load_documents(text, "f.yaml").rejected
    assert rejection.key is None  # the identity is not readable: the file's objects are all kept
    assert (rejection.error.field, rejection.error.reason) == (field, reason + rejection.error.reason[len(reason) :])
    assert "\n" not in str(rejection.error)


def test_a_rejection_is_one_line_whatever_the_input_holds() -> None:
    spec = 'host: a\nsubsets: [{name: v1, labels: {"x\\ny\\u2028z": 1}}]'
    (rejection,) = load(doc("DestinationRule", spec)).rejected
    assert str(rejection.error) == (
        "cfg.yaml: DestinationRule ns/obj: field subsets[0].labels.x\\ny\\u2028z: expected a string, got 1"
    )


def test_a_bug_while_loading_one_document_is_a_rejection_not_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> None:
        raise KeyError("bug")

    monkeypatch.setattr(loader, "_load_document", broken)
    result = load(doc("DestinationRule", "host: a"))
    (rejection,) = result.rejected
    assert rejection.key is None
    assert "internal error reading this document (KeyError)" in str(rejection.error)


# --- the fast paths give the same results as the libraries they stand in for ----------------

YAML_CORNERS = """\
plain: [a, "80", '80', 80, -3, +5, 0x1F, 0o17, 017, 1_000, 1:30, 0b101, 685_230.15]
floats: [1.5, .5, 1e3, -.inf, 6.8523015e+5, 190:20:30.15]
bools: [true, True, TRUE, false, yes, No, on, OFF, y, n]
nulls: [~, null, Null, "", '~', "null"]
times: [2024-05-01T10:00:00Z, 2001-12-14 21:59:43.10 -5, 2002-12-14]
tagged: [!!str 80, !!int "5", !!float "1", !!bool "true", !!null ""]
base: &base {a: 1, b: [x, y]}
merged: {<<: *base, b: z, c: 2}
merged_list: {<<: [*base, {d: 4}], a: 0}
alias: *base
sets: !!set {a, b}
binary: !!binary aGVsbG8=
omap: !!omap [{a: 1}, {b: 2}]
keys: {1: int, 1.5: float, true: bool, ~: none, 2024-05-01: date, "k": str}
empty: {}
none:
? complex
: key
=: value-key
"""


def test_kube_yaml_loader_matches_pyyaml_safe_loading() -> None:
    ours = list(yaml.load_all(YAML_CORNERS + "---\n" + YAML_CORNERS + "--- 5\n---\n", Loader=KubeYamlLoader))
    theirs = list(yaml.load_all(YAML_CORNERS + "---\n" + YAML_CORNERS + "--- 5\n---\n", Loader=yaml.CSafeLoader))
    assert ours == theirs
    assert [type(v) for v in ours[0]["plain"]] == [type(v) for v in theirs[0]["plain"]]
    assert ours[0]["plain"][1:4] == ["80", "80", 80]
    assert ours[0]["merged"] == {"a": 1, "b": "z", "c": 2}
    assert ours[0]["alias"] is ours[0]["base"]  # an alias is the same object, as with SafeLoader


@pytest.mark.parametrize(
    "text", ["? [a, b]\n: unhashable\n", "x: !custom 1\n", "a: &x [*x]\nb: {? *x : 1}\n", "a: [1, 2\n"]
)
def test_kube_yaml_loader_fails_where_pyyaml_fails(text: str) -> None:
    with pytest.raises(yaml.YAMLError) as theirs:
        yaml.load(text, Loader=yaml.CSafeLoader)
    with pytest.raises(type(theirs.value)) as ours:
        yaml.load(text, Loader=KubeYamlLoader)
    assert str(ours.value) == str(theirs.value)


ISTIO_MESSAGES: dict[str, type[Message]] = {
    "DestinationRule": net.DestinationRule,
    "VirtualService": net.VirtualService,
    "ServiceEntry": net.ServiceEntry,
    "WorkloadEntry": net.WorkloadEntry,
    "Sidecar": net.Sidecar,
    "Gateway": net.Gateway,
}


def _istio_specs() -> list[tuple[str, dict[str, object]]]:
    """Every Istio object in the examples, the test data and the benchmark."""
    root = pathlib.Path(__file__).parents[2]
    texts = [p.read_text() for p in sorted([*root.glob("examples/**/*.yaml"), *root.glob("tests/data/**/*.yaml")])]
    specs = []
    for text in [*texts, make_yaml(8)]:
        for d in yaml.safe_load_all(text):
            if isinstance(d, dict) and str(d.get("apiVersion", "")).startswith("networking.istio.io"):
                specs.append((str(d["kind"]), d["spec"]))
    return specs


def _json_format_parse(spec: object, message_type: type[Message]) -> Message:
    msg = message_type()
    merge_message(spec, msg, strict=True)
    return msg


def test_fast_message_building_equals_json_format_on_real_config() -> None:
    specs = _istio_specs()
    assert {kind for kind, _ in specs} >= {"DestinationRule", "VirtualService", "ServiceEntry", "Gateway", "Sidecar"}
    built = 0
    for kind, spec in specs:
        message_type = ISTIO_MESSAGES[kind]
        fast = build_message(spec, message_type)
        try:
            expected = _json_format_parse(spec, message_type)
        except FieldError:  # test templates with placeholders
            assert fast is None
            continue
        assert fast == expected, (kind, spec)
        built += 1
    assert built >= 30


FAST_CASES = [
    # presence: an empty message, a wrapper holding its zero value, an empty list and map
    (net.DestinationRule, {"host": "a", "trafficPolicy": {"tls": {}, "loadBalancer": {"consistentHash": {}}}}),
    (net.DestinationRule, {"host": "a", "trafficPolicy": {"outlierDetection": {"consecutive5xxErrors": 0}}}),
    (net.DestinationRule, {"host": "a", "trafficPolicy": {"tls": {"insecureSkipVerify": False}}, "exportTo": []}),
    (net.DestinationRule, {"host": "a", "subsets": [{"name": "v1", "labels": {}}]}),
    # nulls leave fields unset; doubles take ints; int64 fields take ints
    (net.DestinationRule, {"host": "a", "trafficPolicy": None, "subsets": None}),
    (
        net.VirtualService,
        {"hosts": ["a"], "http": [{"route": [{"destination": {"host": "a"}}], "mirrorPercentage": {"value": 5}}]},
    ),
    (
        net.DestinationRule,
        {
            "host": "a",
            "trafficPolicy": {"loadBalancer": {"consistentHash": {"minimumRingSize": 2048, "httpHeaderName": "x"}}},
        },
    ),
    # maps of messages and of numbers; Go-style and proto3 durations
    (
        net.VirtualService,
        {"hosts": ["a"], "http": [{"match": [{"headers": {"x": {"regex": ".*"}}}], "timeout": "1.5s"}]},
    ),
    (net.WorkloadEntry, {"address": "1.2.3.4", "ports": {"http": 8080}, "weight": 3, "labels": {"app": "a"}}),
    (
        net.DestinationRule,
        {"host": "a", "trafficPolicy": {"outlierDetection": {"interval": "1h30m", "baseEjectionTime": "250ms"}}},
    ),
]


@pytest.mark.parametrize(("message_type", "spec"), FAST_CASES)
def test_fast_message_building_keeps_proto3_json_semantics(message_type: type[Message], spec: object) -> None:
    fast = build_message(spec, message_type)
    assert fast is not None
    assert fast == _json_format_parse(spec, message_type)


SLOW_CASES = [
    # values proto3 JSON accepts in other forms: json_format converts them
    (net.ServiceEntry, {"hosts": ["a.com"], "ports": [{"number": "80", "name": "http"}]}),
    (net.ServiceEntry, {"hosts": ["a.com"], "ports": [{"number": 80.0, "name": "http"}]}),
    (net.DestinationRule, {"host": "a", "trafficPolicy": {"loadBalancer": {"simple": 5}}}),
    (net.DestinationRule, {"host": "a", "trafficPolicy": {"retryBudget": {"percent": "12.5"}}}),
    (
        net.VirtualService,
        {"hosts": ["a"], "http": [{"route": [{"destination": {"host": "a"}}], "mirrorPercentage": {"value": "5"}}]},
    ),
]


@pytest.mark.parametrize(("message_type", "spec"), SLOW_CASES)
def test_other_json_forms_are_left_to_json_format(message_type: type[Message], spec: object) -> None:
    assert build_message(spec, message_type) is None
    assert parse_message(spec, message_type) == _json_format_parse(spec, message_type)


BAD_CASES = [
    # two members of one oneof, a null list item, a number for a string,
    # a duration as an object, an out-of-range number, an unknown enum label, an unpaired surrogate, an unknown field
    ({"host": "a", "trafficPolicy": {"loadBalancer": {"simple": "RANDOM", "consistentHash": {}}}}, "trafficPolicy"),
    ({"host": "a", "subsets": [None]}, "subsets"),
    ({"host": "a", "exportTo": [1]}, "exportTo"),
    (
        {"host": "a", "trafficPolicy": {"outlierDetection": {"interval": {"seconds": 5}}}},
        "trafficPolicy.outlierDetection",
    ),
    (
        {"host": "a", "trafficPolicy": {"connectionPool": {"tcp": {"maxConnections": 2**40}}}},
        "trafficPolicy.connectionPool",
    ),
    ({"host": "a", "trafficPolicy": {"loadBalancer": {"simple": "FASTEST"}}}, "trafficPolicy.loadBalancer.simple"),
    ({"host": "\ud800"}, "host"),
    ({"host": "a", "trafficPolicy": {"tls": {"sniHost": "x"}}}, "trafficPolicy.tls.sniHost"),
]


@pytest.mark.parametrize(("spec", "field_prefix"), BAD_CASES)
def test_invalid_values_are_left_to_json_format_for_the_error(spec: object, field_prefix: str) -> None:
    assert build_message(spec, net.DestinationRule) is None
    with pytest.raises(FieldError) as e:
        parse_message(spec, net.DestinationRule)
    assert e.value.field.startswith(field_prefix)


# --- bounded parsing: inputs that used to crash the server (RecursionError) or hang it ----------


def _rejected_as_invalid_yaml(text: str, reason: str) -> None:
    result = load_documents(text, "bad.yaml")
    assert result.objects == [] and not result.parsed
    [rejection] = result.rejected
    assert str(rejection.error).startswith("bad.yaml: invalid YAML at line ") and reason in str(rejection.error)


def test_deeply_nested_flow_yaml_is_refused_not_a_crash() -> None:
    _rejected_as_invalid_yaml("a: " + "[" * 5000 + "]" * 5000, "nested deeper than 100 levels")


def test_deeply_nested_block_yaml_is_refused_not_a_crash() -> None:
    # 1,500 levels of block indentation take 2.2 MiB, within what a document may hold
    block = "".join(f"{'  ' * i}k{i}:\n" for i in range(1500)) + "  " * 1500 + "v\n"
    _rejected_as_invalid_yaml(block, "nested deeper than 100 levels")


def test_a_billion_laughs_document_is_refused_before_it_expands() -> None:
    levels = ["a: &a [1,1,1,1,1,1,1,1,1]"]
    levels += [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    _rejected_as_invalid_yaml("\n".join(levels) + "\n", "expands to more than 1000000 values")


def test_ordinary_anchors_and_nesting_still_load() -> None:
    text = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: r, namespace: ns, labels: &l {app: x}, annotations: *l}
spec: {host: x, subsets: [{name: v1, labels: {version: v1}}]}
"""
    [obj] = load_documents(text, "ok.yaml").objects
    assert obj.meta.annotations == {"app": "x"}


@pytest.mark.parametrize(
    ("ingress", "field"),
    [
        ("[{port: {number: 8080, protocol: HTTP, targetPort: 9090}}]", "ingress[0].port.targetPort"),
        ("[{port: {number: 8080}}, {port: {number: 8080}}]", "ingress[1].port.number"),
        ("[{port: {number: 8080, protocol: BOGUS}}]", "ingress[0].port.protocol"),
        ("[{port: {number: 8080}, bind: not-an-ip}]", "ingress[0].bind"),
        ("[{port: {number: 8080}, defaultEndpoint: '10.0.0.1:80'}]", "ingress[0].defaultEndpoint"),
        ("[{port: {number: 8080}, defaultEndpoint: '127.0.0.1:http'}]", "ingress[0].defaultEndpoint"),
        ("[{port: {number: 8080}, defaultEndpoint: '127.0.0.1:70000'}]", "ingress[0].defaultEndpoint"),
        ("[{port: {number: 8443, protocol: HTTPS}, tls: {mode: ISTIO_MUTUAL}}]", "ingress[0].tls.mode"),
        (
            "[{port: {number: 8443, protocol: HTTPS}, tls: {mode: SIMPLE, credentialName: c}}]",
            "ingress[0].tls.credentialName",
        ),
        ("[{port: {number: 8080, protocol: HTTP}, tls: {mode: SIMPLE}}]", "ingress[0].tls"),
    ],
)
def test_sidecar_ingress_validation_as_istiod_validate_sidecar(ingress: str, field: str) -> None:
    assert rejected_field(doc("Sidecar", f"ingress: {ingress}")) == field


def test_sidecar_ingress_default_endpoints_istiod_accepts_load() -> None:
    ingress = """ingress:
- {port: {number: 8080}, defaultEndpoint: '127.0.0.1:80'}
- {port: {number: 8081}, defaultEndpoint: '0.0.0.0:80'}
- {port: {number: 8082}, defaultEndpoint: '[::1]:80'}
- {port: {number: 8083}, defaultEndpoint: 'unix:///var/run/app.sock', bind: 10.0.0.1}
"""
    assert len(load(doc("Sidecar", ingress)).objects) == 1


def test_a_dynamic_dns_service_entry_istiod_accepts_loads_with_a_warning() -> None:
    # istiod ValidateServiceEntry: wildcard hosts, no addresses or endpoints, HTTP/TLS/GRPC/HTTP2 ports
    spec = """hosts: ["*.wikipedia.org"]
ports: [{number: 80, name: http, protocol: HTTP}, {number: 443, name: tls, protocol: TLS}]
resolution: DYNAMIC_DNS
location: MESH_EXTERNAL
"""
    [obj] = load(doc("ServiceEntry", spec)).objects
    [warning] = istio_warnings(obj.spec)
    assert warning.startswith("resolution DYNAMIC_DNS: accepted")
