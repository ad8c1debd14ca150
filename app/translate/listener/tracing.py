"""The tracing settings of an HTTP connection manager, as istiod configures them
(pilot/pkg/networking/core/tracing.go configureTracingFromTelemetry).

With no Telemetry configuring tracing and no ``defaultProviders.tracing``, the mesh config's
settings: on when ``enableTracing`` (default true), sampling from the proxy config, Istio's own
tags and the proxy config's custom tags, the tracer the agent's bootstrap names.

Otherwise the ``TracingSpec`` of the listener's mode (app/model/telemetry.py: outbound and gateway
listeners are CLIENT, inbound SERVER) names an extension provider of the mesh config. Zipkin,
Datadog, SkyWalking and OpenTelemetry trace (their service looked up as istiod's LookupCluster);
a disabled spec, another kind of provider or a service not found configures no tracing. The
provider's ``max_tag_length``, the spec's sampling (else the proxy config's; 100 % under an
OpenTelemetry sampler), its custom tags (else the proxy config's) and ``useRequestIdForTraceSampling``
apply. What of the proxy a provider's config reads is resolved into the ``TraceChoice`` value,
which keys the listeners built from it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from envoy.config.core.v3 import base_pb2, extension_pb2, grpc_service_pb2, http_service_pb2, http_uri_pb2
from envoy.config.trace.v3 import datadog_pb2, opentelemetry_pb2, skywalking_pb2, zipkin_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.tracers.opentelemetry.resource_detectors.v3 import (
    dynatrace_resource_detector_pb2,
    environment_resource_detector_pb2,
)
from envoy.extensions.tracers.opentelemetry.samplers.v3 import dynatrace_sampler_pb2
from envoy.type.tracing.v3.custom_tag_pb2 import CustomTag
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message

from app.api.mesh import MeshConfig
from app.api.mesh import Tracing as ProxyTracing
from app.model.proxy import Proxy, ProxyType
from app.model.service import Service
from app.model.telemetry import CustomTag as TelemetryTag
from app.model.telemetry import TracingSpec
from app.translate.listener.lookup import fetch_provider, lookup_cluster

CANONICAL_NAME_LABEL = "service.istio.io/canonical-name"
CANONICAL_REVISION_LABEL = "service.istio.io/canonical-revision"
# the proxy labels the tags read: a class of proxies sharing listeners must agree on them
TRACING_LABELS = (CANONICAL_NAME_LABEL, CANONICAL_REVISION_LABEL)
DEFAULT_SAMPLING = 1.0  # PILOT_TRACE_SAMPLING default
_RBAC_FILTER = "envoy.filters.http.rbac"
# istiod optionalPolicyTags: the dry-run results its RBAC shadow rules leave in dynamic metadata
# (authz model RBACShadowRules{Allow,Deny}StatPrefix + RBACShadow{EffectivePolicyID,EngineResult})
_DRY_RUN_TAGS = (
    ("istio.authorization.dry_run.allow_policy.name", "istio_dry_run_allow_shadow_effective_policy_id"),
    ("istio.authorization.dry_run.allow_policy.result", "istio_dry_run_allow_shadow_engine_result"),
    ("istio.authorization.dry_run.deny_policy.name", "istio_dry_run_deny_shadow_effective_policy_id"),
    ("istio.authorization.dry_run.deny_policy.result", "istio_dry_run_deny_shadow_engine_result"),
)
# the extension providers that trace, by the Envoy tracer they configure
_TRACERS = {
    "zipkin": "envoy.tracers.zipkin",
    "datadog": "envoy.tracers.datadog",
    "skywalking": "envoy.tracers.skywalking",
    "opentelemetry": "envoy.tracers.opentelemetry",
}
_ENVIRONMENT_DETECTOR = "envoy.tracers.opentelemetry.resource_detectors.environment"
_DYNATRACE_DETECTOR = "envoy.tracers.opentelemetry.resource_detectors.dynatrace"
_DYNATRACE_SAMPLER = "envoy.tracers.opentelemetry.samplers.dynatrace"
_VERSION = re.compile(r"^([1-9]+)\.([0-9]+)")
_LATEST = (65535, 65535)  # istiod ParseIstioVersion of no version: MaxIstioVersion
_Provider = MeshConfig.ExtensionProvider


class TraceChoice(NamedTuple):
    """What a listener class's HTTP connection managers trace with: the Telemetry spec of its
    mode (None: the mesh config's settings), and for a provider that traces, its service's
    hostname and outbound cluster (a Dynatrace sampler's own service's too) and what its config
    reads of the proxy; ``usable`` False when the provider cannot trace (not tracing: no tracing
    is configured)."""

    spec: TracingSpec | None = None
    usable: bool = False
    hostname: str = ""
    cluster: str = ""
    sampler_hostname: str = ""
    sampler_cluster: str = ""
    service_cluster: str = ""  # the node's cluster: the Datadog and OpenTelemetry service name
    version: tuple[int, int] = _LATEST  # the proxy's Istio version: Zipkin's config depends on it


LEGACY = TraceChoice()  # the mesh config's tracing settings


def istio_version(version: str) -> tuple[int, int]:
    """istiod ParseIstioVersion's major and minor ("release-" dropped; none or unparsable: the
    latest)."""
    found = _VERSION.match(version.removeprefix("release-"))
    return (int(found.group(1)), int(found.group(2))) if found else _LATEST


def resolve_tracing(
    mesh: MeshConfig, spec: TracingSpec | None, by_hostname: Mapping[str, Mapping[str, Service]], proxy: Proxy
) -> TraceChoice:
    """The tracing of a proxy's listeners of one mode: ``spec`` with its provider's services
    looked up (istiod configureFromProviderConfig; a lookup that fails leaves it unusable)."""
    if spec is None:
        return LEGACY
    provider = fetch_provider(mesh, spec.provider) if spec.provider is not None and not spec.disabled else None
    kind = provider.WhichOneof("provider") if provider is not None else None
    if provider is None or kind not in _TRACERS:
        return TraceChoice(spec)
    config = getattr(provider, kind)
    hostname, cluster, error = lookup_cluster(config.service, config.port, by_hostname)
    if error:
        return TraceChoice(spec)
    sampler = ("", "")
    if kind == "opentelemetry" and config.HasField("dynatrace_sampler"):
        api = config.dynatrace_sampler.http_service
        if config.dynatrace_sampler.HasField("http_service"):
            found = lookup_cluster(api.service, api.port, by_hostname)
            if found[2]:
                return TraceChoice(spec)
            sampler = found[:2]
        elif not config.HasField("http"):
            return TraceChoice(spec)  # the sampler has no HTTP settings to borrow
    service_cluster = proxy.service_cluster if kind in ("datadog", "opentelemetry") else ""
    return TraceChoice(spec, True, hostname, cluster, *sampler, service_cluster, istio_version(proxy.istio_version))


def request_id_for_sampling(choice: TraceChoice) -> bool:
    """The UUID request id extension's ``use_request_id_for_trace_sampling``: the spec's when it
    traces through a provider, else true (istiod's default extension)."""
    spec = choice.spec
    return spec.use_request_id if spec is not None and choice.usable else True


def hcm_tracing(mesh: MeshConfig, proxy: Proxy, choice: TraceChoice) -> hcm_pb2.HttpConnectionManager.Tracing | None:
    """istiod configureTracingFromTelemetry: None when the listener does not trace."""
    settings = mesh.default_config.tracing
    spec = choice.spec
    if spec is None:
        return _mesh_tracing(mesh, proxy, settings)
    if not choice.usable:
        return None
    provider = fetch_provider(mesh, spec.provider or "")
    assert provider is not None  # resolve_tracing found it
    kind = provider.WhichOneof("provider") or ""
    config = getattr(provider, kind)
    out = hcm_pb2.HttpConnectionManager.Tracing()
    if proxy.type is ProxyType.ROUTER or kind == "skywalking":
        out.spawn_upstream_span.value = True
    out.provider.name = _TRACERS[kind]
    out.provider.typed_config.CopyFrom(_pack(_tracer(kind, config, choice)))
    max_tag = 0 if kind == "skywalking" else config.max_tag_length
    if max_tag:
        out.max_path_tag_length.value = max_tag
    custom_sampler = kind == "opentelemetry" and config.HasField("dynatrace_sampler")
    if custom_sampler:
        sampling = 100.0  # every span reaches the sampler, which decides
    elif spec.sampling is not None:
        sampling = spec.sampling
    else:
        sampling = _sampling(settings.sampling)
    _set_sampling(out, sampling)
    tags = [*_service_tags(proxy), *_dry_run_tags()] if spec.istio_tags else []
    if spec.custom_tags:
        tags.extend(_telemetry_tags(spec.custom_tags, choice.version >= (1, 29)))
    else:
        tags.extend(_proxy_config_tags(settings))
    out.custom_tags.extend(sorted(tags, key=lambda t: t.tag))
    if not max_tag and settings.max_path_tag_length:
        out.max_path_tag_length.value = settings.max_path_tag_length
    return out


def _mesh_tracing(
    mesh: MeshConfig, proxy: Proxy, settings: ProxyTracing
) -> hcm_pb2.HttpConnectionManager.Tracing | None:
    """Without Telemetry tracing: None when ``enableTracing`` is off."""
    if not mesh.enable_tracing:
        return None
    out = hcm_pb2.HttpConnectionManager.Tracing()
    _set_sampling(out, _sampling(settings.sampling))
    enable_istio_tags = settings.enable_istio_tags.value if settings.HasField("enable_istio_tags") else True
    tags = [*_service_tags(proxy), *_dry_run_tags()] if enable_istio_tags else []
    tags.extend(_proxy_config_tags(settings))
    # istiod sorts them by name (the proxy config's tags come from a map)
    out.custom_tags.extend(sorted(tags, key=lambda t: t.tag))
    if settings.max_path_tag_length:
        out.max_path_tag_length.value = settings.max_path_tag_length
    return out


def _set_sampling(out: hcm_pb2.HttpConnectionManager.Tracing, random: float) -> None:
    """istiod configureSampling."""
    out.client_sampling.value = 100.0
    out.overall_sampling.value = 100.0
    out.random_sampling.value = random


def _pack(msg: Message) -> any_pb2.Any:
    out = any_pb2.Any()
    out.Pack(msg)
    return out


def _tracer(kind: str, config: Message, choice: TraceChoice) -> Message:
    """The Envoy tracer's config (istiod zipkinConfig, datadogConfig, skywalkingConfig, otelConfig)."""
    out: Message
    if kind == "zipkin":
        assert isinstance(config, _Provider.ZipkinTracingProvider)
        out = _zipkin(config, choice)
    elif kind == "datadog":
        out = datadog_pb2.DatadogConfig(
            collector_cluster=choice.cluster, service_name=choice.service_cluster, collector_hostname=choice.hostname
        )
    elif kind == "skywalking":
        target = grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=choice.cluster, authority=choice.hostname)
        out = skywalking_pb2.SkyWalkingConfig(grpc_service=grpc_service_pb2.GrpcService(envoy_grpc=target))
    else:
        assert isinstance(config, _Provider.OpenTelemetryTracingProvider)
        out = _opentelemetry(config, choice)
    return out


def _zipkin(config: _Provider.ZipkinTracingProvider, choice: TraceChoice) -> zipkin_pb2.ZipkinConfig:
    """An Istio 1.29+ proxy (or one that names no version) gets the collector as an HTTP
    service (timeout 5 s unless set, the provider's headers); an older one the legacy fields."""
    path = config.path or "/api/v2/spans"
    out = zipkin_pb2.ZipkinConfig(collector_endpoint_version=zipkin_pb2.ZipkinConfig.HTTP_JSON)
    out.trace_id_128bit = not config.enable_64bit_trace_id
    out.shared_span_context.value = False
    if choice.version >= (1, 29):
        uri = out.collector_service.http_uri
        uri.uri = f"http://{choice.hostname}{path}"
        uri.cluster = choice.cluster
        uri.timeout.CopyFrom(config.timeout if config.HasField("timeout") else duration_pb2.Duration(seconds=5))
        out.collector_service.request_headers_to_add.extend(_headers(config.headers))
    else:
        out.collector_cluster = choice.cluster
        out.collector_endpoint = path
        out.collector_hostname = choice.hostname
    if choice.version >= (1, 28):
        with_w3c = _Provider.ZipkinTracingProvider.USE_B3_WITH_W3C_PROPAGATION
        if config.trace_context_option == with_w3c:
            out.trace_context_option = zipkin_pb2.ZipkinConfig.USE_B3_WITH_W3C_PROPAGATION
    return out


def _opentelemetry(
    config: _Provider.OpenTelemetryTracingProvider, choice: TraceChoice
) -> opentelemetry_pb2.OpenTelemetryConfig:
    out = opentelemetry_pb2.OpenTelemetryConfig(service_name=choice.service_cluster)
    if config.HasField("http"):
        http = config.http
        out.http_service.CopyFrom(_http_service(_join(choice.hostname, http.path), choice.cluster, http))
    else:
        grpc = out.grpc_service
        grpc.envoy_grpc.cluster_name = choice.cluster
        grpc.envoy_grpc.authority = choice.hostname
        if config.grpc.HasField("timeout"):
            grpc.timeout.CopyFrom(config.grpc.timeout)
        for header in config.grpc.initial_metadata:
            grpc.initial_metadata.add(key=header.name, value=_header_value(header))
    detectors = config.resource_detectors
    if detectors.HasField("environment"):
        out.resource_detectors.add(name=_ENVIRONMENT_DETECTOR).typed_config.Pack(
            environment_resource_detector_pb2.EnvironmentResourceDetectorConfig()
        )
    if detectors.HasField("dynatrace"):
        out.resource_detectors.add(name=_DYNATRACE_DETECTOR).typed_config.Pack(
            dynatrace_resource_detector_pb2.DynatraceResourceDetectorConfig()
        )
    if config.HasField("dynatrace_sampler"):
        out.sampler.CopyFrom(_dynatrace_sampler(config, choice))
    return out


def _dynatrace_sampler(
    config: _Provider.OpenTelemetryTracingProvider, choice: TraceChoice
) -> extension_pb2.TypedExtensionConfig:
    """istiod configureDynatraceSampler: its own API service, or the OTLP HTTP exporter's host,
    timeout and headers."""
    sampler = config.dynatrace_sampler
    out = dynatrace_sampler_pb2.DynatraceSamplerConfig(
        tenant=sampler.tenant, cluster_id=sampler.cluster_id, root_spans_per_minute=sampler.root_spans_per_minute
    )
    if sampler.HasField("http_service"):
        api = sampler.http_service.http
        uri = _join(choice.sampler_hostname, api.path)
        out.http_service.CopyFrom(_http_service(uri, choice.sampler_cluster, api))
    else:
        uri = _join(choice.hostname, "api/v2/samplingConfiguration")
        out.http_service.CopyFrom(_http_service(uri, choice.cluster, config.http))
    typed = extension_pb2.TypedExtensionConfig(name=_DYNATRACE_SAMPLER)
    typed.typed_config.Pack(out)
    return typed


def _http_service(uri: str, cluster: str, http: _Provider.HttpService) -> http_service_pb2.HttpService:
    out = http_service_pb2.HttpService(http_uri=http_uri_pb2.HttpUri(uri=uri, cluster=cluster))
    if http.HasField("timeout"):
        out.http_uri.timeout.CopyFrom(http.timeout)
    out.request_headers_to_add.extend(_headers(http.headers))
    return out


def _join(host: str, path: str) -> str:
    """Go's url.JoinPath of a bare host and a path: one slash between them."""
    path = path.lstrip("/")
    return f"{host}/{path}" if path else host


def _headers(headers: Sequence[_Provider.HttpHeader]) -> list[base_pb2.HeaderValueOption]:
    """istiod buildHTTPHeaders: each set, overwriting what the request has."""
    action = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
    values = [base_pb2.HeaderValue(key=h.name, value=_header_value(h)) for h in headers]
    return [base_pb2.HeaderValueOption(append_action=action, header=value) for value in values]


def _header_value(header: _Provider.HttpHeader) -> str:
    """istiod getHeaderValue: the value, or the control plane's environment variable it names
    (how a token reaches the collector without being written in the mesh config)."""
    if header.WhichOneof("header_value") == "env_name":
        return os.environ.get(header.env_name, "")
    return header.value


def _telemetry_tags(tags: Sequence[TelemetryTag], formatter: bool) -> list[CustomTag]:
    """istiod buildCustomTagsFromProvider (a formatter tag only for an Istio 1.29+ proxy)."""
    out = []
    for tag in tags:
        t = CustomTag(tag=tag.tag)
        if tag.kind == "environment":
            t.environment.name = tag.value
            t.environment.default_value = tag.default
        elif tag.kind == "header":
            t.request_header.name = tag.value
            t.request_header.default_value = tag.default
        elif tag.kind == "literal":
            t.literal.value = tag.value
        elif tag.kind == "formatter":
            if not formatter:
                continue
            t.value = tag.value
        out.append(t)
    return out


def _sampling(configured: float) -> float:
    """istiod proxyConfigSamplingValue: the proxy config's percentage when set, 1 when over 100."""
    if configured == 0.0:
        return DEFAULT_SAMPLING
    return 1.0 if configured > 100.0 else configured


def _literal(tag: str, value: str) -> CustomTag:
    out = CustomTag(tag=tag)
    out.literal.value = value
    return out


def _service_tags(proxy: Proxy) -> list[CustomTag]:
    """istiod buildServiceTags: who the proxy is, "unknown" (revision "latest") where unsaid."""
    return [
        _literal("istio.canonical_revision", proxy.labels.get(CANONICAL_REVISION_LABEL) or "latest"),
        _literal("istio.canonical_service", proxy.labels.get(CANONICAL_NAME_LABEL) or "unknown"),
        _literal("istio.mesh_id", proxy.mesh_id or "unknown"),
        _literal("istio.namespace", proxy.namespace or "default"),
        _literal("istio.cluster_id", proxy.cluster_id or "unknown"),
    ]


def _dry_run_tags() -> list[CustomTag]:
    out = []
    for tag, key in _DRY_RUN_TAGS:
        t = CustomTag(tag=tag)
        t.metadata.kind.request.SetInParent()
        t.metadata.metadata_key.key = _RBAC_FILTER
        t.metadata.metadata_key.path.add(key=key)
        out.append(t)
    return out


def _proxy_config_tags(settings: ProxyTracing) -> list[CustomTag]:
    """istiod buildCustomTagsFromProxyConfig: environment, header and literal tags."""
    out = []
    for name, spec in settings.custom_tags.items():
        kind = spec.WhichOneof("type")
        t = CustomTag(tag=name)
        if kind == "environment":
            t.environment.name = spec.environment.name
            t.environment.default_value = spec.environment.default_value
        elif kind == "header":
            t.request_header.name = spec.header.name
            t.request_header.default_value = spec.header.default_value
        elif kind == "literal":
            t.literal.value = spec.literal.value
        else:
            continue  # an empty tag: istiod skips it too
        out.append(t)
    return out
