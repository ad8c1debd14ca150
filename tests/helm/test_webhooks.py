"""The chart's webhook configurations against istiod's, both rendered by helm (istiod's chart from
the pinned istio.io/istio module): the injector's webhooks (names, selectors, rules, policies)
are istiod's for the same revision, the validator is istiod's per-revision one; and which pods
the injector then selects, evaluated as the API server evaluates label selectors: Istio's own
gateway chart's pods (for the default revision and for a revision beside istiod), never
pilotfish's own pods."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from tests.helm.rendering import by_kind, istio_chart, render, render_istiod

REVISIONS = [(), ("--set", "revision=pilotfish"), ("--set", "sidecarInjectorWebhook.enableNamespacesByDefault=true")]
REVISION_IDS = ["default", "revision", "namespaces-by-default"]


def normalized(hook: Mapping[str, Any]) -> dict[str, Any]:
    """A webhook as the API server stores it, for comparing renders: defaults filled in
    (service port 443, timeout 10 s), the caBundle (patched in later by either) left out."""
    client = dict(hook["clientConfig"])
    client.pop("caBundle", None)
    client["service"] = {"port": 443, **client["service"]}
    return {"timeoutSeconds": 10, **hook, "clientConfig": client}


def webhooks(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    [config] = [doc for doc in docs if doc["kind"] == kind]
    return [normalized(hook) for hook in config["webhooks"]]


@pytest.mark.parametrize("values", REVISIONS, ids=REVISION_IDS)
def test_the_injector_webhooks_are_istiods_for_the_same_values(values: tuple[str, ...]) -> None:
    ours, istiods = render(*values), render_istiod(*values)
    assert webhooks(ours, "MutatingWebhookConfiguration") == webhooks(istiods, "MutatingWebhookConfiguration")
    mine, theirs = by_kind(ours)["MutatingWebhookConfiguration"], by_kind(istiods)["MutatingWebhookConfiguration"]
    assert mine["metadata"]["name"] == theirs["metadata"]["name"]
    assert mine["metadata"]["labels"]["istio.io/rev"] == theirs["metadata"]["labels"]["istio.io/rev"]


@pytest.mark.parametrize("values", [*REVISIONS[:2], ("--is-upgrade",)], ids=[*REVISION_IDS[:2], "upgrade"])
def test_the_validator_is_istiods_per_revision_one(values: tuple[str, ...]) -> None:
    """The same webhook, failing open at install until pilotfish switches it (as istiod), its
    policy left out on upgrades."""
    ours, istiods = render(*values), render_istiod(*values)
    kind = "ValidatingWebhookConfiguration"
    assert webhooks(ours, kind) == webhooks(istiods, kind)
    assert by_kind(ours)[kind]["metadata"]["name"] == by_kind(istiods)[kind]["metadata"]["name"]


# --- which pods are selected ------------------------------------------------------------------


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A label selector as the API server evaluates it (an absent selector selects everything)."""
    selector = selector or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or ():
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        held = key in labels
        if not {
            "In": held and labels.get(key) in values,
            "NotIn": not held or labels.get(key) not in values,
            "Exists": held,
            "DoesNotExist": not held,
        }[operator]:
            return False
    return True


def injecting(docs: list[dict[str, Any]], namespace: Mapping[str, str], pod: Mapping[str, str]) -> list[str]:
    """The injector webhooks of a render that a pod with labels ``pod`` in a namespace with
    labels ``namespace`` goes to."""
    return [
        hook["name"]
        for hook in webhooks(docs, "MutatingWebhookConfiguration")
        if selects(hook.get("namespaceSelector"), namespace) and selects(hook.get("objectSelector"), pod)
    ]


def gateway_pod(*values: str) -> dict[str, Any]:
    """The pod template of Istio's gateway chart (manifests/charts/gateway in the pinned module)."""
    docs = render(*values, chart=istio_chart("gateway"), release="istio-ingressgateway", namespace="istio-ingress")
    template: dict[str, Any] = by_kind(docs)["Deployment"]["spec"]["template"]
    return template


INGRESS = {"kubernetes.io/metadata.name": "istio-ingress"}


def test_istios_gateway_chart_is_injected_by_pilotfish_replacing_istiod() -> None:
    pod = gateway_pod()
    # the gateway template, which the injector must serve (inject.istio.io/templates)
    assert pod["metadata"]["annotations"]["inject.istio.io/templates"] == "gateway"
    assert injecting(render(), INGRESS, pod["metadata"]["labels"]) == ["object.sidecar-injector.istio.io"]


def test_istios_gateway_chart_with_the_revision_is_injected_by_pilotfish_beside_istiod_and_not_by_istiod() -> None:
    labels = gateway_pod("--set", "revision=pilotfish")["metadata"]["labels"]
    assert injecting(render("--set", "revision=pilotfish"), INGRESS, labels) == ["rev.object.sidecar-injector.istio.io"]
    assert injecting(render_istiod(), INGRESS, labels) == []  # the default istiod leaves it to pilotfish


@pytest.mark.parametrize(
    ("namespace", "pod", "expected"),
    [
        ({"istio-injection": "enabled"}, {"app": "web"}, ["namespace.sidecar-injector.istio.io"]),
        ({"istio.io/rev": "default"}, {"app": "web"}, ["rev.namespace.sidecar-injector.istio.io"]),
        ({"istio-injection": "enabled"}, {"app": "web", "sidecar.istio.io/inject": "false"}, []),
        ({}, {"app": "web"}, []),
        ({"istio.io/rev": "canary"}, {"app": "web"}, []),  # another revision's namespace
    ],
    ids=["istio-injection", "revision-label", "opted-out", "unlabelled", "other-revision"],
)
def test_namespaces_and_pods_selected_as_istiod_selects_them(
    namespace: dict[str, str], pod: dict[str, str], expected: Sequence[str]
) -> None:
    assert injecting(render(), {"kubernetes.io/metadata.name": "shop", **namespace}, pod) == expected


@pytest.mark.parametrize("values", REVISIONS, ids=REVISION_IDS)
def test_pilotfishs_own_pods_are_never_injected(values: tuple[str, ...]) -> None:
    docs = render(*values)
    labels = by_kind(docs)["Deployment"]["spec"]["template"]["metadata"]["labels"]
    for namespace in ({"istio-injection": "enabled"}, {"istio.io/rev": labels["istio.io/rev"]}, {}):
        assert injecting(docs, {"kubernetes.io/metadata.name": "istio-system", **namespace}, labels) == []


def test_istios_base_chart_validator_is_one_the_default_revision_serves_and_may_patch() -> None:
    """Istio's base chart (the CRDs' chart) also installs ``istiod-default-validator`` for
    unlabelled config: it calls the default revision's Service and carries its label, so
    pilotfish installed without a revision patches its caBundle (RBAC names it) and serves it."""
    docs = render(chart=istio_chart("base"), release="istio-base")
    assert sum(doc["kind"] == "CustomResourceDefinition" for doc in docs) > 10
    [base] = [doc for doc in docs if doc["kind"] == "ValidatingWebhookConfiguration"]
    assert base["metadata"]["name"] == "istiod-default-validator"
    assert base["metadata"]["labels"]["istio.io/rev"] == "default"
    [hook] = base["webhooks"]
    service = by_kind(render())["Service"]["metadata"]
    assert hook["clientConfig"]["service"] == {
        "name": service["name"],
        "namespace": service["namespace"],
        "path": "/validate",
    }
    assert "objectSelector" not in hook  # every Istio object, labelled or not
    [update] = [
        rule
        for rule in by_kind(render())["ClusterRole"]["rules"]
        if rule["resources"] == ["validatingwebhookconfigurations"] and "update" in rule["verbs"]
    ]
    assert "istiod-default-validator" in update["resourceNames"]


# --- revision tags ----------------------------------------------------------------------------

TAGS = [
    ("--set", "revision=pilotfish", "--set", "revisionTags={default,prod}"),
    ("--set", "revisionTags={prod}"),
    ("--set", "revision=pilotfish", "--set", "revisionTags={default}",
     "--set", "sidecarInjectorWebhook.enableNamespacesByDefault=true"),
]  # fmt: skip
TAG_IDS = ["revision-default-and-prod", "default-revision-prod", "namespaces-by-default"]


def tag_webhooks(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        doc["metadata"]["name"]: doc
        for doc in docs
        if doc["kind"] == "MutatingWebhookConfiguration" and "istio.io/tag" in doc["metadata"]["labels"]
    }


@pytest.mark.parametrize("values", TAGS, ids=TAG_IDS)
def test_revision_tags_are_istiods_for_the_same_values(values: tuple[str, ...]) -> None:
    """istiod's revisionTags (revision-tags-mwc.yaml): the same MutatingWebhookConfigurations,
    named and labelled as istiod's (istioctl tag list reads those labels), with the same webhooks;
    and the tag Services, reaching pilotfish's pods."""
    ours, istiods = render(*values), render_istiod(*values)
    mine, theirs = tag_webhooks(ours), tag_webhooks(istiods)
    assert sorted(mine) == sorted(theirs) and mine
    for name, config in mine.items():
        for label in ("istio.io/tag", "istio.io/rev"):
            assert config["metadata"]["labels"][label] == theirs[name]["metadata"]["labels"][label], (name, label)
        assert [normalized(hook) for hook in config["webhooks"]] == [
            normalized(hook) for hook in theirs[name]["webhooks"]
        ], name
    services = {doc["metadata"]["name"]: doc for doc in ours if doc["kind"] == "Service"}
    istiod_services = {doc["metadata"]["name"]: doc for doc in istiods if doc["kind"] == "Service"}
    pods = by_kind(ours)["Deployment"]["spec"]["template"]["metadata"]["labels"]
    for name in (n for n in istiod_services if n.startswith("istiod-revision-tag-")):
        service = services[name]
        assert (
            service["metadata"]["labels"]["istio.io/tag"] == istiod_services[name]["metadata"]["labels"]["istio.io/tag"]
        )
        assert (
            service["metadata"]["labels"]["istio.io/rev"] == istiod_services[name]["metadata"]["labels"]["istio.io/rev"]
        )
        assert selects({"matchLabels": service["spec"]["selector"]}, pods)
        assert {p["port"] for p in service["spec"]["ports"]} == {
            p["port"] for p in istiod_services[name]["spec"]["ports"]
        }


def test_without_revision_tags_none_is_rendered() -> None:
    docs = render("--set", "revision=pilotfish")
    assert tag_webhooks(docs) == {}
    assert [doc["metadata"]["name"] for doc in docs if doc["kind"] == "Service"] == ["istiod-pilotfish"]


def test_the_default_tag_of_a_revision_injects_what_the_default_revision_injects() -> None:
    """``--set revision=pilotfish --set revisionTags={default}``: namespaces labelled
    istio-injection=enabled or istio.io/rev=default, and pods sidecar.istio.io/inject=true in
    unlabelled namespaces, go to pilotfish through the tag's webhooks (istiod's own default
    injector, deactivated by ``istioctl tag set default``, is istiod's business)."""
    docs = render("--set", "revision=pilotfish", "--set", "revisionTags={default,prod}")
    [default] = [doc for doc in docs if doc["metadata"].get("name") == "istio-revision-tag-default"]
    hooks = [normalized(hook) for hook in default["webhooks"]]
    assert {hook["clientConfig"]["service"]["name"] for hook in hooks} == {"istiod-pilotfish"}

    def selecting(namespace: dict[str, str], pod: dict[str, str]) -> list[str]:
        return [
            hook["name"]
            for doc in tag_webhooks(docs).values()
            for hook in doc["webhooks"]
            if selects(hook.get("namespaceSelector"), namespace) and selects(hook.get("objectSelector"), pod)
        ]

    assert selecting({"istio-injection": "enabled"}, {}) == ["namespace.sidecar-injector.istio.io"]
    assert selecting({"istio.io/rev": "default"}, {}) == ["rev.namespace.sidecar-injector.istio.io"]
    assert selecting({"istio.io/rev": "prod"}, {}) == ["rev.namespace.sidecar-injector.istio.io"]
    assert selecting({}, {"sidecar.istio.io/inject": "true"}) == ["object.sidecar-injector.istio.io"]
    assert selecting({}, {"istio.io/rev": "prod"}) == ["rev.object.sidecar-injector.istio.io"]
    assert selecting({"istio.io/rev": "canary"}, {}) == []
    assert selecting({"istio.io/rev": "prod"}, {"sidecar.istio.io/inject": "false"}) == []


def test_istios_base_chart_validator_moved_to_a_revision_is_that_revisions_to_patch() -> None:
    """``helm upgrade istio-base --set defaultRevision=pilotfish`` (Istio's helm canary upgrade)
    points the validator of unlabelled config at the revision's Service with its label: pilotfish
    installed as that revision patches it (app/webhook/ca_bundle.ours), the RBAC naming it."""
    docs = render("--set", "defaultRevision=pilotfish", chart=istio_chart("base"), release="istio-base")
    [base] = [doc for doc in docs if doc["kind"] == "ValidatingWebhookConfiguration"]
    ours = render("--set", "revision=pilotfish")
    service = by_kind(ours)["Service"]["metadata"]
    assert (
        base["metadata"]["labels"]["istio.io/rev"] == by_kind(ours)["Deployment"]["metadata"]["labels"]["istio.io/rev"]
    )
    assert base["webhooks"][0]["clientConfig"]["service"]["name"] == service["name"]
    [update] = [
        rule
        for rule in by_kind(ours)["ClusterRole"]["rules"]
        if rule["resources"] == ["validatingwebhookconfigurations"] and "update" in rule["verbs"]
    ]
    assert base["metadata"]["name"] in update["resourceNames"]
