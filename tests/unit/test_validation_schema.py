"""Type checks of the proto3 JSON parsing (app/config/schema.py normalize), as the Kubernetes API
server's structural schema and Go's protojson refuse a value of the wrong type: every mismatch,
at any depth, is a FieldError naming the field path and saying in words what was wanted and what
was found; nothing else (KeyError, TypeError, OverflowError, ValueError from json_format) escapes,
and no reason quotes Python's internals."""

from __future__ import annotations

import textwrap

import pytest

from app.config.loader import load_documents, load_mesh_file


def doc(kind: str, spec: str, api: str = "networking.istio.io/v1") -> str:
    body = textwrap.indent(textwrap.dedent(spec).strip(), "  ")
    return f"apiVersion: {api}\nkind: {kind}\nmetadata: {{name: x, namespace: ns}}\nspec:\n{body}\n"


def rejection(kind: str, spec: str, api: str = "networking.istio.io/v1") -> str:
    [r] = load_documents(doc(kind, spec, api), "f.yaml").rejected
    prefix = f"f.yaml: {kind} ns/x: field "
    assert str(r.error).startswith(prefix), r.error
    return str(r.error).removeprefix(prefix)


SEC = "security.istio.io/v1"


@pytest.mark.parametrize(
    ("kind", "spec", "expected"),
    [
        # a map field written as a list (the KeyError that stopped `pilotfish serve`)
        ("WorkloadEntry", "address: 10.0.0.1\nports: [{http: 80}]", "ports: expected a map, got a list"),
        ("Gateway", "selector: [{istio: ingressgateway}]\nservers: []", "selector: expected a map, got a list"),
        (
            "PeerAuthentication",
            "selector: {matchLabels: {a: b}}\nportLevelMtls: [{mode: STRICT}]",
            "portLevelMtls: expected a map, got a list",
        ),
        ("DestinationRule", "host: a\nsubsets: [{name: v1, labels: [v1]}]", "subsets[0].labels: expected a map"),
        # map keys and values
        ("DestinationRule", "host: a\nsubsets: [{name: v1, labels: {1: a}}]", "subsets[0].labels.1: expected a string"),
        ("DestinationRule", "host: a\nsubsets: [{name: v1, labels: {a: null}}]", "subsets[0].labels.a: expected a"),
        (
            "PeerAuthentication",
            "selector: {matchLabels: {a: b}}\nportLevelMtls: {http: {mode: STRICT}}",
            "portLevelMtls.http: expected an integer as the key, got 'http'",
        ),
        # scalars
        ("DestinationRule", "host: [a]", "host: expected a string, got a list"),
        ("DestinationRule", "host: 2024-01-01", "host: expected a string, got a timestamp (quote it"),
        (
            "DestinationRule",
            "host: a\ntrafficPolicy: {connectionPool: {tcp: {maxConnections: many}}}",
            "trafficPolicy.connectionPool.tcp.maxConnections: expected an integer, got 'many'",
        ),
        (
            "DestinationRule",
            "host: a\ntrafficPolicy: {connectionPool: {tcp: {maxConnections: [1]}}}",
            "trafficPolicy.connectionPool.tcp.maxConnections: expected an integer, got a list",
        ),
        (
            "DestinationRule",
            "host: a\ntrafficPolicy: {connectionPool: {tcp: {maxConnections: true}}}",
            "trafficPolicy.connectionPool.tcp.maxConnections: expected an integer, got true",
        ),
        (
            "DestinationRule",
            "host: a\ntrafficPolicy: {loadBalancer: {simple: [RANDOM]}}",
            "trafficPolicy.loadBalancer.simple: expected one of",
        ),
        (
            "DestinationRule",
            "host: a\ntrafficPolicy: {loadBalancer: {simple: RANDUM}}",
            "trafficPolicy.loadBalancer.simple: unknown value 'RANDUM' (want UNSPECIFIED, LEAST_CONN",
        ),
        (
            # a number the enum has not: the code reading the field would raise on it
            "Sidecar",
            "outboundTrafficPolicy: {mode: 7}",
            "outboundTrafficPolicy.mode: unknown value 7 (want REGISTRY_ONLY, ALLOW_ANY)",
        ),
        (
            "DestinationRule",
            "host: a\ntrafficPolicy: {tls: {insecureSkipVerify: 'yes'}}",
            "trafficPolicy.tls.insecureSkipVerify: expected true or false, got 'yes'",
        ),
        ("DestinationRule", "host: a\nexportTo: ns1", "exportTo: expected a list, got a string"),
        ("DestinationRule", "host: a\nexportTo: [[ns1]]", "exportTo[0]: expected a string, got a list"),
        # well-known types
        (
            "DestinationRule",
            "host: a\ntrafficPolicy: {outlierDetection: {interval: {seconds: 5}}}",
            "trafficPolicy.outlierDetection.interval: expected a duration such as 5s or 100ms, got an object",
        ),
        (
            "DestinationRule",
            "host: a\ntrafficPolicy: {connectionPool: {tcp: {connectTimeout: 99999999999999h}}}",
            "trafficPolicy.connectionPool.tcp.connectTimeout: duration '99999999999999h' out of range",
        ),
        (
            "VirtualService",
            "hosts: [a]\nhttp: [{route: [{destination: {host: a}}], mirrorPercentage: {value: .nan}}]",
            "http[0].mirrorPercentage.value: expected a finite number, got nan",
        ),
        (
            "VirtualService",
            "hosts: [a]\nhttp: [{route: [{destination: {host: a}}], mirrorPercentage: {value: Infinity}}]",
            "http[0].mirrorPercentage.value: expected a finite number, got 'Infinity'",
        ),
        (
            "VirtualService",
            f"hosts: [a]\nhttp: [{{route: [{{destination: {{host: a}}}}], mirrorPercentage: {{value: {10**400}}}}}]",
            "http[0].mirrorPercentage.value: number out of range",
        ),
        (
            "VirtualService",
            "hosts: [a]\nhttp: [{route: [{destination: {host: a}}], mirrorPercent: x}]",
            "http[0].mirrorPercent: expected an integer, got 'x'",
        ),
        # a value protobuf itself refuses (out of range) is still named by its path
        (
            "Gateway",
            "selector: {a: b}\nservers: [{port: {number: 1.0e+30, protocol: HTTP, name: p}, hosts: ['*']}]",
            "servers[0].port.number: 1000000000000000019884624838656 is out of range",
        ),
        (
            "DestinationRule",
            "host: a\ntrafficPolicy: {loadBalancer: {simple: RANDOM, consistentHash: {useSourceIp: true}}}",
            "trafficPolicy.loadBalancer: only one of simple, consistentHash may be set",
        ),
    ],
)
def test_a_type_mismatch_anywhere_is_a_field_error_naming_its_path(kind: str, spec: str, expected: str) -> None:
    api = SEC if kind == "PeerAuthentication" else "networking.istio.io/v1"
    got = rejection(kind, spec, api)
    assert got.startswith(expected), got


def test_struct_values_in_the_mesh_config_are_json_values() -> None:
    # a google.protobuf.Struct of Istio's MeshConfig: an access log's JSON labels
    labels = "extensionProviders: [{name: x, envoyFileAccessLog: {path: /dev/stdout, logFormat: {labels: %s}}}]"
    at = "extensionProviders[0].envoyFileAccessLog.logFormat.labels"
    for text, expected in [
        (labels % "{1: a}", f"{at}.1: expected a string as the key, got 1"),
        (labels % "{a: .inf}", f"{at}.a: expected a finite number, got inf"),
        (labels % f"{{a: {10**400}}}", f"{at}.a: number out of range"),
        (labels % "[a]", f"{at}: expected an object, got a list"),
        ("discoverySelectors: [[1]]", "discoverySelectors[0]: expected an object, got a list"),
        # defaultConfig is a typed ProxyConfig, as istiod reads it
        ("defaultConfig: [a]", "defaultConfig: expected an object, got a list"),
        ("defaultConfig: {concurrency: two}", "defaultConfig.concurrency: expected an integer, got 'two'"),
    ]:
        [r] = load_mesh_file(text + "\n", "mesh.yaml").rejected
        assert str(r.error) == f"mesh.yaml: MeshConfig mesh: field {expected}", r.error


def test_proto3_json_forms_istio_accepts_still_load() -> None:
    se = doc("ServiceEntry", "hosts: [a.example.com]\nports: [{number: '443', name: tls, protocol: TLS}]")
    assert load_documents(se, "f.yaml").rejected == []
    pa = doc("PeerAuthentication", "selector: {matchLabels: {a: b}}\nportLevelMtls: {'8080': {mode: DISABLE}}", SEC)
    assert load_documents(pa, "f.yaml").rejected == []
    vs = doc("VirtualService", "hosts: [a]\nhttp: [{route: [{destination: {host: a}}], mirrorPercentage: {value: 5}}]")
    assert load_documents(vs, "f.yaml").rejected == []
