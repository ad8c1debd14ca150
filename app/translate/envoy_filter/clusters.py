"""EnvoyFilter CLUSTER patches (istiod envoyfilter/cluster_patch.go): MERGE and REMOVE on each
cluster the patch matches, ADD after them; a MERGE whose value sets a transport socket merges
into the cluster's socket of that name."""

from __future__ import annotations

from collections.abc import Sequence

from envoy.config.cluster.v3.cluster_pb2 import Cluster

from app.model.envoy_filter import ApplyTo, MergedPatches, Operation
from app.translate.cluster.builder import parse_cluster_name
from app.translate.envoy_filter.common import added, context_matches, is_merge, merge_value
from app.translate.envoy_filter.merge import merge_any


def patch_cluster(context: int, patches: MergedPatches, cluster: Cluster, hosts: Sequence[str] = ()) -> Cluster | None:
    """istiod ApplyClusterMerge, on a copy: the patched cluster, None when a patch removes it.
    ``hosts``: an inbound cluster's service hostnames (what a service match is tested against)."""
    found = patches.of(ApplyTo.CLUSTER)
    if not found:
        return cluster
    out = Cluster()
    out.CopyFrom(cluster)
    for patch in found:
        if not context_matches(context, patch) or not _cluster_matches(out, patch, hosts):
            continue
        if patch.operation == Operation.REMOVE:
            return None
        if is_merge(patch.operation) and not _merge_transport_socket(out, patch.value):
            merge_value(patch, out)
    return out


def inserted_clusters(context: int, patches: MergedPatches) -> list[Cluster]:
    """istiod InsertedClusters: the clusters the ADD patches of this context add."""
    return [c for c in added(context, patches.of(ApplyTo.CLUSTER)) if isinstance(c, Cluster)]


def _merge_transport_socket(cluster: Cluster, value: Cluster) -> bool:
    """mergeTransportSocketCluster: whether the value's transport socket was merged here (then
    the rest of the value is not merged)."""
    if not value.HasField("transport_socket"):
        return False
    wanted = value.transport_socket
    socket = None
    if len(cluster.transport_socket_matches):
        socket = next(
            (m.transport_socket for m in cluster.transport_socket_matches
             if m.HasField("transport_socket") and m.transport_socket.name == wanted.name),
            None,
        )  # fmt: skip
        if socket is None:
            return True  # no socket of that name: nothing is merged
    elif cluster.HasField("transport_socket") and cluster.transport_socket.name == wanted.name:
        socket = cluster.transport_socket
    if socket is None:
        cluster.transport_socket.CopyFrom(wanted)
    elif socket.HasField("typed_config") and wanted.HasField("typed_config"):
        merged = merge_any(socket.typed_config, wanted.typed_config)
        if merged is None:
            return False  # istiod: the merge failed, so the patch moves on without merging
        socket.typed_config.CopyFrom(merged)
    return True


def _cluster_matches(cluster: Cluster, patch: object, hosts: Sequence[str]) -> bool:
    """istiod clusterMatch: by name, else by the parts of the cluster's subset key."""
    match = patch.match  # type: ignore[attr-defined]
    if not match.HasField("cluster"):
        return True
    wanted = match.cluster
    if wanted.name:
        return bool(wanted.name == cluster.name)
    key = parse_cluster_name(cluster.name)
    candidates = list(hosts) if key.direction == "inbound" and hosts else [key.hostname]
    if wanted.subset and wanted.subset != key.subset:
        return False
    if wanted.service and wanted.service not in candidates:
        return False
    return not (wanted.port_number and wanted.port_number != key.port)
