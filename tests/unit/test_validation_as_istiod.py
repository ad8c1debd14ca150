"""Validation as Istio's (issue 24, item 14), beyond Istio's own fixtures
(test_istio_validation_fixtures.py): where each istiod reader refuses and ignores, and the checks
the fixtures showed missing, each against the istiod code it follows (istio.io/istio
pkg/config/validation/validation.go, pkg/webhooks/validation/server/server.go,
pilot/pkg/config/kube/crd/conversion.go, istioctl/pkg/validate/validate.go).

Three readers, three rules for what Istio does not define, as Istio's own:
* the file source (``serve --config-dir``) reads as istiod's file source (crd.ParseInputs: json
  decoding ignores an unknown top-level key, jsonpb with AllowUnknownFields an unknown spec
  field): both ignored, the field with a warning in the log;
* ``pilotfish validate`` as ``istioctl validate`` (ApplyJSONStrict, checkFields): both refused;
* the webhook as istiod's (an unknown top-level key refused, after the object is found valid);
  an unknown spec field is refused too, which the API server does before any webhook sees it.
"""

from __future__ import annotations

import json
import logging
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import main
from app.config.loader import load_documents, load_object
from app.config.objects import ConfigKey, EventType, Kind
from app.sources.files import FileSource
from app.webhook.admission import review, review_body

NET = "networking.istio.io/v1"
SEC = "security.istio.io/v1"


def doc(kind: str, spec: str, *, api: str = NET, name: str = "x", extra: str = "") -> str:
    body = textwrap.indent(textwrap.dedent(spec).strip(), "  ")
    return f"apiVersion: {api}\nkind: {kind}\nmetadata: {{name: {name}, namespace: shop}}\n{extra}spec:\n{body}\n"


def refusal(kind: str, spec: str, api: str = NET) -> str:
    """The one rejection of a document (``field: reason``), or "" when it loads."""
    result = load_documents(doc(kind, spec, api=api), "f.yaml", strict=False)
    assert len(result.rejected) + len(result.objects) == 1, result
    return f"{result.rejected[0].error.field}: {result.rejected[0].error.reason}" if result.rejected else ""


def admit(obj: dict[str, Any]) -> dict[str, Any]:
    request = {"uid": "u", "operation": "CREATE", "namespace": "shop", "object": obj}
    return review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})["response"]


# --- a kind is its API group and its kind --------------------------------------------------

GATEWAY_API = """apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: shop}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 80, protocol: HTTP}]
"""


def test_a_gateway_api_gateway_is_not_istio_s_and_is_skipped_not_refused() -> None:
    # was: "apiVersion 'gateway.networking.k8s.io/v1' is not served for Gateway"
    result = load_documents(GATEWAY_API, "gw.yaml", strict=False)
    assert (result.objects, result.rejected, result.ignored) == ([], [], 1)
    assert admit(yaml.safe_load(GATEWAY_API)) == {"uid": "u", "allowed": True}


def test_istio_s_gateway_is_still_read_and_an_unserved_version_of_it_refused() -> None:
    gateway = doc("Gateway", "servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}]")
    [obj] = load_documents(gateway, "gw.yaml").objects
    assert obj.kind is Kind.GATEWAY
    [rejection] = load_documents(gateway.replace(NET, "networking.istio.io/v2"), "gw.yaml").rejected
    assert rejection.error.field == "apiVersion" and "is not served for Gateway" in rejection.error.reason


# --- a key given twice ------------------------------------------------------------------------


def test_a_mapping_naming_a_key_twice_is_refused_naming_the_key() -> None:
    text = doc("DestinationRule", "host: a.example\ntrafficPolicy: {tls: {mode: SIMPLE}}\nhost: b.example")
    result = load_documents(text, "dup.yaml", strict=False)
    assert (result.parsed, result.objects) == (False, [])
    [rejection] = result.rejected
    assert rejection.error.reason.startswith("invalid YAML at line 7, column 3: duplicate key 'host'"), rejection


def test_the_line_of_a_yaml_error_is_the_file_s_in_a_later_document() -> None:
    first = doc("DestinationRule", "host: a.example", name="a")
    text = first + "---\n" + doc("DestinationRule", "host: b.example\nhost: c.example", name="b")
    [rejection] = load_documents(text, "dup.yaml").rejected
    assert "at line 12, column 3: duplicate key 'host'" in rejection.error.reason, rejection


def test_keys_python_takes_as_equal_but_yaml_does_not_are_no_duplicates() -> None:
    # 1 and true are equal in Python, distinct keys in YAML (and in Go)
    assert load_documents("a: {1: x, true: y}\n", "k.yaml").parsed


def test_the_file_source_keeps_what_a_file_held_when_a_key_is_given_twice(tmp_path: Path) -> None:
    (tmp_path / "dr.yaml").write_text(doc("DestinationRule", "host: a.example"))
    source = FileSource(tmp_path)
    [added] = source.load()
    (tmp_path / "dr.yaml").write_text(doc("DestinationRule", "host: a.example\nhost: b.example"))
    assert source.load() == []
    [error] = source.rejections()
    assert "duplicate key 'host'" in str(error) and source.objects() == [added.obj]


def test_the_webhook_refuses_a_json_object_naming_a_key_twice() -> None:
    body = (
        '{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u-7", '
        '"operation": "CREATE", "object": {"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule", '
        '"metadata": {"name": "x", "namespace": "shop"}, "spec": {"host": "a", "host": "b"}}}}'
    )
    answer = review_body(body.encode())["response"]
    assert answer["uid"] == "u-7" and answer["allowed"] is False
    assert answer["status"]["message"] == 'could not decode body: duplicate key "host" in a JSON object'


# --- what Istio does not define: three readers, three rules ---------------------------------

UNKNOWN_SPEC = doc("DestinationRule", "host: a.example\ntrafficPolicy: {tls: {mode: SIMPLE}, websocketUpgrade: true}")
UNKNOWN_TOP = doc("DestinationRule", "host: a.example", extra="extra: {a: 1}\n")


def test_the_file_source_ignores_an_unknown_spec_field_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "dr.yaml").write_text(UNKNOWN_SPEC)
    with caplog.at_level(logging.WARNING, logger="app.sources.files"):
        [event] = FileSource(tmp_path).load()
    assert event.type is EventType.ADD and event.obj.spec.traffic_policy.tls.mode == 1  # SIMPLE
    [warning] = event.obj.warnings
    assert warning.startswith("trafficPolicy.websocketUpgrade: unknown field, ignored")
    logged = [r.getMessage() for r in caplog.records]
    assert any("DestinationRule shop/x: trafficPolicy.websocketUpgrade: unknown field" in m for m in logged), logged


def test_the_file_source_ignores_an_unknown_top_level_key_as_istiod_s_does(tmp_path: Path) -> None:
    (tmp_path / "dr.yaml").write_text(UNKNOWN_TOP)
    source = FileSource(tmp_path)
    assert [e.obj.key for e in source.load()] == [ConfigKey(Kind.DESTINATION_RULE, "shop", "x")]
    assert source.rejections() == []


@pytest.mark.parametrize(("text", "field"), [(UNKNOWN_SPEC, "trafficPolicy.websocketUpgrade"), (UNKNOWN_TOP, "extra")])
def test_pilotfish_validate_refuses_both_as_istioctl_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str
) -> None:
    (tmp_path / "dr.yaml").write_text(text)
    assert main(["validate", str(tmp_path / "dr.yaml")]) == 1
    [line] = capsys.readouterr().out.splitlines()
    assert f"DestinationRule shop/x: field {field}: unknown field" in line


def test_a_proto_field_name_is_taken_in_a_file_as_jsonpb_takes_it() -> None:
    # istiod's file source (jsonpb) reads `traffic_policy` as trafficPolicy; Istio's CRD has no
    # such name, so `pilotfish validate` (and the API server) refuse it
    text = doc("DestinationRule", "host: a.example\ntraffic_policy: {tls: {mode: SIMPLE}}")
    [obj] = load_documents(text, "f.yaml", strict=False).objects
    assert obj.spec.traffic_policy.tls.mode == 1 and obj.warnings == ()
    [rejection] = load_documents(text, "f.yaml").rejected
    assert (rejection.error.field, rejection.error.reason) == ("traffic_policy", "unknown field")


def test_the_webhook_refuses_an_unknown_top_level_key_only_once_the_object_is_valid() -> None:
    obj = yaml.safe_load(UNKNOWN_TOP)
    assert admit(obj)["status"]["message"] == "unknown field 'extra' on DestinationRule resource shop/x"
    obj["spec"]["host"] = ""  # invalid: istiod's ValidateConfig answers before checkFields
    assert admit(obj)["status"]["message"].startswith("configuration is invalid: DestinationRule shop/x: field host")


# --- the checks Istio's fixtures showed missing, and their neighbours -----------------------


@pytest.mark.parametrize(
    ("kind", "spec", "expected"),
    [
        # ValidateVirtualService: "http, tcp or tls must be provided in virtual service"
        ("VirtualService", "hosts: [a.example]", "http: http, tcp or tls must be provided in virtual service"),
        # validateConnectionPool: a keepalive needs both its durations
        (
            "DestinationRule",
            "host: a\ntrafficPolicy: {connectionPool: {http: {http2KeepAlive: {interval: 30s}}}}",
            "trafficPolicy.connectionPool.http.http2KeepAlive.timeout: http2 keepalive timeout is required",
        ),
        # validateLoadBalancer
        (
            "DestinationRule",
            "host: a\ntrafficPolicy: {loadBalancer: {consistentHash: {maglev: {tableSize: 1000}, useSourceIp: true}}}",
            "trafficPolicy.loadBalancer.consistentHash.maglev.tableSize: tableSize must be a prime number for maglev",
        ),
        (
            "DestinationRule",
            "host: a\ntrafficPolicy: {loadBalancer: {warmup: {duration: 0.5ms}}}",
            "trafficPolicy.loadBalancer.warmup.duration: duration must be greater than 1ms",
        ),
        (
            "DestinationRule",
            "host: a\ntrafficPolicy: {loadBalancer: {warmupDurationSecs: 10s, warmup: {duration: 10s}}}",
            "trafficPolicy.loadBalancer.warmup: only one of warmupDurationSecs or warmup can be set",
        ),
        # validatePortTrafficPolicies
        (
            "DestinationRule",
            "host: a\ntrafficPolicy: {portLevelSettings: [{port: {number: 80}}]}",
            "trafficPolicy.portLevelSettings[0]: port traffic policy must have at least one field",
        ),
        # ValidateAuthorizationPolicy
        ("AuthorizationPolicy", "action: DENY", "rules: a DENY action without rules is meaningless"),
        ("AuthorizationPolicy", "action: CUSTOM\nprovider: {name: ext}", "rules: a CUSTOM action without rules"),
        (
            "AuthorizationPolicy",
            "action: CUSTOM\nprovider: {name: ext}\nrules: [{from: [{source: {principals: [a]}}]}]",
            "rules[0].from[0].source.principals: is not supported with action CUSTOM",
        ),
        (
            "AuthorizationPolicy",
            "rules: [{from: [{source: {notServiceAccounts: [ns/sa], notNamespaces: [b]}}]}]",
            "rules[0].from[0].source: cannot set serviceAccounts with namespaces or principals",
        ),
        (
            "AuthorizationPolicy",
            "selector: {matchLabels: {app: a}}\ntargetRefs: [{kind: Service, name: a}]",
            "targetRefs: only one of selector, targetRef or targetRefs can be set",
        ),
        (
            "AuthorizationPolicy",
            "targetRef: {group: apps, kind: Deployment, name: a}",
            "targetRef: must be to one of core/Service, networking.istio.io/ServiceEntry",
        ),
        # validateWorkloadSelector / ValidateAlphaWorkloadSelector
        ("PeerAuthentication", "selector: {matchLabels: {'app*': a}}", "selector.matchLabels.app*: wildcard"),
        ("Sidecar", "workloadSelector: {labels: {app: '*'}}\negress: [{hosts: ['./*']}]", "wildcard"),
        # validateJwtRule
        (
            "RequestAuthentication",
            "jwtRules: [{issuer: i, outputClaimToHeaders: [{claim: c, header: 'x:y'}]}]",
            "jwtRules[0].outputClaimToHeaders[0].header: 'x:y' does not match",
        ),
        ("RequestAuthentication", "jwtRules: [{issuer: i, timeout: 0.1ms}]", "jwtRules[0].timeout: duration must be"),
        # ValidateHTTPHeaderOperationName / WithAuthority: Envoy refuses to modify these and
        # would NACK every route configuration carrying the VirtualService
        (
            "VirtualService",
            "hosts: [a]\nhttp: [{headers: {response: {set: {host: x}}}, route: [{destination: {host: a}}]}]",
            'http[0].headers.response.set[host]: invalid header "host": cannot set Host header',
        ),
        (
            "VirtualService",
            "hosts: [a]\nhttp: [{route: [{destination: {host: a}, headers: {request: {set: {':path': /x}}}}]}]",
            'http[0].route[0].headers.request.set[:path]: invalid header ":path": header cannot have ":" prefix',
        ),
        (
            "VirtualService",
            "hosts: [a]\nhttp: [{headers: {request: {remove: [host]}}, route: [{destination: {host: a}}]}]",
            'http[0].headers.request.remove[0]: invalid header "host": cannot set Host header',
        ),
        (
            "VirtualService",
            "hosts: [a]\nhttp: [{headers: {request: {set: {':authority': d}}}, rewrite: {authority: e}, "
            "route: [{destination: {host: a}}]}]",
            'http[0].headers.request: authority header cannot be set multiple times: have "e", attempting to set "d"',
        ),
        # the CRD's bounds (app/api/istio/crd_constraints.py, generated from Istio's CRDs)
        ("ServiceEntry", "hosts: []", "hosts: must not be empty"),
        ("ServiceEntry", "hosts: [a.example]\nworkloadSelector: {labels: {app: " + "a" * 64 + "}}", "at most 63"),
        (
            "Gateway",
            "servers: [{port: {number: 80, protocol: HTTP}, hosts: ['*']}]",
            "servers[0].port.name: is required",
        ),
    ],
)
def test_istiod_s_checks(kind: str, spec: str, expected: str) -> None:
    api = SEC if kind.endswith(("Policy", "Authentication")) else NET
    got = refusal(kind, spec, api)
    assert got.startswith(expected) or (not expected.startswith(got.split(":")[0]) and expected in got), got


@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        # validateTLSOptions: a certificate from credentialNames or tlsCertificates is a source too
        ("Gateway", "servers: [{port: {number: 443, name: https, protocol: HTTPS}, hosts: ['*'], "
         "tls: {mode: SIMPLE, credentialNames: [a, b]}}]"),
        ("Gateway", "servers: [{port: {number: 443, name: https, protocol: HTTPS}, hosts: ['*'], "
         "tls: {mode: MUTUAL, caCertificates: /ca.pem, "
         "tlsCertificates: [{serverCertificate: /c.pem, privateKey: /k.pem}]}}]"),
        # an HTTP server may hold a passthrough TLS block for httpsRedirect
        ("Gateway", "servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*'], "
         "tls: {httpsRedirect: true}}]"),
        # a selector without labels: every workload of the namespace (istiod warns, admits)
        ("AuthorizationPolicy", "selector: {}\naction: ALLOW"),
        ("RequestAuthentication", "selector: {matchLabels: {}}\njwtRules: [{issuer: i}]"),
        ("RequestAuthentication", "targetRef: {kind: Gateway, group: gateway.networking.k8s.io, name: web}"),
        ("RequestAuthentication", "jwtRules: [{issuer: i, jwksUri: 'HTTPS://login.example/keys'}]"),
        # a request may set the authority: a host rewrite
        ("VirtualService", "hosts: [a]\nhttp: [{headers: {request: {set: {host: a.example}}}, "
         "route: [{destination: {host: a}}]}]"),
        ("DestinationRule", "host: a\ntrafficPolicy: {connectionPool: {http: {http2KeepAlive: "
         "{interval: 30s, timeout: 5s}}}}"),
        ("DestinationRule", "host: a\ntrafficPolicy: {loadBalancer: {consistentHash: "
         "{maglev: {tableSize: 65537}, useSourceIp: true}}}"),
    ],
)  # fmt: skip
def test_what_istiod_admits_loads(kind: str, spec: str) -> None:
    api = SEC if kind.endswith(("Policy", "Authentication")) else NET
    assert refusal(kind, spec, api) == ""


@pytest.mark.parametrize(
    ("tls", "reason"),
    [
        ("{mode: SIMPLE, credentialName: a, credentialNames: [b]}", "only one of credentialName, credentialNames"),
        ("{mode: ISTIO_MUTUAL, credentialNames: [a]}", "ISTIO_MUTUAL TLS cannot have associated certificates"),
        ("{mode: MUTUAL, credentialNames: [a, b, c]}", "must hold at most 2 items"),
        ("{mode: SIMPLE, tlsCertificates: [{serverCertificate: /c.pem}]}", "SIMPLE TLS requires a private key"),
    ],
)
def test_a_gateway_server_s_certificate_sources_are_checked_as_istiod_s(tls: str, reason: str) -> None:
    spec = f"servers: [{{port: {{number: 443, name: https, protocol: HTTPS}}, hosts: ['*'], tls: {tls}}}]"
    assert reason in refusal("Gateway", spec)


def test_a_go_flow_colon_document_is_read_by_the_python_reader_only_when_libyaml_refuses_it() -> None:
    text = doc("ServiceEntry", "hosts: [a.example]\naddresses: [1.2.3.4, 001:db8::]\nresolution: STATIC")
    [obj] = load_documents(text, "se.yaml").objects
    assert list(obj.spec.addresses) == ["1.2.3.4", "001:db8::"]
    # the same reader keeps the bounds: nesting, and a key given twice
    [rejection] = load_documents(
        text.replace("resolution: STATIC", "resolution: STATIC\n  hosts: [b]"), "se.yaml"
    ).rejected
    assert "duplicate key 'hosts'" in rejection.error.reason


def test_load_object_reports_nothing_of_top_level_keys_the_caller_checks() -> None:
    obj = json.loads(json.dumps(yaml.safe_load(UNKNOWN_TOP)))
    assert [o.key.name for o in load_object(obj, "kube").objects] == ["x"]
