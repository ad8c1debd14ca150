"""Proxy classes: what of a proxy the scope-wide configuration reads (its traits), so proxies
with the same SidecarScope and traits share one build per snapshot, and the narrowed proxies
the builders get, so a key cannot miss a proxy input.

Labels are a trait only for scopes whose config reads them (workloadSelector DestinationRules,
sourceLabels, locality failoverPriority), else only those tracing tags and the selectors of the
namespace's access-logging and tracing Telemetries read; the Istio version and node cluster only
where a tracing provider may read them; the first IP only for a proxy at an address the
scope's outbound listeners bind one listener per endpoint to (it gets no listener for itself).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace

from app.config.mesh import MeshConfig
from app.config.objects import EMPTY_LABELS
from app.model.proxy import Proxy, family_ips
from app.model.sidecar_scope import SidecarScope
from app.translate.listener.tracing import TRACING_LABELS


def _scope_ips(ips: Sequence[str], own_read: bool) -> tuple[str, ...]:
    """What scope-wide config reads of the proxy's IPs: the families, and the first IP itself
    when the scope's outbound listeners bind it (``per_endpoint_addresses``)."""
    families = family_ips(ips)
    if not own_read or not ips:
        return families
    own = ips[0]
    return (own, *(p for p in families if (":" in p) != (":" in own)))


def labels_read(scope: SidecarScope, mesh: MeshConfig) -> bool:
    """Whether config in this scope reads the proxy's labels: the scope's own rules and
    VirtualServices (``SidecarScope.reads_labels``) or mesh-wide locality failoverPriority."""
    return scope.reads_labels or bool(len(mesh.locality_lb_setting.failover_priority))


def proxy_key(p: Proxy) -> tuple[Hashable, ...]:
    """Every field of a (narrowed) proxy that generation reads, hashable."""
    return (
        p.type,
        p.id,
        p.ip_addresses,
        p.namespace,
        p.dns_domain,
        tuple(sorted(p.labels.items())),
        p.cluster_id,
        p.mesh_id,
        p.network,
        p.istio_version,
        p.service_cluster,
        p.interception_mode,
        p.locality,
        p.dns_capture,
        p.dns_auto_allocate,
    )


@dataclass(frozen=True, slots=True)
class Traits:
    """The narrowed proxies a class builds with."""

    scope_proxy: Proxy  # what scope-wide config (outbound listeners, routes) reads
    outbound: Proxy  # what an EDS-type outbound cluster reads
    located: Proxy  # what locality load balancing reads (DNS clusters, assignments)

    def key(self) -> tuple[Hashable, Hashable]:
        return proxy_key(self.scope_proxy), proxy_key(self.located)


def traits(
    proxy: Proxy,
    read_labels: bool,
    own_ip_read: bool = False,
    selector_keys: frozenset[str] = frozenset(),
    traces_by_provider: bool = False,
) -> Traits:
    """``selector_keys``: the label keys the Telemetries selecting in the proxy's namespace match
    on (Telemetries.reads): the outbound listeners' access logs and tracing read those
    labels. ``traces_by_provider``: the proxy's listeners may trace through an extension
    provider (Telemetries.reads), whose config reads its node's cluster and version."""
    labels = proxy.labels if read_labels else EMPTY_LABELS
    outbound = Proxy(
        type=proxy.type, id="", ip_addresses=family_ips(proxy.ip_addresses), namespace="", dns_domain="", cluster_id=""
    )
    located = replace(
        outbound,
        labels=labels,
        cluster_id=proxy.cluster_id,
        network=proxy.network,
        locality=proxy.locality,
    )
    # every HTTP connection manager's tracing tags name the proxy's canonical service and mesh,
    # and its access logs follow the Telemetries whose selectors match its labels
    read = (*TRACING_LABELS, *sorted(selector_keys))
    some_labels = {k: proxy.labels[k] for k in read if k in proxy.labels}
    scope_proxy = replace(
        outbound,
        ip_addresses=_scope_ips(proxy.ip_addresses, own_ip_read),
        namespace=proxy.namespace,
        dns_domain=proxy.dns_domain,
        labels=labels if read_labels else some_labels,
        cluster_id=proxy.cluster_id,
        mesh_id=proxy.mesh_id,
        network=proxy.network,
        interception_mode=proxy.interception_mode,
        dns_capture=proxy.dns_capture,  # with allocation on: listeners bind allocated addresses
        dns_auto_allocate=proxy.dns_auto_allocate,
        # else no ISTIO_VERSION: only virtualInbound reads it, built per proxy
        istio_version=proxy.istio_version if traces_by_provider else "",
        service_cluster=proxy.service_cluster if traces_by_provider else "",
    )
    return Traits(scope_proxy, outbound, located)


def lineage(scope: SidecarScope, found: Traits) -> Hashable:
    """A class across snapshots: its scope's name and namespace (the scope object is replaced
    when what it holds changes) and its traits."""
    return (scope.name, scope.namespace, *found.key())
