"""pilotfish's own webhook certificate and its caBundle patching, against a real kube-apiserver.

The chart's MutatingWebhookConfiguration and ValidatingWebhookConfiguration are applied as the
chart renders them (no caBundle; only the address changed to reach a local ``pilotfish serve``),
then pilotfish starts with its CA and without ``--webhook-cert``: it serves its webhooks with a
certificate of its CA, patches the CA's root into the caBundle of the configurations of its
revision (istiod's webhook patcher and validation controller), patches it again when someone
sets it back, leaves other revisions' configurations alone, and the API server then calls its
validating webhook over TLS it verifies; the validator, installed failing open as istiod's, is
switched to Fail once a dry run of invalid config is refused. pilotfish holds only the chart's
RBAC.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from tests.e2e.processes import run_pilotfish
from tests.support.cluster import REPO, ApiError, Cluster, free_port, helm

ADMISSION = "admissionregistration.k8s.io/v1"
MUTATING, VALIDATING = "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"


def chart_webhook_configs(url: str) -> dict[str, dict[str, Any]]:
    """The chart's two webhook configurations by kind, each webhook calling ``url`` + its path."""
    rendered = subprocess.run(
        [str(helm()), "template", "pilotfish", str(REPO / "charts" / "pilotfish"), "--namespace", "istio-system"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    configs = {d["kind"]: d for d in yaml.safe_load_all(rendered) if d and d["kind"] in (MUTATING, VALIDATING)}
    for config in configs.values():
        for webhook in config["webhooks"]:
            assert "caBundle" not in webhook["clientConfig"]  # pilotfish patches it in
            webhook["clientConfig"] = {"url": url + webhook["clientConfig"]["service"]["path"]}
    return configs


def bundles(kube: Cluster, kind: str, name: str) -> list[str | None]:
    config = kube.get(ADMISSION, kind, "", name)
    assert config is not None
    return [hook["clientConfig"].get("caBundle") for hook in config["webhooks"]]


def policies(kube: Cluster, name: str) -> list[str]:
    config = kube.get(ADMISSION, VALIDATING, "", name)
    assert config is not None
    return [hook["failurePolicy"] for hook in config["webhooks"]]


@dataclass
class Configs:
    port: int  # where pilotfish is to serve its webhooks
    by_kind: dict[str, dict[str, Any]]  # the chart's, as applied


@pytest.fixture
def configs(kube: Cluster) -> Iterator[Configs]:
    """The chart's configurations (calling a free local port) and one of another revision,
    applied before pilotfish starts, as ``helm install`` leaves them; deleted after."""
    port = free_port()
    by_kind = chart_webhook_configs(f"https://127.0.0.1:{port}")
    other = copy.deepcopy(by_kind[MUTATING])
    other["metadata"] = {"name": "istio-sidecar-injector-canary", "labels": {"istio.io/rev": "canary"}}
    try:
        kube.apply(*by_kind.values(), other)
        yield Configs(port, by_kind)
    finally:
        for config in (*by_kind.values(), other):
            kube.delete(ADMISSION, config["kind"], "", config["metadata"]["name"])


INVALID = """
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: lookbehind, labels: {istio.io/rev: default}}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {regex: "(?<=a)b"}}]
    route: [{destination: {host: reviews}}]
"""
VALID = """
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, labels: {istio.io/rev: default}}
spec:
  hosts: [reviews]
  http:
  - route: [{destination: {host: reviews}}]
"""


def test_pilotfish_patches_its_root_into_its_webhook_configurations_and_the_api_server_calls_it(
    kube: Cluster, pilotfish_kubeconfig: Path, tmp_path: Path, configs: Configs
) -> None:
    chart = configs.by_kind
    mutating, validating = chart[MUTATING]["metadata"]["name"], chart[VALIDATING]["metadata"]["name"]
    assert (mutating, validating) == ("istio-sidecar-injector", "istio-validator-istio-system")
    args = (
        "--ca-dir", str(tmp_path / "ca"),
        "--secure-xds-address", "127.0.0.1:0",
        "--webhook-address", f"127.0.0.1:{configs.port}",
        "--revision", "default",  # outside a cluster pilotfish patches only when told its revision
    )  # fmt: skip
    with run_pilotfish(None, tmp_path, kubeconfig=pilotfish_kubeconfig, extra_args=args) as pilotfish:
        root = base64.b64encode((tmp_path / "ca" / "root-cert.pem").read_bytes()).decode()
        # every webhook of both configurations of its revision trusts the CA's root
        kube.wait_for("the caBundles patched", lambda: bundles(kube, MUTATING, mutating) == [root] * 4)
        kube.wait_for("the caBundle patched", lambda: bundles(kube, VALIDATING, validating) == [root])
        # installed failing open, as istiod's; switched to Fail once a dry run of an invalid
        # Gateway was refused through pilotfish (istiod's validation controller)
        assert chart[VALIDATING]["webhooks"][0]["failurePolicy"] == "Ignore"
        kube.wait_for("the validator failing closed", lambda: policies(kube, validating) == ["Fail"])
        # the API server now calls the validating webhook over TLS it verifies against that root
        namespace = kube.namespace("webhook-ca")
        with pytest.raises(ApiError) as refused:
            kube.apply(yaml.safe_load(INVALID), namespace=namespace)
        message = json.loads(refused.value.body)["message"]
        assert 'admission webhook "rev.validation.istio.io" denied the request' in message, message
        assert "field http[0].match[0].uri.regex" in message, message
        [stored] = kube.apply(yaml.safe_load(VALID), namespace=namespace)
        assert stored["metadata"]["name"] == "reviews"

        # set back by someone (a foreign CA, as a helm upgrade or a hand edit could): patched again
        foreign = base64.b64encode(trustme.CA().cert_pem.bytes()).decode()
        [hook] = chart[VALIDATING]["webhooks"]
        set_back = {**hook, "clientConfig": {**hook["clientConfig"], "caBundle": foreign}}  # and Ignore
        patched = kube.patch(ADMISSION, VALIDATING, "", validating, {"webhooks": [set_back]})
        assert [(h["clientConfig"]["caBundle"], h["failurePolicy"]) for h in patched["webhooks"]] == [
            (foreign, "Ignore")
        ]
        kube.wait_for("the caBundle patched again", lambda: bundles(kube, VALIDATING, validating) == [root])
        assert policies(kube, validating) == ["Fail"]
        # the webhooks replaced as the chart renders them: no caBundle
        patched = kube.patch(ADMISSION, MUTATING, "", mutating, {"webhooks": chart[MUTATING]["webhooks"]})
        assert [hook["clientConfig"].get("caBundle") for hook in patched["webhooks"]] == [None] * 4
        kube.wait_for("the caBundles patched again", lambda: bundles(kube, MUTATING, mutating) == [root] * 4)
        with pytest.raises(ApiError):
            kube.apply(yaml.safe_load(INVALID), namespace=namespace)

        # another revision's configuration is not pilotfish's: never patched
        assert bundles(kube, MUTATING, "istio-sidecar-injector-canary") == [None] * 4
        log = pilotfish.log()
        assert "caBundle patched" in log and "istio-sidecar-injector-canary" not in log, log
        assert "invalid config refused through the webhook; failing closed" in log, log
