"""The mesh config's access log (accessLogFile, accessLogEncoding, accessLogFormat,
disableEnvoyListenerLog) as istiod writes it (FileAccessLogFromMeshConfig), and where it goes:
every HTTP connection manager and tcp_proxy, each listener's own for NR, never the blackhole
chains. The differential scene (tests/differential) compares all of it with istiod's."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format

from app.config.mesh import parse_mesh_config
from app.model.telemetry import CLIENT, Telemetries
from app.translate.listener.access_log import (
    JSON_FORMAT,
    TEXT_FORMAT,
    access_logs,
    listener_access_logs,
    resolve_logs,
)
from app.xds.generators.reference import generate_listeners
from tests.support.mesh import kube_pod, kube_service, push_context, router_proxy, sidecar_proxy


def logged(mesh: dict[str, Any], listener: bool = False) -> list[dict[str, Any]]:
    parsed = parse_mesh_config(mesh)
    selection = Telemetries.build((), parsed).access_logging("default", {}, CLIENT)  # no Telemetry
    resolved = resolve_logs(parsed, selection, {})  # no service: no access log service is found
    logs = listener_access_logs(parsed, resolved) if listener else access_logs(parsed, resolved)
    return [json_format.MessageToDict(log) for log in logs]


def file_log(**log_format: Any) -> dict[str, Any]:
    return {
        "name": "envoy.access_loggers.file",
        "typedConfig": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
            "path": "/dev/stdout",
            "logFormat": log_format,
        },
    }


def test_no_file_no_log() -> None:
    assert logged({}) == logged({}, listener=True) == []


def test_the_default_text_format_is_istios() -> None:
    assert logged({"accessLogFile": "/dev/stdout"}) == [file_log(textFormatSource={"inlineString": TEXT_FORMAT})]


def test_a_text_format_gets_its_newline_and_the_formatter_it_names() -> None:
    [log] = logged({"accessLogFile": "/dev/stdout", "accessLogFormat": "%REQ_WITHOUT_QUERY(:PATH)% %RESPONSE_CODE%"})
    fmt = log["typedConfig"]["logFormat"]
    assert fmt["textFormatSource"]["inlineString"] == "%REQ_WITHOUT_QUERY(:PATH)% %RESPONSE_CODE%\n"
    assert [f["name"] for f in fmt["formatters"]] == ["envoy.formatter.req_without_query"]


@pytest.mark.parametrize(
    ("written", "fields"),
    [
        ("", JSON_FORMAT),
        ('{"code": "%RESPONSE_CODE%", "n": 1}', {"code": "%RESPONSE_CODE%", "n": 1.0}),
        ("not json", JSON_FORMAT),  # istiod logs the error and keeps its own format
    ],
)
def test_json_encoding(written: str, fields: dict[str, Any]) -> None:
    mesh = {"accessLogFile": "/dev/stdout", "accessLogEncoding": "JSON", "accessLogFormat": written}
    assert logged(mesh) == [file_log(jsonFormat=fields, jsonFormatOptions={})]


def test_a_listener_logs_only_what_no_filter_chain_took_unless_disabled() -> None:
    mesh = {"accessLogFile": "/dev/stdout"}
    assert logged(mesh, listener=True) == [{**file_log(textFormatSource={"inlineString": TEXT_FORMAT}),
                                           "filter": {"responseFlagFilter": {"flags": ["NR"]}}}]  # fmt: skip
    assert logged({**mesh, "disableEnvoyListenerLog": True}, listener=True) == []


SCENE = (
    kube_service("web", "[{name: http, port: 80, targetPort: 8080}, {name: tcp, port: 5432}]", namespace="shop",
                 cluster_ip="10.96.0.5", selector="app: web")
    + kube_pod("web-0", "10.1.0.5", "app: web", namespace="shop", container_ports="[{containerPort: 8080}]")
    + """
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 8080, name: http, protocol: HTTP}, hosts: ["*"]}]
"""
)  # fmt: skip
ACCESS_LOGS = "accessLogFile: /dev/stdout\n"
LOGGED = ("envoy.filters.network.tcp_proxy", "envoy.filters.network.http_connection_manager")


def _logs_by_place(mesh: str) -> dict[str, int]:
    """How many access logs each listener, and each HCM and tcp_proxy of its chains, carries,
    for a sidecar and a gateway."""
    push = push_context(SCENE, mesh=mesh)
    proxies = (sidecar_proxy("web-0.shop", "10.1.0.5", {"app": "web"}),
               router_proxy("gw-0.shop", "10.1.0.7", {"istio": "ingressgateway"}))  # fmt: skip
    found: dict[str, int] = {}
    for proxy in proxies:
        for lst in generate_listeners(proxy, push):
            doc = json_format.MessageToDict(lst)
            found[lst.name] = len(doc.get("accessLog", []))
            default = [doc["defaultFilterChain"]] if "defaultFilterChain" in doc else []
            chains = [*doc.get("filterChains", []), *default]
            for i, chain in enumerate(chains):
                for f in chain.get("filters", []):
                    if f["name"] in LOGGED:
                        place = f"{lst.name}/{chain.get('name', i)}/{f['name']}"
                        found[place] = len(f["typedConfig"].get("accessLog", []))
    return found


def test_every_listener_connection_manager_and_tcp_proxy_logs_but_the_blackholes() -> None:
    places = _logs_by_place(ACCESS_LOGS)
    blackholes = {p for p in places if "/" in p and "blackhole" in p.lower()}
    assert len(blackholes) == 2 and all(places[p] == 0 for p in blackholes)  # virtualInbound's, virtualOutbound's
    outbound = {p for p in places if "/" not in p and p not in ("virtualInbound", "virtualOutbound", "0.0.0.0_8080")}
    assert outbound and all(places[p] == 0 for p in outbound)  # istiod's buildListenerFromEntry: none
    assert all(n == 1 for p, n in places.items() if p not in blackholes | outbound), places
    assert any("8080" in p and "http_connection_manager" in p for p in places)  # the gateway's
    assert any("5432" in p and "tcp_proxy" in p for p in places)
    assert all(n == 0 for n in _logs_by_place("").values())


def test_default_providers_name_the_file_logs_in_place_of_access_log_file() -> None:
    """defaultProviders.accessLogging (no Telemetry resource): istiod's built-in ``envoy``
    provider formats as the mesh config says; another file provider by its own path and format
    (labels as JSON, omitEmptyValues); sorted by name; an access log service whose service is
    not found logs nothing (test_telemetry_access_log.py has one found)."""
    mesh = {
        "accessLogFile": "/dev/ignored",  # the providers rule when named
        "accessLogEncoding": "JSON",
        "defaultProviders": {"accessLogging": ["envoy", "audit", "otel"]},
        "extensionProviders": [
            {"name": "audit", "envoyFileAccessLog": {"path": "/var/log/audit.log", "omitEmptyValues": True,
                                                    "logFormat": {"labels": {"code": "%RESPONSE_CODE%"}}}},
            {"name": "otel", "envoyOtelAls": {"service": "otel.example.com", "port": 4317}},
        ],
    }  # fmt: skip
    audit = file_log(jsonFormat={"code": "%RESPONSE_CODE%"}, jsonFormatOptions={}, omitEmptyValues=True)
    audit["typedConfig"]["path"] = "/var/log/audit.log"
    assert logged(mesh) == [audit, file_log(jsonFormat=JSON_FORMAT, jsonFormatOptions={})]
    text = {"defaultProviders": {"accessLogging": ["audit"]},
            "extensionProviders": [{"name": "audit", "envoyFileAccessLog": {"logFormat": {"text": "%RESPONSE_CODE%"}}}]}
    [one] = logged(text, listener=True)
    assert one["typedConfig"]["path"] == "/dev/stdout" and one["filter"] == {"responseFlagFilter": {"flags": ["NR"]}}
    assert one["typedConfig"]["logFormat"]["textFormatSource"]["inlineString"] == "%RESPONSE_CODE%\n"
