"""SDS for gateways (istiod SecretGen): the credentialName key pairs a proxy asks for by name, a
handful per gateway, each a few KB: built per ask, never shared between proxies."""

from __future__ import annotations

from app.model.proxy import Proxy
from app.translate.secrets import generate_secrets
from app.xds.generators.base import WholeTypeOnly
from app.xds.generators.state import SnapshotState
from app.xds.resource import Resource, encode
from app.xds.watch import WatchedResource


class SecretGenerator(WholeTypeOnly):
    def generate(self, state: SnapshotState, proxy: Proxy, watch: WatchedResource) -> list[Resource] | None:
        secrets = state.push.secrets
        found = generate_secrets(proxy, lambda ns, name: secrets.get((ns, name)), sorted(watch.names))
        # nothing to send is no response at all, as istiod's pushXds has it for SDS
        return [encode(s.name, s) for s in found] or None
