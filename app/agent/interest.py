"""What the local Envoy has asked for and holds, per type, so a new upstream stream can be told
the same (sans-I/O; the xDS proxy feeds it every request and response it passes on).

pilot-agent closes Envoy's stream when its upstream breaks and lets Envoy reconnect; pilotfish's
agent keeps Envoy's stream up instead and replays Envoy's interest on the new upstream stream:
SotW, each type's last request (names and the version Envoy last accepted); Delta, each type's
subscription and the versions Envoy holds as ``initial_resource_versions`` (the xDS protocol's
reconnect rule), so the control plane sends only what changed meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
)

WILDCARD = "*"


@dataclass(slots=True)
class SotwInterest:
    """Per type, Envoy's last request: the names it wants and the version it last accepted."""

    requests: dict[str, DiscoveryRequest] = field(default_factory=dict)

    def on_request(self, req: DiscoveryRequest) -> None:
        # an ACK's and a NACK's version_info are both the last version Envoy accepted
        kept = DiscoveryRequest(type_url=req.type_url, version_info=req.version_info)
        kept.resource_names.extend(req.resource_names)
        self.requests[req.type_url] = kept

    def replay(self) -> list[DiscoveryRequest]:
        """One request per type Envoy asked for, in the order it first asked (no nonce: each
        opens the type on the new stream)."""
        return list(self.requests.values())


@dataclass(slots=True)
class _DeltaType:
    wildcard: bool
    names: set[str] = field(default_factory=set)
    versions: dict[str, str] = field(default_factory=dict)  # what Envoy holds: name -> version


@dataclass(slots=True)
class DeltaInterest:
    """Per type, Envoy's subscription and the resource versions it was sent."""

    types: dict[str, _DeltaType] = field(default_factory=dict)

    def on_request(self, req: DeltaDiscoveryRequest) -> None:
        found = self.types.get(req.type_url)
        if found is None:
            # the first request of a type: no names, or "*", is a wildcard subscription
            subscribe = set(req.resource_names_subscribe)
            found = self.types[req.type_url] = _DeltaType(wildcard=not subscribe or WILDCARD in subscribe)
            found.versions.update(req.initial_resource_versions)
        for name in req.resource_names_subscribe:
            if name == WILDCARD:
                found.wildcard = True
            else:
                found.names.add(name)
        for name in req.resource_names_unsubscribe:
            if name == WILDCARD:
                found.wildcard = False
            else:
                found.names.discard(name)
                found.versions.pop(name, None)

    def on_response(self, resp: DeltaDiscoveryResponse) -> None:
        found = self.types.get(resp.type_url)
        if found is None:
            return
        for r in resp.resources:
            found.versions[r.name] = r.version
        for name in resp.removed_resources:
            found.versions.pop(name, None)

    def replay(self) -> list[DeltaDiscoveryRequest]:
        out = []
        for type_url, t in self.types.items():
            names = sorted(t.names)
            if t.wildcard and names:
                names.insert(0, WILDCARD)  # wildcard plus explicit names: say both
            out.append(
                DeltaDiscoveryRequest(
                    type_url=type_url, resource_names_subscribe=names, initial_resource_versions=t.versions
                )
            )
        return out
