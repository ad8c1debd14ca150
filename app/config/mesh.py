"""Istio MeshConfig: istiod's defaults with the user's YAML applied over them.

Fields pilotfish does not model are ignored (MeshConfig has many that only matter to
features pilotfish lacks); fields it models are type-checked like any other config.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import duration_pb2, wrappers_pb2

from app.api import mesh_pb2
from app.config.schema import merge_message
from app.errors import FieldError

MeshConfig = mesh_pb2.MeshConfig


def default_mesh_config() -> mesh_pb2.MeshConfig:
    """The values istiod uses when mesh config leaves a field unset (pkg/config/mesh DefaultMeshConfig)."""
    m = mesh_pb2.MeshConfig(
        root_namespace="istio-system",
        trust_domain="cluster.local",
        connect_timeout=duration_pb2.Duration(seconds=10),
        enable_auto_mtls=wrappers_pb2.BoolValue(value=True),
        dns_refresh_rate=duration_pb2.Duration(seconds=60),
        protocol_detection_timeout=duration_pb2.Duration(seconds=0),
        ingress_class="istio",
        ingress_service="istio-ingressgateway",
    )
    m.outbound_traffic_policy.mode = mesh_pb2.MeshConfig.OutboundTrafficPolicy.ALLOW_ANY
    m.locality_lb_setting.enabled.value = True
    return m


def parse_mesh_config(body: Any) -> mesh_pb2.MeshConfig:
    if not isinstance(body, dict):
        raise FieldError("", f"mesh config must be an object, got {type(body).__name__}")
    mesh = default_mesh_config()
    merge_message(body, mesh, strict=False)
    if not mesh.root_namespace:
        raise FieldError("rootNamespace", "must not be empty")
    return mesh
