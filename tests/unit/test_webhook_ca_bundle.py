"""What pilotfish patches into webhook configurations (istiod's webhook patcher and validation
controller rules) and its own webhook serving certificate from its CA."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509

from app.runtime import Runtime
from app.security.ca import CertificateAuthority
from app.settings import Settings
from app.webhook.admission import review
from app.webhook.ca_bundle import MUTATING, VALIDATING, dry_run_verdict, fails_open, invalid_gateway, patched_webhooks
from app.webhook.certificate import ServingCertificate, istiod_dns_names
from app.webhook.server import WebhookServer

ROOT = b"-----BEGIN CERTIFICATE-----\nroot\n-----END CERTIFICATE-----\n"
ENCODED = base64.b64encode(ROOT).decode()


def config(revision: str | None, *names: str, bundle: str | None = None) -> dict[str, Any]:
    labels = {"istio.io/rev": revision} if revision is not None else {}
    client: dict[str, Any] = {"service": {"name": "istiod", "namespace": "istio-system", "path": "/inject"}}
    if bundle is not None:
        client["caBundle"] = bundle
    return {
        "metadata": {"name": "c", "labels": labels},
        "webhooks": [{"name": n, "clientConfig": client} for n in names],
    }


def test_the_injectors_webhooks_of_its_revision_get_the_root_others_are_left_as_they_are() -> None:
    hooks = patched_webhooks(
        MUTATING.kind, config("default", "rev.object.sidecar-injector.istio.io", "other.example.com"), ROOT, ""
    )
    assert hooks is not None
    assert hooks[0]["clientConfig"] == {
        "service": {"name": "istiod", "namespace": "istio-system", "path": "/inject"},
        "caBundle": ENCODED,
    }
    assert "caBundle" not in hooks[1]["clientConfig"]


def test_every_webhook_of_a_validator_of_its_revision_gets_the_root() -> None:
    hooks = patched_webhooks(
        VALIDATING.kind, config("canary", "rev.validation.istio.io", "x.example.com"), ROOT, "canary"
    )
    assert hooks is not None and [h["clientConfig"]["caBundle"] for h in hooks] == [ENCODED, ENCODED]


@pytest.mark.parametrize(
    ("kind", "doc", "revision"),
    [
        (MUTATING.kind, config("canary", "namespace.sidecar-injector.istio.io"), ""),  # another revision's
        (MUTATING.kind, config("default", "namespace.sidecar-injector.istio.io"), "canary"),
        (MUTATING.kind, config(None, "namespace.sidecar-injector.istio.io"), ""),  # not Istio's
        (MUTATING.kind, config("default", "injector.example.com"), ""),  # no injector webhook in it
        (VALIDATING.kind, config("default", "rev.validation.istio.io", bundle=ENCODED), "default"),  # up to date
        (MUTATING.kind, config("default"), ""),
    ],
    ids=["other-revision", "default-for-a-revision", "unlabelled", "no-injector", "up-to-date", "no-webhooks"],
)
def test_nothing_is_written_when_the_configuration_is_not_its_or_holds_the_root(
    kind: str, doc: dict[str, Any], revision: str
) -> None:
    assert patched_webhooks(kind, doc, ROOT, revision) is None


def test_a_validator_fails_closed_only_once_told_and_an_injector_never_changes_policy() -> None:
    validator = config("default", "rev.validation.istio.io", bundle=ENCODED)
    validator["webhooks"][0]["failurePolicy"] = "Ignore"
    assert fails_open(validator)
    assert patched_webhooks(VALIDATING.kind, validator, ROOT, "") is None  # the bundle is there; not ready
    hooks = patched_webhooks(VALIDATING.kind, validator, ROOT, "", fail_closed=True)
    assert hooks is not None and hooks[0]["failurePolicy"] == "Fail"
    assert not fails_open({"webhooks": [{"name": "x"}]})  # unset is the API server's default, Fail
    injector = config("default", "namespace.sidecar-injector.istio.io", bundle=ENCODED)
    injector["webhooks"][0]["failurePolicy"] = "Ignore"
    assert patched_webhooks(MUTATING.kind, injector, ROOT, "", fail_closed=True) is None


@pytest.mark.parametrize(
    ("status", "message", "ready"),
    [
        (400, 'admission webhook "rev.validation.istio.io" denied the request: configuration is invalid', True),
        (404, "the server could not find the requested resource", True),
        (400, 'admission webhook "x" does not support dry run', True),
        (201, "", False),  # admitted: the webhook was not called (Ignore, unreachable) or did not refuse
        (403, "gateways.networking.istio.io is forbidden", False),
        (404, 'namespaces "istio-system" not found', False),
        (0, "Cannot connect to host", False),
    ],
    ids=["refused", "no-gateway-kind", "no-dry-run", "admitted", "forbidden", "no-namespace", "unreachable"],
)
def test_the_dry_run_is_read_as_istiod_reads_it(status: int, message: str, ready: bool) -> None:
    assert dry_run_verdict(status, message)[0] is ready


def test_the_dry_runs_gateway_is_invalid_and_of_the_revision() -> None:
    gateway = invalid_gateway("istio-system", "canary")
    assert gateway["metadata"]["labels"] == {"istio.io/rev": "canary"} and gateway["spec"] == {}
    request = {"uid": "u", "operation": "CREATE", "namespace": "istio-system", "object": gateway}
    answer = review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    assert answer["response"]["allowed"] is False


def test_istiods_dns_names_and_the_revisions_service() -> None:
    assert istiod_dns_names("istio-system", "default") == (
        "istio-pilot.istio-system.svc",
        "istiod-remote.istio-system.svc",
        "istiod.istio-system.svc",
        "pilotfish.istio-system.svc",
    )
    assert {"istiod-pilotfish.mesh.svc", "pilotfish-pilotfish.mesh.svc"} <= set(istiod_dns_names("mesh", "pilotfish"))


def sans(pem: str) -> list[str]:
    cert = x509.load_pem_x509_certificate(pem.encode())
    return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)


def test_the_serving_certificate_names_the_service_chains_to_the_root_and_follows_a_new_root() -> None:
    ca = CertificateAuthority.self_signed("cluster.local")
    current = [ca]
    serving = ServingCertificate(lambda: current[0], ("istiod.istio-system.svc",))
    assert serving.ca_bundle == ca.root_pem
    assert sans(serving.certificate) == ["istiod.istio-system.svc"]
    leaf = x509.load_pem_x509_certificate(serving.certificate.encode())
    leaf.verify_directly_issued_by(ca.signing_cert)
    first = serving.certificate
    serving.set_root(ca.root_pem)  # the same root: nothing to do
    assert serving.certificate == first
    current[0] = CertificateAuthority.self_signed("cluster.local")
    serving.set_root(current[0].root_pem)
    assert serving.ca_bundle == current[0].root_pem and serving.certificate != first
    x509.load_pem_x509_certificate(serving.certificate.encode()).verify_directly_issued_by(current[0].signing_cert)


async def test_renewed_at_half_life_and_after_a_root_change_and_the_patcher_told() -> None:
    ca = CertificateAuthority.self_signed("cluster.local")
    serving = ServingCertificate(lambda: ca, ("istiod.istio-system.svc",), ttl=datetime.timedelta(seconds=0.2))
    told: list[str] = []
    task = asyncio.create_task(serving.run(lambda: told.append(serving.certificate)))
    try:
        async with asyncio.timeout(5):
            while len(told) < 2:
                await asyncio.sleep(0.01)
        assert len(set(told)) == 2  # a new certificate each half life
    finally:
        task.cancel()


async def test_the_webhook_server_presents_the_ca_issued_certificate(unused_tcp_port: int) -> None:
    ca = CertificateAuthority.self_signed("cluster.local")
    serving = ServingCertificate(lambda: ca, ("istiod.istio-system.svc",), ("127.0.0.1",))
    server = WebhookServer(lambda: serving.context)
    await server.start(f"127.0.0.1:{unused_tcp_port}")
    try:
        trusting = ssl.create_default_context(cadata=serving.ca_bundle)
        async with aiohttp.ClientSession() as session:
            url = f"https://127.0.0.1:{server.port}/validate"
            async with session.post(url, data=b"", ssl=trusting) as response:
                assert response.status == 400  # TLS verified against the root; an empty body refused
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("where", "revision", "served"),
    [("in-cluster", "", True), ("kubeconfig", "", False), ("kubeconfig", "default", True), ("files", "default", False)],
)
def test_the_ca_issued_webhooks_run_in_a_cluster_or_with_an_explicit_revision(
    tmp_path: Path, where: str, revision: str, served: bool
) -> None:
    """A pilotfish run from a laptop against a cluster (a kubeconfig) never patches the webhooks
    of that cluster's istiod unless it is told its revision; without Kubernetes there is none."""
    settings = Settings(
        config_dir=tmp_path if where == "files" else None,
        kubeconfig=tmp_path / "kubeconfig" if where == "kubeconfig" else None,
        in_cluster=where == "in-cluster",
        ca_dir=tmp_path / "ca",
        revision=revision,
    )
    runtime = Runtime(settings)
    assert (runtime.webhook is not None) is served
