"""DestinationRule checks as istiod's pkg/config/validation: validateConnectionPool,
validateOutlierDetection, validateSubset (labels.Instance.Validate) and
agent.ValidateLocalityLbSetting, at every level a traffic policy appears (the rule's, a
subset's, a port's). Each rejection names the field path and istiod's reason."""

from __future__ import annotations

import textwrap

import pytest

from app.config.loader import load_documents

DR = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: r, namespace: ns}}
spec:
  host: app
{body}
"""


def rejection(body: str) -> str:
    result = load_documents(DR.format(body=textwrap.indent(textwrap.dedent(body).strip(), "  ")), "dr.yaml")
    if not result.rejected:
        return ""
    [r] = result.rejected
    assert str(r.error).startswith("dr.yaml: DestinationRule ns/r: field "), r.error
    return str(r.error).removeprefix("dr.yaml: DestinationRule ns/r: field ")


def accepted(body: str) -> bool:
    return rejection(body) == ""


# where a traffic policy may appear: each rule applies at every level
LEVELS = [
    ("trafficPolicy", "trafficPolicy: {{{policy}}}"),
    ("subsets[0].trafficPolicy", "subsets: [{{name: v1, trafficPolicy: {{{policy}}}}}]"),
    (
        "trafficPolicy.portLevelSettings[0]",
        "trafficPolicy: {{portLevelSettings: [{{port: {{number: 80}}, {policy}}}]}}",
    ),
]


@pytest.mark.parametrize(("prefix", "template"), LEVELS, ids=[p for p, _ in LEVELS])
@pytest.mark.parametrize(
    ("pool", "field", "reason"),
    [
        ("tcp: {connectTimeout: -1s}", "tcp.connectTimeout", "duration must be greater than 1ms"),
        ("tcp: {connectTimeout: 0s}", "tcp.connectTimeout", "duration must be greater than 1ms"),
        ("tcp: {connectTimeout: 1.5ms}", "tcp.connectTimeout", "only durations to ms precision are supported"),
        ("tcp: {maxConnectionDuration: 0.5ms}", "tcp.maxConnectionDuration", "duration must be greater than 1ms"),
        ("tcp: {idleTimeout: 1.0001s}", "tcp.idleTimeout", "only durations to ms precision are supported"),
        ("tcp: {tcpKeepalive: {time: 0s}}", "tcp.tcpKeepalive.time", "duration must be greater than 1ms"),
        ("tcp: {tcpKeepalive: {interval: -5s}}", "tcp.tcpKeepalive.interval", "duration must be greater than 1ms"),
        ("http: {idleTimeout: 0s}", "http.idleTimeout", "duration must be greater than 1ms"),
        ("tcp: {maxConnections: -1}", "tcp.maxConnections", "must be non-negative, got -1"),
        ("http: {http1MaxPendingRequests: -1}", "http.http1MaxPendingRequests", "must be non-negative"),
        ("http: {http2MaxRequests: -1}", "http.http2MaxRequests", "must be non-negative"),
        ("http: {maxRequestsPerConnection: -2}", "http.maxRequestsPerConnection", "must be non-negative"),
        ("http: {maxRetries: -3}", "http.maxRetries", "must be non-negative"),
        ("http: {maxConcurrentStreams: -1}", "http.maxConcurrentStreams", "must be non-negative"),
        ("http: {h2UpgradePolicy: UPGRADE, useClientProtocol: true}", "http.useClientProtocol", "must not be true"),
        ("{}", "", "connection pool must have at least one field"),
    ],
)
def test_validate_connection_pool(prefix: str, template: str, pool: str, field: str, reason: str) -> None:
    policy = f"connectionPool: {{{pool}}}" if pool != "{}" else "connectionPool: {}"
    got = rejection(template.format(policy=policy))
    path = f"{prefix}.connectionPool" + (f".{field}" if field else "")
    assert got.startswith(f"{path}: {reason}"), got


def test_validate_connection_pool_accepts_what_istiod_accepts() -> None:
    pool = """
    trafficPolicy:
      connectionPool:
        tcp: {maxConnections: 0, connectTimeout: 1ms, maxConnectionDuration: 1h, idleTimeout: 0s,
              tcpKeepalive: {time: 7200s, interval: 75s, probes: 9}}
        http: {http1MaxPendingRequests: 0, http2MaxRequests: 1000, maxRequestsPerConnection: 1, maxRetries: 0,
               idleTimeout: 1h30m, h2UpgradePolicy: UPGRADE, maxConcurrentStreams: 100}
    """
    assert accepted(pool)
    # a tcp idleTimeout under 1ms (0s included) turns the timeout off: istiod skips it
    assert accepted("trafficPolicy: {connectionPool: {tcp: {idleTimeout: 0.5ms}}}")


@pytest.mark.parametrize(("prefix", "template"), LEVELS, ids=[p for p, _ in LEVELS])
@pytest.mark.parametrize(
    ("outlier", "field", "reason"),
    [
        ("interval: 0s", "interval", "duration must be greater than 1ms"),
        ("interval: 10.5ms", "interval", "only durations to ms precision are supported"),
        ("baseEjectionTime: -30s", "baseEjectionTime", "duration must be greater than 1ms"),
        ("maxEjectionPercent: 101", "maxEjectionPercent", "must be between 0 and 100, got 101"),
        ("maxEjectionPercent: -1", "maxEjectionPercent", "must be between 0 and 100, got -1"),
        ("minHealthPercent: 150", "minHealthPercent", "must be between 0 and 100, got 150"),
        ("consecutiveLocalOriginFailures: 3", "consecutiveLocalOriginFailures", "is set, but splitExternal"),
    ],
)
def test_validate_outlier_detection(prefix: str, template: str, outlier: str, field: str, reason: str) -> None:
    got = rejection(template.format(policy=f"outlierDetection: {{{outlier}}}"))
    assert got.startswith(f"{prefix}.outlierDetection.{field}: {reason}"), got


def test_validate_outlier_detection_accepts_what_istiod_accepts() -> None:
    assert accepted(
        "trafficPolicy: {outlierDetection: {interval: 1ms, baseEjectionTime: 30s, maxEjectionPercent: 100, "
        "minHealthPercent: 0, splitExternalLocalOriginErrors: true, consecutiveLocalOriginFailures: 3, "
        "consecutive5xxErrors: 0}}"
    )


@pytest.mark.parametrize(
    ("labels", "field", "reason"),
    [
        ("{'bad key!': v1}", "subsets[0].labels", "invalid label key 'bad key!'"),
        ("{'-lead': v1}", "subsets[0].labels", "invalid label key '-lead'"),
        ("{'a/b/c': v1}", "subsets[0].labels", "invalid label key 'a/b/c'"),
        ("{'Bad_Prefix/x': v1}", "subsets[0].labels", "invalid label key 'Bad_Prefix/x'"),
        (f"{{{'k' * 64}: v1}}", "subsets[0].labels", "the name is longer than 63"),
        (f"{{{'p' * 254}/k: v1}}", "subsets[0].labels", "the DNS prefix is longer than 253"),
        ("{version: 'v 1'}", "subsets[0].labels.version", "invalid label value 'v 1'"),
        ("{version: -v1}", "subsets[0].labels.version", "invalid label value '-v1'"),
    ],
)
def test_validate_subset_labels_as_labels_instance_validate(labels: str, field: str, reason: str) -> None:
    got = rejection(f"subsets: [{{name: v1, labels: {labels}}}]")
    assert got.startswith(f"{field}: ") and reason in got, got


def test_validate_subset_labels_accepts_kubernetes_label_forms() -> None:
    labels = f"{{app.kubernetes.io/version: 1.2.3_rc-1, version: '', A_b.c: X, example.com/{'k' * 63}: {'v' * 80}}}"
    assert accepted(f"subsets: [{{name: v1, labels: {labels}}}]")  # istiod caps no value's length


@pytest.mark.parametrize(
    ("lls", "field", "reason"),
    [
        ("{distribute: [{from: a/*, to: {a/*: 90}}]}", "distribute[0].to", "weights must total 100, got 90"),
        ("{distribute: [{from: a/*, to: {a/*: 0, b/*: 100}}]}", "distribute[0].to.a/*", "locality weight must be"),
        ("{distribute: [{from: a/*, to: {'a/*/x/*': 100}}]}", "distribute[0].to", "may appear once, at the end"),
        ("{distribute: [{from: a//b, to: {a/*: 100}}]}", "distribute", "must not contain an empty region"),
        (
            "{distribute: [{from: a/*, to: {a/*: 100}}, {from: a/b/*, to: {a/*: 100}}]}",
            "distribute",
            "'a/b/*' overlaps one given before",
        ),
        ("{distribute: [{from: '*', to: {a: 100}}, {from: b, to: {a: 100}}]}", "distribute", "overlaps"),
        ("{failover: [{from: us-east, to: us-east}]}", "failover[0]", "must specify different regions"),
        ("{failover: [{from: us-east/z1, to: us-west}]}", "failover[0]", "only specify region"),
        ("{failover: [{from: us-east, to: 'us-*'}]}", "failover[0]", "should not contain '*'"),
        (
            "{failover: [{from: a, to: b}], failoverPriority: [topology.kubernetes.io/zone]}",
            "failoverPriority[0]",
            "cannot name topology label",
        ),
        (
            "{failover: [{from: a, to: b}], distribute: [{from: a/*, to: {a/*: 100}}]}",
            "",
            "distribute and failover cannot both be set",
        ),
    ],
)
def test_validate_locality_lb_setting(lls: str, field: str, reason: str) -> None:
    got = rejection(f"trafficPolicy: {{loadBalancer: {{localityLbSetting: {lls}}}}}")
    path = "trafficPolicy.loadBalancer.localityLbSetting" + (f".{field}" if field else "")
    assert got.startswith(f"{path}: ") and reason in got, got


def test_validate_locality_lb_setting_accepts_what_istiod_accepts() -> None:
    assert accepted(
        "trafficPolicy: {loadBalancer: {localityLbSetting: {distribute: [{from: us-east/z1/*, "
        "to: {us-east/z1/*: 80, us-east/z2/*: 20}}, {from: us-west/*, to: {us-west/*: 100}}]}}}"
    )
    assert accepted(
        "trafficPolicy: {loadBalancer: {localityLbSetting: {failover: [{from: us-east, to: us-west}], "
        "failoverPriority: [topology.istio.io/network]}}}"
    )
