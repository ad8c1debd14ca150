"""Istio MeshConfig: istiod's defaults with the user's YAML applied over them.

A field Istio's MeshConfig does not define is ignored, as istiod's ApplyMeshConfig ignores it;
every field it defines is type-checked like any other config, though pilotfish reads only some
(MeshConfig has many that only matter to features pilotfish lacks).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from google.protobuf import duration_pb2, wrappers_pb2

from app.api.mesh import MeshConfig as MeshConfig
from app.config.schema import merge_message, type_name
from app.config.validation.fields import (
    check_connect_timeout,
    check_locality_lb_setting,
    check_port_number,
    is_dns1123_label,
)
from app.errors import FieldError


def default_mesh_config() -> MeshConfig:
    """The values istiod uses when mesh config leaves a field unset (pkg/config/mesh DefaultMeshConfig)."""
    m = MeshConfig(
        root_namespace="istio-system",
        trust_domain="cluster.local",
        connect_timeout=duration_pb2.Duration(seconds=10),
        enable_auto_mtls=wrappers_pb2.BoolValue(value=True),
        dns_refresh_rate=duration_pb2.Duration(seconds=60),
        protocol_detection_timeout=duration_pb2.Duration(seconds=0),
        ingress_class="istio",
        ingress_service="istio-ingressgateway",
        enable_tracing=True,
    )
    m.outbound_traffic_policy.mode = MeshConfig.OutboundTrafficPolicy.ALLOW_ANY
    m.locality_lb_setting.enabled.value = True
    m.extension_providers.add(name="prometheus").prometheus.SetInParent()
    m.extension_providers.add(name="stackdriver").stackdriver.SetInParent()
    m.extension_providers.add(name="envoy").envoy_file_access_log.path = "/dev/stdout"
    return m


def parse_mesh_config(body: Any) -> MeshConfig:
    if not isinstance(body, dict):
        raise FieldError("", f"mesh config must be an object, got {type_name(body)}")
    mesh = default_mesh_config()
    defaults = [MeshConfig.ExtensionProvider(name=p.name) for p in mesh.extension_providers]
    for copy, provider in zip(defaults, mesh.extension_providers, strict=True):
        copy.CopyFrom(provider)
    merge_message(body, mesh, strict=False)
    if "extensionProviders" in body:
        _merge_extension_providers(mesh, defaults)
    if not mesh.root_namespace:
        raise FieldError("rootNamespace", "must not be empty")
    validate_mesh_config(mesh, explicit=body.keys())
    return mesh


def _merge_extension_providers(mesh: MeshConfig, defaults: list[MeshConfig.ExtensionProvider]) -> None:
    """ApplyMeshConfig: the YAML's providers over the defaults by name, a later one of a name
    replacing an earlier one's provider (so no name is listed twice)."""
    merged = defaults
    for provider in mesh.extension_providers:
        same = next((p for p in merged if p.name == provider.name), None)
        if same is None:
            merged.append(provider)
        else:
            same.CopyFrom(provider)
    del mesh.extension_providers[:]
    mesh.extension_providers.extend(merged)


def validate_mesh_config(mesh: MeshConfig, explicit: Collection[str] = ()) -> None:
    """agent.ValidateMeshConfig (which istiod runs on the mesh config merged over its defaults),
    for the fields pilotfish reads. ``explicit``: the fields the user's YAML sets (a port of 0
    written out is refused; left out, it is the default)."""
    if mesh.proxy_listen_port or "proxyListenPort" in explicit:
        check_port_number("proxyListenPort", mesh.proxy_listen_port)
    check_connect_timeout("connectTimeout", mesh.connect_timeout)
    detection = mesh.protocol_detection_timeout  # ValidateProtocolDetectionTimeout: 0s turns it off
    if (detection.seconds * 1_000_000_000 + detection.nanos) % 1_000_000:
        raise FieldError("protocolDetectionTimeout", "only durations to ms precision are supported")
    if mesh.HasField("locality_lb_setting"):
        check_locality_lb_setting("localityLbSetting", mesh.locality_lb_setting)
    _check_trust_domain("trustDomain", mesh.trust_domain)
    for i, alias in enumerate(mesh.trust_domain_aliases):
        _check_trust_domain(f"trustDomainAliases[{i}]", alias)
    if mesh.HasField("mesh_mTLS") and len(mesh.mesh_mTLS.ecdh_curves):
        raise FieldError("meshMTLS.ecdhCurves", "mesh TLS does not support ECDH curves configuration")


def _check_trust_domain(path: str, domain: str) -> None:
    """agent.ValidateTrustDomain: DNS labels, the last of which may be empty (``istio.io.``)."""
    if not domain:
        raise FieldError(path, "empty domain name not allowed")
    labels = domain.split(".")
    if labels[-1] == "":
        labels.pop()
    if not all(is_dns1123_label(label) for label in labels):
        raise FieldError(path, f"trust domain name {domain!r} invalid")
