"""When the CA's root changes, the runtime's hook (``Runtime.root_changed``, which the CA code
calls after replacing the CA) re-issues the webhook certificate under the new root and the
caBundle of pilotfish's webhook configurations follows, against a real kube-apiserver, with the
chart's RBAC; a configuration of its revision created while it runs is patched too."""

from __future__ import annotations

import asyncio
import base64
import copy
import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from cryptography import x509

from app.security.ca import CertificateAuthority
from app.settings import Settings
from tests.support.cluster import REPO, Cluster, helm
from tests.support.runtime import running

ADMISSION = "admissionregistration.k8s.io/v1"
KIND = "ValidatingWebhookConfiguration"


def chart_validator() -> dict[str, Any]:
    rendered = subprocess.run(
        [str(helm()), "template", "pilotfish", str(REPO / "charts" / "pilotfish"), "--namespace", "istio-system"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    [config] = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == KIND]
    for webhook in config["webhooks"]:  # nothing is called here: an address nothing serves
        webhook["clientConfig"] = {"url": "https://127.0.0.1:9/validate"}
    return dict(config)


async def eventually(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not await asyncio.to_thread(check):
            await asyncio.sleep(0.1)


async def test_a_new_root_is_served_and_patched_into_the_ca_bundles(
    kube: Cluster, pilotfish_kubeconfig: Path, tmp_path: Path
) -> None:
    validator = chart_validator()
    default_validator = copy.deepcopy(validator)  # as Istio's base chart names its own
    default_validator["metadata"]["name"] = "istiod-default-validator"
    names = [validator["metadata"]["name"], "istiod-default-validator"]
    await asyncio.to_thread(kube.apply, validator)

    def bundles(pem: str) -> bool:
        encoded = base64.b64encode(pem.encode()).decode()
        configs = [kube.get(ADMISSION, KIND, "", name) for name in names]
        return all(
            c is not None and [h["clientConfig"].get("caBundle") for h in c["webhooks"]] == [encoded] for c in configs
        )

    settings = Settings(
        config_dir=None,
        kubeconfig=pilotfish_kubeconfig,
        xds_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        secure_xds_address="127.0.0.1:0",
        webhook_address="127.0.0.1:0",
        revision="default",
        ca_dir=tmp_path / "ca",
    )
    try:
        async with running(settings) as runtime:
            assert runtime.ca is not None and runtime.webhook_certificate is not None
            await asyncio.to_thread(kube.apply, default_validator)  # created while pilotfish runs
            await eventually("the first root patched", lambda: bundles(runtime.ca.root_pem))  # type: ignore[union-attr]

            rotated = CertificateAuthority.self_signed("cluster.local")
            runtime.ca = rotated
            runtime.root_changed(rotated.root_pem)
            served = x509.load_pem_x509_certificate(runtime.webhook_certificate.certificate.encode())
            served.verify_directly_issued_by(rotated.signing_cert)
            await eventually("the new root patched", lambda: bundles(rotated.root_pem))
    finally:
        for name in names:
            await asyncio.to_thread(kube.delete, ADMISSION, KIND, "", name)


async def test_the_ca_issued_webhook_serves_injection_as_the_chart_runs_it(
    kube: Cluster, pilotfish_kubeconfig: Path, tmp_path: Path
) -> None:
    """The chart's default (the CA on, no --webhook-cert): the MutatingWebhookConfiguration calls
    ``/inject`` on the same server as ``/validate``, so it must answer with the injecting patch
    (a 404 there fails every pod creation in an injected namespace)."""
    settings = Settings(
        config_dir=None,
        kubeconfig=pilotfish_kubeconfig,
        xds_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        secure_xds_address="127.0.0.1:0",
        webhook_address="127.0.0.1:0",
        revision="default",
        ca_dir=tmp_path / "ca",
    )
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hello"},
           "spec": {"containers": [{"name": "hello", "image": "example.com/hello:1"}]}}  # fmt: skip
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": "CREATE", "namespace": "shop", "object": pod},
    }
    async with running(settings) as runtime:
        assert runtime.webhook is not None and runtime.webhook_certificate is not None
        trusting = ssl.create_default_context(cadata=runtime.webhook_certificate.ca_bundle)
        url = f"https://127.0.0.1:{runtime.webhook.port}/inject"
        async with aiohttp.ClientSession() as session, session.post(url, json=review, ssl=trusting) as response:
            assert response.status == 200, await response.text()
            answer = (await response.json())["response"]
    assert answer["allowed"] is True and answer["patchType"] == "JSONPatch", answer
    assert "istio-proxy" in base64.b64decode(answer["patch"]).decode()
