"""Environment: the ConfigStore and the ServiceRegistry fed from one event stream, and the
PushContext built from them (istiod's model.Environment). Pure and synchronous: the serving
pipeline and the offline config-dump share it."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from app.config.objects import ConfigEvent, ConfigKey, ConfigObject, Kind
from app.config.store import ConfigStore
from app.model.features import Features
from app.model.push_context import PushContext, PushInputs
from app.model.service import Registry, Resolution
from app.registry.endpoint_index import ServiceKey
from app.registry.registry import EMPTY_DELTA, RegistryDelta, ServiceRegistry

# kinds the ConfigStore keeps for the PushContext (the registry keeps the rest)
_STORE_KINDS = frozenset(
    {
        Kind.DESTINATION_RULE,
        Kind.VIRTUAL_SERVICE,
        Kind.SIDECAR,
        Kind.GATEWAY,
        Kind.PEER_AUTHENTICATION,
        Kind.AUTHORIZATION_POLICY,
        Kind.REQUEST_AUTHENTICATION,
        Kind.PROXY_CONFIG,
        Kind.TELEMETRY,
        Kind.ENVOY_FILTER,
        Kind.MESH_CONFIG,
        Kind.SECRET,
    }
)

_CDS_ENDPOINTS = frozenset({Resolution.DNS_LB, Resolution.DNS_ROUND_ROBIN_LB})


def service_config_key(hostname: str, namespace: str) -> ConfigKey:
    """How a changed Service (of any registry) is named among changed configs (istiod names it
    as a ServiceEntry key with the hostname as name)."""
    return ConfigKey(Kind.SERVICE, namespace, hostname)


@dataclass(frozen=True, slots=True)
class Change:
    """What a batch of events changed: config keys (what the PushContext and the push filter
    read), the registry's delta (endpoints, service targets), and for config objects that were
    updated in place their version before and after the batch (what the push filter may
    compare to narrow the xDS types a change can affect)."""

    configs: frozenset[ConfigKey] = frozenset()
    registry: RegistryDelta = EMPTY_DELTA
    replaced: Mapping[ConfigKey, tuple[ConfigObject, ConfigObject]] = field(
        default_factory=lambda: MappingProxyType({})
    )


class Environment:
    def __init__(self, *, domain_suffix: str = "cluster.local", features: Features | None = None) -> None:
        self.domain_suffix = domain_suffix
        self.features = features or Features()
        self.store = ConfigStore()
        self.registry = ServiceRegistry(domain_suffix=domain_suffix)
        # jwksUri -> keys the control plane fetched (app/security/jwks.py; app/model/jwks.py)
        self.jwks: dict[str, str] = {}

    def apply(self, events: Iterable[ConfigEvent]) -> Change:
        configs: set[ConfigKey] = set()
        before: dict[ConfigKey, ConfigObject | None] = {}
        deltas: list[RegistryDelta] = []
        for stored, run in itertools.groupby(events, key=lambda event: event.obj.kind in _STORE_KINDS):
            if not stored:
                deltas.append(self.registry.apply_all(run))  # in order, a run at a time
                continue
            for event in run:
                obj = event.obj
                key = obj.key
                if key not in before:
                    before[key] = self.store.get(obj.kind, key.namespace, key.name)
                if self.store.apply(event):
                    configs.add(key)
        delta = RegistryDelta.union(deltas)
        services = delta.services_changed | delta.identities_changed | self._endpoints_in_clusters(delta)
        configs.update(service_config_key(*key) for key in services)
        configs.update(self._headless_changes(delta))
        replaced = {}
        for key, old in before.items():
            new = self.store.get(key.kind, key.namespace, key.name)
            if key in configs and old is not None and new is not None:
                replaced[key] = (old, new)
        return Change(frozenset(configs), delta, MappingProxyType(replaced))

    def _endpoints_in_clusters(self, delta: RegistryDelta) -> set[ServiceKey]:
        """DNS services carry their endpoints inside the cluster (CDS), so a change to them is a
        config change, not an EDS-only one (istiod does a full push for them too)."""
        out = set()
        for key in delta.endpoints_changed:
            svc = self.registry.service(*key)
            if svc is not None and svc.resolution in _CDS_ENDPOINTS:
                out.add(key)
        return out

    def _headless_changes(self, delta: RegistryDelta) -> set[ConfigKey]:
        """The endpoints of a headless Kubernetes Service are names in DNS (and, for TCP
        ports, the addresses outbound listeners bind), so their change is a config change, as
        istiod's endpointslice.go makes it: the service's key when a port is not HTTP, else
        only its DNS name (istiod kind.DNSName: no listener reads HTTP ports' endpoints)."""
        out = set()
        for key in delta.endpoints_changed - delta.services_changed:
            svc = self.registry.service(*key)
            if svc is None or svc.registry is not Registry.KUBERNETES or svc.resolution is not Resolution.PASSTHROUGH:
                continue
            http_only = all(p.protocol.is_http for p in svc.ports)
            out.add(ConfigKey(Kind.DNS_NAME, key[1], key[0]) if http_only else service_config_key(*key))
        return out

    def config_object(self, key: ConfigKey) -> ConfigObject | None:
        """The object of that key as last applied (Istio config, or a Kubernetes Service or
        ServiceEntry by its object name): where it came from and its resourceVersion."""
        if key.kind in _STORE_KINDS:
            return self.store.get(key.kind, key.namespace, key.name)
        return self.registry.config_object(key.kind, key.namespace, key.name)

    def push_inputs(self) -> PushInputs:
        """What a PushContext is built from, as immutable tuples taken now: the build itself
        may then run off the event loop while events keep arriving."""
        return PushInputs(
            mesh=self.store.mesh,
            services=self.registry.services(),
            virtual_services=self.store.list(Kind.VIRTUAL_SERVICE),
            destination_rules=self.store.list(Kind.DESTINATION_RULE),
            sidecars=self.store.list(Kind.SIDECAR),
            gateways=self.store.list(Kind.GATEWAY),
            peer_authentications=self.store.list(Kind.PEER_AUTHENTICATION),
            authorization_policies=self.store.list(Kind.AUTHORIZATION_POLICY),
            request_authentications=self.store.list(Kind.REQUEST_AUTHENTICATION),
            telemetries=self.store.list(Kind.TELEMETRY),
            envoy_filters=self.store.list(Kind.ENVOY_FILTER),
            secrets=self.store.list(Kind.SECRET),
            endpoints=self.registry.snapshot(),
            domain_suffix=self.domain_suffix,
            features=self.features,
            jwks=MappingProxyType(dict(self.jwks)),
        )

    def build_push_context(self, previous: PushContext | None, change: Change | None = None) -> PushContext:
        return PushContext.build(previous, self.push_inputs(), None if change is None else change.configs)
