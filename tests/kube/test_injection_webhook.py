"""The chart's default install, the webhook half, against a real kube-apiserver: pilotfish with
its CA (no --webhook-cert) serves ``/inject`` with a certificate of that CA, patches the CA's
root into the chart's MutatingWebhookConfiguration, and the API server then calls it and stores
a pod of an ``istio-injection=enabled`` namespace injected."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import yaml

from app.settings import Settings
from tests.support.cluster import REPO, Cluster, helm
from tests.support.runtime import running

ADMISSION = "admissionregistration.k8s.io/v1"
KIND = "MutatingWebhookConfiguration"


def chart_injector(url: str) -> dict[str, Any]:
    """The chart's injector configuration, its webhooks calling ``url`` (no Service here)."""
    rendered = subprocess.run(
        [str(helm()), "template", "pilotfish", str(REPO / "charts" / "pilotfish"), "--namespace", "istio-system"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    [config] = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == KIND]
    for webhook in config["webhooks"]:
        webhook["clientConfig"] = {"url": url}
    return dict(config)


async def test_the_api_server_stores_a_pod_injected_through_the_ca_issued_webhook(
    kube: Cluster, pilotfish_kubeconfig: Path, tmp_path: Path
) -> None:
    settings = Settings(
        config_dir=None,
        kubeconfig=pilotfish_kubeconfig,
        xds_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        secure_xds_address="127.0.0.1:0",
        webhook_address="127.0.0.1:0",
        revision="default",
        ca_dir=tmp_path / "ca",
        kube_controllers=False,
    )
    namespace = kube.namespace("injected", labels={"istio-injection": "enabled"})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hello", "labels": {"app": "hello"}},
        "spec": {"containers": [{"name": "hello", "image": "example.com/hello:1"}]},
    }
    async with running(settings) as runtime:
        assert runtime.webhook is not None
        config = chart_injector(f"https://127.0.0.1:{runtime.webhook.port}/inject")
        name = config["metadata"]["name"]
        try:
            await asyncio.to_thread(kube.apply, config)
            await asyncio.to_thread(
                kube.wait_for,
                "the CA's root patched into the injector",
                lambda: all(h["clientConfig"].get("caBundle") for h in kube.get(ADMISSION, KIND, "", name)["webhooks"]),
                30,
            )
            # the API server takes the configuration up within a moment: a dry run shows when
            path = kube.path("v1", "Pod", namespace)
            await asyncio.to_thread(
                kube.wait_for,
                "the API server calling the injector",
                lambda: "istio-proxy" in _names(kube.request("POST", path, pod, query={"dryRun": "All"})),
                30,
            )
            stored = await asyncio.to_thread(kube.create, pod, namespace)
        finally:
            await asyncio.to_thread(kube.delete, ADMISSION, KIND, "", name)
    assert _names(stored) == ["istio-init", "istio-proxy", "hello"]  # istio-proxy a native sidecar
    assert "sidecar.istio.io/status" in stored["metadata"]["annotations"]


def _names(pod: dict[str, Any]) -> list[str]:
    spec = pod["spec"]
    return [c["name"] for c in [*spec.get("initContainers", []), *spec["containers"]]]
