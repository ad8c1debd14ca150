"""One cluster state in the real API server for both control planes: a root namespace holding
the mesh ConfigMap, and a config set's objects in a namespace of its own. Deployments become
pods "run" as a kubelet would (``Cluster.run_pod``: bound to the node, Running, Ready, an
address), one per Deployment; the real endpointslice controller makes the EndpointSlices. A
Deployment annotated ``pilotfish.test/ready: "false"`` runs a pod that is not Ready (an unready
endpoint both control planes must send alike).

The mesh's discoverySelectors keep both control planes to this scene's namespaces of the shared
test cluster (the system namespace is read regardless, as istiod does)."""

from __future__ import annotations

import base64
import ipaddress
import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from envoy.config.core.v3 import base_pb2

from app.xds.client import node
from tests.support.cluster import ApiError, Cluster
from tests.support.peers import istio_module_dir
from tests.support.plugged_ca import key_pem, new_root, pem

DATA = Path(__file__).with_name("data")
SELECTOR_LABEL = "pilotfish-differential"
READY_ANNOTATION = "pilotfish.test/ready"
POD_SUBNET = ipaddress.IPv4Network("10.244.0.0/16")  # pod addresses: never dialled, only listed
TRUST_DOMAIN = "cluster.local"
# what a mesh installed by istiod's chart has (manifests/charts/istio-control/istio-discovery
# values: meshConfig defaults); rootNamespace and the selector are added per scene, access logs
# (the demo profile's file, and default providers: istiod's built-in one and a JSON one, which
# take its place), two ext_authz providers for data/features.yaml's CUSTOM policy (its
# ServiceEntry ext-authz), two access log services and four tracers on that ServiceEntry
# (data/telemetry.yaml)
MESH = """\
defaultConfig:
  discoveryAddress: istiod.{system}.svc:15012
accessLogFile: /dev/stdout
rootNamespace: {system}
trustDomain: cluster.local
enablePrometheusMerge: true
discoverySelectors:
- matchLabels: {{{label}: '{token}'}}
defaultProviders:
  accessLogging: [envoy, audit-json]
extensionProviders:
- name: audit-json
  envoyFileAccessLog:
    path: /dev/stderr
    logFormat:
      labels: {{code: "%RESPONSE_CODE%", route: "%ROUTE_NAME%"}}
- name: otel-als
  envoyOtelAls:
    service: ext-authz.example.com
    port: 9000
    logFormat:
      labels: {{code: "%RESPONSE_CODE%", path: "%REQ_WITHOUT_QUERY(:PATH)%"}}
- name: http-als
  envoyHttpAls:
    service: ext-authz.example.com
    port: 8000
    additionalRequestHeadersToLog: [x-request-id]
- name: zipkin
  zipkin: {{service: ext-authz.example.com, port: 8000, maxTagLength: 128}}
- name: otel
  opentelemetry:
    service: ext-authz.example.com
    port: 9000
    grpc: {{timeout: 2s, initialMetadata: [{{name: x-tenant, value: shop}}]}}
    resourceDetectors: {{environment: {{}}}}
- name: datadog
  datadog: {{service: ext-authz.example.com, port: 8000}}
- name: skywalking
  skywalking: {{service: ext-authz.example.com, port: 9000}}
- name: ext-authz-grpc
  envoyExtAuthzGrpc:
    service: ext-authz.example.com
    port: 9000
    timeout: 0.5s
    statusOnError: "403"
- name: ext-authz-http
  envoyExtAuthzHttp:
    service: ext-authz.example.com
    port: 8000
    pathPrefix: /check
    includeRequestHeadersInCheck: [x-ext-authz, "x-user-*"]
    headersToUpstreamOnAllow: [x-authz-user]
"""


def istio_sample(relative: str) -> list[dict[str, Any]]:
    """The objects of a file under the pinned istio module's ``samples/`` (never copied here)."""
    text = (istio_module_dir() / "samples" / relative).read_text()
    return [d for d in yaml.safe_load_all(text) if d]


@dataclass(frozen=True)
class Workload:
    """A running pod of the scene, and the node Envoy in it would send."""

    name: str  # the pod
    namespace: str
    ip: str
    labels: Mapping[str, str]
    service_account: str
    deployment: str
    container_ports: tuple[int, ...]
    ready: bool = True
    proxy_type: str = "sidecar"  # "router" for a gateway
    metadata: Mapping[str, str] = field(default_factory=dict)  # more ISTIO_META_* (DNS_CAPTURE, ...)

    @property
    def agent(self) -> bool:
        """Whether its pilot-agent asks for NDS too (DNS capture on, as pkg/istio-agent does)."""
        return self.metadata.get("DNS_CAPTURE") == "true"

    def node(self, istio_version: str) -> base_pb2.Node:
        """The node id and metadata pilot-agent sends for this pod (pkg/bootstrap/config.go
        GetNodeMetaData over the environment istiod's injection template gives istio-proxy)."""
        node_id = f"{self.proxy_type}~{self.ip}~{self.name}.{self.namespace}~{self.namespace}.svc.cluster.local"
        return node(node_id, {
            "NAME": self.name,
            "NAMESPACE": self.namespace,
            "LABELS": dict(self.labels),
            "SERVICE_ACCOUNT": self.service_account,
            "INSTANCE_IPS": self.ip,
            "ISTIO_VERSION": istio_version,
            "CLUSTER_ID": "Kubernetes",
            "MESH_ID": TRUST_DOMAIN,
            "INTERCEPTION_MODE": "REDIRECT",
            "WORKLOAD_NAME": self.deployment,
            "OWNER": f"kubernetes://apis/apps/v1/namespaces/{self.namespace}/deployments/{self.deployment}",
            "APP_CONTAINERS": self.deployment.rsplit("-", 1)[0],
            "POD_PORTS": json.dumps([{"containerPort": p, "protocol": "TCP"} for p in self.container_ports]),
            "NODE_NAME": "node-1",
            "ENVOY_STATUS_PORT": 15021,
            "ENVOY_PROMETHEUS_PORT": 15090,
            **self.metadata,
        })  # fmt: skip


@dataclass
class Scene:
    kube: Cluster
    system: str  # the root namespace, with the mesh ConfigMap
    token: str  # the discoverySelectors' label value
    workloads: dict[str, Workload] = field(default_factory=dict)  # by Deployment name
    namespaces: dict[str, str] = field(default_factory=dict)  # made -> the stable name it stands for
    exact: set[str] = field(default_factory=set)  # namespaces made by their very name
    nodes: list[str] = field(default_factory=list)  # Nodes made (``delete_nodes`` takes them away)
    _next_ip: int = 10

    @classmethod
    def create(cls, kube: Cluster) -> Scene:
        token = secrets.token_hex(4)
        system = kube.namespace("differential-system", {SELECTOR_LABEL: token})
        scene = cls(kube, system, token)
        mesh = MESH.format(system=system, label=SELECTOR_LABEL, token=token)
        config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "istio", "namespace": system}}
        kube.apply({**config_map, "data": {"mesh": mesh}})
        return scene

    def namespace(self, prefix: str) -> str:
        made = self.kube.namespace(prefix, {SELECTOR_LABEL: self.token})
        self.namespaces[made] = prefix
        return made

    def exact_namespace(self, name: str) -> str:
        """A namespace by its very name (config that names namespaces in hosts, exportTo and
        Sidecar egress keeps its meaning), deleted with the scene's others."""
        labels = {SELECTOR_LABEL: self.token}
        self.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
        self.kube.track_namespace(name)
        self.exact.add(name)
        return name

    def node(self, node: Mapping[str, Any]) -> None:
        """A Node of a file-source config set (the pods that name it run on it: both control
        planes read their locality from its labels), cluster-wide until ``delete_nodes``."""
        self.kube.apply(node)
        self.nodes.append(node["metadata"]["name"])

    def delete_nodes(self) -> None:
        while self.nodes:
            self.kube.delete("v1", "Node", "", self.nodes.pop())

    def run_pod(self, pod: Mapping[str, Any], namespace: str) -> None:
        """A Pod of a file-source config set: run with the address and readiness its status
        gives, on the Node its spec names (else the cluster's)."""
        status = pod.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
        ready = ready or not status.get("conditions")
        name = pod["metadata"]["name"]
        self.kube.run_pod({"metadata": pod["metadata"], "spec": pod.get("spec") or {}}, status["podIP"],
                          ready=ready, namespace=namespace)  # fmt: skip
        spec = pod.get("spec") or {}
        ports = tuple(p["containerPort"] for c in spec.get("containers") or () for p in c.get("ports") or ())
        labels = dict(pod["metadata"].get("labels") or {})
        account = spec.get("serviceAccountName") or "default"
        self.workloads[name] = Workload(name, namespace, status["podIP"], labels, account, name, ports, ready)

    def placeholders(self) -> dict[str, str]:
        """What differs run after run, by its stable stand-in: each namespace's random name by
        its prefix (the root namespace as istio-system), each Service's ClusterIP as
        ``CLUSTER_IP(NAMESPACE/NAME)``."""
        out = {self.system: "istio-system", **self.namespaces}
        for made, prefix in self.namespaces.items():
            for service in self.kube.list("v1", "Service", made):
                address = service["spec"].get("clusterIP")
                if address and address != "None":
                    out[address] = f"CLUSTER_IP({prefix}/{service['metadata']['name']})"
        return out

    def with_node(self, deployment: str, proxy_type: str = "sidecar", **metadata: str) -> None:
        """The pod of ``deployment`` runs a proxy of this type, with this node metadata besides."""
        self.workloads[deployment] = replace(self.workloads[deployment], proxy_type=proxy_type, metadata=metadata)

    def apply(self, docs: Iterable[Mapping[str, Any]], namespace: str) -> None:
        """Objects into ``namespace``: a Deployment runs as one pod, everything else is applied."""
        for doc in docs:
            if doc["kind"] == "Deployment":
                self._run(doc, namespace)
            else:
                self.kube.apply({**doc, "metadata": {**doc["metadata"], "namespace": namespace}})

    def _run(self, deployment: Mapping[str, Any], namespace: str) -> None:
        name = deployment["metadata"]["name"]
        template = deployment["spec"]["template"]
        labels = dict(template["metadata"].get("labels") or {})
        ip = str(POD_SUBNET.network_address + self._next_ip)
        self._next_ip += 1
        pod = {"metadata": {"name": f"{name}-0", "labels": labels}, "spec": template["spec"]}
        ready = (deployment["metadata"].get("annotations") or {}).get(READY_ANNOTATION) != "false"
        self.kube.run_pod(pod, ip, ready=ready, namespace=namespace)
        ports = tuple(p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports") or ())
        account = template["spec"].get("serviceAccountName") or "default"
        self.workloads[name] = Workload(f"{name}-0", namespace, ip, labels, account, name, ports, ready)

    def wait_for_endpoints(self, namespace: str) -> None:
        """Until every Service of ``namespace`` has an EndpointSlice with its pods, each with the
        readiness its pod has."""
        for service in self.kube.list("v1", "Service", namespace):
            selector = service["spec"].get("selector") or {}
            want = {
                (w.ip, w.ready) for w in self.workloads.values()
                if w.namespace == namespace and selector and all(w.labels.get(k) == v for k, v in selector.items())
            }  # fmt: skip
            name = service["metadata"]["name"]
            self.kube.wait_for(f"the EndpointSlices of {namespace}/{name}",
                               lambda n=name, w=want: _slice_addresses(self.kube, namespace, n) == w)  # fmt: skip


def _slice_addresses(kube: Cluster, namespace: str, service: str) -> set[tuple[str, bool]]:
    selector = f"kubernetes.io/service-name={service}"
    slices = kube.list("discovery.k8s.io/v1", "EndpointSlice", namespace, labelSelector=selector)
    return {
        (address, bool((e.get("conditions") or {}).get("ready")))
        for s in slices
        for e in s.get("endpoints") or ()
        for address in e["addresses"]
    }


BOOKINFO = "bookinfo/platform/kube/bookinfo.yaml"
SLEEP = "sleep/sleep.yaml"
TRAFFIC_POLICY = DATA / "traffic-policy.yaml"
SCOPED = DATA / "scoped.yaml"
GATEWAY = DATA / "gateway.yaml"
FEATURES = DATA / "features.yaml"
TELEMETRY = DATA / "telemetry.yaml"
ENVOY_FILTER = DATA / "envoy-filter.yaml"


def deployments() -> tuple[str, ...]:
    """Every Deployment of the scene's config sets (each one pod, each a proxy to compare)."""
    docs = [*istio_sample(BOOKINFO), *istio_sample(SLEEP), *_data(TRAFFIC_POLICY, ""), *_data(GATEWAY, "bookinfo")]
    docs += _data(FEATURES, "bookinfo")
    docs += [d for sample in SAMPLES for d in istio_sample(sample)]
    docs += [d for path in testdata_files() for d in yaml.safe_load_all(path.read_text())]
    return (*(d["metadata"]["name"] for d in docs if d and d["kind"] == "Deployment"), *project_pods())


def _data(path: Path, bookinfo_namespace: str) -> list[dict[str, Any]]:
    text = path.read_text().replace("${BOOKINFO}", bookinfo_namespace)
    return [d for d in yaml.safe_load_all(text) if d]


def bookinfo(scene: Scene) -> str:
    """The bookinfo sample of the pinned istio module, its DestinationRules (every subset) and the
    80/20 reviews VirtualService, in a new namespace; returns it once the slices are there."""
    namespace = scene.namespace("bookinfo-sample")  # examples/bookinfo has the namespace bookinfo
    scene.apply(istio_sample(BOOKINFO), namespace)
    scene.apply(istio_sample("bookinfo/networking/destination-rule-all.yaml"), namespace)
    scene.apply(istio_sample("bookinfo/networking/virtual-service-reviews-80-20.yaml"), namespace)
    scene.wait_for_endpoints(namespace)
    return namespace


def traffic_policy(scene: Scene) -> str:
    """tests/differential/data/traffic-policy.yaml (DestinationRule traffic policies, ServiceEntries)
    in a new namespace; returns it once the slices are there."""
    namespace = scene.namespace("traffic-policy")
    scene.apply([d for d in yaml.safe_load_all(TRAFFIC_POLICY.read_text()) if d], namespace)
    scene.wait_for_endpoints(namespace)
    return namespace


TESTDATA = "tests/testdata/config"


def testdata_files() -> list[Path]:
    return sorted((istio_module_dir() / TESTDATA).glob("*.yaml"))


def istio_testdata(scene: Scene) -> list[str]:
    """Istio's own config corpus (tests/testdata/config of the pinned module: ServiceEntries of
    every resolution, VirtualServices, DestinationRules, Gateways, Sidecars, PeerAuthentications,
    and the fortio pods of its interception-mode-NONE namespace), each object in the namespace
    it names (made with that name, so the namespaces its hosts and Sidecars name mean what they
    say), else in one of its file's own. The objects of the shared cluster's ``default``
    namespace are left out (two: a PeerAuthentication and a DestinationRule), and so are those
    the API server refuses (Istio's CRDs no longer declare a field they set); both are returned,
    so the test says what was not compared."""
    left_out: list[str] = []
    made: dict[str, str] = {}
    for path in testdata_files():
        for doc in (d for d in yaml.safe_load_all(path.read_text()) if d):
            named = doc["metadata"].get("namespace")
            if named == "default":
                left_out.append(f"{path.name}: {doc['kind']} default/{doc['metadata']['name']}")
                continue
            wanted = named or path.stem
            if wanted not in made:
                if not named:
                    made[wanted] = scene.namespace(wanted)
                else:
                    made[wanted] = wanted if wanted in scene.exact else scene.exact_namespace(wanted)
            try:
                scene.apply([doc], made[wanted])
            except ApiError as e:  # fields Istio's CRDs no longer declare (websocketUpgrade)
                reason = json.loads(e.body).get("message", e.body)
                left_out.append(f"{path.name}: {doc['kind']} {wanted}/{doc['metadata']['name']}: {reason}")
    scene.with_node("fortio-cli", INTERCEPTION_MODE="NONE")
    for namespace in made.values():
        scene.wait_for_endpoints(namespace)
    return left_out


def features(scene: Scene, bookinfo_namespace: str) -> str:
    """data/features.yaml: the security kinds (PeerAuthentication, AuthorizationPolicy,
    RequestAuthentication), a Sidecar ingress listener, VirtualService delegation and a
    WorkloadEntry, on the ``web`` workload; returns its namespace once the slices are there."""
    namespace = scene.namespace("features")
    scene.apply(_data(FEATURES, bookinfo_namespace), namespace)
    scene.wait_for_endpoints(namespace)
    return namespace


REPO = Path(__file__).resolve().parents[2]
# the config sets the project's own tests use (examples/bookinfo is also tests/data/golden/bookinfo)
PROJECT_SETS = (
    REPO / "examples" / "bookinfo",
    REPO / "tests" / "data" / "golden" / "dns" / "config",
    REPO / "tests" / "data" / "golden" / "dr-lookup" / "config",
    REPO / "tests" / "data" / "golden" / "serviceentries" / "config",
)


def project_pods() -> tuple[str, ...]:
    """The pods of the project's config sets (each a sidecar to compare)."""
    return tuple(d["metadata"]["name"] for d in _project_docs(*PROJECT_SETS) if d["kind"] == "Pod")


def _project_docs(*paths: Path) -> list[dict[str, Any]]:
    """The objects of config sets (their ``mesh.yaml``, a MeshConfig, is the scene's own here)."""
    files = [f for path in paths for f in sorted(path.glob("*.yaml")) if f.name != "mesh.yaml"]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d and d.get("kind")]


def project_config_sets(scene: Scene) -> list[str]:
    """The config sets the project's tests use (file-source YAML: Namespaces, Nodes, Services, Pods
    with their status, EndpointSlices, Istio config; not their mesh.yaml), put in the cluster as
    the file source reads them:
    every object in the namespace it names (made with that name), each Pod run with the address and
    readiness its status gives, on the Node it names (the set's Nodes are made first, cluster-wide).
    An EndpointSlice of a Service with a selector is left to the real controller; a Service whose
    fixed ClusterIP the API server refuses (taken, or a second family this cluster lacks) gets one
    allocated. Returns what could not be put in, with the reason."""
    left_out: list[str] = []
    for path in PROJECT_SETS:
        docs = _project_docs(path)
        selected = {(d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs
                    if d["kind"] == "Service" and (d.get("spec") or {}).get("selector")}  # fmt: skip
        for doc in sorted(docs, key=lambda d: d["kind"] != "Node"):  # a pod's Node before the pod
            meta = doc["metadata"]
            if doc["kind"] == "Node":
                scene.node(doc)
                continue
            if doc["kind"] == "Namespace":
                if meta["name"] not in (*scene.exact, "istio-system"):
                    scene.exact_namespace(meta["name"])
                continue
            namespace = meta.get("namespace") or "default"
            if namespace == "istio-system":
                namespace = scene.system  # the root namespace stands for it
            elif namespace not in scene.exact:
                scene.exact_namespace(namespace)
            if doc["kind"] == "EndpointSlice":
                owner = (meta.get("labels") or {}).get("kubernetes.io/service-name")
                if (namespace, owner) in selected:
                    continue
            where = f"{path.relative_to(REPO)}: {doc['kind']} {namespace}/{meta['name']}"
            try:
                if doc["kind"] == "Pod":
                    scene.run_pod(doc, namespace)
                elif doc["kind"] == "Service":
                    _service(scene, doc, namespace, left_out, where)
                else:
                    scene.apply([doc], namespace)
            except ApiError as e:
                left_out.append(f"{where}: {json.loads(e.body).get('message', e.body)}")
    for namespace in sorted(scene.exact):
        scene.wait_for_endpoints(namespace)
    return left_out


def _service(scene: Scene, doc: dict[str, Any], namespace: str, left_out: list[str], where: str) -> None:
    try:
        scene.apply([doc], namespace)
    except ApiError as e:
        fixed = ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy")
        spec = {k: v for k, v in doc["spec"].items() if k not in fixed}
        if doc["spec"].get("clusterIP") == "None":
            spec["clusterIP"] = "None"
        scene.apply([{**doc, "spec": spec}], namespace)
        reason = json.loads(e.body).get("message", e.body)
        left_out.append(f"{where}: its fixed ClusterIP allocated anew ({reason[:160]})")


SAMPLES = ("httpbin/httpbin.yaml", "helloworld/helloworld.yaml")


def placed(scene: Scene, path: Path, namespaces: Mapping[str, str]) -> None:
    """A data file (data/telemetry.yaml, data/envoy-filter.yaml): each document in the namespace
    its ``${NAME}`` placeholder names (ROOT: the root namespace; the others as ``namespaces``
    gives them)."""
    text = path.read_text()
    for name, namespace in {"ROOT": scene.system, **namespaces}.items():
        text = text.replace(f"${{{name}}}", namespace)
    for doc in yaml.safe_load_all(text):
        if doc:
            scene.kube.apply(doc)


def samples(scene: Scene) -> str:
    """The httpbin and helloworld samples of the pinned istio module in a namespace of their own;
    returns it once the slices are there."""
    namespace = scene.namespace("samples")
    for sample in SAMPLES:
        scene.apply(istio_sample(sample), namespace)
    scene.wait_for_endpoints(namespace)
    return namespace


def scoped(scene: Scene, bookinfo_namespace: str) -> str:
    """The sleep sample of the pinned istio module with DNS capture and auto-allocation on, in a
    namespace a Sidecar scopes to itself and bookinfo (data/scoped.yaml, with ServiceEntries that
    NDS resolves); returns it once the slices are there."""
    namespace = scene.namespace("scoped")
    scene.apply(istio_sample(SLEEP), namespace)
    scene.apply(_data(SCOPED, bookinfo_namespace), namespace)
    scene.with_node("sleep", DNS_CAPTURE="true", DNS_AUTO_ALLOCATE="true")
    scene.wait_for_endpoints(namespace)
    return namespace


def gateway(scene: Scene, bookinfo_namespace: str) -> str:
    """An ingress gateway in a namespace of its own (data/gateway.yaml: an HTTPS server with a
    credentialName Secret made here) serving the bookinfo sample's Gateway and VirtualService;
    returns the namespace once the slices are there."""
    namespace = scene.namespace("ingress")
    scene.apply(_data(GATEWAY, bookinfo_namespace), namespace)
    scene.with_node("istio-ingressgateway", "router")
    cert, key = new_root("bookinfo.example.com")
    secret = {k: base64.b64encode(v.encode()).decode() for k, v in (("tls.crt", pem(cert)), ("tls.key", key_pem(key)))}
    scene.kube.apply({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "bookinfo-cert", "namespace": namespace},
        "data": secret,
    })  # fmt: skip
    scene.apply(istio_sample("bookinfo/networking/bookinfo-gateway.yaml"), bookinfo_namespace)
    scene.wait_for_endpoints(namespace)
    return namespace
