"""What went into one served resource, in the user's terms (issue 28 item 2): the dependency
keys ``generators.attribution`` derives, resolved to the config objects (kind, namespace, name,
and the file or resourceVersion of the version in force), the services and the endpoint shards.

A Service key names the service by hostname, as the push filter does; it is shown as the
object it came from (a Kubernetes Service or a ServiceEntry). ``find`` looks an object up by
key (``Environment.config_object``); without it the snapshot's own Istio objects are used and
services have no origin. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from app.config.objects import ConfigKey, ConfigObject, Kind
from app.errors import PilotfishError
from app.model.proxy import Proxy
from app.model.push_context import PushContext
from app.model.service import Registry, Service
from app.xds.cache import Dep, expand
from app.xds.cause import Cause
from app.xds.generators.source import XdsGenerator
from app.xds.type_urls import SHORT_NAMES

Find = Callable[[ConfigKey], ConfigObject | None]


@dataclass(frozen=True, slots=True)
class Explanation:
    """A resource's contributors: the config objects, the services and the endpoint shards
    (hostname, namespace, endpoints now) its dependency keys name."""

    proxy: str
    type_url: str
    name: str
    configs: tuple[Cause, ...]
    services: tuple[Service, ...]
    shards: tuple[tuple[str, str, int], ...]

    def json(self) -> dict[str, Any]:
        return {
            "proxy": self.proxy,
            "type": SHORT_NAMES.get(self.type_url, self.type_url),
            "name": self.name,
            "configs": [c.json() for c in self.configs],
            "services": [
                {"hostname": s.hostname, "namespace": s.namespace, "registry": str(s.registry), "name": s.name}
                for s in self.services
            ],
            "endpointShards": [{"hostname": h, "namespace": ns, "endpoints": n} for h, ns, n in self.shards],
        }


def _cause(key: ConfigKey, found: ConfigObject | None) -> Cause:
    if found is None:
        return Cause(str(key.kind), key.namespace, key.name)
    file = "" if found.source.startswith("kube:") else found.source
    return Cause(str(found.kind), found.meta.namespace, found.meta.name, file, found.meta.resource_version)


def _snapshot_objects(push: PushContext) -> dict[ConfigKey, ConfigObject]:
    inputs = push.inputs
    kinds: Iterable[tuple[ConfigObject, ...]] = (
        inputs.virtual_services,
        inputs.destination_rules,
        inputs.sidecars,
        inputs.gateways,
        inputs.peer_authentications,
        inputs.authorization_policies,
        inputs.request_authentications,
        inputs.telemetries,
        inputs.secrets,
    )
    return {obj.key: obj for objects in kinds for obj in objects}


def _service_origin(service: Service) -> ConfigKey:
    kind = Kind.SERVICE if service.registry is Registry.KUBERNETES else Kind.SERVICE_ENTRY
    return ConfigKey(kind, service.namespace, service.name)


def contributors(
    push: PushContext, deps: Iterable[Dep], find: Find | None = None
) -> tuple[list[Cause], list[Service], list[tuple[str, str, int]]]:
    """The config objects (sorted by kind, namespace, name; a service as its object), the
    services and the endpoint shards ``deps`` name in ``push``."""
    objects = _snapshot_objects(push)
    services = {(s.hostname, s.namespace): s for s in push.inputs.services}
    causes: dict[ConfigKey, Cause] = {}
    found_services: dict[tuple[str, str], Service] = {}
    shards: list[tuple[str, str, int]] = []
    for dep in expand(deps):
        if isinstance(dep, ConfigKey):
            if dep.kind is Kind.SERVICE:
                service = services.get((dep.name, dep.namespace))
                if service is None:
                    continue
                found_services[(service.hostname, service.namespace)] = service
                key = _service_origin(service)
            else:
                key = dep
            obj = find(key) if find is not None else objects.get(key)
            causes[key] = _cause(key, obj)
        else:
            _, host, ns = dep
            shards.append((host, ns, len(push.endpoints(host, ns))))
    ordered = [causes[k] for k in sorted(causes, key=lambda k: (str(k.kind), k.namespace, k.name))]
    return ordered, sorted(found_services.values(), key=lambda s: (s.hostname, s.namespace)), sorted(shards)


def explanation(
    push: PushContext, proxy_id: str, type_url: str, name: str, deps: Iterable[Dep], find: Find | None = None
) -> Explanation:
    configs, services, shards = contributors(push, deps, find)
    return Explanation(proxy_id, type_url, name, tuple(configs), tuple(services), tuple(shards))


class NotServed(PilotfishError):
    """The proxy is not served a resource of that type and name."""


def type_url_of(short: str) -> str:
    """A type URL from its short name (cds, eds, lds, rds, nds, sds) or itself."""
    for url, name in SHORT_NAMES.items():
        if short in (name, url):
            return url
    raise PilotfishError(f"type {short!r}: want one of {', '.join(sorted(SHORT_NAMES.values()))}")


def explain_resource(
    generator: XdsGenerator, proxy: Proxy, type_url: str, name: str, find: Find | None = None
) -> Explanation:
    """What the resource ``name`` of ``type_url`` the proxy is served now was made from;
    raises NotServed, saying what the proxy is served instead, when it is not served one."""
    served = generator.names(type_url, proxy, (name,))
    if name not in served:
        shown = ", ".join(served[:10]) + (f", ... ({len(served)} in all)" if len(served) > 10 else "")
        short = SHORT_NAMES.get(type_url, type_url)
        raise NotServed(f"proxy {proxy.id}: no {short} resource {name!r} (served: {shown or 'none'})")
    deps = generator.deps(type_url, proxy, name)
    return explanation(generator.push_context(), proxy.id, type_url, name, deps, find)
