"""The ProxyConfig an injected proxy gets (istiod EffectiveProxyConfig): mesh config's
``defaultConfig`` over istiod's defaults (mesh.DefaultProxyConfig), then the ProxyConfig resources
of the root namespace and of the pod's namespace, the pod's ``proxy.istio.io/config`` annotation
(mesh.ApplyProxyConfig: proxyMetadata merged key by key, other fields replaced), and last the
resource that selects the pod; and cleanProxyConfig, which leaves out what equals the defaults
before it goes into PROXY_CONFIG."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from google.protobuf import duration_pb2

from app.api.istio.mesh.v1alpha1.proxy_pb2 import AuthenticationPolicy
from app.api.mesh import MeshConfig, ProxyConfig
from app.config.objects import ConfigObject
from app.config.schema import merge_message
from app.errors import FieldError

PROXY_CONFIG_ANNOTATION = "proxy.istio.io/config"


def default_proxy_config() -> ProxyConfig:
    """mesh.DefaultProxyConfig."""
    return ProxyConfig(
        config_path="./etc/istio/proxy",
        service_cluster="istio-proxy",
        drain_duration=duration_pb2.Duration(seconds=45),
        termination_drain_duration=duration_pb2.Duration(seconds=5),
        proxy_admin_port=15000,
        control_plane_auth_policy=AuthenticationPolicy.MUTUAL_TLS,
        discovery_address="istiod.istio-system.svc:15012",
        binary_path="/usr/local/bin/envoy",
        stat_name_length=189,
        status_port=15020,
    )


def injection_mesh(mesh: MeshConfig) -> MeshConfig:
    """``mesh`` with its defaultConfig laid over istiod's ProxyConfig defaults (pilotfish's mesh
    config holds only what the user set there)."""
    out = MeshConfig()
    out.CopyFrom(mesh)
    proxy = default_proxy_config()
    proxy.MergeFrom(mesh.default_config)
    out.default_config.CopyFrom(proxy)
    return out


def apply_proxy_config(text: str, base: ProxyConfig) -> ProxyConfig:
    """mesh.MergeProxyConfig: the annotation's YAML over ``base``."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise FieldError(PROXY_CONFIG_ANNOTATION, f"could not parse proxy config: {e}") from e
    out = ProxyConfig()
    out.CopyFrom(base)
    if doc is None:
        return out
    if not isinstance(doc, dict):
        raise FieldError(PROXY_CONFIG_ANNOTATION, "could not parse proxy config: not an object")
    metadata = dict(base.proxy_metadata)
    merge_message(doc, out, strict=False)
    metadata.update(out.proxy_metadata)
    out.proxy_metadata.clear()
    out.proxy_metadata.update(metadata)
    return out


@dataclass(frozen=True, slots=True)
class ProxyConfigResource:
    """One ProxyConfig resource (networking.istio.io/v1beta1) as injection reads it: what it sets
    of a proxy's ProxyConfig (istiod toMeshConfigProxyConfig) and whom it selects."""

    namespace: str
    selector: tuple[tuple[str, str], ...] | None  # matchLabels; None: no selector (namespace-wide)
    concurrency: int | None
    image_type: str | None
    environment: tuple[tuple[str, str], ...]  # environmentVariables: laid over proxyMetadata

    @classmethod
    def of(cls, obj: ConfigObject) -> ProxyConfigResource:
        spec = obj.spec
        return cls(
            obj.meta.namespace,
            tuple(sorted(spec.selector.match_labels.items())) if spec.HasField("selector") else None,
            spec.concurrency.value if spec.HasField("concurrency") else None,
            spec.image.image_type if spec.HasField("image") else None,
            tuple(sorted(spec.environment_variables.items())),
        )

    def over(self, base: ProxyConfig) -> ProxyConfig:
        out = ProxyConfig()
        out.CopyFrom(base)
        if self.concurrency is not None:
            out.concurrency.value = self.concurrency  # 0 too: all cores, over a mesh-wide 2
        if self.image_type is not None:
            out.image.image_type = self.image_type
        out.proxy_metadata.update(self.environment)
        return out

    def selects(self, labels: Mapping[str, str]) -> bool:
        """mergedWorkloadConfig: a selector with labels, all of them the pod's (an empty one
        selects nothing, and is no namespace-wide resource either)."""
        return bool(self.selector) and all(labels.get(k) == v for k, v in self.selector or ())


@dataclass(frozen=True, slots=True)
class ProxyConfigs:
    """istiod's ProxyConfigs: the resources, oldest first (sortConfigByCreationTime), and the
    root namespace, whose resource without a selector applies to every pod."""

    root_namespace: str = ""
    resources: tuple[ProxyConfigResource, ...] = ()

    @classmethod
    def of(cls, root_namespace: str, objects: Iterable[ConfigObject]) -> ProxyConfigs:
        ordered = sorted(objects, key=ConfigObject.creation_order)
        return cls(root_namespace, tuple(ProxyConfigResource.of(obj) for obj in ordered))

    def effective(
        self, base: ProxyConfig, namespace: str, labels: Mapping[str, str], annotation: str | None
    ) -> ProxyConfig:
        """EffectiveProxyConfig for a pod of ``namespace`` with ``labels`` and its
        ``proxy.istio.io/config`` annotation, over ``base`` (the mesh's defaultConfig complete).
        The oldest matching resource of each level applies, not a merge of them all."""
        config = base
        levels = [self._namespace_wide(self.root_namespace)] if self.root_namespace else []
        if namespace != self.root_namespace:
            levels.append(self._namespace_wide(namespace))
        for level in levels:
            config = level.over(config) if level is not None else config
        if annotation is not None:
            config = apply_proxy_config(annotation, config)
        workload = next((r for r in self.resources if r.namespace == namespace and r.selects(labels)), None)
        return workload.over(config) if workload is not None else config

    def _namespace_wide(self, namespace: str) -> ProxyConfigResource | None:
        return next((r for r in self.resources if r.namespace == namespace and r.selector is None), None)


NO_PROXY_CONFIGS = ProxyConfigs()


def clean_proxy_config(config: Any) -> ProxyConfig:
    """cleanProxyConfig: a copy without the fields that equal mesh.DefaultProxyConfig's."""
    pc = ProxyConfig()
    pc.CopyFrom(config)
    defaults = default_proxy_config()
    for name in ("config_path", "binary_path", "control_plane_auth_policy", "discovery_address",
                 "proxy_admin_port", "stat_name_length", "status_port"):  # fmt: skip
        if getattr(pc, name) == getattr(defaults, name):
            pc.ClearField(name)
    if pc.WhichOneof("cluster_name") == "service_cluster" and pc.service_cluster == defaults.service_cluster:
        pc.ClearField("service_cluster")
    for name in ("drain_duration", "termination_drain_duration", "envoy_metrics_service", "envoy_access_log_service",
                 "tracing", "concurrency"):  # fmt: skip
        if pc.HasField(name) == defaults.HasField(name) and getattr(pc, name) == getattr(defaults, name):
            pc.ClearField(name)
    return pc
