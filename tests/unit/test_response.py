"""Responses assembled from pre-encoded resources are, on the wire, exactly the Envoy messages
the protobuf library would build: parsed back, every field is what Envoy must read."""

from __future__ import annotations

from envoy.config.cluster.v3 import cluster_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import any_pb2

from app.xds.resource import Resource, encode
from app.xds.response import DeltaResponse, SotwResponse
from app.xds.type_urls import CLUSTER


def resources() -> list[Resource]:
    small = cluster_pb2.Cluster(name="outbound|80||a.ns.svc.cluster.local")
    # a body over 16 KiB: lengths take three varint bytes; a name outside ASCII
    big = cluster_pb2.Cluster(name="outbound|80||b.ns.svc.cluster.local", alt_stat_name="x" * 20_000)
    odd = cluster_pb2.Cluster(name="outbound|80||ü.ns.svc.cluster.local")
    return [encode(c.name, c) for c in (small, big, odd)]


def packed(msg: cluster_pb2.Cluster) -> any_pb2.Any:
    out = any_pb2.Any()
    out.Pack(msg, deterministic=True)
    return out


def test_delta_response_bytes_are_the_envoy_message() -> None:
    found = resources()
    resp = DeltaResponse(CLUSTER, "7", "v1", found, ["gone|1", "gone|2"])
    expected = discovery_pb2.DeltaDiscoveryResponse(
        type_url=CLUSTER, nonce="7", system_version_info="v1", removed_resources=["gone|1", "gone|2"]
    )
    for r in found:
        expected.resources.add(name=r.name, version=r.version).resource.CopyFrom(r.body)
    assert resp.message() == expected
    parsed = resp.message().resources[1]
    assert cluster_pb2.Cluster.FromString(parsed.resource.value).alt_stat_name == "x" * 20_000


def test_removed_names_of_every_length_are_the_envoy_field() -> None:
    # under 128 bytes (one length byte, the fast path), at 127/128, over it, and not ASCII
    names = ["", "a", "b" * 127, "c" * 128, "d" * 300, "outbound|80||ü.ns.svc.cluster.local"]
    for removed in (names, names[:3], names[3:]):
        resp = DeltaResponse(CLUSTER, "7", "v1", [], removed)
        assert list(resp.message().removed_resources) == removed


def test_sotw_response_bytes_are_the_envoy_message() -> None:
    found = resources()
    resp = SotwResponse(CLUSTER, "3", "abc", found)
    expected = discovery_pb2.DiscoveryResponse(type_url=CLUSTER, nonce="3", version_info="abc")
    expected.resources.extend(r.body for r in found)
    assert resp.message() == expected
    assert [cluster_pb2.Cluster.FromString(a.value).name for a in resp.message().resources] == [r.name for r in found]


def test_an_encoded_resource_carries_the_packed_message() -> None:
    c = cluster_pb2.Cluster(name="outbound|80||a.ns.svc.cluster.local", alt_stat_name="é" * 100)
    r = encode(c.name, c)
    assert r.body == packed(c)
    assert any_pb2.Any.FromString(bytes(r.sotw)[3:]) == packed(c)  # key, 2-byte length, Any
    entry = discovery_pb2.DeltaDiscoveryResponse.FromString(r.entry).resources[0]
    assert (entry.name, entry.version, entry.resource) == (r.name, r.version, packed(c))


def test_empty_responses_are_valid_messages() -> None:
    assert DeltaResponse(CLUSTER, "1", "", []).message() == discovery_pb2.DeltaDiscoveryResponse(
        type_url=CLUSTER, nonce="1"
    )
    assert SotwResponse(CLUSTER, "2", "v", []).message() == discovery_pb2.DiscoveryResponse(
        type_url=CLUSTER, nonce="2", version_info="v"
    )
