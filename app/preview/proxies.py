"""The proxies of a mesh as its objects describe it, for an offline preview: a sidecar for every
Pod whose namespace enables injection (label ``istio-injection=enabled`` or ``istio.io/rev``) or
that carries the ``sidecar.istio.io/status`` annotation of an injected pod, unless the pod opts
out (``sidecar.istio.io/inject: "false"``); a router for every Pod a Gateway's selector selects.
A Pod without an IP yet has no proxy connected. Each watches what Envoy behind pilot-agent
subscribes to: every cluster and listener, the endpoints of its EDS clusters, the routes its
listeners name (added by the preview from what is served), and a sidecar the DNS name table."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from app.config.kube import PodSpec
from app.config.labels import selector_matches
from app.config.objects import ConfigObject, Kind
from app.errors import SettingsError
from app.model.proxy import InvalidNodeError, Proxy, ProxyType, build_proxy
from app.model.sidecar_scope import SidecarScope
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, NAME_TABLE, ROUTE
from app.xds.watch import WatchedResource

_INJECTED = "sidecar.istio.io/status"
_INJECT = "sidecar.istio.io/inject"


@dataclass(frozen=True, slots=True)
class Watching:
    """A proxy as a push reaches it: what it watches by type and the SidecarScope its last push
    used (None: the one served now). ``synced``: its EDS and RDS watches hold the names of what
    its CDS and LDS watches are served now (an offline proxy, as Envoy would have subscribed),
    rather than the names given."""

    proxy: Proxy
    watches: Mapping[str, WatchedResource]
    scope: SidecarScope | None = None
    synced: bool = False


def envoy_watches(proxy: Proxy) -> dict[str, WatchedResource]:
    """What Envoy (through pilot-agent) subscribes to; the EDS and RDS names are those of what
    is served (``Watching.synced``)."""
    watches = {
        CLUSTER: WatchedResource(CLUSTER, True),
        ENDPOINT: WatchedResource(ENDPOINT, False),
        LISTENER: WatchedResource(LISTENER, True),
        ROUTE: WatchedResource(ROUTE, False),
    }
    if proxy.type is ProxyType.SIDECAR:
        watches[NAME_TABLE] = WatchedResource(NAME_TABLE, True)
    return watches


def _injected(pod: ConfigObject, namespaces: Mapping[str, Mapping[str, str]]) -> bool:
    if pod.meta.labels.get(_INJECT) == "false" or pod.meta.annotations.get(_INJECT) == "false":
        return False
    labels = namespaces.get(pod.meta.namespace, {})
    enabled = labels.get("istio-injection") == "enabled" or "istio.io/rev" in labels
    return enabled or _INJECTED in pod.meta.annotations


def pod_proxy(pod: ConfigObject, proxy_type: ProxyType) -> Proxy | None:
    """The proxy a Pod runs, named as pilot-agent names it; None before it has an IP."""
    spec = pod.spec
    if not isinstance(spec, PodSpec) or not spec.pod_ips:
        return None
    ns = pod.meta.namespace
    metadata = {
        "NAMESPACE": ns,
        "LABELS": dict(pod.meta.labels),
        "INSTANCE_IPS": ",".join(spec.pod_ips),
        "SERVICE_ACCOUNT": spec.service_account,
    }
    return build_proxy(f"{proxy_type.value}~{spec.pod_ips[0]}~{pod.meta.name}.{ns}~{ns}.svc.cluster.local", metadata)


def mesh_proxies(objects: Iterable[ConfigObject]) -> list[Proxy]:
    """Every proxy of the mesh the objects describe, routers then sidecars, by id."""
    pods, namespaces, selectors = [], {}, []
    for obj in objects:
        if obj.kind is Kind.POD:
            pods.append(obj)
        elif obj.kind is Kind.NAMESPACE:
            namespaces[obj.meta.name] = obj.meta.labels
        elif obj.kind is Kind.GATEWAY:
            selectors.append(dict(obj.spec.selector))
    out = []
    for pod in pods:
        if any(selector and selector_matches(selector, pod.meta.labels) for selector in selectors):
            proxy = pod_proxy(pod, ProxyType.ROUTER)
        elif _injected(pod, namespaces):
            proxy = pod_proxy(pod, ProxyType.SIDECAR)
        else:
            continue
        if proxy is not None:
            out.append(proxy)
    return sorted(out, key=lambda p: (p.type is not ProxyType.ROUTER, p.id))


def select_proxies(mesh: list[Proxy], wanted: Iterable[str]) -> list[Proxy]:
    """``--proxy``: none given, the mesh's; else exactly those named, each a proxy id of the
    mesh (``POD.NAMESPACE``) or a whole node id (``TYPE~IP~POD.NAMESPACE~DOMAIN``) adding one."""
    ids = list(wanted)
    if not ids:
        return mesh
    by_id = {p.id: p for p in mesh}
    out = []
    for text in ids:
        found = by_id.get(text)
        if found is None:
            if "~" not in text:
                raise SettingsError(f"--proxy {text!r}: no such proxy in the mesh (give a whole node id to add one)")
            try:
                found = build_proxy(text)
            except InvalidNodeError as e:
                raise SettingsError(f"--proxy: {e}") from None
        out.append(found)
    return out
