"""Fields Istio defines that pilotfish accepts without applying them are named in a warning (the
log, /debug/configz, the webhook's answer), never refused and never dropped in silence."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import yaml
from google.protobuf.descriptor import Descriptor

from app.config.loader import load_documents
from app.config.validation.not_applied import NOT_APPLIED
from app.config.validation.spec import SPEC_MESSAGES, istio_warnings
from app.webhook.admission import review

APP = Path(__file__).resolve().parents[2] / "app"
# fields istiod does not apply either (deprecated, or never implemented): no warning
IGNORED_BY_ISTIOD = {
    "istio.networking.v1alpha3.OutlierDetection.consecutive_errors",  # deprecated; validation only
    "istio.networking.v1alpha3.OutlierDetection.outlier_detection_http_error_codes",  # not read by istiod yet
    "istio.networking.v1alpha3.L4MatchAttributes.source_subnet",  # not read by istiod
    "istio.networking.v1alpha3.EnvoyFilter.Patch.filter_class",  # not read by istiod
}
RULE = """
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews
  trafficPolicy:
    retryBudget: {percent: 25, budgetInterval: 10s}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy: {loadBalancer: {simple: ROUND_ROBIN, zoneAwareLbSetting: {minClusterSize: 3}}}
"""


def _fields(desc: Descriptor, seen: set[str]) -> Iterator[tuple[Descriptor, str]]:
    """Every field reachable from ``desc``, but those inside a field the table names."""
    if desc.full_name in seen or desc.full_name.startswith("google.protobuf."):
        return
    seen.add(desc.full_name)
    for fd in desc.fields:
        yield desc, fd.name
        if fd.name in NOT_APPLIED.get(desc.full_name, {}):
            continue
        target = fd.message_type
        if target is not None and target.GetOptions().map_entry:
            target = target.fields_by_name["value"].message_type
        if target is not None:
            yield from _fields(target, seen)


def test_the_table_names_fields_that_exist() -> None:
    seen: set[str] = set()
    known = {f"{desc.full_name}.{name}" for m in SPEC_MESSAGES.values() for desc, name in _fields(m.DESCRIPTOR, seen)}
    for message, fields in NOT_APPLIED.items():
        for name in fields:
            assert f"{message}.{name}" in known


def test_every_field_pilotfish_never_reads_is_in_the_table() -> None:
    # a field whose name appears nowhere in pilotfish's code is not applied: a pin of istio.io/api
    # that adds one fails here until it is applied or listed
    source = "\n".join(p.read_text() for p in APP.rglob("*.py") if "api" not in p.relative_to(APP).parts[:1])
    source = source.replace((APP / "config" / "validation" / "not_applied.py").read_text(), "")
    seen: set[str] = set()
    unread = {
        f"{desc.full_name}.{name}"
        for m in SPEC_MESSAGES.values()
        for desc, name in _fields(m.DESCRIPTOR, seen)
        if not re.search(rf"\b{name}\b", source)
    }
    listed = {f"{message}.{name}" for message, fields in NOT_APPLIED.items() for name in fields}
    assert unread - IGNORED_BY_ISTIOD <= listed, sorted(unread - IGNORED_BY_ISTIOD - listed)


def test_a_rule_setting_fields_not_applied_loads_with_a_warning_per_field() -> None:
    result = load_documents(RULE, "rule.yaml")
    assert not result.rejected
    [rule] = result.objects
    assert istio_warnings(rule.spec) == [
        "trafficPolicy.retryBudget.budgetInterval: accepted, not applied by pilotfish yet "
        "(Envoy's default interval)",
        "subsets[0].trafficPolicy.loadBalancer.zoneAwareLbSetting: accepted, not applied by pilotfish yet "
        "(Envoy's zone-aware defaults)",
    ]


def test_the_webhook_admits_it_and_hands_the_warnings_to_kubectl() -> None:
    obj = yaml.safe_load(RULE)
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "1", "operation": "CREATE", "namespace": "shop", "object": obj},
    }
    response = review(body)["response"]
    assert response["allowed"] is True
    assert [w.split(":")[0] for w in response["warnings"]] == [
        "trafficPolicy.retryBudget.budgetInterval",
        "subsets[0].trafficPolicy.loadBalancer.zoneAwareLbSetting",
    ]


def test_a_rule_without_them_has_no_warning() -> None:
    text = RULE.replace("budgetInterval: 10s", "minRetryConcurrency: 2")
    [rule] = load_documents(text, "r.yaml").objects
    assert [w for w in istio_warnings(rule.spec) if "budgetInterval" in w] == []
