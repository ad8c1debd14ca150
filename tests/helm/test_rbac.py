"""The chart's RBAC, listed exactly: reads for the informers (Nodes for native sidecars); writes
only where pilotfish writes (the Leases of earlier releases, deleted, istio-ca-root-cert ConfigMaps, ServiceEntry
address status; the CA Secret; its own webhook configurations' caBundle, by name); TokenReviews
and SubjectAccessReviews. Any widening shows up here as a diff."""

from __future__ import annotations

from typing import Any

from tests.helm.rendering import assert_valid, by_kind, render

READ = ["get", "list", "watch"]
CLUSTER_RULES = [
    {"apiGroups": [""], "resources": ["namespaces", "services", "pods"], "verbs": READ},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": READ},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": READ},
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": READ},
    {
        "apiGroups": ["networking.istio.io"],
        "resources": [
            "destinationrules",
            "virtualservices",
            "serviceentries",
            "workloadentries",
            "sidecars",
            "gateways",
            "proxyconfigs",
            "envoyfilters",
        ],
        "verbs": READ,
    },
    {"apiGroups": ["extensions.istio.io"], "resources": ["wasmplugins"], "verbs": READ},
    {
        "apiGroups": ["security.istio.io"],
        "resources": ["peerauthentications", "authorizationpolicies", "requestauthentications"],
        "verbs": READ,
    },
    {"apiGroups": ["telemetry.istio.io"], "resources": ["telemetries"], "verbs": READ},
    {"apiGroups": ["networking.istio.io"], "resources": ["serviceentries/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": [*READ, "create", "update"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": READ},
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
    {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
        "verbs": READ,
    },
]
WEBHOOK_READS = CLUSTER_RULES[-1]


def webhook_updates(mutating: list[str], validating: list[str]) -> list[dict[str, Any]]:
    kinds = (("mutatingwebhookconfigurations", mutating), ("validatingwebhookconfigurations", validating))
    group = ["admissionregistration.k8s.io"]
    return [
        {"apiGroups": group, "resources": [plural], "resourceNames": names, "verbs": ["update"]}
        for plural, names in kinds
    ]


DRY_RUN = {"apiGroups": ["networking.istio.io"], "resources": ["gateways"], "verbs": ["create"]}
CA_SECRET = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "update"]}
# the Leases of releases before the ConfigMap locks: read, deleted once stale, never taken
LEGACY_LEASES = {
    "apiGroups": ["coordination.k8s.io"],
    "resources": ["leases"],
    "resourceNames": ["istio-namespace-controller-election", "istio-ip-autoallocate"],
    "verbs": ["get", "delete"],
}
ROLE_RULES = [LEGACY_LEASES, DRY_RUN, CA_SECRET]


def rbac(*values: str) -> dict[str, dict[str, Any]]:
    docs = render(*values)
    assert_valid(docs)
    kinds = by_kind(docs)
    account = kinds["ServiceAccount"]["metadata"]
    for binding in (kinds["ClusterRoleBinding"], kinds["RoleBinding"]):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"], "namespace": "istio-system"}]
    assert kinds["ClusterRoleBinding"]["roleRef"]["name"] == kinds["ClusterRole"]["metadata"]["name"]
    assert kinds["RoleBinding"]["roleRef"]["name"] == kinds["Role"]["metadata"]["name"]
    assert kinds["Role"]["metadata"]["namespace"] == "istio-system"
    return kinds


def test_the_default_revisions_rules() -> None:
    kinds = rbac()
    # the default revision also serves Istio's base chart validator (istio.io/rev=default)
    updates = webhook_updates(
        ["istio-sidecar-injector", "istio-revision-tag-default"],
        ["istio-validator-istio-system", "istiod-default-validator"],
    )
    assert kinds["ClusterRole"]["rules"] == [*CLUSTER_RULES, *updates]
    assert kinds["Role"]["rules"] == ROLE_RULES


def test_a_revisions_rules_name_its_own_webhook_configurations() -> None:
    """Its own, and those ``istioctl tag set default --revision pilotfish`` points at it (the
    default tag's injector and istiod-default-validator, relabelled with the revision), which
    istiod's webhook patcher and validation controller keep patched as their revision's."""
    kinds = rbac("--set", "revision=pilotfish")
    updates = webhook_updates(
        ["istio-sidecar-injector-pilotfish", "istio-revision-tag-default"],
        ["istio-validator-pilotfish-istio-system", "istiod-default-validator"],
    )
    assert kinds["ClusterRole"]["rules"] == [*CLUSTER_RULES, *updates]
    assert kinds["ClusterRole"]["metadata"]["name"] == "pilotfish-pilotfish-istio-system"


def test_a_revisions_tags_are_updated_by_name() -> None:
    kinds = rbac("--set", "revision=pilotfish", "--set", "revisionTags={prod,default}")
    updates = webhook_updates(
        ["istio-sidecar-injector-pilotfish", "istio-revision-tag-prod", "istio-revision-tag-default"],
        ["istio-validator-pilotfish-istio-system", "istiod-default-validator"],
    )
    assert kinds["ClusterRole"]["rules"] == [*CLUSTER_RULES, *updates]


def test_without_the_ca_no_secret_is_created_and_no_webhook_configuration_updated() -> None:
    kinds = rbac(
        "--set", "pilot.ca.enabled=false", "--set", "webhook.certSecretName=tls", "--set", "webhook.caBundle=Q0E="
    )
    assert kinds["Role"]["rules"] == [LEGACY_LEASES]
    # only the default revision's tag is read (the leader elections' priority)
    default_tag = {**WEBHOOK_READS, "resources": ["mutatingwebhookconfigurations"]}
    others = [rule for rule in CLUSTER_RULES if rule is not WEBHOOK_READS]
    assert kinds["ClusterRole"]["rules"] == [*others, default_tag]


def test_without_an_injector_only_the_validators_are_updated() -> None:
    kinds = rbac("--set", "global.operatorManageWebhooks=true")
    updates = webhook_updates([], ["istio-validator-istio-system", "istiod-default-validator"])
    assert kinds["ClusterRole"]["rules"] == [*CLUSTER_RULES, updates[1]]


def test_a_revision_without_its_validator_updates_only_the_default_one() -> None:
    kinds = rbac("--set", "revision=pilotfish", "--set", "global.configValidation=false")
    assert kinds["Role"]["rules"] == [LEGACY_LEASES, CA_SECRET]  # no dry run either
    # but the default revision's validator, once the default tag points at it
    assert kinds["ClusterRole"]["rules"] == [
        *CLUSTER_RULES,
        *webhook_updates(
            ["istio-sidecar-injector-pilotfish", "istio-revision-tag-default"], ["istiod-default-validator"]
        ),
    ]
