"""istiod's checks of a Telemetry (pkg/config/validation ValidateTelemetry: the selector or
policy targets, then metrics, tracing and access logging) and the CEL rules the Telemetry CRD
puts on its spec (tag overrides, a reporting interval of at least 1ms).

Each raises FieldError naming the field path; parsing (app/config/schema.py), with the CRD's
OpenAPI bounds (non-empty provider names, custom metric and tag values), came first.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf import duration_pb2

from app.api.istio.telemetry.v1alpha1 import telemetry_pb2 as tpb
from app.config.validation.fields import fail
from app.config.validation.security import check_policy_targets

_TagOperation = tpb.MetricsOverrides.TagOverride.Operation
_MS = 1_000_000


def validate_telemetry(spec: tpb.Telemetry, namespace: str) -> None:
    check_policy_targets(spec)
    for i, metrics in enumerate(spec.metrics):
        _check_metrics(f"metrics[{i}]", metrics)
    for i, tracing in enumerate(spec.tracing):
        _check_tracing(f"tracing[{i}]", tracing)
    for i, logging in enumerate(spec.access_logging):
        path = f"accessLogging[{i}]"
        if logging.HasField("filter"):
            check_filter_expression(f"{path}.filter.expression", logging.filter.expression)
        _check_providers(path, logging.providers)


def _check_providers(path: str, providers: Iterable[tpb.ProviderRef]) -> None:
    """validateTelemetryProviders: every provider named."""
    for i, provider in enumerate(providers):
        if not provider.name:
            raise fail(f"{path}.providers[{i}].name", "providers.name may not be empty")


def _check_metrics(path: str, metrics: tpb.Metrics) -> None:
    """validateTelemetryMetrics and the CRD's rules on tag overrides and the interval."""
    _check_providers(path, metrics.providers)
    if metrics.HasField("reporting_interval") and _nanos(metrics.reporting_interval) < _MS:
        raise fail(f"{path}.reportingInterval", "must be a valid duration greater than 1ms")
    for i, override in enumerate(metrics.overrides):
        here = f"{path}.overrides[{i}]"
        for name in sorted(override.tag_overrides):
            tag = override.tag_overrides[name]
            if tag.operation == _TagOperation.UPSERT and not tag.value:
                raise fail(f"{here}.tagOverrides.{name}.value", "value must be set when operation is UPSERT")
            if tag.operation == _TagOperation.REMOVE and tag.value:
                raise fail(f"{here}.tagOverrides.{name}.value", "value must not be set when operation is REMOVE")
        if override.match.WhichOneof("metric_match") == "custom_metric" and not override.match.custom_metric:
            raise fail(f"{here}.match.customMetric", "customMetric may not be empty")


def _check_tracing(path: str, tracing: tpb.Tracing) -> None:
    """validateTelemetryTracing (its warnings, several tracings or providers, are no errors)."""
    _check_providers(path, tracing.providers)
    percentage = tracing.random_sampling_percentage.value
    if not 0 <= percentage <= 100:
        raise fail(f"{path}.randomSamplingPercentage", "randomSamplingPercentage must be in range [0.0, 100.0]")
    for name in sorted(tracing.custom_tags):
        tag = tracing.custom_tags[name]
        here = f"{path}.customTags.{name}"
        if not name:
            raise fail(f"{path}.customTags", "tag name may not be empty")
        kind = tag.WhichOneof("type")
        if kind == "literal" and not tag.literal.value:
            raise fail(f"{here}.literal.value", "literal tag value may not be empty")
        if kind == "header" and not tag.header.name:
            raise fail(f"{here}.header.name", "header tag name may not be empty")
        if kind == "environment" and not tag.environment.name:
            raise fail(f"{here}.environment.name", "environment tag name may not be empty")


_CLOSING = {"(": ")", "[": "]", "{": "}"}


def check_filter_expression(path: str, expression: str) -> None:
    """What of istiod's validateTelemetryFilter (a CEL parse) is checked here without a CEL
    parser: an expression is there, its brackets balance and its string literals end. Envoy
    would refuse the listener of anything else."""
    if not expression.strip():
        raise fail(path, "must be a valid CEL expression: the expression is empty")
    expected: list[str] = []
    quote = ""
    escaped = False
    for char in expression:
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in _CLOSING:
            expected.append(_CLOSING[char])
        elif char in ")]}" and (not expected or expected.pop() != char):
            raise fail(path, f"must be a valid CEL expression: unbalanced {char!r}")
    if quote:
        raise fail(path, "must be a valid CEL expression: a string literal is not terminated")
    if expected:
        raise fail(path, f"must be a valid CEL expression: {expected[-1]!r} is missing")


def _nanos(d: duration_pb2.Duration) -> int:
    return d.seconds * 1_000_000_000 + d.nanos
