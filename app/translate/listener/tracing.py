"""The tracing settings of an HTTP connection manager, as istiod configures them without the
Telemetry API (pilot/pkg/networking/core/tracing.go, configureTracingFromTelemetry's fallback to
mesh config): on when ``enableTracing`` (default true), sampling from the proxy config, Istio's
own tags and the proxy config's custom tags. The tracer itself is the one the agent's bootstrap
names. Telemetry resources and ``defaultProviders.tracing`` (istiod's provider path) are not
modelled: with a default tracing provider set, no tracing is configured here.
"""

from __future__ import annotations

from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.type.tracing.v3.custom_tag_pb2 import CustomTag

from app.api.mesh import MeshConfig
from app.api.mesh import Tracing as ProxyTracing
from app.model.proxy import Proxy

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


def hcm_tracing(mesh: MeshConfig, proxy: Proxy) -> hcm_pb2.HttpConnectionManager.Tracing | None:
    """istiod configureTracingFromTelemetry with no Telemetry config: None when tracing is off."""
    if not mesh.enable_tracing or len(mesh.default_providers.tracing):
        return None
    settings = mesh.default_config.tracing
    out = hcm_pb2.HttpConnectionManager.Tracing()
    out.client_sampling.value = 100.0
    out.overall_sampling.value = 100.0
    out.random_sampling.value = _sampling(settings.sampling)
    enable_istio_tags = settings.enable_istio_tags.value if settings.HasField("enable_istio_tags") else True
    tags = [*_service_tags(proxy), *_dry_run_tags()] if enable_istio_tags else []
    tags.extend(_proxy_config_tags(settings))
    # istiod sorts them by name (the proxy config's tags come from a map)
    out.custom_tags.extend(sorted(tags, key=lambda t: t.tag))
    if settings.max_path_tag_length:
        out.max_path_tag_length.value = settings.max_path_tag_length
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
