"""What the xDS generators read from a push context: one ``PushContextView`` Protocol shared by
CDS, EDS, LDS and RDS (app.model.push_context.PushContext satisfies it), so the generators
depend on a narrow interface, not on how the snapshot is built (DESIGN.md §7); and the
per-proxy helpers more than one generator derives from it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.config.objects import ConfigObject
from app.model.authn import PeerAuthentications
from app.model.authz import AuthorizationPolicies, RequestAuthentications
from app.model.features import Features
from app.model.proxy import Proxy
from app.model.service import Endpoint, Service, ServicePort
from app.model.telemetry import Telemetries
from app.translate.cluster.builder import AppliedDestinationRule, ServiceTarget
from app.translate.listener.gateway import GatewayVirtualServices
from app.translate.listener.plan import EgressListenerView


class SidecarScopeView(Protocol):
    """What the generators read from a SidecarScope."""

    @property
    def name(self) -> str | None: ...
    @property
    def namespace(self) -> str: ...
    @property
    def sidecar(self) -> net.Sidecar | None: ...
    @property
    def services(self) -> Sequence[Service]: ...
    @property
    def services_by_host(self) -> Mapping[str, Service]: ...
    @property
    def egress_listeners(self) -> Sequence[EgressListenerView]: ...
    @property
    def outbound_traffic_policy(self) -> str: ...

    def destination_rule(self, proxy: Proxy, service: Service) -> AppliedDestinationRule | None: ...

    def inbound_destination_rule(self, service: Service) -> AppliedDestinationRule | None: ...


class ProxyDestinationRules(Mapping[str, net.DestinationRule]):
    """Service hostname -> the DestinationRule the proxy applies to it, looked up on demand
    (routes read it for consistent-hash policies, TCP chains for their settings; istiod
    SidecarScope.DestinationRule)."""

    def __init__(self, proxy: Proxy, scope: SidecarScopeView) -> None:
        self._proxy = proxy
        self._scope = scope

    def __getitem__(self, hostname: str) -> net.DestinationRule:
        found = self.get(hostname)
        if found is None:
            raise KeyError(hostname)
        return found

    def get(self, hostname: str, default: net.DestinationRule | None = None) -> net.DestinationRule | None:  # type: ignore[override]
        # without a KeyError raised and caught per host: listener plans ask for every service
        svc = self._scope.services_by_host.get(hostname)
        applied = None if svc is None else self._scope.destination_rule(self._proxy, svc)
        return default if applied is None else applied.rule

    def __iter__(self) -> Iterator[str]:
        by_host = self._scope.services_by_host
        return (h for h, s in by_host.items() if self._scope.destination_rule(self._proxy, s) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class ServiceIndexView(Protocol):
    """Every service by hostname and namespace, and who may see it (gateway routes)."""

    @property
    def by_hostname(self) -> Mapping[str, Mapping[str, Service]]: ...

    def is_visible(self, svc: Service, namespace: str) -> bool: ...


class PushContextView(Protocol):
    """What the generators read from a PushContext."""

    @property
    def mesh(self) -> MeshConfig: ...
    @property
    def gateways(self) -> Sequence[ConfigObject]: ...
    @property
    def virtual_service_index(self) -> GatewayVirtualServices: ...
    @property
    def service_index(self) -> ServiceIndexView: ...
    @property
    def peer_authentications(self) -> PeerAuthentications: ...
    @property
    def authorization_policies(self) -> AuthorizationPolicies: ...
    @property
    def request_authentications(self) -> RequestAuthentications: ...
    @property
    def telemetries(self) -> Telemetries: ...
    @property
    def features(self) -> Features: ...

    def sidecar_scope(self, proxy: Proxy) -> SidecarScopeView: ...

    def endpoints(self, hostname: str, namespace: str) -> Sequence[Endpoint]: ...

    def service_targets(self, ip: str) -> Sequence[tuple[Service, ServicePort, Endpoint]]: ...


def proxy_service_targets(proxy: Proxy, push: PushContextView) -> list[ServiceTarget]:
    """The (Service, port, endpoint) triples of the proxy's own workload, over all its IPs, of
    services in the proxy's own namespace only. The IPs are the proxy's word (INSTANCE_IPS, the
    node id); istiod looks the workload up within the proxy's namespace (GetProxyServiceTargets:
    the kube registry by the pod the proxy id names in that namespace, else that namespace's
    services selecting its labels; the ServiceEntry registry keeps instances of services in the
    proxy's namespace), so another namespace's pod IP gives none of that namespace's inbound
    clusters, chains or gateway ports."""
    return [
        target
        for ip in proxy.ip_addresses
        for target in push.service_targets(ip)
        if target[0].namespace == proxy.namespace
    ]
