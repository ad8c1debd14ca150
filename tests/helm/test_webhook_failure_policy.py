"""The chart's validating webhook fails closed, as istiod's once it serves (issue 24, item 7).

istiod's chart renders ``failurePolicy: Ignore`` only until its webhook controller, having patched
in the caBundle, sees a dry-run of an invalid Gateway refused and switches every webhook to
``Fail`` (pkg/webhooks/validation/controller); given a caBundle at install, the chart renders
``Fail`` itself. This chart always sets the caBundle and pilotfish patches nothing, so it renders
``Fail``: a review pilotfish cannot give refuses the object rather than admitting it unvalidated.
``webhook.failurePolicy`` still chooses otherwise."""

from __future__ import annotations

from typing import Any

from tests.helm.test_chart import assert_valid, render


def policies(*values: str) -> list[Any]:
    docs = render(*values)
    assert_valid(docs)
    [config] = [doc for doc in docs if doc["kind"] == "ValidatingWebhookConfiguration"]
    assert all(hook["clientConfig"].get("caBundle") for hook in config["webhooks"])
    return [hook["failurePolicy"] for hook in config["webhooks"]]


def test_the_webhook_fails_closed_by_default() -> None:
    assert policies() == ["Fail"]


def test_ignore_is_still_a_choice() -> None:
    assert policies("--set", "webhook.failurePolicy=Ignore") == ["Ignore"]
