"""Push contexts and proxies for generator tests: YAML text (or a config dir) in, the PushContext
the generators read out, built the way pilotfish builds it from files; proxies as ``build_proxy``
makes them from the node id Istio sends; and the objects (Istio config, Service, Pod, EndpointSlice,
the mesh ConfigMap) that YAML is made of, as one-document texts to concatenate."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path

from app.config.loader import load_documents, load_mesh_file
from app.config.objects import ConfigEvent, EventType
from app.environment import Environment
from app.model.features import Features
from app.model.proxy import Proxy, build_proxy
from app.model.push_context import PushContext
from app.sources.files import FileSource


def push_context(*texts: str, mesh: str | None = None, features: Features | None = None) -> PushContext:
    """Each text is one multi-document YAML file of Kubernetes and Istio objects, ``mesh`` a
    ``mesh.yaml`` (MeshConfig); any rejected object fails the test."""
    events: list[ConfigEvent] = []
    if mesh is not None:
        result = load_mesh_file(mesh, "mesh.yaml")
        assert not result.rejected, result.rejected
        events += [ConfigEvent(EventType.ADD, obj) for obj in result.objects]
    for i, text in enumerate(texts):
        result = load_documents(text, f"doc{i}.yaml")
        assert not result.rejected, result.rejected
        events += [ConfigEvent(EventType.ADD, obj) for obj in result.objects]
    env = Environment(features=features)
    env.apply(events)
    return env.build_push_context(None)


def push_context_from_dir(config_dir: Path) -> PushContext:
    """A config directory as ``pilotfish serve`` reads it (mesh.yaml included)."""
    source = FileSource(config_dir)
    env = Environment()
    env.apply(source.load())
    assert source.rejections() == [], source.rejections()
    return env.build_push_context(None)


def sidecar_proxy(
    pod: str,
    ip: str,
    labels: Mapping[str, str] | None = None,
    *,
    locality: str = "",
    interception_mode: str = "REDIRECT",
) -> Proxy:
    """The sidecar of pod ``NAME.NAMESPACE`` at ``ip`` (node id ``sidecar~IP~POD~NS.svc.cluster.local``)."""
    return _proxy("sidecar", pod, ip, labels, locality, interception_mode)


def router_proxy(pod: str, ip: str, labels: Mapping[str, str] | None = None) -> Proxy:
    """The gateway (router) of pod ``NAME.NAMESPACE`` at ``ip``."""
    return _proxy("router", pod, ip, labels, "", "REDIRECT")


def _proxy(
    kind: str, pod: str, ip: str, labels: Mapping[str, str] | None, locality: str, interception_mode: str
) -> Proxy:
    namespace = pod.rsplit(".", 1)[1]
    metadata = {"LABELS": dict(labels or {}), "INTERCEPTION_MODE": interception_mode}
    return build_proxy(f"{kind}~{ip}~{pod}~{namespace}.svc.cluster.local", metadata, locality)


# --- objects as YAML text (labels, selector and ports in YAML flow style) --------------------


def config_doc(
    kind: str,
    name: str,
    spec: str,
    *,
    namespace: str = "default",
    api: str = "networking.istio.io/v1",
    created: str = "",
) -> str:
    """One object whose ``spec`` is given as block-style YAML (its common indentation removed)."""
    body = textwrap.indent(textwrap.dedent(spec).strip(), "  ")
    stamp = f', creationTimestamp: "{created}"' if created else ""
    meta = f"{{name: {name}, namespace: {namespace}{stamp}}}"
    return f"\n---\napiVersion: {api}\nkind: {kind}\nmetadata: {meta}\nspec:\n{body}\n"


def mesh_config_map(body: str) -> str:
    """The ``istio`` ConfigMap of ``istio-system`` with ``body`` (MeshConfig YAML) as its ``mesh``."""
    text = textwrap.indent(textwrap.dedent(body).strip(), "    ")
    meta = "{name: istio, namespace: istio-system}"
    return f"\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {meta}\ndata:\n  mesh: |\n{text}\n"


def kube_service(
    name: str,
    ports: str,
    *,
    namespace: str = "default",
    cluster_ip: str = "",
    selector: str = "",
    labels: str = "",
    created: str = "",
) -> str:
    """A Service; ``ports`` e.g. ``[{name: http, port: 80, targetPort: 8080}]``."""
    stamp = f', creationTimestamp: "{created}"' if created else ""
    meta = f"{{name: {name}, namespace: {namespace}{stamp}" + (f", labels: {{{labels}}}}}" if labels else "}")
    ip = f"\n  clusterIP: {cluster_ip}" if cluster_ip else ""
    sel = f"\n  selector: {{{selector}}}" if selector else ""
    return f"\n---\napiVersion: v1\nkind: Service\nmetadata: {meta}\nspec:{ip}{sel}\n  ports: {ports}\n"


def kube_pod(
    name: str,
    ip: str,
    labels: str,
    *,
    namespace: str = "default",
    service_account: str = "default",
    sidecar: bool = True,
    container_ports: str = "",
) -> str:
    """A running, ready Pod at ``ip``; ``sidecar`` adds the ``security.istio.io/tlsMode: istio`` label."""
    tls = ", security.istio.io/tlsMode: istio" if sidecar else ""
    container = f"{{name: app, ports: {container_ports}}}" if container_ports else "{name: app}"
    return f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}, labels: {{{labels}{tls}}}}}
spec: {{serviceAccountName: {service_account}, containers: [{container}]}}
status: {{phase: Running, podIP: {ip}, conditions: [{{type: Ready, status: "True"}}]}}
"""


def endpoint_slice(service: str, ports: str, *endpoints: str, namespace: str = "default") -> str:
    """The EndpointSlice ``SERVICE-1`` of a Service; each endpoint a ``slice_endpoint``."""
    return f"""
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {service}-1, namespace: {namespace}, labels: {{kubernetes.io/service-name: {service}}}}}
addressType: IPv4
ports: {ports}
endpoints:{"".join(endpoints)}
"""


# an unready pod's endpoint as the endpointslice controller writes it: every condition set (one
# not set reads as true in istiod, so ``{ready: false}`` alone is a terminating endpoint)
UNREADY = "{ready: false, serving: false, terminating: false}"


def slice_endpoint(ip: str, pod: str, conditions: str = "{ready: true}", *, namespace: str = "default") -> str:
    """One endpoint of an EndpointSlice: ``ip``, backed by Pod ``pod``."""
    return f"""
- addresses: [{ip}]
  conditions: {conditions}
  targetRef: {{kind: Pod, name: {pod}, namespace: {namespace}}}"""


def sidecars_without_capture(
    namespace: str, *, egress_port: int, server_ip: str, server_port: int, app_port: int
) -> str:
    """Sidecars for a client and a server (``app: client``, ``app: server``) of a mesh without
    traffic capture: the client's outbound listener is its egress entry on 127.0.0.1, the
    server's inbound listener its ingress entry on its own address, sending to its app on
    127.0.0.1 (istiod builds both from the Sidecar when there is no iptables)."""
    return f"""
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: client, namespace: {namespace}}}
spec:
  workloadSelector: {{labels: {{app: client}}}}
  egress:
  - port: {{number: {egress_port}, protocol: HTTP, name: http}}
    bind: 127.0.0.1
    captureMode: NONE
    hosts: ["./*"]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: server, namespace: {namespace}}}
spec:
  workloadSelector: {{labels: {{app: server}}}}
  ingress:
  - port: {{number: {server_port}, protocol: HTTP, name: http}}
    bind: {server_ip}
    defaultEndpoint: 127.0.0.1:{app_port}
  egress:
  - hosts: ["istio-system/*"]  # nothing: its outbound listeners would bind the client's port
"""
