"""Moving the mesh's default to pilotfish as Istio's canary upgrade documents it, against a real
kube-apiserver with the real ``istioctl``: pilotfish installed beside istiod as the revision
``pilotfish`` (the chart's webhook configurations and Services, ``revisionTags={prod}``; the
webhooks call a local ``pilotfish serve`` with the chart's RBAC for that revision), Istio's base
chart's ``istiod-default-validator`` pointing at istiod, istiod's replica holding the namespace
controller's lock. ``istioctl tag list`` shows the chart's tag; ``istioctl tag set default
--revision pilotfish --overwrite`` then makes pilotfish the default revision: its replica takes
istiod's lock at once (prioritized election), patches its CA's root into the default tag's
injector and into the validator istioctl pointed at it, switches that validator to Fail as
istiod's validation controller does, and the API server has unlabelled Istio config reviewed by
pilotfish through it; a caBundle set back is patched again."""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from app.controllers.leader import NAMESPACE_CONTROLLER, LeaderElectionRecord
from tests.e2e.processes import run_pilotfish
from tests.helm.rendering import istio_chart
from tests.support.cluster import REPO, ApiError, Cluster, chart_credentials, free_port, helm
from tests.support.leader_lock import lock_record, take
from tests.support.peers import peer_binary

ADMISSION = "admissionregistration.k8s.io/v1"
MUTATING, VALIDATING = "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"
SYSTEM = "istio-system"
REVISION = ["--set", "revision=pilotfish", "--set", "revisionTags={prod}"]
DEFAULT_TAG, DEFAULT_VALIDATOR = "istio-revision-tag-default", "istiod-default-validator"


def istioctl(kube: Cluster, *args: str) -> str:
    argv = [str(peer_binary("istioctl")), "--kubeconfig", str(kube.admin_kubeconfig), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"istioctl {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def rendered(chart: Path, release: str, *values: str) -> list[dict[str, Any]]:
    text = subprocess.run(
        [str(helm()), "template", release, str(chart), "--namespace", SYSTEM, *values],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    return [doc for doc in yaml.safe_load_all(text) if doc]


def calling(config: dict[str, Any], url: str) -> dict[str, Any]:
    """``config`` with its webhooks calling ``url`` + their path (there is no pod behind the Service)."""
    for webhook in config["webhooks"]:
        assert "caBundle" not in webhook["clientConfig"]  # pilotfish patches it in
        webhook["clientConfig"] = {"url": url + webhook["clientConfig"]["service"]["path"]}
    return config


@pytest.fixture
def beside_istiod(kube: Cluster) -> Iterator[int]:
    """The revision's webhook configurations and Services as the chart renders them (the webhooks
    calling a free local port, returned), and Istio's base chart's default validator; deleted
    after, with what istioctl wrote and the lock istiod's replica held, so no other test meets them."""
    port = free_port()
    ours = [
        calling(doc, f"https://127.0.0.1:{port}") if doc["kind"] in (MUTATING, VALIDATING) else doc
        for doc in rendered(REPO / "charts" / "pilotfish", "pilotfish", *REVISION)
        if doc["kind"] in (MUTATING, VALIDATING, "Service")
    ]
    # istiod's, calling istiod (nothing listens there): by URL as ours, since istioctl patches it
    [base] = [
        calling(doc, f"https://127.0.0.1:{free_port()}")
        for doc in rendered(istio_chart("base"), "istio-base")
        if doc["kind"] == VALIDATING
    ]
    made = [*ours, base, {"apiVersion": ADMISSION, "kind": MUTATING, "metadata": {"name": DEFAULT_TAG}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "istiod-revision-tag-default"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAMESPACE_CONTROLLER}}]  # fmt: skip
    if kube.get("v1", "Namespace", "", SYSTEM) is None:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM}})
    try:
        kube.apply(*ours, base, namespace=SYSTEM)
        yield port
    finally:
        for doc in made:
            try:
                namespace = SYSTEM if doc["kind"] in ("Service", "ConfigMap") else ""
                kube.delete(doc.get("apiVersion", "v1"), doc["kind"], namespace, doc["metadata"]["name"])
            except ApiError as e:
                if e.status != 404:
                    raise


def bundles(kube: Cluster, kind: str, name: str) -> list[str | None]:
    config = kube.get(ADMISSION, kind, "", name)
    assert config is not None, name
    return [hook["clientConfig"].get("caBundle") for hook in config["webhooks"]]


def policies(kube: Cluster, name: str) -> list[str]:
    config = kube.get(ADMISSION, VALIDATING, "", name)
    assert config is not None, name
    return [hook["failurePolicy"] for hook in config["webhooks"]]


def held_by_istiod(kube: Cluster) -> None:
    """istiod's (default revision) replica holds the namespace controller's lock, unexpired."""
    if kube.get("v1", "ConfigMap", SYSTEM, NAMESPACE_CONTROLLER) is None:
        kube.create(LeaderElectionRecord().written_into({"metadata": {"name": NAMESPACE_CONTROLLER}}), SYSTEM)
    take(kube, SYSTEM, NAMESPACE_CONTROLLER, "istiod-0", "default")


def leading(http_port: int) -> bool:
    """Whether the replica says it leads the namespace controller's lock (its /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    wanted = f'leader_election_master_status{{name="{NAMESPACE_CONTROLLER}"}}'
    return any(line.startswith(wanted) and float(line.split()[-1]) == 1 for line in text.splitlines())


INVALID = """
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: lookbehind}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {regex: "(?<=a)b"}}]
    route: [{destination: {host: reviews}}]
"""


def test_istioctl_moves_the_default_tag_to_pilotfish_and_pilotfish_serves_as_the_default_revision(
    kube: Cluster, tmp_path: Path, beside_istiod: int
) -> None:
    shop = kube.namespace("shop", {"istio.io/rev": "prod"})
    # istioctl tag list reads the chart's tag as one of istiod's chart
    assert json.loads(istioctl(kube, "tag", "list", "-o", "json")) == [
        {"tag": "prod", "revision": "pilotfish", "namespaces": [shop]}
    ]
    credentials = chart_credentials(kube, tmp_path / "pilotfish.kubeconfig", SYSTEM, REVISION)
    held_by_istiod(kube)
    args = (
        "--ca-dir", str(tmp_path / "ca"),
        "--webhook-address", f"127.0.0.1:{beside_istiod}",
        "--revision", "pilotfish",
    )  # fmt: skip
    with run_pilotfish(None, tmp_path, kubeconfig=credentials, extra_args=args) as pilotfish:
        root = base64.b64encode((tmp_path / "ca" / "root-cert.pem").read_bytes()).decode()
        injector = "istio-sidecar-injector-pilotfish"
        kube.wait_for("the revision's injector patched", lambda: bundles(kube, MUTATING, injector) == [root] * 2)
        kube.wait_for(
            "the chart's tag patched", lambda: bundles(kube, MUTATING, "istio-revision-tag-prod") == [root] * 2
        )
        assert lock_record(kube, SYSTEM, NAMESPACE_CONTROLLER).holder == "istiod-0"  # not the default yet
        assert not leading(pilotfish.http_port)

        out = istioctl(kube, "tag", "set", "default", "--revision", "pilotfish", "--overwrite", "--skip-confirmation")
        assert 'Revision tag "default" created, referencing control plane revision "pilotfish"' in out, out
        tags = {(t["tag"], t["revision"]) for t in json.loads(istioctl(kube, "tag", "list", "-o", "json"))}
        assert tags == {("default", "pilotfish"), ("prod", "pilotfish")}
        # the default revision now: istiod's lock taken over at once (istiod's prioritized election)
        kube.wait_for("istiod's lock taken", lambda: leading(pilotfish.http_port), timeout=40)
        assert lock_record(kube, SYSTEM, NAMESPACE_CONTROLLER).key == "pilotfish"
        # what istioctl pointed at pilotfish is pilotfish's to patch, as istiod patches every
        # webhook configuration labelled with its revision
        validator = kube.get(ADMISSION, VALIDATING, "", DEFAULT_VALIDATOR)
        assert validator is not None and validator["metadata"]["labels"]["istio.io/rev"] == "pilotfish"
        kube.wait_for("the validator failing closed", lambda: policies(kube, DEFAULT_VALIDATOR) == ["Fail"])
        assert bundles(kube, VALIDATING, DEFAULT_VALIDATOR) == [root]
        with pytest.raises(ApiError) as refused:  # unlabelled config, reviewed by pilotfish
            kube.apply(yaml.safe_load(INVALID), namespace=shop)
        message = json.loads(refused.value.body)["message"]
        assert 'admission webhook "validation.istio.io" denied the request' in message, message
        # a root set back (a foreign CA, as a rotation elsewhere would leave it): patched again
        tag = kube.get(ADMISSION, MUTATING, "", DEFAULT_TAG)
        assert tag is not None and len(tag["webhooks"]) == 4
        foreign = base64.b64encode(trustme.CA().cert_pem.bytes()).decode()
        set_back = [{**hook, "clientConfig": {**hook["clientConfig"], "caBundle": foreign}} for hook in tag["webhooks"]]
        kube.patch(ADMISSION, MUTATING, "", DEFAULT_TAG, {"webhooks": set_back})
        kube.wait_for("the default tag patched again", lambda: bundles(kube, MUTATING, DEFAULT_TAG) == [root] * 4)
        assert "forbidden" not in pilotfish.log().lower(), pilotfish.log()
