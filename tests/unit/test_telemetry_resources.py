"""Telemetry resources (telemetry.istio.io v1 and v1alpha1) read and validated as istiod's
ValidateTelemetry and the Telemetry CRD's rules: a bad one is refused with one line naming the
object, the field and the reason, from a file and by the validating webhook; a good one loads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.config.loader import load_documents
from app.config.objects import Kind
from app.config.validation.spec import istio_warnings
from app.webhook.admission import review


def telemetry(spec: dict[str, Any], version: str = "v1", name: str = "logs", namespace: str = "shop") -> str:
    meta = {"name": name, "namespace": namespace}
    return json.dumps(
        {"apiVersion": f"telemetry.istio.io/{version}", "kind": "Telemetry", "metadata": meta, "spec": spec}
    )


@pytest.mark.parametrize("version", ["v1", "v1alpha1"])
def test_a_telemetry_of_either_served_version_loads(version: str) -> None:
    spec = {
        "selector": {"matchLabels": {"app": "reviews"}},
        "accessLogging": [
            {
                "providers": [{"name": "envoy"}],
                "match": {"mode": "SERVER"},
                "filter": {"expression": "response.code >= 400"},
            }
        ],
    }
    result = load_documents(telemetry(spec, version), "t.yaml")
    assert not result.rejected, result.rejected
    [obj] = result.objects
    assert obj.kind is Kind.TELEMETRY and obj.meta.namespace == "shop"
    assert obj.spec.access_logging[0].filter.expression == "response.code >= 400"


def test_an_unserved_version_or_another_group_is_not_read_as_telemetry() -> None:
    doc = json.loads(telemetry({}))
    doc["apiVersion"] = "networking.istio.io/v1"
    result = load_documents(json.dumps(doc), "t.yaml")
    assert not result.objects


_UPSERT = {"metrics": [{"overrides": [{"tagOverrides": {"foo": {"operation": "UPSERT"}}}]}]}
_REMOVE = {"metrics": [{"overrides": [{"tagOverrides": {"foo": {"operation": "REMOVE", "value": "x"}}}]}]}
_GATEWAY = {"kind": "Gateway", "group": "gateway.networking.k8s.io", "name": "g"}
_TAG = "metrics[0].overrides[0].tagOverrides.foo.value"
_EXPRESSION = "accessLogging[0].filter.expression"
BAD = [
    ({"accessLogging": [{"providers": [{"name": ""}]}]}, "accessLogging[0].providers[0].name", "must not be empty"),
    ({"accessLogging": [{"filter": {"expression": "response.code >= (400"}}]}, _EXPRESSION, "')' is missing"),
    ({"accessLogging": [{"filter": {"expression": "  "}}]}, _EXPRESSION, "empty"),
    ({"accessLogging": [{"filter": {"expression": "request.path == 'x"}}]}, _EXPRESSION, "not terminated"),
    ({"tracing": [{"randomSamplingPercentage": 101}]}, "tracing[0].randomSamplingPercentage", "100"),
    ({"tracing": [{"customTags": {"t": {"header": {"name": ""}}}}]}, "customTags.t.header.name", "must not be empty"),
    (_UPSERT, _TAG, "value must be set when operation is UPSERT"),
    (_REMOVE, _TAG, "must not be set"),
    ({"metrics": [{"reportingInterval": "0.5ms"}]}, "metrics[0].reportingInterval", "greater than 1ms"),
    ({"selector": {"matchLabels": {"app": "r*"}}}, "selector.matchLabels.app", "wildcard"),
    ({"selector": {"matchLabels": {"app": "r"}}, "targetRefs": [_GATEWAY]}, "targetRef", "only one of selector"),
    ({"targetRefs": [{**_GATEWAY, "namespace": "other"}]}, "targetRefs[0].namespace", "cross namespace"),
    ({"accessLogging": [{"match": {"mode": "SOMETIMES"}}]}, "accessLogging[0].match.mode", "SOMETIMES"),
]


@pytest.mark.parametrize(("spec", "field", "reason"), BAD)
def test_a_bad_telemetry_is_refused_naming_object_field_and_reason(
    spec: dict[str, Any], field: str, reason: str
) -> None:
    good = telemetry({"accessLogging": [{"providers": [{"name": "envoy"}]}]}, name="good")
    result = load_documents(telemetry(spec) + "\n---\n" + good, "t.yaml")
    [rejection] = result.rejected
    message = str(rejection.error)
    assert "Telemetry" in message and "shop/logs" in message and field in message and reason in message, message
    assert "\n" not in message
    assert [o.meta.name for o in result.objects] == ["good"]  # nothing else lost


@pytest.mark.parametrize(("spec", "field", "reason"), BAD[:3])
def test_the_webhook_refuses_a_bad_telemetry_and_admits_a_good_one(
    spec: dict[str, Any], field: str, reason: str
) -> None:
    def ask(doc: str) -> dict[str, Any]:
        request = {"uid": "u", "operation": "CREATE", "namespace": "shop", "object": json.loads(doc)}
        answer: dict[str, Any] = review(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        )
        return answer["response"]

    refused = ask(telemetry(spec))
    assert refused["allowed"] is False
    assert field in refused["status"]["message"] and reason in refused["status"]["message"]
    assert ask(telemetry({"accessLogging": [{"providers": [{"name": "envoy"}]}]}))["allowed"] is True


def test_what_is_not_applied_is_warned_by_field() -> None:
    spec = {
        "metrics": [{"providers": [{"name": "prometheus"}]}],
        "tracing": [{"randomSamplingPercentage": 10}, {"disableContextPropagation": True}],
    }
    [obj] = load_documents(telemetry(spec), "t.yaml").objects
    warnings = istio_warnings(obj.spec)
    assert [w.split(":")[0] for w in warnings] == ["tracing[1].disableContextPropagation", "metrics"]
