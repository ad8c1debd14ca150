"""The validating webhook as the real API server calls it: the chart's ValidatingWebhookConfiguration
(its rules, failure policy, review versions and revision selector; only the address and CA changed
to reach a local ``pilotfish serve``), registered in kube-apiserver, which then sends pilotfish an
AdmissionReview for every Istio object of its revision (labelled ``istio.io/rev: default``, as
istiod's per-revision validator selects them) a client applies. Valid config with fields Istio defines is admitted (the
hand-written protos once vetoed these cluster-wide), invalid config is refused with pilotfish's
message naming the field."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from tests.e2e.processes import run_pilotfish
from tests.support.cluster import REPO, ApiError, Cluster, free_port, helm
from tests.support.peers import peer_binary


def chart_webhook(url: str, ca_pem: bytes) -> dict[str, Any]:
    rendered = subprocess.run(
        [str(helm()), "template", "pilotfish", str(REPO / "charts" / "pilotfish"), "--namespace", "istio-system"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    [config] = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ValidatingWebhookConfiguration"]
    for webhook in config["webhooks"]:
        webhook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca_pem).decode()}
    return dict(config)


@pytest.fixture
def webhook(kube: Cluster, pilotfish_kubeconfig: Path, tmp_path: Path) -> Iterator[str]:
    """pilotfish serving the webhook, registered in the API server; the namespace to apply in."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(tmp_path / "webhook.crt")
    cert.private_key_pem.write_to_path(tmp_path / "webhook.key")
    port = free_port()
    args = (
        "--webhook-address", f"127.0.0.1:{port}",
        "--webhook-cert", str(tmp_path / "webhook.crt"),
        "--webhook-key", str(tmp_path / "webhook.key"),
    )  # fmt: skip
    with run_pilotfish(None, tmp_path, kubeconfig=pilotfish_kubeconfig, extra_args=args):
        config = chart_webhook(f"https://127.0.0.1:{port}/validate", ca.cert_pem.bytes())
        kube.apply(config)
        try:
            yield kube.namespace("webhook")
        finally:
            name = config["metadata"]["name"]
            kube.delete("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "", name)


REQUEST_AUTHENTICATION = """
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, labels: {istio.io/rev: default}}
spec:
  jwtRules:
  - issuer: https://issuer.example.com
    jwks_uri: https://issuer.example.com/jwks
    spaceDelimitedClaims: [scope]
"""
MIRROR_PERCENT = """
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: mirror, labels: {istio.io/rev: default}}
spec:
  hosts: [reviews]
  http:
  - route: [{destination: {host: reviews}}]
    mirror: {host: reviews-shadow}
    mirror_percent: 50
"""
# a regex Envoy's RE2 cannot compile: the CRD's schema lets it through, istiod's validation does not
LOOKBEHIND = """
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: lookbehind, labels: {istio.io/rev: default}}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {regex: "(?<=a)b"}}]
    route: [{destination: {host: reviews}}]
"""


def test_the_api_server_admits_valid_istio_config_through_the_webhook(kube: Cluster, webhook: str) -> None:
    for text in (REQUEST_AUTHENTICATION, MIRROR_PERCENT):
        doc = yaml.safe_load(text)
        [stored] = kube.apply(doc, namespace=webhook)
        assert stored["metadata"]["name"] == doc["metadata"]["name"]


def test_the_api_server_refuses_invalid_istio_config_with_pilotfishs_message(kube: Cluster, webhook: str) -> None:
    with pytest.raises(ApiError) as refused:
        kube.apply(yaml.safe_load(LOOKBEHIND), namespace=webhook)
    assert refused.value.status == 400
    message = json.loads(refused.value.body)["message"]
    assert 'admission webhook "rev.validation.istio.io" denied the request' in message, message
    assert "VirtualService" in message and "/lookbehind: field http[0].match[0].uri.regex" in message, message
    assert kube.get("networking.istio.io/v1", "VirtualService", webhook, "lookbehind") is None


WASM_PLUGIN = """
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: auth, labels: {istio.io/rev: default}}
spec: {url: "oci://example.com/auth:1"}
"""
ENVOY_FILTER = """
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: lua, labels: {istio.io/rev: default}}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    match: {context: SIDECAR_INBOUND}
    patch:
      operation: INSERT_BEFORE
      value:
        name: envoy.filters.http.lua
        typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua, inlineCode: "-- x"}
"""


def _kubectl_apply(kube: Cluster, namespace: str, text: str) -> subprocess.CompletedProcess[str]:
    argv = [
        str(peer_binary("kubectl")),
        "--kubeconfig",
        str(kube.admin_kubeconfig),
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
    ]
    return subprocess.run(argv, input=text, capture_output=True, text=True, timeout=120, check=False)


def test_kubectl_prints_that_a_wasm_plugin_is_stored_but_not_applied(kube: Cluster, webhook: str) -> None:
    """istiod would apply it and pilotfish does not: admitted (as istiod's webhook admits it),
    and the webhook's warning reaches the user through the API server, as kubectl's "Warning:"."""
    done = _kubectl_apply(kube, webhook, WASM_PLUGIN)
    assert done.returncode == 0, done.stderr
    assert "Warning:" in done.stderr and "WasmPlugin" in done.stderr, done.stderr
    assert "not applied (istiod adds its Wasm filter; pilotfish applies no WasmPlugin)" in done.stderr
    assert kube.get("extensions.istio.io/v1alpha1", "WasmPlugin", webhook, "auth") is not None


def test_kubectl_prints_istiods_warning_for_an_envoy_filter(kube: Cluster, webhook: str) -> None:
    """An EnvoyFilter is validated and admitted with the warning istiod's webhook gives every one."""
    done = _kubectl_apply(kube, webhook, ENVOY_FILTER)
    assert done.returncode == 0, done.stderr
    assert "Warning:" in done.stderr and "EnvoyFilter exposes internal implementation details" in done.stderr
    assert kube.get("networking.istio.io/v1alpha3", "EnvoyFilter", webhook, "lua") is not None
