"""Tracing from Telemetry resources and ``defaultProviders.tracing``, as istiod configures it
(pilot/pkg/model/telemetry.go Telemetries.Tracing; pilot/pkg/networking/core/tracing.go): the
provider in force per mode (CLIENT: outbound and gateway listeners, SERVER: inbound), its Envoy
tracer with the collector's outbound cluster, sampling, custom tags, the request id's sampling
flag; none when the spec is disabled or the provider cannot trace. And the push: a proxy's node
cluster names the service (Datadog, OpenTelemetry), so proxies of one scope that differ in it get
their own listeners; a Telemetry change reaches the listeners."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml
from envoy.config.listener.v3 import listener_pb2
from google.protobuf import json_format

from app.config.loader import load_documents
from app.config.mesh import parse_mesh_config
from app.model.proxy import Proxy, build_proxy
from app.model.telemetry import CLIENT, SERVER, CustomTag, Telemetries, TracingSpec
from app.xds.generators.reference import generate_listeners
from app.xds.type_urls import LISTENER
from tests.support.bookinfo_mesh import Mesh
from tests.support.mesh import kube_service, mesh_config_map, push_context
from tests.unit.test_telemetry_access_log import GATEWAY, HCM, ROOT, WEB, telemetry
from tests.unit.test_telemetry_access_log import SCENE as SHOP

MESH = """
extensionProviders:
- {name: zipkin, zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411, maxTagLength: 64}}
- name: otel
  opentelemetry:
    service: otel-collector.observability.svc.cluster.local
    port: 4317
    grpc: {timeout: 2s, initialMetadata: [{name: x-tenant, value: shop}]}
    resourceDetectors: {environment: {}}
- name: otel-http
  opentelemetry:
    service: otel-collector.observability.svc.cluster.local
    port: 4318
    http: {path: /v1/traces, timeout: 3s, headers: [{name: x-token, value: t}]}
- {name: datadog, datadog: {service: otel-collector.observability.svc.cluster.local, port: 8126}}
- {name: skywalking, skywalking: {service: otel-collector.observability.svc.cluster.local, port: 11800}}
- {name: lost, zipkin: {service: nowhere.example.com, port: 9411}}
- {name: logs, envoyFileAccessLog: {path: /dev/stdout}}
"""
# the access-log tests' shop (web, a gateway) and the collectors the providers name
SCENE = (
    kube_service("zipkin", "[{name: http, port: 9411}]", namespace=ROOT, cluster_ip="10.96.9.9")
    + kube_service(
        "otel-collector",
        "[{name: grpc, port: 4317}, {name: http, port: 4318}, {name: dd, port: 8126}, {name: sw, port: 11800}]",
        namespace="observability",
        cluster_ip="10.96.9.1",
    )
    + SHOP
)


def tracing(*providers: str, **entry: Any) -> dict[str, Any]:
    return {"tracing": [{"providers": [{"name": p} for p in providers], **entry}]}


def _managers(proxy: Proxy, *docs: str, mesh: str = MESH) -> dict[str, dict[str, Any]]:
    """Each HTTP connection manager's config, by listener and chain, as JSON."""
    push = push_context(SCENE, *docs, mesh=mesh)
    return _hcms(generate_listeners(proxy, push))


def _hcms(listeners: list[listener_pb2.Listener]) -> dict[str, dict[str, Any]]:
    found = {}
    for lst in listeners:
        doc = json_format.MessageToDict(lst)
        default = [doc["defaultFilterChain"]] if "defaultFilterChain" in doc else []
        for i, chain in enumerate([*doc.get("filterChains", []), *default]):
            for f in chain.get("filters", []):
                if f["name"] == HCM:
                    found[f"{lst.name}/{chain.get('name', i)}"] = f["typedConfig"]
    return found


def _tracers(managers: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """The tracer names, inbound (virtualInbound) and outbound."""
    out: dict[str, set[str]] = {"inbound": set(), "outbound": set()}
    for place, hcm in managers.items():
        provider = hcm.get("tracing", {}).get("provider", {}).get("name", "-" if "tracing" not in hcm else "mesh")
        out["inbound" if place.startswith("virtualInbound") else "outbound"].add(provider)
    return out


def _spec(
    *docs: str, mesh: str = MESH, namespace: str = "shop", labels: dict[str, str] | None = None, mode: int = CLIENT
) -> TracingSpec | None:
    objects = load_documents("\n---\n".join(docs), "t.yaml").objects if docs else []
    return Telemetries.build(objects, parse_mesh_config(yaml.safe_load(mesh))).tracing(namespace, labels or {}, mode)


def test_without_telemetry_or_default_provider_the_mesh_config_settings_trace() -> None:
    assert _spec() is None
    tracers = _tracers(_managers(WEB))
    assert tracers == {"inbound": {"mesh"}, "outbound": {"mesh"}}


def test_a_default_provider_traces_every_listener_through_its_collector() -> None:
    mesh = MESH + "defaultProviders: {tracing: [zipkin]}\n"
    managers = _managers(WEB, mesh=mesh)
    assert _tracers(managers) == {"inbound": {"envoy.tracers.zipkin"}, "outbound": {"envoy.tracers.zipkin"}}
    hcm = next(iter(managers.values()))
    trace = hcm["tracing"]
    config = trace["provider"]["typedConfig"]
    # a proxy that names no Istio version is taken as the latest: the collector as an HTTP service
    assert config["collectorService"]["httpUri"] == {
        "uri": "http://zipkin.istio-system.svc.cluster.local/api/v2/spans",
        "cluster": "outbound|9411||zipkin.istio-system.svc.cluster.local",
        "timeout": "5s",
    }
    assert config["traceId128bit"] is True and config["sharedSpanContext"] is False
    assert trace["maxPathTagLength"] == 64
    assert trace["randomSampling"] == {"value": 1.0} and trace["clientSampling"] == {"value": 100.0}
    assert [t["tag"] for t in trace["customTags"]][:2] == [
        "istio.authorization.dry_run.allow_policy.name",
        "istio.authorization.dry_run.allow_policy.result",
    ]
    assert "spawnUpstreamSpan" not in trace  # a sidecar's
    assert hcm["requestIdExtension"]["typedConfig"]["useRequestIdForTraceSampling"] is True


def test_an_older_proxy_gets_zipkins_legacy_collector_fields() -> None:
    old = build_proxy(
        "sidecar~10.1.0.5~web-0.shop~shop.svc.cluster.local", {"LABELS": {"app": "web"}, "ISTIO_VERSION": "1.27.3"}
    )
    managers = _managers(old, telemetry("t", ROOT, tracing("zipkin")))
    config = next(iter(managers.values()))["tracing"]["provider"]["typedConfig"]
    assert config["collectorCluster"] == "outbound|9411||zipkin.istio-system.svc.cluster.local"
    assert config["collectorEndpoint"] == "/api/v2/spans"
    assert config["collectorHostname"] == "zipkin.istio-system.svc.cluster.local"
    assert "collectorService" not in config


def test_modes_namespaces_and_selectors_merge_as_istiod() -> None:
    root = telemetry("mesh", ROOT, tracing("zipkin", randomSamplingPercentage=10))
    ns = telemetry("shop", "shop", tracing("otel", match={"mode": "SERVER"}))
    web = telemetry(
        "web",
        "shop",
        {"selector": {"matchLabels": {"app": "web"}}, **tracing(customTags={"team": {"literal": {"value": "a"}}})},
    )
    client = _spec(root, ns, web, labels={"app": "web"})
    server = _spec(root, ns, web, labels={"app": "web"}, mode=SERVER)
    assert client == TracingSpec("zipkin", sampling=10.0, custom_tags=(CustomTag("team", "literal", "a"),))
    assert server == TracingSpec("otel", sampling=10.0, custom_tags=(CustomTag("team", "literal", "a"),))
    # another workload: the selecting Telemetry does not apply
    assert _spec(root, ns, web, labels={"app": "api"}) == TracingSpec("zipkin", sampling=10.0)
    # an unknown provider leaves none in force: tracing is disabled
    assert _spec(telemetry("t", "shop", tracing("nope"))) == TracingSpec(None, disabled=True)
    assert _spec(root, telemetry("t", "shop", tracing(disableSpanReporting=True))) == TracingSpec(
        "zipkin", disabled=True, sampling=10.0
    )
    # provider names are matched in any case, kept as the mesh config spells them
    assert _spec(telemetry("t", "shop", tracing("ZIPKIN"))) == TracingSpec("zipkin")


def test_each_mode_traces_with_its_own_provider() -> None:
    docs = (
        telemetry("mesh", ROOT, tracing("zipkin")),
        telemetry("shop", "shop", tracing("otel", match={"mode": "SERVER"})),
    )
    assert _tracers(_managers(WEB, *docs)) == {
        "inbound": {"envoy.tracers.opentelemetry"},
        "outbound": {"envoy.tracers.zipkin"},
    }


def test_disabled_or_untraceable_providers_configure_no_tracing() -> None:
    for provider in ("lost", "logs", "nope"):
        managers = _managers(WEB, telemetry("t", "shop", tracing(provider, useRequestIdForTraceSampling=False)))
        assert _tracers(managers) == {"inbound": {"-"}, "outbound": {"-"}}, provider
        # istiod's default request id extension, not the spec's flag
        assert all(h["requestIdExtension"]["typedConfig"]["useRequestIdForTraceSampling"] for h in managers.values())
    managers = _managers(WEB, telemetry("t", "shop", tracing("zipkin", disableSpanReporting=True)))
    assert _tracers(managers) == {"inbound": {"-"}, "outbound": {"-"}}


def test_sampling_custom_tags_and_request_id_follow_the_spec() -> None:
    spec = tracing(
        "zipkin",
        randomSamplingPercentage=2.5,
        enableIstioTags=False,
        useRequestIdForTraceSampling=False,
        customTags={
            "env": {"environment": {"name": "POD_NAME", "defaultValue": "x"}},
            "hdr": {"header": {"name": "x-user"}},
            "fmt": {"formatter": {"value": "%REQ(:PATH)%"}},
        },
    )
    hcm = next(iter(_managers(WEB, telemetry("t", "shop", spec)).values()))
    trace = hcm["tracing"]
    assert trace["randomSampling"] == {"value": 2.5}
    assert trace["customTags"] == [
        {"tag": "env", "environment": {"name": "POD_NAME", "defaultValue": "x"}},
        {"tag": "fmt", "value": "%REQ(:PATH)%"},
        {"tag": "hdr", "requestHeader": {"name": "x-user"}},
    ]
    assert hcm["requestIdExtension"]["typedConfig"]["useRequestIdForTraceSampling"] is False


def test_opentelemetry_datadog_and_skywalking_tracers() -> None:
    node = "sidecar~10.1.0.5~web-0.shop~shop.svc.cluster.local"
    proxy = build_proxy(node, {"LABELS": {"app": "web"}}, service_cluster="web.shop")

    def config(provider: str) -> dict[str, Any]:
        hcm = next(iter(_managers(proxy, telemetry("t", "shop", tracing(provider))).values()))
        return dict(hcm["tracing"]["provider"]["typedConfig"])

    otel = config("otel")
    assert otel["serviceName"] == "web.shop"
    assert otel["grpcService"] == {
        "envoyGrpc": {
            "clusterName": "outbound|4317||otel-collector.observability.svc.cluster.local",
            "authority": "otel-collector.observability.svc.cluster.local",
        },
        "timeout": "2s",
        "initialMetadata": [{"key": "x-tenant", "value": "shop"}],
    }
    assert [d["name"] for d in otel["resourceDetectors"]] == [
        "envoy.tracers.opentelemetry.resource_detectors.environment"
    ]
    http = config("otel-http")["httpService"]
    assert http["httpUri"] == {
        "uri": "otel-collector.observability.svc.cluster.local/v1/traces",
        "cluster": "outbound|4318||otel-collector.observability.svc.cluster.local",
        "timeout": "3s",
    }
    assert http["requestHeadersToAdd"] == [
        {"header": {"key": "x-token", "value": "t"}, "appendAction": "OVERWRITE_IF_EXISTS_OR_ADD"}
    ]
    assert config("datadog") == {
        "@type": "type.googleapis.com/envoy.config.trace.v3.DatadogConfig",
        "collectorCluster": "outbound|8126||otel-collector.observability.svc.cluster.local",
        "serviceName": "web.shop",
        "collectorHostname": "otel-collector.observability.svc.cluster.local",
    }
    hcm = next(iter(_managers(proxy, telemetry("t", "shop", tracing("skywalking"))).values()))
    assert hcm["tracing"]["spawnUpstreamSpan"] is True
    assert "maxPathTagLength" not in hcm["tracing"]


def test_a_gateway_traces_as_a_client_and_spawns_upstream_spans() -> None:
    docs = (telemetry("t", "shop", tracing("zipkin", match={"mode": "CLIENT"})),)
    managers = _managers(GATEWAY, *docs)
    assert managers and all(h["tracing"]["provider"]["name"] == "envoy.tracers.zipkin" for h in managers.values())
    assert all(h["tracing"]["spawnUpstreamSpan"] is True for h in managers.values())


def test_node_clusters_split_a_class_and_a_telemetry_change_reaches_the_listeners() -> None:
    mesh = Mesh()
    mesh.apply(
        mesh_config_map(
            "extensionProviders:\n"
            "- {name: otel, opentelemetry: {service: reviews.bookinfo.svc.cluster.local, port: 9080}}\n"
        )
    )
    tool = "sidecar~10.1.0.77~tool-0.bookinfo~bookinfo.svc.cluster.local"
    first, _ = mesh.connect(listeners=True, service_cluster="productpage.bookinfo")
    second, _ = mesh.connect(tool, listeners=True, service_cluster="tool.bookinfo")
    request = mesh.apply(telemetry("t", "bookinfo", tracing("otel")))

    def names(out: list[Any]) -> set[Any]:
        return _pushed(
            out, lambda h: h.get("tracing", {}).get("provider", {}).get("typedConfig", {}).get("serviceName")
        )

    assert names(first.on_push(request)) == {"productpage.bookinfo"}
    assert names(second.on_push(request)) == {"tool.bookinfo"}
    request = mesh.apply(telemetry("t", "bookinfo", tracing(disableSpanReporting=True)))
    assert names(first.on_push(request)) == {None}


def test_a_provider_the_mesh_config_adds_later_takes_effect_on_the_next_push() -> None:
    mesh = Mesh()
    conn, _ = mesh.connect(listeners=True)
    request = mesh.apply(telemetry("t", "bookinfo", tracing("later")))
    assert _pushed_tracers(conn.on_push(request)) == {"-"}  # named, not defined: no tracing
    provider = "- {name: later, zipkin: {service: reviews.bookinfo.svc.cluster.local, port: 9080}}\n"
    request = mesh.apply(mesh_config_map("extensionProviders:\n" + provider))
    assert _pushed_tracers(conn.on_push(request)) == {"envoy.tracers.zipkin"}


def _pushed_tracers(out: list[Any]) -> set[Any]:
    """The tracer of each HTTP connection manager the push's listeners carry ("-": none)."""
    return _pushed(out, lambda h: h.get("tracing", {}).get("provider", {}).get("name", "-"))


def _pushed(out: list[Any], read: Callable[[dict[str, Any]], Any]) -> set[Any]:
    """What ``read`` finds in each HTTP connection manager of the pushed listeners."""
    listeners = [
        listener_pb2.Listener.FromString(r.body.value)
        for resp in out
        if resp.type_url == LISTENER
        for r in resp.resources
    ]
    return {read(hcm) for hcm in _hcms(listeners).values()}
