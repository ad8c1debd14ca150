"""The chart's webhook fails closed, as istiod's once it serves (issue 24, item 7), against the real
kube-apiserver: with the chart's ValidatingWebhookConfiguration (only the address and CA changed,
and the failurePolicy pilotfish switches it to once it serves: tests/e2e/test_webhook_ca_bundle.py)
an Istio object is refused when pilotfish cannot review it, instead of admitted unvalidated; and
an object over 1 MiB, which aiohttp's default body limit answered with 413 (admitted under the
old ``Ignore``), is reviewed like any other: refused with pilotfish's message when invalid."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import trustme

from tests.e2e.test_validating_webhook import chart_webhook, webhook  # noqa: F401 - the fixture
from tests.support.cluster import ApiError, Cluster, free_port


def virtual_service(name: str, hosts: int = 1, regex: str = "") -> dict[str, Any]:
    route: dict[str, Any] = {"route": [{"destination": {"host": "reviews"}}]}
    if regex:
        route["match"] = [{"uri": {"regex": regex}}]
    spec = {"hosts": [f"h{i:05d}.reviews.example.com" for i in range(hosts)], "http": [route]}
    # labelled with the revision the chart's validator selects (istiod's per-revision objectSelector)
    metadata = {"name": name, "labels": {"istio.io/rev": "default"}}
    return {"apiVersion": "networking.istio.io/v1", "kind": "VirtualService", "metadata": metadata, "spec": spec}


@pytest.fixture
def unreachable(kube: Cluster) -> Iterator[str]:
    """The chart's webhook registered for an address nothing serves; the namespace to apply in."""
    config = chart_webhook(f"https://127.0.0.1:{free_port()}/validate", trustme.CA().cert_pem.bytes())
    for hook in config["webhooks"]:  # as pilotfish leaves it once it has served (the chart installs Ignore)
        hook["failurePolicy"] = "Fail"
    kube.apply(config)
    try:
        yield kube.namespace("unreviewed")
    finally:
        kube.delete("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "", config["metadata"]["name"])


def test_an_object_pilotfish_cannot_review_is_refused_not_admitted(kube: Cluster, unreachable: str) -> None:
    with pytest.raises(ApiError) as refused:
        kube.apply(virtual_service("unreviewed"), namespace=unreachable)
    message = json.loads(refused.value.body)["message"]
    assert 'failed calling webhook "rev.validation.istio.io"' in message, message
    assert kube.get("networking.istio.io/v1", "VirtualService", unreachable, "unreviewed") is None


def test_an_object_over_a_mebibyte_is_reviewed(kube: Cluster, webhook: str) -> None:  # noqa: F811
    invalid = virtual_service("big-invalid", hosts=40_000, regex="(?<=a)b")
    assert len(json.dumps(invalid)) > 2**20
    with pytest.raises(ApiError) as refused:
        kube.apply(invalid, namespace=webhook)
    message = json.loads(refused.value.body)["message"]
    assert 'admission webhook "rev.validation.istio.io" denied the request' in message, message[:500]
    assert "/big-invalid: field http[0].match[0].uri.regex" in message, message[:500]
    assert kube.get("networking.istio.io/v1", "VirtualService", webhook, "big-invalid") is None
    [stored] = kube.apply(virtual_service("big-valid", hosts=40_000), namespace=webhook)
    assert len(stored["spec"]["hosts"]) == 40_000
