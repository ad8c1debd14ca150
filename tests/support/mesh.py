"""Push contexts and proxies for generator tests: YAML text (or a config dir) in, the PushContext
the generators read out, built the way pilotfish builds it from files; proxies as ``build_proxy``
makes them from the node id Istio sends."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from app.config.loader import load_documents, load_mesh_file
from app.config.model import ConfigEvent, EventType
from app.environment import Environment
from app.model.proxy import Proxy, build_proxy
from app.model.push_context import PushContext
from app.sources.files import FileSource


def push_context(*texts: str, mesh: str | None = None) -> PushContext:
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
    env = Environment()
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
