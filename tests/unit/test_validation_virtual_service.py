"""VirtualService checks istiod makes (pkg/config/validation/virtualservice.go, validation.go) that
keep config Envoy would reject from being served: RE2 regexes (Envoy's safe_regex is RE2; istiod
compiles with Go's RE2 and caps the length at 1024), a total weight of 0 over several
destinations, HTTP timeouts under 1ms or finer than milliseconds."""

from __future__ import annotations

import pytest

from app.config.loader import load_documents

VS = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: r, namespace: ns}}
spec:
  hosts: [app]
  http:
  - {route}
"""
ROUTE = "route: [{destination: {host: app}}]"


def rejection(http: str) -> str:
    result = load_documents(VS.format(route=http), "vs.yaml")
    return str(result.rejected[0].error) if result.rejected else ""


@pytest.mark.parametrize(
    ("http", "field", "reason"),
    [
        ("match: [{uri: {regex: '(a'}}]\n    " + ROUTE, "http[0].match[0].uri.regex", "missing ): (a"),
        ("match: [{uri: {regex: 'a\\1'}}]\n    " + ROUTE, "http[0].match[0].uri.regex", "invalid escape"),
        ("match: [{headers: {x: {regex: '(?=look)'}}}]\n    " + ROUTE, "http[0].match[0].headers.x.regex", "perl"),
        ("match: [{queryParams: {q: {regex: ''}}}]\n    " + ROUTE, "http[0].match[0].queryParams.q.regex",
         "should not be empty"),
        ("match: [{authority: {prefix: ''}}]\n    " + ROUTE, "http[0].match[0].authority.prefix",
         "should not be empty"),
        (f"match: [{{uri: {{regex: '{'a' * 1025}'}}}}]\n    " + ROUTE, "http[0].match[0].uri.regex", "max length"),
        ("rewrite: {uriRegexRewrite: {match: '[z-a]', rewrite: x}}\n    " + ROUTE,
         "http[0].rewrite.uriRegexRewrite.match", "RE2"),
        ("corsPolicy: {allowOrigins: [{regex: '*x'}]}\n    " + ROUTE, "http[0].corsPolicy.allowOrigins[0].regex",
         "RE2"),
        ("route: [{destination: {host: app}, weight: 0}, {destination: {host: app2}, weight: 0}]", "http[0].route",
         "total destination weight = 0"),
        ("route: [{destination: {host: app}}, {destination: {host: app2}}]", "http[0].route",
         "total destination weight = 0"),
        ("timeout: 0s\n    " + ROUTE, "http[0].timeout", "greater than 1ms"),
        ("timeout: 0.0005s\n    " + ROUTE, "http[0].timeout", "greater than 1ms"),
        ("timeout: 1.0005s\n    " + ROUTE, "http[0].timeout", "ms precision"),
    ],
)  # fmt: skip
def test_rejected_as_istiod_rejects_it(http: str, field: str, reason: str) -> None:
    error = rejection(http)
    assert f"VirtualService ns/r: field {field}:" in error and reason in error, error


@pytest.mark.parametrize(
    "http",
    [
        "match: [{uri: {regex: '/api/v[0-9]+/.*'}}, {headers: {x: {regex: '[[:alpha:]]+'}}}]\n    " + ROUTE,
        "route: [{destination: {host: app}, weight: 100}, {destination: {host: app2}}]",
        "route: [{destination: {host: app}}]",  # one destination needs no weight
        "timeout: 1.5s\n    " + ROUTE,
        "rewrite: {uriRegexRewrite: {match: '^/old/(.*)', rewrite: '/new/\\\\1'}}\n    " + ROUTE,
    ],
)
def test_accepted(http: str) -> None:
    assert rejection(http) == ""


def test_tcp_routes_with_zero_total_weight_are_rejected() -> None:
    text = VS.format(route=ROUTE).replace(
        "  http:\n  - " + ROUTE, "  tcp:\n  - route: [{destination: {host: a}, weight: 0}, {destination: {host: b}}]"
    )
    [rejected] = load_documents(text, "vs.yaml").rejected
    assert "field tcp[0].route: total destination weight = 0" in str(rejected.error)
