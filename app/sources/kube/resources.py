"""The Kubernetes resources pilotfish reads: API group, versions, plural, scope (pure)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.config.objects import Kind
from app.registry.locality import NODE_LOCALITY_LABELS
from app.sources.kube.store import Raw

REVISION_LABEL = "istio.io/rev"  # a control-plane revision: on its webhooks, objects and pods
ISTIO_NETWORKING = "networking.istio.io"
# the versions istiod serves its networking kinds in, newest first: an informer lists the newest
# one the API server has (the CRDs convert between them)
ISTIO_VERSIONS = ("v1", "v1beta1", "v1alpha3")
ISTIO_SECURITY = "security.istio.io"
SECURITY_VERSIONS = ("v1", "v1beta1")


@dataclass(frozen=True, slots=True)
class KubeResource:
    kind: str  # as in the objects' ``kind:`` (a config Kind, or e.g. CustomResourceDefinition)
    group: str  # "" for the core group
    versions: tuple[str, ...]  # preferred first
    plural: str
    namespaced: bool = True
    # what an informer of it lists and watches, when it reads only some (a fieldSelector)
    field_selector: str = ""
    # what of each object the source's informer keeps (client-go's ObjectTransform), when it
    # reads little of a large object
    transform: Callable[[Raw], Raw] | None = None

    def group_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def path(self, version: str, namespace: str = "") -> str:
        """The collection's URL path, in one namespace or across all."""
        base = f"/apis/{self.group}/{version}" if self.group else f"/api/{version}"
        scope = f"/namespaces/{namespace}" if namespace and self.namespaced else ""
        return f"{base}{scope}/{self.plural}"

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


NAMESPACES = KubeResource(Kind.NAMESPACE, "", ("v1",), "namespaces", namespaced=False)
# credentialName certificates, as istiod's credentials controller reads them: never Helm
# releases nor service-account tokens, two large kinds of Secret no certificate is kept in
# (istiod pilot/pkg/credentials/kube SecretsFieldSelector)
SECRETS = KubeResource(
    Kind.SECRET,
    "",
    ("v1",),
    "secrets",
    field_selector="type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token",
)


def node_topology(obj: Raw) -> Raw:
    """What the registry reads of a Node: its name and topology labels (its pods' locality).
    A Node is large (images, conditions, capacity) and its status changes all day; so kept, a
    Node changes only when its topology labels do."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    kept = {k: labels[k] for k in NODE_LOCALITY_LABELS if k in labels}
    return {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": "Node",
        "metadata": {"name": meta.get("name", ""), "resourceVersion": meta.get("resourceVersion", ""), "labels": kept},
    }


# the Nodes: their topology labels for the registry (node_topology); the webhook's own informer
# keeps their kubelet versions, for ENABLE_NATIVE_SIDECARS=auto (app/sources/kube/nodes.py)
NODES = KubeResource(Kind.NODE, "", ("v1",), "nodes", namespaced=False, transform=node_topology)
# Nodes listed before Pods, so the pods of the first lists mostly find their Node's locality
# there already (a Node that comes after re-locates its pods, rebuilding their slices once)
KUBE_RESOURCES = (
    NAMESPACES,
    NODES,
    KubeResource(Kind.SERVICE, "", ("v1",), "services"),
    KubeResource(Kind.POD, "", ("v1",), "pods"),
    KubeResource(Kind.ENDPOINT_SLICE, "discovery.k8s.io", ("v1",), "endpointslices"),
    SECRETS,
)


def mesh_configmap(name: str) -> KubeResource:
    """The mesh ConfigMap ``name`` (the revision's, ``mesh_configmap_name``), read in the system
    namespace only."""
    return KubeResource(Kind.CONFIG_MAP, "", ("v1",), "configmaps", field_selector=f"metadata.name={name}")


# watched to start an Istio kind's informer once its CRD is installed (istiod's CRD watcher)
CRDS = KubeResource("CustomResourceDefinition", "apiextensions.k8s.io", ("v1",), "customresourcedefinitions", False)
ISTIO_RESOURCES = (
    *(
        KubeResource(kind, ISTIO_NETWORKING, ISTIO_VERSIONS, plural)
        for kind, plural in (
            (Kind.DESTINATION_RULE, "destinationrules"),
            (Kind.VIRTUAL_SERVICE, "virtualservices"),
            (Kind.SERVICE_ENTRY, "serviceentries"),
            (Kind.WORKLOAD_ENTRY, "workloadentries"),
            (Kind.SIDECAR, "sidecars"),
            (Kind.GATEWAY, "gateways"),
        )
    ),
    KubeResource(Kind.PEER_AUTHENTICATION, ISTIO_SECURITY, SECURITY_VERSIONS, "peerauthentications"),
    KubeResource(Kind.AUTHORIZATION_POLICY, ISTIO_SECURITY, SECURITY_VERSIONS, "authorizationpolicies"),
    KubeResource(Kind.REQUEST_AUTHENTICATION, ISTIO_SECURITY, SECURITY_VERSIONS, "requestauthentications"),
    KubeResource(Kind.PROXY_CONFIG, ISTIO_NETWORKING, ("v1beta1",), "proxyconfigs"),
    KubeResource(Kind.TELEMETRY, "telemetry.istio.io", ("v1", "v1alpha1"), "telemetries"),
    KubeResource(Kind.ENVOY_FILTER, ISTIO_NETWORKING, ("v1alpha3",), "envoyfilters"),
)


def identity_only(obj: Raw) -> Raw:
    """What is read of an object that is only warned about: its identity, and the generation of
    its spec (a status write does not move it)."""
    meta = obj.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "namespace", "labels", "generation", "resourceVersion") if k in meta}
    return {"apiVersion": obj.get("apiVersion", ""), "kind": obj.get("kind", ""), "metadata": kept}


# Istio kinds istiod applies and pilotfish does not (app.config.loader.UNSUPPORTED_KINDS): their
# objects in the cluster are listed and watched only to warn of each
UNSUPPORTED_RESOURCES = (
    KubeResource("WasmPlugin", "extensions.istio.io", ("v1alpha1",), "wasmplugins", transform=identity_only),
)
