"""VirtualService HTTP route checks as istiod's (pkg/config/validation virtualservice.go
validateHTTPRoute, validation.go validateHTTPMirrors, validateHTTPFaultInjection(Abort/Delay),
validatePercentage, validateCORSPolicy, validateDestination, validateHTTPRouteMatchRequest,
validateTCPMatch; agent.ValidateHTTPRetry), for the fields pilotfish reads. Each rejection
names the field path (with indexes) and istiod's reason."""

from __future__ import annotations

import pytest

from app.config.loader import load_documents

VS = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: r, namespace: ns}}
spec:
  hosts: [app]
  http:
  - {{route: [{{destination: {{host: app}}}}], {extra}}}
"""


def rejection(extra: str, template: str = VS) -> str:
    result = load_documents(template.format(extra=extra), "vs.yaml")
    if not result.rejected:
        return ""
    [r] = result.rejected
    prefix = "vs.yaml: VirtualService ns/r: field "
    assert str(r.error).startswith(prefix), r.error
    return str(r.error).removeprefix(prefix)


def check(extra: str, field: str, reason: str) -> None:
    got = rejection(extra)
    assert got.startswith(f"{field}: ") and reason in got, got


@pytest.mark.parametrize(
    ("extra", "field", "reason"),
    [
        ("mirror: {host: m}, mirrorPercentage: {value: 150}", "http[0].mirrorPercentage", "max value of 100"),
        ("mirror: {host: m}, mirrorPercentage: {value: -1}", "http[0].mirrorPercentage", "min value of 0"),
        ("mirror: {host: m}, mirrorPercent: 101", "http[0].mirrorPercent", "max value of 100 (it has 101)"),
        ("mirrors: [{destination: {host: m}, percentage: {value: 100.5}}]", "http[0].mirrors[0].percentage", "100"),
        ("mirrors: [{destination: {host: m}, percentage: {value: -3}}]", "http[0].mirrors[0].percentage", "min"),
        ("mirrors: [{percentage: {value: 5}}]", "http[0].mirrors[0].destination", "is required"),
        ("mirrors: [{destination: {host: '*'}}]", "http[0].mirrors[0].destination.host", "invalid destination"),
        ("mirror: {host: m, subset: V_1}", "http[0].mirror.subset", "not a valid subset name"),
        ("mirror: {host: 'bad host!'}", "http[0].mirror.host", "not a valid DNS name"),
    ],
)
def test_validate_http_mirrors(extra: str, field: str, reason: str) -> None:
    check(extra, field, reason)


def test_validate_http_mirrors_accepts_0_to_100() -> None:
    assert rejection("mirror: {host: m}, mirrorPercentage: {value: 0}") == ""
    assert rejection("mirrors: [{destination: {host: m, subset: v1}, percentage: {value: 100}}]") == ""
    assert rejection("mirror: {host: m}, mirrorPercent: 100") == ""


@pytest.mark.parametrize(
    ("fault", "field", "reason"),
    [
        ("{}", "http[0].fault", "must have an abort and/or a delay"),
        ("{abort: {httpStatus: 503, percentage: {value: 200}}}", "http[0].fault.abort.percentage", "neither 0.0"),
        ("{abort: {httpStatus: 503, percentage: {value: -1}}}", "http[0].fault.abort.percentage", "neither 0.0"),
        ("{abort: {httpStatus: 503, percentage: {value: 0.00001}}}", "http[0].fault.abort.percentage", "0.0001"),
        ("{abort: {httpStatus: 199}}", "http[0].fault.abort.httpStatus", "HTTP status 199 is not in range"),
        ("{abort: {httpStatus: 601}}", "http[0].fault.abort.httpStatus", "HTTP status 601 is not in range"),
        ("{abort: {grpcStatus: NOPE}}", "http[0].fault.abort.grpcStatus", "gRPC status 'NOPE' is not supported"),
        ("{abort: {http2Error: REFUSED}}", "http[0].fault.abort.http2Error", "not supported yet"),
        ("{delay: {fixedDelay: 5s, percentage: {value: 101}}}", "http[0].fault.delay.percentage", "neither 0.0"),
        ("{delay: {fixedDelay: 0s}}", "http[0].fault.delay.fixedDelay", "duration must be greater than 1ms"),
        ("{delay: {fixedDelay: 1.5ms}}", "http[0].fault.delay.fixedDelay", "ms precision"),
        ("{delay: {exponentialDelay: 1s}}", "http[0].fault.delay.exponentialDelay", "not supported yet"),
    ],
)
def test_validate_http_fault_injection(fault: str, field: str, reason: str) -> None:
    check(f"fault: {fault}", field, reason)


def test_validate_http_fault_injection_accepts_what_istiod_accepts() -> None:
    fault = "{abort: {httpStatus: 600, percentage: {value: 0.0001}}, delay: {fixedDelay: 1ms, percentage: {value: 0}}}"
    assert rejection(f"fault: {fault}") == ""
    assert rejection("fault: {abort: {grpcStatus: UNAVAILABLE}, delay: {fixedDelay: 5s, percent: 30}}") == ""


@pytest.mark.parametrize(
    ("retries", "field", "reason"),
    [
        ("{attempts: 3, perTryTimeout: 0s}", "http[0].retries.perTryTimeout", "duration must be greater than 1ms"),
        ("{attempts: 3, perTryTimeout: 2.0005s}", "http[0].retries.perTryTimeout", "ms precision"),
        ("{attempts: 3, backoff: 0.1ms}", "http[0].retries.backoff", "duration must be greater than 1ms"),
        ("{attempts: -1}", "http[0].retries.attempts", "must not be negative"),
        ("{attempts: 0, perTryTimeout: 1s}", "http[0].retries.perTryTimeout", "attempts are set to 0 (disabled)"),
        ("{retryOn: 5xx}", "http[0].retries.retryOn", "attempts are set to 0 (disabled)"),
        ("{attempts: 0, retryRemoteLocalities: true}", "http[0].retries.retryRemoteLocalities", "attempts are set"),
        ("{attempts: 2, retryOn: '5xx,bogus'}", "http[0].retries.retryOn", "'bogus' is not a valid retryOn policy"),
        ("{attempts: 2, retryOn: '5xx, reset'}", "http[0].retries.retryOn", "' reset' is not a valid retryOn"),
        ("{attempts: 2, retryOn: '5xx,'}", "http[0].retries.retryOn", "'' is not a valid retryOn policy"),
        ("{attempts: 2, retryOn: '599'}", "http[0].retries.retryOn", "'599' is not a valid retryOn policy"),
    ],
)
def test_validate_http_retry(retries: str, field: str, reason: str) -> None:
    check(f"retries: {retries}", field, reason)


def test_validate_http_retry_accepts_conditions_and_status_codes() -> None:
    retry_on = "gateway-error,connect-failure,503,429,cancelled"
    retries = f"{{attempts: 3, perTryTimeout: 2s, backoff: 25ms, retryOn: '{retry_on}'}}"
    assert rejection(f"retries: {retries}") == ""
    assert rejection("retries: {attempts: 0}") == ""


@pytest.mark.parametrize(
    ("extra", "field", "reason"),
    [
        ("corsPolicy: {maxAge: 0s}", "http[0].corsPolicy.maxAge", "duration must be greater than 1ms"),
        ("corsPolicy: {maxAge: 1.5s}", "http[0].corsPolicy.maxAge", "accurate only to seconds precision"),
        ("timeout: 0s", "http[0].timeout", "duration must be greater than 1ms"),
    ],
)
def test_validate_http_route_durations(extra: str, field: str, reason: str) -> None:
    check(extra, field, reason)


@pytest.mark.parametrize(
    ("extra", "field", "reason"),
    [
        ("match: [{sourceLabels: {'bad key!': a}}]", "http[0].match[0].sourceLabels", "invalid label key"),
        ("match: [{sourceLabels: {app: 'a b'}}]", "http[0].match[0].sourceLabels.app", "invalid label value"),
        ("match: [{port: 70000}]", "http[0].match[0].port", "out of range"),
        ("match: [{sourceNamespace: Not_A_Namespace}]", "http[0].match[0].sourceNamespace", "not a namespace"),
    ],
)
def test_validate_http_route_match_request(extra: str, field: str, reason: str) -> None:
    check(extra, field, reason)


def test_validate_tcp_and_tls_match_source_labels() -> None:
    tcp = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: r, namespace: ns}}
spec:
  hosts: [app]
  tcp: [{{match: [{{sourceLabels: {{'x y': a}}}}], route: [{{destination: {{host: app}}}}]}}]
{extra}
"""
    got = rejection("", tcp)
    assert got.startswith("tcp[0].match[0].sourceLabels: invalid label key 'x y'"), got
    tls = tcp.replace(
        "tcp: [{{match: [{{sourceLabels: {{'x y': a}}}}]",
        "tls: [{{match: [{{sniHosts: [app], sourceLabels: {{app: '-'}}}}]",
    )
    got = rejection("", tls)
    assert got.startswith("tls[0].match[0].sourceLabels.app: invalid label value '-'"), got


@pytest.mark.parametrize(
    ("dest", "field", "reason"),
    [
        ("{host: '*'}", "http[0].route[0].destination.host", "invalid destination host '*'"),
        ("{host: app, subset: 'v.1'}", "http[0].route[0].destination.subset", "not a valid subset name"),
    ],
)
def test_validate_destination(dest: str, field: str, reason: str) -> None:
    template = VS.replace("route: [{{destination: {{host: app}}}}], {extra}", "{extra}")
    got = rejection(f"route: [{{destination: {dest}}}]", template)
    assert got.startswith(f"{field}: ") and reason in got, got
