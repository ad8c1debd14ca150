"""``POST /inject`` over HTTPS, as istiod answers it: an AdmissionReview of a Pod in, the review
back with the JSONPatch that injects the sidecar (base64, patchType JSONPatch) and the request's
uid; a pod the policy skips is allowed without a patch, one that cannot be injected refused with
istiod's reason, a body that is not a review refused; ``/inject/cluster/ID`` names the cluster."""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from app.config.mesh import default_mesh_config
from app.errors import SettingsError
from app.inject.inputs import InjectionInputs, injector_for
from app.inject.source import injection_source
from app.settings import Settings
from app.webhook.file_certificate import file_context
from app.webhook.server import WebhookServer
from tests.support.json_patch import apply_patch

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "hello", "labels": {"app": "hello"}},
    "spec": {"containers": [{"name": "hello", "image": "example.com/hello:1"}]},
}


def review(pod: Any) -> dict[str, Any]:
    request = {"uid": "u-7", "operation": "CREATE", "namespace": "shop", "object": pod}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@pytest.fixture
async def webhook(tmp_path: Path) -> AsyncIterator[tuple[str, ssl.SSLContext]]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    inputs = InjectionInputs(None, None, default_mesh_config().SerializeToString(), native_sidecars=False)
    server = WebhookServer(partial(file_context, tmp_path / "tls.crt", tmp_path / "tls.key"), injection=lambda: inputs)
    await server.start("127.0.0.1:0")
    client = ssl.create_default_context()
    ca.configure_trust(client)
    yield f"https://127.0.0.1:{server.port}", client
    await server.stop()


async def _post(session: aiohttp.ClientSession, url: str, tls: ssl.SSLContext, body: Any) -> dict[str, Any]:
    async with session.post(url, json=body, ssl=tls) as resp:
        assert resp.status == 200
        answer: dict[str, Any] = (await resp.json())["response"]
        return answer


async def test_a_pod_review_is_answered_with_the_injecting_patch(webhook: tuple[str, ssl.SSLContext]) -> None:
    base, tls = webhook
    async with aiohttp.ClientSession() as session:
        response = await _post(session, f"{base}/inject", tls, review(POD))
        assert response["uid"] == "u-7" and response["allowed"] is True and response["patchType"] == "JSONPatch"
        pod = apply_patch(POD, json.loads(base64.b64decode(response["patch"])))
        assert [c["name"] for c in pod["spec"]["containers"]] == ["hello", "istio-proxy"]
        assert [c["name"] for c in pod["spec"]["initContainers"]] == ["istio-init"]
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][1]["env"]}
        assert env["CA_ADDR"] == "istiod.istio-system.svc:15012"
        assert env["ISTIO_META_OWNER"] == "kubernetes://apis/v1/namespaces/shop/pods/hello"
        assert "namespace" not in pod["metadata"]  # the patch leaves alone what injection does not set

        with_cluster = await _post(session, f"{base}/inject/cluster/east", tls, review(POD))
        ops = json.loads(base64.b64decode(with_cluster["patch"]))
        env = {e["name"]: e.get("value") for e in apply_patch(POD, ops)["spec"]["containers"][1]["env"]}
        assert env["ISTIO_META_CLUSTER_ID"] == "east"


async def test_skipped_refused_and_malformed_reviews(webhook: tuple[str, ssl.SSLContext]) -> None:
    base, tls = webhook
    url = f"{base}/inject"
    async with aiohttp.ClientSession() as session:
        host_network = {**POD, "spec": {**POD["spec"], "hostNetwork": True}}
        assert await _post(session, url, tls, review(host_network)) == {"uid": "u-7", "allowed": True}
        bad = {**POD, "metadata": {"name": "hello", "annotations": {"status.sidecar.istio.io/port": "http"}}}
        refused = await _post(session, url, tls, review(bad))
        assert refused["allowed"] is False
        assert "invalid value 'http' for annotation 'status.sidecar.istio.io/port'" in refused["status"]["message"]
        not_a_pod = await _post(session, url, tls, review([1]))
        assert not_a_pod["allowed"] is False and not_a_pod["uid"] == "u-7"
        async with session.post(url, data=b"{", headers={"Content-Type": "application/json"}, ssl=tls) as resp:
            answer = (await resp.json())["response"]
            assert answer["allowed"] is False and answer["status"]["message"].startswith("could not decode body")
        # the server keeps injecting
        assert (await _post(session, url, tls, review(POD)))["allowed"] is True


def test_the_injection_files_are_checked_at_start(tmp_path: Path) -> None:
    """serve --inject-config / --inject-values: read once; a bad one stops pilotfish naming it."""
    mesh = default_mesh_config()
    (tmp_path / "config").write_text("policy: disabled\ntemplates:\n  sidecar: '{{ .Nope'\n")
    settings = Settings(config_dir=None, inject_config=tmp_path / "config")
    with pytest.raises(SettingsError, match="injection template 'sidecar'"):
        injection_source(settings, lambda: mesh)
    (tmp_path / "values").write_text("[1]")
    refusal = re.escape(f"--inject-values {tmp_path / 'values'}: configuration values must be an object")
    with pytest.raises(SettingsError, match=refusal):
        injection_source(Settings(config_dir=None, inject_values=tmp_path / "values"), lambda: mesh)
    with pytest.raises(SettingsError, match=r"--inject-config .*missing"):
        injection_source(Settings(config_dir=None, inject_config=tmp_path / "missing"), lambda: mesh)
    (tmp_path / "config").write_text("policy: disabled\n")
    (tmp_path / "values").write_text('{"global": {"hub": "example.com", "tag": "1"}}')
    source = injection_source(
        Settings(config_dir=None, inject_config=tmp_path / "config", inject_values=tmp_path / "values"), lambda: mesh
    )
    injector = injector_for(source())
    assert injector.config.policy == "disabled" and set(injector.templates) >= {"sidecar", "gateway"}
    assert injector.inject(POD, "shop") is None  # policy disabled, no opt-in
    assert injector.values["global"]["caAddress"] == "istiod.istio-system.svc:15012"


def test_an_edited_injection_file_is_taken_up_and_a_bad_edit_ignored(tmp_path: Path) -> None:
    """As istiod reloads its ConfigMap: the next review sees the new file; a broken one is
    logged and the last good one stays."""
    mesh = default_mesh_config()
    config = tmp_path / "config"
    config.write_text("policy: enabled\n")
    source = injection_source(Settings(config_dir=None, inject_config=config), lambda: mesh)
    assert injector_for(source()).config.policy == "enabled"
    config.write_text("policy: disabled\n")
    os.utime(config, ns=(1, 10**18))  # a later modification time, whatever the clock's resolution
    assert injector_for(source()).config.policy == "disabled"
    config.write_text("policy: enabled\ntemplates: {sidecar: '{{ end }}'}\n")
    os.utime(config, ns=(1, 2 * 10**18))
    assert injector_for(source()).config.policy == "disabled"


def test_a_bad_edit_is_read_and_logged_once_not_at_every_review(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The files are checked on the event loop that serves xDS (parsing istiod's templates takes
    ~40 ms, a 1 MiB ConfigMap's ~1 s): a broken edit is checked once, as istiod's watcher reloads
    once per change, not again with every pod; a later good edit is taken up."""
    mesh = default_mesh_config()
    config = tmp_path / "config"
    config.write_text("policy: enabled\n")
    source = injection_source(Settings(config_dir=None, inject_config=config), lambda: mesh)
    config.write_text("policy: disabled\ntemplates: {sidecar: '{{ end }}'}\n")
    os.utime(config, ns=(1, 10**18))
    with caplog.at_level("ERROR", logger="app.inject.source"):
        for _ in range(5):
            assert injector_for(source()).config.policy == "enabled"
    assert len([r for r in caplog.records if "keeps its last good --inject-config" in r.message]) == 1
    config.write_text("policy: disabled\n")
    os.utime(config, ns=(1, 2 * 10**18))
    assert injector_for(source()).config.policy == "disabled"
