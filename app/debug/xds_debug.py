"""istiod's debug types over xDS (its StatusGen), which ``istioctl proxy-status --xds-address``
reads from the secure port:

* ``istio.io/debug/syncz``: one ``envoy.service.status.v3.ClientConfig`` per proxy stream (node
  id, metadata CLUSTER_ID / NAMESPACE / ISTIO_VERSION, per watched type its ConfigStatus:
  NOT_SENT when nothing was sent, SYNCED when the latest response is ACKed, else STALE; ERROR
  while the latest answer is a NACK), types sorted;
* ``istio.io/debug/config_dump`` for one proxy (resource name ``POD.NAMESPACE``): the config
  dump sections istiod returns, in its order (bootstrap, scoped routes, secrets and ECDS empty;
  clusters, listeners and routes as served now; no endpoints, as istiod's).

As istiod (pilot/pkg/xds/statusgen.go), a caller whose identity is outside the root namespace
sees only the proxies of its own namespace, and a stream that watches nothing (istioctl's own)
is not listed. Unknown ``istio.io/debug/*`` types answer no resources. Pure: the server hands
in the streams and the resource source.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from google.protobuf import struct_pb2
from google.protobuf.message import Message

from app.debug.dump import decoded, served, served_routes
from app.security.authn import parse_spiffe
from app.xds.mesh_source import MeshSource, MeshStream
from app.xds.type_urls import CLUSTER, DEBUG_PREFIX, LISTENER
from app.xds.watch import WatchedResource

SYNCZ = f"{DEBUG_PREFIX}/syncz"
CONFIG_DUMP = f"{DEBUG_PREFIX}/config_dump"

Named = tuple[str, Message]


def caller_namespace(identities: Sequence[str], root_namespace: str) -> str | None:
    """The one namespace whose proxies a caller may see, or None for all of them: a caller with
    an identity in the root namespace sees every proxy (istiod callerNamespaceFilter)."""
    namespaces = [sid.namespace for i in identities if (sid := parse_spiffe(i)) is not None]
    if root_namespace in namespaces:
        return None
    return next(iter(namespaces), "")


def control_plane_identifier(pod: str, version: str) -> str:
    """The ControlPlane identifier istiod sets on syncz answers (istioctl's ISTIOD column)."""
    return json.dumps({"Component": "istiod", "ID": pod, "Info": {"version": version}}, separators=(",", ":"))


def _config_status(watch: WatchedResource) -> str:
    """istiod debugSyncStatus, by ConfigStatus name."""
    if watch.last_error:
        return "ERROR"
    if not watch.nonce_sent:
        return "NOT_SENT"
    return "SYNCED" if watch.nonce_acked == watch.nonce_sent else "STALE"


def syncz(streams: Sequence[MeshStream], namespace: str | None) -> list[Named]:
    # Envoy's admin and CSDS messages (15 ms of imports) when istioctl first asks, not at start
    from envoy.service.status.v3 import csds_pb2

    out: list[Named] = []
    for stream in sorted(streams, key=lambda s: s.connection.id):
        connection = stream.connection
        proxy = connection.client
        watches = sorted(connection.watched(), key=lambda w: w.type_url)
        if not watches or (namespace is not None and proxy.namespace != namespace):
            continue
        metadata = struct_pb2.Struct()
        metadata.update({"CLUSTER_ID": proxy.cluster_id, "NAMESPACE": proxy.namespace})
        if proxy.istio_version:
            metadata.update({"ISTIO_VERSION": proxy.istio_version})
        config = csds_pb2.ClientConfig()
        config.node.id = proxy.id
        config.node.metadata.CopyFrom(metadata)
        for watch in watches:
            entry = config.generic_xds_configs.add(type_url=watch.type_url)
            entry.config_status = csds_pb2.ConfigStatus.Value(_config_status(watch))
            if watch.last_error:
                entry.error_state.details = watch.last_error
        out.append((proxy.id, config))
    return out


def answer(
    type_url: str,
    names: Sequence[str],
    identities: Sequence[str],
    *,
    streams: Sequence[MeshStream],
    source: MeshSource,
    root_namespace: str,
    control_plane: str,
) -> tuple[list[Named], str]:
    """A debug request's resources, and the ControlPlane identifier to send with them."""
    namespace = caller_namespace(identities, root_namespace)
    if type_url == SYNCZ:
        return syncz(streams, namespace), control_plane
    if type_url == CONFIG_DUMP and len(names) == 1:
        return config_dump(streams, names[0], namespace, source), ""
    return [], ""


def config_dump(streams: Sequence[MeshStream], name: str, namespace: str | None, source: MeshSource) -> list[Named]:
    """What the first stream whose id contains ``name`` is served now, as config dump sections."""
    from envoy.admin.v3 import config_dump_pb2, config_dump_shared_pb2

    stream = next((s for s in sorted(streams, key=lambda s: s.connection.id) if name in s.connection.id), None)
    if stream is None or (namespace is not None and stream.connection.client.namespace != namespace):
        return []
    proxy = stream.connection.client
    # the served resources' Anys are the dump's as they are: nothing decoded but the listeners
    clusters = config_dump_shared_pb2.ClustersConfigDump()
    for r in served(proxy, source, CLUSTER, WatchedResource(CLUSTER, True)):
        clusters.dynamic_active_clusters.add(version_info=r.version).cluster.CopyFrom(r.body)
    listeners = config_dump_shared_pb2.ListenersConfigDump()
    served_listeners = served(proxy, source, LISTENER, WatchedResource(LISTENER, True))
    for r in served_listeners:
        dynamic = listeners.dynamic_listeners.add(name=r.name)
        dynamic.active_state.version_info = r.version
        dynamic.active_state.listener.CopyFrom(r.body)
    routes = config_dump_shared_pb2.RoutesConfigDump()
    for r in served_routes(proxy, source, decoded(LISTENER, served_listeners)):
        routes.dynamic_route_configs.add(version_info=r.version).route_config.CopyFrom(r.body)
    return [
        ("", config_dump_pb2.BootstrapConfigDump()),
        ("", clusters),
        ("", listeners),
        ("", config_dump_shared_pb2.ScopedRoutesConfigDump()),
        ("", routes),
        ("", config_dump_pb2.SecretsConfigDump()),
        ("", config_dump_shared_pb2.EcdsConfigDump()),
    ]
