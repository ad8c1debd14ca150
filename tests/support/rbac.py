"""Real RBAC on the test cluster: Roles and bindings made through the API, and waiting until the
API server's authorizer enforces them (its informer follows RBAC objects a moment later)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.support.cluster import Cluster

# the account charts/pilotfish runs pilotfish as (tests.support.cluster.chart_credentials)
PILOTFISH = ("istio-system", "pilotfish")


def may(kube: Cluster, user: str, verb: str, resource: str, namespace: str = "", group: str = "") -> bool:
    """The API server's answer to a SubjectAccessReview (no groups, as istiod asks)."""
    attributes = {"verb": verb, "resource": resource, "group": group, **({"namespace": namespace} if namespace else {})}
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": attributes},
    }
    answer = kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
    return bool(answer["status"].get("allowed"))


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def grant(kube: Cluster, namespace: str, name: str, account: tuple[str, str], rules: Sequence[dict[str, Any]]) -> None:
    """A Role ``name`` in ``namespace`` with ``rules``, bound to ``account`` (namespace, name);
    returns once the authorizer allows the first rule's first verb."""
    kube.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name},
            "rules": list(rules),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "namespace": account[0], "name": account[1]}],
        },
        namespace=namespace,
    )
    first = rules[0]
    user = service_account_user(*account)
    kube.wait_for(
        f"{user} may {first['verbs'][0]} {first['resources'][0]} in {namespace}",
        lambda: may(kube, user, first["verbs"][0], first["resources"][0], namespace, first["apiGroups"][0]),
        timeout=30,
    )


def grant_cluster(kube: Cluster, name: str, account: tuple[str, str], rules: Sequence[dict[str, Any]]) -> None:
    """The same, cluster-wide (a ClusterRole and its binding; kept across tests: made idempotently)."""
    kube.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": list(rules),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "namespace": account[0], "name": account[1]}],
        },
    )
    first = rules[0]
    user = service_account_user(*account)
    kube.wait_for(
        f"{user} may {first['verbs'][0]} {first['resources'][0]}",
        lambda: may(kube, user, first["verbs"][0], first["resources"][0], "", first["apiGroups"][0]),
        timeout=30,
    )


def grant_istiod_ca_rules(kube: Cluster, system_namespace: str) -> None:
    """What istiod's chart grants istiod for its CA and SDS (manifests/charts/istio-control/
    istio-discovery templates role.yaml "For storing CA secret", clusterrole.yaml
    "verify gateway SDS"), given to pilotfish's account: Secrets in the system namespace, and
    SubjectAccessReviews."""
    grant(
        kube,
        system_namespace,
        "pilotfish-ca",
        PILOTFISH,
        [
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "verbs": ["create", "get", "watch", "list", "update", "delete"],
            }
        ],
    )
    grant_cluster(
        kube,
        "pilotfish-sds-review",
        PILOTFISH,
        [{"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}],
    )
