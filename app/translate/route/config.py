"""What every RouteConfiguration pilotfish builds shares: istiod's settings on it, and the empty
configuration a name that cannot be built gets."""

from __future__ import annotations

from collections.abc import Sequence

from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.config.route.v3 import route_pb2
from google.protobuf import wrappers_pb2

from app.api.mesh import MeshConfig
from app.model.service import Protocol as PortProtocol

MAX_DIRECT_RESPONSE_BODY_BYTES = 1024 * 1024  # istiod DefaultMaxDirectResponseBodySizeBytes


def empty_route_config(name: str) -> route_pb2.RouteConfiguration:
    # what istiod answers for a name it cannot build (a gateway recently deleted, a bad name)
    return route_pb2.RouteConfiguration(name=name, validate_clusters=wrappers_pb2.BoolValue(value=False))


def route_config(name: str, vhosts: Sequence[rc.VirtualHost]) -> route_pb2.RouteConfiguration:
    cfg = empty_route_config(name)
    cfg.virtual_hosts.extend(vhosts)
    cfg.ignore_port_in_host_matching = True
    cfg.max_direct_response_body_size_bytes.value = MAX_DIRECT_RESPONSE_BODY_BYTES
    return cfg


def include_attempt_count(mesh: MeshConfig) -> bool:
    """False when defaultConfig.proxyHeaders.attemptCount.disabled is set in mesh config."""
    return not mesh.default_config.proxy_headers.attempt_count.disabled.value


def http_or_sniffed(protocol: PortProtocol) -> bool:
    return protocol.is_http or protocol is PortProtocol.UNSUPPORTED
