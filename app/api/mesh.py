"""Istio's mesh-wide configuration (the ``mesh`` key of the istio ConfigMap): MeshConfig and
the ProxyConfig of its ``defaultConfig``, generated from istio.io/api mesh/v1alpha1."""

from app.api.istio.mesh.v1alpha1.config_pb2 import LabelSelector, MeshConfig
from app.api.istio.mesh.v1alpha1.proxy_pb2 import ProxyConfig, Tracing

__all__ = ["LabelSelector", "MeshConfig", "ProxyConfig", "Tracing"]
