"""xDS responses assembled from pre-encoded resources (DESIGN §7 rule 3).

A response to one proxy is its header fields and the shared ``Resource``s it carries; its wire
bytes are those resources' own bytes joined, so serving 2,000 proxies the same 1,000 clusters
builds no message per proxy and copies each resource once, into the buffer gRPC writes.
``message()`` parses the bytes back into the Envoy proto, for tests and debugging.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass

from envoy.service.discovery.v3 import discovery_pb2

from app.xds.resource import Resource, field_bytes, repeated_field

_ENTRY = operator.attrgetter("entry")
_SOTW = operator.attrgetter("sotw")


@dataclass(frozen=True, slots=True)
class DeltaResponse:
    """A DeltaDiscoveryResponse (field names as the proto's)."""

    type_url: str
    nonce: str
    system_version_info: str
    resources: Sequence[Resource]
    removed_resources: Sequence[str] = ()
    control_plane: str = ""  # ControlPlane.identifier, set on debug answers only
    # removed_resources already encoded (``removed_field``), when many responses carry them
    encoded_removed: bytes | None = None

    def payload(self) -> bytes:
        # fields: system_version_info 1, resources 2, type_url 4, nonce 5, removed_resources 6,
        # control_plane 7
        removed = self.encoded_removed
        return b"".join(
            (
                field_bytes(1, self.system_version_info.encode()),
                *map(_ENTRY, self.resources),
                field_bytes(4, self.type_url.encode()),
                field_bytes(5, self.nonce.encode()),
                removed_field(self.removed_resources) if removed is None else removed,
                _control_plane(7, self.control_plane),
            )
        )

    def message(self) -> discovery_pb2.DeltaDiscoveryResponse:
        return discovery_pb2.DeltaDiscoveryResponse.FromString(self.payload())


@dataclass(frozen=True, slots=True)
class SotwResponse:
    """A DiscoveryResponse (field names as the proto's)."""

    type_url: str
    nonce: str
    version_info: str
    resources: Sequence[Resource]
    control_plane: str = ""  # ControlPlane.identifier, set on debug answers only

    def payload(self) -> bytes:
        # fields: version_info 1, resources 2, type_url 4, nonce 5, control_plane 6
        return b"".join(
            (
                field_bytes(1, self.version_info.encode()),
                *map(_SOTW, self.resources),
                field_bytes(4, self.type_url.encode()),
                field_bytes(5, self.nonce.encode()),
                _control_plane(6, self.control_plane),
            )
        )

    def message(self) -> discovery_pb2.DiscoveryResponse:
        return discovery_pb2.DiscoveryResponse.FromString(self.payload())


def removed_field(names: Sequence[str]) -> bytes:
    """A DeltaDiscoveryResponse's removed_resources (field 6) on the wire."""
    return repeated_field(6, list(map(str.encode, names)))


def _control_plane(number: int, identifier: str) -> bytes:
    # config.core.v3.ControlPlane: identifier 1
    return field_bytes(number, field_bytes(1, identifier.encode())) if identifier else b""


def payload(response: DeltaResponse | SotwResponse) -> bytes:
    """The gRPC response serializer for both protocols."""
    return response.payload()
