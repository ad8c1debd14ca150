"""The chart's validating webhook fails closed (issue 24, item 7), and its caBundle is pilotfish's to
patch.

istiod's chart renders ``failurePolicy: Ignore`` only until its webhook controller, having patched
in the caBundle, sees a dry run of an invalid Gateway refused and switches every webhook to
``Fail`` (pkg/webhooks/validation/controller). pilotfish patches the caBundle (its CA's root,
app/webhook/ca_bundle.py) but does not switch the policy, so the chart renders ``Fail``: a review
pilotfish cannot give refuses the object rather than admitting it unvalidated.
``webhook.failurePolicy`` still chooses otherwise."""

from __future__ import annotations

from typing import Any

from tests.helm.rendering import assert_valid, render


def validator(*values: str) -> list[dict[str, Any]]:
    docs = render(*values)
    assert_valid(docs)
    [config] = [doc for doc in docs if doc["kind"] == "ValidatingWebhookConfiguration"]
    return list(config["webhooks"])


def test_the_webhook_fails_closed_by_default_with_the_ca_bundle_left_to_pilotfish() -> None:
    hooks = validator()
    assert [hook["failurePolicy"] for hook in hooks] == ["Fail"]
    assert [hook["clientConfig"].get("caBundle") for hook in hooks] == [None]


def test_ignore_is_still_a_choice() -> None:
    assert [hook["failurePolicy"] for hook in validator("--set", "webhook.failurePolicy=Ignore")] == ["Ignore"]


def test_without_the_ca_the_given_bundle_is_trusted() -> None:
    values = (
        "--set",
        "pilot.ca.enabled=false",
        "--set",
        "webhook.certSecretName=tls",
        "--set",
        "webhook.caBundle=Q0E=",
    )
    assert [hook["clientConfig"]["caBundle"] for hook in validator(*values)] == ["Q0E="]
