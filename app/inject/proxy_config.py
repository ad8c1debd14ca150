"""The ProxyConfig an injected proxy gets: mesh config's ``defaultConfig`` over istiod's
defaults (mesh.DefaultProxyConfig), with the pod's ``proxy.istio.io/config`` annotation applied
over it (mesh.ApplyProxyConfig: proxyMetadata merged key by key, other fields replaced); and
cleanProxyConfig, which leaves out what equals the defaults before it goes into PROXY_CONFIG."""

from __future__ import annotations

from typing import Any

import yaml
from google.protobuf import duration_pb2

from app.api.istio.mesh.v1alpha1.proxy_pb2 import AuthenticationPolicy
from app.api.mesh import MeshConfig, ProxyConfig
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
