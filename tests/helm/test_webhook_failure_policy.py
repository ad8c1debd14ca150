"""The chart's validator fails open only until pilotfish serves it, as istiod's (issue 24, item 7).

As istiod's chart, it is installed with ``failurePolicy: Ignore`` (Istio config can be written
while the control plane starts) and without a caBundle; pilotfish patches in its CA's root and,
once the API server refuses a dry run of an invalid Gateway through it, switches the policy to
``Fail`` (app/webhook/ca_bundle.py, istiod's validation controller; tests/e2e/
test_webhook_ca_bundle.py). An upgrade leaves the policy out (the API server's default, Fail), so
it does not reopen; ``webhook.failurePolicy=Fail`` fails closed from the start; without the CA
(nothing patched or switched) it is Fail."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helm.rendering import assert_valid, render

NO_CA = ("--set", "pilot.ca.enabled=false", "--set", "webhook.certSecretName=tls", "--set", "webhook.caBundle=Q0E=")


def validator(*values: str) -> list[dict[str, Any]]:
    docs = render(*values)
    assert_valid(docs)
    [config] = [doc for doc in docs if doc["kind"] == "ValidatingWebhookConfiguration"]
    return list(config["webhooks"])


@pytest.mark.parametrize(
    ("values", "policy"),
    [
        ((), "Ignore"),
        (("--is-upgrade",), None),
        (("--set", "webhook.failurePolicy=Fail"), "Fail"),
        (NO_CA, "Fail"),
    ],
    ids=["install", "upgrade", "fail-from-the-start", "no-ca"],
)
def test_the_failure_policy(values: tuple[str, ...], policy: str | None) -> None:
    assert [hook.get("failurePolicy") for hook in validator(*values)] == [policy]


def test_the_ca_bundle_is_left_to_pilotfish_or_given_without_the_ca() -> None:
    assert [hook["clientConfig"].get("caBundle") for hook in validator()] == [None]
    assert [hook["clientConfig"]["caBundle"] for hook in validator(*NO_CA)] == ["Q0E="]
