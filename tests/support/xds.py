"""Encoded xDS resources for session transcripts (SotW and Delta tests)."""

from __future__ import annotations

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2

from app.xds.resource import Resource, encode


def clusters(*names: str, timeout: int = 1) -> list[Resource]:
    """One Cluster per name; a different ``timeout`` makes a different version of the same names."""
    out = []
    for n in names:
        c = cluster_pb2.Cluster(name=n)
        c.connect_timeout.seconds = timeout
        out.append(encode(n, c))
    return out


def cla(*names: str) -> list[Resource]:
    """One empty ClusterLoadAssignment per name."""
    return [encode(n, endpoint_pb2.ClusterLoadAssignment(cluster_name=n)) for n in names]
