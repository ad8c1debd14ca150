"""Access logging from Telemetry resources, as istiod applies it (pilot/pkg/model/telemetry.go
applicableTelemetries and mergeLogs; pilot/pkg/networking/core/accesslog.go): the root
namespace's, the proxy namespace's, then the selecting Telemetries; CLIENT on outbound and
gateway listeners, SERVER on inbound ones; disabled providers; filter expressions as CEL
extension filters; the mesh config's accessLogFile when no provider is found. And the push: a
changed Telemetry reaches the proxies of its namespace (and of every namespace from the root
namespace) with their new listeners, and no other proxy."""

from __future__ import annotations

import json
from typing import Any

from envoy.config.listener.v3 import listener_pb2
from google.protobuf import json_format

from app.config.loader import load_documents
from app.config.mesh import parse_mesh_config
from app.model.proxy import Proxy
from app.model.telemetry import CLIENT, SERVER, LogProvider, Telemetries
from app.translate.listener.access_log import CEL_FILTER, TEXT_FORMAT
from app.xds.generators.reference import generate_listeners
from app.xds.type_urls import LISTENER
from tests.support.bookinfo_mesh import Mesh
from tests.support.mesh import kube_pod, kube_service, mesh_config_map, push_context, router_proxy, sidecar_proxy

ROOT = "istio-system"
HCM = "envoy.filters.network.http_connection_manager"
TCP = "envoy.filters.network.tcp_proxy"
MESH = """
accessLogFile: /dev/fallback
extensionProviders:
- {name: audit, envoyFileAccessLog: {path: /var/log/audit.log}}
- {name: json, envoyFileAccessLog: {path: /dev/stdout, logFormat: {labels: {code: "%RESPONSE_CODE%"}}}}
- {name: zipkin, zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}}
- name: otel
  envoyOtelAls:
    service: otel-collector.observability.svc.cluster.local
    port: 4317
    logFormat: {labels: {code: "%RESPONSE_CODE%", path: "%REQ_WITHOUT_QUERY(:PATH)%"}}
- name: http-als
  envoyHttpAls:
    service: observability/als.observability.svc.cluster.local
    port: 9000
    logName: web
    additionalRequestHeadersToLog: [x-id]
- {name: tcp-als, envoyTcpAls: {service: als.observability.svc.cluster.local, port: 9001}}
- {name: lost-als, envoyTcpAls: {service: nowhere.example.com, port: 1}}
"""
COLLECTORS = kube_service(
    "otel-collector", "[{name: grpc, port: 4317}]", namespace="observability", cluster_ip="10.96.9.1"
) + kube_service(
    "als",
    "[{name: grpc-http, port: 9000}, {name: grpc-tcp, port: 9001}]",
    namespace="observability",
    cluster_ip="10.96.9.2",
)
SCENE = (
    kube_service("web", "[{name: http, port: 80, targetPort: 8080}, {name: tcp, port: 5432}]", namespace="shop",
                 cluster_ip="10.96.0.5", selector="app: web")
    + kube_pod("web-0", "10.1.0.5", "app: web", namespace="shop", container_ports="[{containerPort: 8080}]")
    + kube_pod("api-0", "10.1.0.6", "app: api", namespace="shop")
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
WEB = sidecar_proxy("web-0.shop", "10.1.0.5", {"app": "web"})
API = sidecar_proxy("api-0.shop", "10.1.0.6", {"app": "api"})
GATEWAY = router_proxy("gw-0.shop", "10.1.0.7", {"istio": "ingressgateway"})


def telemetry(name: str, namespace: str, spec: dict[str, Any], created: str = "2026-01-01T00:00:00Z") -> str:
    meta = {"name": name, "namespace": namespace, "creationTimestamp": created}
    return json.dumps({"apiVersion": "telemetry.istio.io/v1", "kind": "Telemetry", "metadata": meta, "spec": spec})


def logging(*providers: str, **entry: Any) -> dict[str, Any]:
    return {"accessLogging": [{"providers": [{"name": p} for p in providers], **entry}]}


def _places(proxy: Proxy, *docs: str, mesh: str = MESH) -> dict[str, list[dict[str, Any]]]:
    """Each listener's own access logs, and each HCM's and tcp_proxy's, by where they are."""
    push = push_context(SCENE, *docs, mesh=mesh)
    found: dict[str, list[dict[str, Any]]] = {}
    for lst in generate_listeners(proxy, push):
        doc = json_format.MessageToDict(lst)
        found[lst.name] = doc.get("accessLog", [])
        default = [doc["defaultFilterChain"]] if "defaultFilterChain" in doc else []
        for i, chain in enumerate([*doc.get("filterChains", []), *default]):
            for f in chain.get("filters", []):
                if f["name"] in (HCM, TCP) and "blackhole" not in chain.get("name", "").lower():
                    found[f"{lst.name}/{chain.get('name', i)}/{f['name']}"] = f["typedConfig"].get("accessLog", [])
    return found


def _paths(logs: list[dict[str, Any]]) -> list[str]:
    return [log["typedConfig"].get("path", log["name"]) for log in logs]


def _by_direction(places: dict[str, list[dict[str, Any]]]) -> dict[str, set[tuple[str, ...]]]:
    """The paths logged at each place, grouped: inbound (virtualInbound and its chains) and outbound."""
    out: dict[str, set[tuple[str, ...]]] = {"inbound": set(), "outbound": set()}
    for place, logs in places.items():
        out["inbound" if place.startswith("virtualInbound") else "outbound"].add(tuple(_paths(logs)))
    return out


def test_without_telemetry_the_mesh_config_file_logs_everywhere() -> None:
    assert _by_direction(_places(WEB)) == {"inbound": {("/dev/fallback",)}, "outbound": {("/dev/fallback",), ()}}


def test_a_root_namespace_telemetry_logs_every_proxy_to_its_providers_sorted_by_name() -> None:
    root = telemetry("mesh-logs", ROOT, logging("json", "audit"))
    for proxy in (WEB, GATEWAY):
        places = _places(proxy, root)
        logged = {tuple(_paths(logs)) for logs in places.values() if logs}
        assert logged == {("/var/log/audit.log", "/dev/stdout")}, proxy.id
    [listener_log, _] = _places(WEB, root)["virtualInbound"]
    assert listener_log["filter"] == {"responseFlagFilter": {"flags": ["NR"]}}


def test_a_namespace_telemetry_overrides_the_root_one_and_disabled_logs_nothing() -> None:
    root = telemetry("mesh-logs", ROOT, logging("audit"))
    off = telemetry("off", "shop", logging(disabled=True))  # no providers: the parent's, disabled
    assert all(logs == [] for logs in _places(WEB, root, off).values())
    other = telemetry("json", "shop", logging("json"))
    assert {tuple(_paths(v)) for v in _places(WEB, root, other).values() if v} == {("/dev/stdout",)}


def test_a_selecting_telemetry_with_match_server_changes_only_the_selected_workloads_inbound() -> None:
    root = telemetry("mesh-logs", ROOT, logging("audit"))
    server = telemetry(
        "web-server", "shop", {"selector": {"matchLabels": {"app": "web"}}, **logging("json", match={"mode": "SERVER"})}
    )
    web = _by_direction(_places(WEB, root, server))
    assert web["inbound"] == {("/dev/stdout",)}  # SERVER: the selected workload's inbound only
    assert web["outbound"] == {("/var/log/audit.log",), ()}  # the root's, as before
    api = _by_direction(_places(API, root, server))
    assert {p for p in api["inbound"] | api["outbound"] if p} == {("/var/log/audit.log",)}


def test_a_filter_expression_is_a_cel_filter_after_no_route_on_a_listener() -> None:
    spec = logging("audit", filter={"expression": "response.code >= 400"})
    places = _places(WEB, telemetry("errors", "shop", spec))
    cel = {"extensionFilter": {"name": CEL_FILTER, "typedConfig": {
        "@type": "type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter",
        "expression": "response.code >= 400"}}}  # fmt: skip
    [hcm_log] = next(v for k, v in places.items() if k.endswith(HCM))
    assert hcm_log["filter"] == cel
    [listener_log] = places["virtualInbound"]
    assert listener_log["filter"] == {"andFilter": {"filters": [{"responseFlagFilter": {"flags": ["NR"]}}, cel]}}


def test_providers_not_found_or_not_logging_fall_back_to_the_mesh_config_file() -> None:
    # istiod AccessLogging finds no config: setHTTPAccessLog and the others log accessLogFile
    for names in (("nowhere",), ("zipkin",)):
        places = _places(WEB, telemetry("t", "shop", logging(*names)))
        assert {tuple(_paths(v)) for v in places.values() if v} == {("/dev/fallback",)}, names


def test_a_telemetry_with_target_refs_selects_no_sidecar() -> None:
    gateway_ref = {"targetRefs": [{"kind": "Gateway", "group": "gateway.networking.k8s.io", "name": "gw"}]}
    places = _places(WEB, telemetry("t", "shop", {**gateway_ref, **logging("audit")}))
    assert {tuple(_paths(v)) for v in places.values() if v} == {("/dev/fallback",)}


def test_merge_logs_as_istiod() -> None:
    """mergeLogs cases: inheritance of the parent's providers, the last level naming providers
    scopes them, a filter from the last entry naming a provider, modes."""
    mesh = parse_mesh_config({"defaultProviders": {"accessLogging": ["envoy"]}})

    def merged(*specs: tuple[str, dict[str, Any]], mode: int = CLIENT, labels: dict[str, str] | None = None) -> Any:
        docs = [telemetry(f"t{i}", ns, spec, f"2026-01-01T00:00:0{i}Z") for i, (ns, spec) in enumerate(specs)]
        objects = load_documents("\n---\n".join(docs), "t.yaml").objects if docs else []
        return Telemetries.build(objects, mesh).access_logging("shop", labels or {}, mode)

    assert merged() == (LogProvider("envoy", False, None),)
    # no providers: the defaults; disabled in the namespace
    assert merged((ROOT, logging()), ("shop", logging(disabled=True))) == (LogProvider("envoy", True, None),)
    # the namespace's providers replace the root's in scope
    assert merged((ROOT, logging("a")), ("shop", logging("b"))) == (LogProvider("b", False, None),)
    # a mode that does not match leaves the level out of scope
    server_only = logging("b", match={"mode": "SERVER"})
    assert merged((ROOT, logging("a")), ("shop", server_only)) == (LogProvider("a", False, None),)
    assert merged((ROOT, logging("a")), ("shop", server_only), mode=SERVER) == (LogProvider("b", False, None),)
    # a filter goes with its provider; the oldest namespace-wide Telemetry of a namespace only
    filtered = logging("a", filter={"expression": "true"})
    assert merged(("shop", filtered), ("shop", logging("b"))) == (LogProvider("a", False, "true"),)
    # a selecting Telemetry applies to the workloads it matches
    selecting = {"selector": {"matchLabels": {"app": "web"}}, **logging("c")}
    assert merged(("shop", logging("a")), ("shop", selecting)) == (LogProvider("a", False, None),)
    assert merged(("shop", logging("a")), ("shop", selecting), labels={"app": "web"}) == (
        LogProvider("c", False, None),
    )


def _service(log: dict[str, Any]) -> tuple[str, str]:
    grpc = log["typedConfig"]["commonConfig"]["grpcService"]["envoyGrpc"]
    return grpc["clusterName"], grpc["authority"]


def test_access_log_services_log_to_their_cluster_once_their_service_is_found() -> None:
    """istiod telemetryAccessLog: envoyOtelAls, envoyHttpAls and envoyTcpAls by the cluster
    LookupCluster finds (``NAMESPACE/HOST`` or a host one namespace has); one whose service is
    not found logs nothing, and with nothing else found the mesh config's file stands in."""
    selected = telemetry("als", "shop", logging("otel", "http-als", "tcp-als", "lost-als"))
    places = _places(WEB, COLLECTORS, selected)
    [hcm] = [v for k, v in places.items() if k.endswith(HCM)][:1]
    assert [log["name"] for log in hcm] == [
        "envoy.access_loggers.http_grpc", "envoy.access_loggers.open_telemetry", "envoy.tcp_grpc_access_log",
    ]  # sorted by provider name: http-als, otel, tcp-als  # fmt: skip
    http, otel, tcp = hcm
    assert _service(http) == (
        "outbound|9000||als.observability.svc.cluster.local",
        "als.observability.svc.cluster.local",
    )
    assert http["typedConfig"]["commonConfig"]["logName"] == "web"
    assert http["typedConfig"]["commonConfig"]["filterStateObjectsToLog"] == ["upstream_peer", "downstream_peer"]
    assert http["typedConfig"]["additionalRequestHeadersToLog"] == ["x-id"]
    assert tcp["typedConfig"]["commonConfig"]["logName"] == "tcp_envoy_accesslog"
    assert _service(tcp)[0] == "outbound|9001||als.observability.svc.cluster.local"
    collector = "otel-collector.observability.svc.cluster.local"
    assert otel["typedConfig"] == {
        "@type": "type.googleapis.com/envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig",
        "commonConfig": {
            "logName": "otel_envoy_accesslog",
            "grpcService": {"envoyGrpc": {"clusterName": f"outbound|4317||{collector}", "authority": collector}},
            "transportApiVersion": "V3",
            "filterStateObjectsToLog": ["upstream_peer", "downstream_peer", "wasm.upstream_peer",
                                        "wasm.upstream_peer_id", "wasm.downstream_peer", "wasm.downstream_peer_id"],
        },
        "disableBuiltinLabels": True,
        "body": {"stringValue": TEXT_FORMAT},
        "attributes": {"values": [
            {"key": "code", "value": {"stringValue": "%RESPONSE_CODE%"}},
            {"key": "path", "value": {"stringValue": "%REQ_WITHOUT_QUERY(:PATH)%"}},
        ]},
        "formatters": [{"name": "envoy.formatter.req_without_query", "typedConfig": {
            "@type": "type.googleapis.com/envoy.extensions.formatter.req_without_query.v3.ReqWithoutQuery"}}],
    }  # fmt: skip
    # without the collectors' services nothing is found: the mesh config's file
    alone = _places(WEB, selected)
    assert {tuple(_paths(v)) for v in alone.values() if v} == {("/dev/fallback",)}


# --- the push ------------------------------------------------------------------------------

BOOKINFO_TELEMETRY = telemetry("logs", "bookinfo", logging("envoy"))
OTHER_NODE = "sidecar~10.9.0.1~client-0.other~other.svc.cluster.local"


def _listener_logs(out: list[Any]) -> dict[str, list[str]]:
    """The paths each pushed listener's HCMs and tcp_proxies log to."""
    found: dict[str, list[str]] = {}
    for resp in out:
        if resp.type_url != LISTENER:
            continue
        for r in resp.resources:
            doc = json_format.MessageToDict(listener_pb2.Listener.FromString(r.body.value))
            for chain in [
                *doc.get("filterChains", []),
                *([doc["defaultFilterChain"]] if "defaultFilterChain" in doc else []),
            ]:
                for f in chain.get("filters", []):
                    if f["name"] in (HCM, TCP):
                        found.setdefault(r.name, []).extend(_paths(f["typedConfig"].get("accessLog", [])))
    return found


def test_a_telemetry_change_pushes_the_new_access_logs_to_its_namespace_only() -> None:
    mesh = Mesh()
    mesh.apply(mesh_config_map("accessLogFile: ''\n"))
    conn, _ = mesh.connect(listeners=True)
    other, _ = mesh.connect(OTHER_NODE, listeners=True)
    out = conn.on_push(mesh.apply(BOOKINFO_TELEMETRY))
    logs = _listener_logs(out)
    assert logs and all(paths == ["/dev/stdout"] * len(paths) and paths for paths in logs.values()), logs
    assert other.on_push(mesh.pushed.request if mesh.pushed else mesh.apply(BOOKINFO_TELEMETRY)) == []
    # disabled: the next push takes them away again
    out = conn.on_push(mesh.apply(telemetry("logs", "bookinfo", logging(disabled=True))))
    assert _listener_logs(out) and all(paths == [] for paths in _listener_logs(out).values())
    # from the root namespace, every namespace's proxies
    assert other.on_push(mesh.apply(telemetry("mesh", ROOT, logging("envoy"))))


def test_a_selecting_telemetry_splits_a_class_by_the_labels_it_matches() -> None:
    # two proxies of one scope; the Telemetry selects one: each gets its own outbound logs, and
    # assertion mode (every cache hit rebuilt and compared) holds
    mesh = Mesh()
    mesh.apply(mesh_config_map("accessLogFile: ''\n"))
    tool = "sidecar~10.1.0.77~tool-0.bookinfo~bookinfo.svc.cluster.local"
    selected, _ = mesh.connect(listeners=True, labels={"app": "productpage", "version": "v1"})
    plain, _ = mesh.connect(tool, listeners=True, labels={"app": "tool", "version": "v1"})
    spec = {"selector": {"matchLabels": {"app": "productpage"}}, **logging("envoy", match={"mode": "CLIENT"})}
    request = mesh.apply(telemetry("selected", "bookinfo", spec))
    got = _listener_logs(selected.on_push(request))
    assert got and all(paths and set(paths) == {"/dev/stdout"} for paths in got.values()), got
    assert all(paths == [] for paths in _listener_logs(plain.on_push(request)).values())
    # the label the selector reads changes: the proxy leaves the selected class
    request = mesh.apply(telemetry("selected", "bookinfo", {**spec, "selector": {"matchLabels": {"app": "tool"}}}))
    assert all(paths == [] for paths in _listener_logs(selected.on_push(request)).values())
    assert any(paths for paths in _listener_logs(plain.on_push(request)).values())
