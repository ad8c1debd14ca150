"""A real Kubernetes control plane for the tests (DESIGN §6): etcd, kube-apiserver and
kube-controller-manager from ``.peers/bin`` (``make peers``), on loopback, on free ports, with
everything (data, certificates, kubeconfigs, logs) in one temporary directory.

* etcd: one member, ``--unsafe-no-fsync``; its JSON gateway compacts (``Cluster.compact``).
* kube-apiserver: serving certificate for 127.0.0.1 / localhost / ``kubernetes.default.svc``
  from a test CA; client certificates from a second CA (the admin is O=system:masters);
  service-account tokens signed with a generated key (issuer
  ``https://kubernetes.default.svc.cluster.local``, audiences that and ``istio-ca``), so
  TokenRequest and TokenReview work; RBAC; the default admission plugins (webhooks included,
  called at a ready endpoint of their Service: ``--enable-aggregator-routing``);
  the default watch cache (off for Events, as in every cluster: their watches are served from
  etcd, so a compaction expires them with a real ``410 Gone``).
* kube-controller-manager with its own client certificate and per-controller service-account
  credentials (RBAC's bootstrap roles): EndpointSlices (and mirroring), the ``default``
  ServiceAccount and ``kube-root-ca.crt`` of every namespace, namespace deletion, garbage
  collection, legacy token secrets, Deployments and ReplicaSets (their pods run only where
  tests/support/kubelet.py runs them; otherwise they stay Pending, unscheduled).
* Istio's CRDs from the pinned istio.io/istio module (never copied into this repository).
* One Node (``node-1``) for pods to be bound to: there is no kubelet, so ``run_pod`` creates a
  pod bound to it and writes its status as a kubelet would (the endpointslice controller skips
  pods on nodes that do not exist). Its kubelet version is the API server's, as a kubelet would
  report it (the injector's native sidecars hang on it).

The helpers are synchronous (plain HTTPS with the admin's certificate); an async test may call
the quick ones directly and should run the ones that wait (``wait_for``) in a thread. Every
process's log stays in the directory; ``log_tails`` is attached to a failing test's report.
Processes get SIGTERM, then SIGKILL, at the end, and die with the test process.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import pytest
import trustme
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.peers import istio_crds_file, peer_binary

REPO = Path(__file__).resolve().parents[2]
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
ISSUER = "https://kubernetes.default.svc.cluster.local"
AUDIENCES = (ISSUER, "istio-ca")
SERVICE_CIDR = "10.96.0.0/16"
NODE = "node-1"
FIELD_MANAGER = "pilotfish-tests"
# kube-controller-manager --help names them so (the short forms are aliases)
CONTROLLERS = (
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "namespace-controller",
    "garbage-collector-controller",
    # Deployments make their pods, which tests/support/kubelet.py binds and runs
    "deployment-controller",
    "replicaset-controller",
)
START_TIMEOUT = 120.0  # a loaded 2-core CI machine; polling returns as soon as it is up
STOP_TIMEOUT = 10.0
LOG_LINES = 40

T = TypeVar("T")


class ApiError(Exception):
    def __init__(self, status: int, body: str, what: str) -> None:
        super().__init__(f"{what}: HTTP {status}: {body[:1000]}")
        self.status = status
        self.body = body


def helm() -> Path:
    for path in (Path(sys.executable).parent / "helm", REPO / ".venv" / "bin" / "helm"):
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("helm")
    if found is None:
        pytest.fail("helm is missing: run `make .venv/bin/helm`", pytrace=False)
    return Path(found)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def machine_address() -> str:
    """An IPv4 address of this machine outside 127.0.0.0/8 and 169.254.0.0/16: a pod address a
    local process can listen on (EndpointSlice validation refuses loopback addresses)."""
    candidates: list[str] = []
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the route's source
        candidates.append(probe.getsockname()[0])
    with contextlib.suppress(OSError):
        candidates += [info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)]
    for address in candidates:
        if not address.startswith(("127.", "169.254.", "0.")):
            with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((address, 0))
                return str(address)
    pytest.fail(f"no non-loopback IPv4 address to give pods (tried {candidates})", pytrace=False)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class PeerProcess:
    name: str
    log_path: Path
    popen: subprocess.Popen[bytes]
    argv: list[str] = field(default_factory=list)  # what it was started with (a restart repeats it)

    @classmethod
    def start(cls, name: str, argv: list[str], workdir: Path) -> PeerProcess:
        log_path = workdir / f"{name}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )  # fmt: skip
        return cls(name, log_path, popen, argv)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = LOG_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@dataclass
class Cluster:
    workdir: Path
    server: str  # https://127.0.0.1:PORT
    etcd_url: str  # http://127.0.0.1:PORT
    ca_file: Path
    admin_kubeconfig: Path
    processes: list[PeerProcess] = field(default_factory=list)
    started_in: float = 0.0  # seconds from the first process to a cluster ready for tests
    steps: dict[str, float] = field(default_factory=dict)  # seconds each start-up step took
    _admin_ssl: ssl.SSLContext | None = None
    _token_ssl: ssl.SSLContext | None = None
    _resources: dict[tuple[str, str], tuple[str, bool]] = field(default_factory=dict)
    _namespaces: list[str] = field(default_factory=list)  # made for the running test

    # --- REST --------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        token: str | None = None,
        ok: Iterable[int] = (200, 201),
    ) -> Any:
        """One request as the admin (or with a bearer ``token``); the JSON answer, or ApiError."""
        assert self._admin_ssl is not None and self._token_ssl is not None
        host, port = self.server.removeprefix("https://").split(":")
        conn = http.client.HTTPSConnection(
            host, int(port), timeout=30, context=self._token_ssl if token else self._admin_ssl
        )
        headers = {"Accept": "application/json", "Content-Type": content_type}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        url = f"{path}?{urlencode(query)}" if query else path
        try:
            conn.request(method, url, body=None if body is None else json.dumps(body), headers=headers)
            response = conn.getresponse()
            text = response.read().decode(errors="replace")
        finally:
            conn.close()
        if response.status not in tuple(ok):
            raise ApiError(response.status, text, f"{method} {url}")
        return json.loads(text) if text.startswith(("{", "[")) else text

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) of a kind, from discovery (asked again for a kind not seen yet:
        a CRD may have been installed since)."""
        key = (api_version, kind)
        if key not in self._resources:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            for resource in self.request("GET", base)["resources"]:
                if "/" not in resource["name"]:
                    self._resources[(api_version, resource["kind"])] = (resource["name"], resource["namespaced"])
        if key not in self._resources:
            raise KeyError(f"the API server serves no {kind} in {api_version}")
        return self._resources[key]

    def path(self, api_version: str, kind: str, namespace: str = "", name: str = "") -> str:
        plural, namespaced = self._resource(api_version, kind)
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        scope = f"/namespaces/{namespace}" if namespaced and namespace else ""
        return f"{base}{scope}/{plural}" + (f"/{name}" if name else "")

    def apply(
        self, *docs: Mapping[str, Any] | str, namespace: str = "", manager: str = FIELD_MANAGER
    ) -> list[dict[str, Any]]:
        """Server-side apply (as ``kubectl apply --server-side --force-conflicts``) of objects
        or YAML text; ``namespace`` for those that name none."""
        out = []
        for doc in _documents(docs):
            meta = dict(doc.get("metadata") or {})
            _, namespaced = self._resource(str(doc["apiVersion"]), str(doc["kind"]))
            if namespaced:
                meta["namespace"] = meta.get("namespace") or namespace or "default"
            body = {**doc, "metadata": meta}
            path = self.path(body["apiVersion"], body["kind"], meta.get("namespace", ""), meta["name"])
            query = {"fieldManager": manager, "force": "true"}
            out.append(self.request("PATCH", path, body, query=query, content_type="application/apply-patch+yaml"))
        return out

    def create(self, doc: Mapping[str, Any], namespace: str = "") -> dict[str, Any]:
        namespace = namespace or (doc.get("metadata") or {}).get("namespace", "")
        created: dict[str, Any] = self.request("POST", self.path(doc["apiVersion"], doc["kind"], namespace), doc)
        return created

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.request("GET", self.path(api_version, kind, namespace, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        return found

    def list(self, api_version: str, kind: str, namespace: str = "", **query: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.request("GET", self.path(api_version, kind, namespace), query=query)["items"]
        return items

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete (gone already is fine); returns without waiting for finalizers."""
        self.request("DELETE", self.path(api_version, kind, namespace, name), ok=(200, 202, 404))

    def patch(self, api_version: str, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """A JSON merge patch (a None value removes the field, e.g. a label)."""
        patched: dict[str, Any] = self.request(
            "PATCH", self.path(api_version, kind, namespace, name), patch, content_type="application/merge-patch+json"
        )
        return patched

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        """What a status writer (a kubelet, a controller) does: a merge patch of ``status``
        through the status subresource."""
        path = self.path(api_version, kind, namespace, name) + "/status"
        query = {"fieldManager": "status-writer"}
        patched: dict[str, Any] = self.request(
            "PATCH", path, {"status": status}, query=query, content_type="application/merge-patch+json"
        )
        return patched

    def wait_for(self, what: str, check: Callable[[], T | None], timeout: float = 60.0) -> T:
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            try:
                value = check()
            except ApiError as e:
                value, last = None, e
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last})")
            time.sleep(0.1)

    # --- what tests need -----------------------------------------------------------------

    def namespace(self, prefix: str = "test", labels: Mapping[str, str] | None = None) -> str:
        """A new namespace with a unique name, deleted after the test (``delete_namespaces``)."""
        name = f"{prefix[:40].rstrip('-')}-{secrets.token_hex(3)}"
        doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}}
        self.create(doc)
        self._namespaces.append(name)
        return name

    def track_namespace(self, name: str) -> None:
        """Delete ``name`` with the namespaces ``namespace`` made (a test made it by its name)."""
        self._namespaces.append(name)

    def delete_namespaces(self) -> None:
        """The namespaces made since the last call go (the namespace controller empties them
        in the background). Their pods go at once: a pod bound to a node waits for its kubelet
        to confirm it stopped, and there is none."""
        while self._namespaces:
            namespace = self._namespaces.pop()
            pods = self.path("v1", "Pod", namespace)
            self.request("DELETE", pods, query={"gracePeriodSeconds": "0"}, ok=(200, 404))
            self.delete("v1", "Namespace", "", namespace)

    def service_account(self, namespace: str, name: str) -> None:
        try:
            self.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}, namespace)
        except ApiError as e:
            if e.status != 409:
                raise

    def run_pod(self, pod: Mapping[str, Any], ip: str, *, ready: bool = True, namespace: str = "") -> dict[str, Any]:
        """Create a pod as the scheduler would leave it (bound to the node its spec names, else
        ``node-1``), then write its status as the kubelet would once its containers run: Running,
        ``ip``, Ready (or not)."""
        meta = dict(pod.get("metadata") or {})
        meta["namespace"] = namespace = meta.get("namespace") or namespace or "default"
        spec = dict(pod.get("spec") or {})
        spec["nodeName"] = spec.get("nodeName") or NODE
        containers = spec.get("containers") or [{"name": "app"}]
        spec["containers"] = [{"image": "registry.invalid/none", **c} for c in containers]
        # the ServiceAccount admission plugin refuses a pod whose account does not exist (yet)
        self.service_account(namespace, spec.get("serviceAccountName") or "default")
        doc = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
        self.create(doc)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        state = "True" if ready else "False"
        states = (("PodScheduled", "True"), ("Initialized", "True"), ("ContainersReady", state), ("Ready", state))
        conditions = [{"type": t, "status": s, "lastTransitionTime": now} for t, s in states]
        status = {
            "phase": "Running",
            "hostIP": ip,
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": now,
            "conditions": conditions,
        }
        return self.patch_status("v1", "Pod", namespace, meta["name"], status)

    def token(self, namespace: str, account: str, audiences: Iterable[str] = (ISSUER,), seconds: int = 3600) -> str:
        """A TokenRequest for a ServiceAccount: the JWT a projected volume would hold."""
        path = self.path("v1", "ServiceAccount", namespace, account) + "/token"
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": list(audiences), "expirationSeconds": seconds},
        }
        token: str = self.request("POST", path, body)["status"]["token"]
        return token

    def token_kubeconfig(self, token: str, path: Path) -> Path:
        path.write_text(_kubeconfig(self.server, self.ca_file, {"token": token}))
        return path

    def compact(self) -> int:
        """Compact etcd at its current revision: every older resourceVersion is gone."""
        now = self._etcd("/v3/kv/range", {"key": base64.b64encode(b"/compact").decode()})
        revision = int(now["header"]["revision"])
        self._etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _etcd(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        host, port = self.etcd_url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            text = response.read().decode()
        finally:
            conn.close()
        if response.status != 200:
            raise ApiError(response.status, text, f"etcd {path}")
        answer: dict[str, Any] = json.loads(text)
        return answer

    def kubectl(self, *args: str, timeout: float = 120) -> str:
        argv = [str(peer_binary("kubectl")), "--kubeconfig", str(self.admin_kubeconfig), *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def restart_api_server(self, down: float) -> None:
        """Kill kube-apiserver (its watches break without a goodbye), leave it down ``down``
        seconds and start it again as before: same flags, port and etcd."""
        [old] = [p for p in self.processes if p.name == "kube-apiserver"]
        old.popen.kill()
        old.popen.wait()
        time.sleep(down)
        new = PeerProcess.start(old.name, old.argv, self.workdir)
        self.processes[self.processes.index(old)] = new
        _wait_up(new, "kube-apiserver /readyz", lambda: self.request("GET", "/readyz") == "ok")

    def log_tails(self, lines: int = LOG_LINES) -> list[tuple[str, str]]:
        return [(f"{p.name} log ({p.log_path}), last {lines} lines", p.tail(lines)) for p in self.processes]


# --- start and stop ----------------------------------------------------------------------------


@contextlib.contextmanager
def running_cluster(workdir: Path) -> Iterator[Cluster]:
    """etcd, kube-apiserver and kube-controller-manager, ready, with Istio's CRDs; all stopped
    on the way out, whatever happened."""
    binaries = {name: str(peer_binary(name)) for name in BINARIES}
    began = time.monotonic()
    pki = workdir / "pki"
    pki.mkdir(parents=True)
    etcd_port, apiserver_port = free_port(), free_port()
    cluster = Cluster(
        workdir=workdir,
        server=f"https://127.0.0.1:{apiserver_port}",
        etcd_url=f"http://127.0.0.1:{etcd_port}",
        ca_file=pki / "ca.pem",
        admin_kubeconfig=workdir / "admin.kubeconfig",
    )
    files = _certificates(pki, cluster)
    last = began

    def mark(step: str) -> None:
        nonlocal last
        cluster.steps[step], last = time.monotonic() - last, time.monotonic()

    mark("certificates")
    try:
        peer_url = f"http://127.0.0.1:{free_port()}"
        etcd = _start(cluster, "etcd", [
            binaries["etcd"], "--name", "etcd", "--data-dir", str(workdir / "etcd"),
            "--listen-client-urls", cluster.etcd_url, "--advertise-client-urls", cluster.etcd_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"etcd={peer_url}", "--unsafe-no-fsync", "--log-level", "warn",
        ])  # fmt: skip
        _wait_up(etcd, "etcd /health", lambda: '"true"' in _http_get(f"{cluster.etcd_url}/health"))
        mark("etcd")
        apiserver = _start(cluster, "kube-apiserver", [
            binaries["kube-apiserver"],
            "--etcd-servers", cluster.etcd_url,
            "--bind-address", "127.0.0.1", "--secure-port", str(apiserver_port),
            "--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none",
            "--tls-cert-file", files["serving.pem"], "--tls-private-key-file", files["serving-key.pem"],
            "--client-ca-file", files["client-ca.pem"],
            "--service-account-key-file", files["sa.pub"],
            "--service-account-signing-key-file", files["sa.key"],
            "--service-account-issuer", ISSUER, "--api-audiences", ",".join(AUDIENCES),
            "--authorization-mode", "RBAC",
            "--service-cluster-ip-range", SERVICE_CIDR,
            # webhooks (and aggregated APIs) reached at a ready endpoint of their Service, not its
            # ClusterIP: there is no kube-proxy to route a ClusterIP from the API server's host
            "--enable-aggregator-routing=true",
            "--profiling=false",
        ])  # fmt: skip
        _wait_up(apiserver, "kube-apiserver /readyz", lambda: cluster.request("GET", "/readyz") == "ok")
        mark("kube-apiserver")
        controllers = _start(cluster, "kube-controller-manager", [
            binaries["kube-controller-manager"],
            "--kubeconfig", files["controller-manager.kubeconfig"],
            "--controllers", ",".join(CONTROLLERS),
            "--use-service-account-credentials",
            "--service-account-private-key-file", files["sa.key"],
            "--root-ca-file", str(cluster.ca_file),
            "--leader-elect=false", "--secure-port", "0", "--bind-address", "127.0.0.1",
        ])  # fmt: skip
        cluster.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        version = cluster.request("GET", "/version")["gitVersion"]
        cluster.patch_status("v1", "Node", "", NODE, {"nodeInfo": {"kubeletVersion": version}})
        install_istio_crds(cluster)
        mark("Istio CRDs")
        # the controllers work (with their own credentials) once a namespace has its account and root
        _wait_up(controllers, "the default ServiceAccount and kube-root-ca.crt of namespace default", lambda: (
            cluster.get("v1", "ServiceAccount", "default", "default") is not None
            and cluster.get("v1", "ConfigMap", "default", "kube-root-ca.crt") is not None
        ))  # fmt: skip
        mark("kube-controller-manager")  # started before the CRDs: what it took beyond them
        cluster.started_in = time.monotonic() - began
        yield cluster
    finally:
        for process in reversed(cluster.processes):
            process.stop()


def _start(cluster: Cluster, name: str, argv: list[str]) -> PeerProcess:
    process = PeerProcess.start(name, argv, cluster.workdir)
    cluster.processes.append(process)
    return process


def _wait_up(process: PeerProcess, what: str, check: Callable[[], bool], timeout: float = START_TIMEOUT) -> None:
    """Until ``check`` holds; the process ending first, or the time running out, raises with the
    last lines of its log."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        if not process.alive():
            code = process.popen.returncode
            raise RuntimeError(f"{process.name} exited with {code} before {what}:\n{process.tail()}")
        try:
            if check():
                return
        except (OSError, ApiError, http.client.HTTPException, ValueError) as e:
            last = e
        if time.monotonic() > deadline:
            raise RuntimeError(f"{process.name}: no {what} after {timeout:.0f}s (last: {last}):\n{process.tail()}")
        time.sleep(0.1)


def _http_get(url: str) -> str:
    host, port = url.removeprefix("http://").split("/", 1)[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request("GET", "/" + url.split("/", 3)[3])
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def _certificates(pki: Path, cluster: Cluster) -> dict[str, str]:
    """The serving CA and certificate, the client CA, the admin's and the controller manager's
    client certificates and kubeconfigs, the service-account key pair."""
    serving_ca, client_ca = trustme.CA(), trustme.CA()
    serving_ca.cert_pem.write_to_path(str(cluster.ca_file))
    serving = serving_ca.issue_cert(
        "127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local", "10.96.0.1",
    )  # fmt: skip
    files: dict[str, str] = {}

    def write(name: str, data: bytes) -> str:
        (pki / name).write_bytes(data)
        files[name] = str(pki / name)
        return files[name]

    write("serving.pem", b"".join(blob.bytes() for blob in serving.cert_chain_pems))
    write("serving-key.pem", serving.private_key_pem.bytes())
    write("client-ca.pem", client_ca.cert_pem.bytes())
    for user, group, kubeconfig in (
        ("admin", "system:masters", cluster.admin_kubeconfig),
        ("system:kube-controller-manager", None, pki / "controller-manager.kubeconfig"),
    ):
        slug = user.rsplit(":", 1)[-1]
        # an identity besides the name: Go refuses a certificate whose critical SAN is empty
        leaf = client_ca.issue_cert(f"{slug}@pilotfish.test", common_name=user, organization_name=group)
        credentials = {
            "client-certificate": write(f"{slug}.pem", leaf.cert_chain_pems[0].bytes()),
            "client-key": write(f"{slug}-key.pem", leaf.private_key_pem.bytes()),
        }
        kubeconfig.write_text(_kubeconfig(cluster.server, cluster.ca_file, credentials))
        files[kubeconfig.name] = str(kubeconfig)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write("sa.key", key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ))  # fmt: skip
    write("sa.pub", key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ))  # fmt: skip
    admin = ssl.create_default_context(cafile=str(cluster.ca_file))
    admin.load_cert_chain(files["admin.pem"], files["admin-key.pem"])
    cluster._admin_ssl = admin
    cluster._token_ssl = ssl.create_default_context(cafile=str(cluster.ca_file))
    return files


def _kubeconfig(server: str, ca_file: Path, user: Mapping[str, str]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
            "users": [{"name": "test", "user": dict(user)}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
            "current-context": "test",
        }
    )


# --- Istio's CRDs and pilotfish's chart ---------------------------------------------------------


def istio_crd(name: str) -> dict[str, Any]:
    """One CRD of Istio's (e.g. ``workloadentries.networking.istio.io``), as the module has it."""
    for doc in yaml.safe_load_all(istio_crds_file().read_text()):
        if doc and doc["metadata"]["name"] == name:
            return dict(doc)
    raise KeyError(name)


def install_istio_crds(cluster: Cluster) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(istio_crds_file()))
    cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=120s")


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def chart_credentials(
    cluster: Cluster, kubeconfig: Path, namespace: str = "istio-system", values: Sequence[str] = ()
) -> Path:
    """What charts/pilotfish (rendered with helm's ``values`` arguments) gives pilotfish, and
    nothing more: its ServiceAccount and RBAC objects applied, a TokenRequest token of that
    account, a kubeconfig with it."""
    rendered = subprocess.run(
        [str(helm()), "template", "pilotfish", str(REPO / "charts" / "pilotfish"), "--namespace", namespace, *values],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if rendered.returncode != 0:
        raise RuntimeError(f"helm template charts/pilotfish: {rendered.stderr}")
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d and d.get("kind") in RBAC_KINDS]
    [account] = [d for d in docs if d["kind"] == "ServiceAccount"]
    if cluster.get("v1", "Namespace", "", namespace) is None:
        cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    cluster.apply(*docs, namespace=namespace)
    token = cluster.token(namespace, account["metadata"]["name"], seconds=4 * 3600)
    # RBAC's authorizer follows its objects through an informer: wait until it has the binding
    cluster.wait_for("the chart's RBAC in force", lambda: cluster.request(
        "GET", "/api/v1/services", query={"limit": "1"}, token=token, ok=(200,)
    ), timeout=30)  # fmt: skip
    return cluster.token_kubeconfig(token, kubeconfig)


def chart_role(cluster: Cluster, system_namespace: str, release_namespace: str = "istio-system") -> None:
    """The chart's Role (the CA Secret) in a test's own system namespace, bound to the
    account ``chart_credentials`` made in ``release_namespace``: what a release installed with
    ``global.istioNamespace`` = ``system_namespace`` would grant there."""
    rendered = subprocess.run(
        [str(helm()), "template", "pilotfish", str(REPO / "charts" / "pilotfish"), "--namespace", system_namespace,
         "--set", f"global.istioNamespace={system_namespace}"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d and d.get("kind") in ("Role", "RoleBinding")]
    for doc in docs:
        for subject in doc.get("subjects", ()):
            subject["namespace"] = release_namespace
    cluster.apply(*docs, namespace=system_namespace)


def _documents(docs: Iterable[Mapping[str, Any] | str]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for doc in docs:
        if isinstance(doc, str):
            out.extend(d for d in yaml.safe_load_all(doc) if d)
        else:
            out.append(doc)
    return out


# --- watching what a client asks -----------------------------------------------------------------


class Requests:
    """Records every request a ``KubeClient`` makes (path and query) and can hold the next watch
    back until released: a watch that lapses for a while, as after a network partition, while
    the test changes the cluster."""

    def __init__(self, client: Any) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.established: list[tuple[str, dict[str, str]]] = []  # watches the server answered
        self._hold: asyncio.Event | None = None
        self.held = asyncio.Event()  # a watch is waiting to be released
        self._real = client.request
        client.request = self._request

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        query = dict(kwargs.get("query") or {})
        self.seen.append((path, query))
        if self._hold is not None and query.get("watch") == "true":
            gate, self._hold = self._hold, None
            self.held.set()
            await gate.wait()
        response = await self._real(method, path, **kwargs)
        if query.get("watch") == "true":
            self.established.append((path, query))
        return response

    def hold_next_watch(self) -> Callable[[], None]:
        """Hold the next watch request; returns what releases it."""
        gate = self._hold = asyncio.Event()
        self.held.clear()
        return gate.set

    def lists(self, plural: str) -> list[dict[str, str]]:
        return [q for p, q in self.seen if p.endswith(f"/{plural}") and q.get("watch") != "true"]

    def watches(self, plural: str) -> list[dict[str, str]]:
        return [q for p, q in self.seen if p.endswith(f"/{plural}") and q.get("watch") == "true"]
