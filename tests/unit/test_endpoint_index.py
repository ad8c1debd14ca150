"""EndpointIndex: per-source shards, change detection, merged order."""

from __future__ import annotations

from app.model.service import Endpoint, HealthStatus
from app.registry.endpoint_index import EndpointIndex

H = "svc.ns.svc.cluster.local"


def ep(address: str, port: int = 8080, name: str = "http") -> Endpoint:
    return Endpoint(address=address, port=port, service_port_name=name)


def test_update_reports_change_only_when_content_differs() -> None:
    index = EndpointIndex()
    assert index.update(H, "ns", "Kubernetes", (ep("10.0.0.1"),)) is True
    # an equal tuple (not the same object) is no change
    assert index.update(H, "ns", "Kubernetes", (ep("10.0.0.1"),)) is False
    assert index.update(H, "ns", "Kubernetes", (ep("10.0.0.1", port=9090),)) is True
    assert index.endpoints(H, "ns") == (ep("10.0.0.1", port=9090),)


def test_health_change_is_a_change() -> None:
    index = EndpointIndex()
    index.update(H, "ns", "Kubernetes", (ep("10.0.0.1"),))
    unhealthy = Endpoint("10.0.0.1", 8080, "http", health=HealthStatus.UNHEALTHY)
    assert index.update(H, "ns", "Kubernetes", (unhealthy,)) is True
    assert index.endpoints(H, "ns")[0].health is HealthStatus.UNHEALTHY


def test_sources_merge_in_name_order_and_empty_removes_a_source() -> None:
    index = EndpointIndex()
    index.update(H, "ns", "Kubernetes", (ep("10.0.0.2"), ep("10.0.0.1")))
    index.update(H, "ns", "External", (ep("192.168.0.1"),))
    assert [e.address for e in index.endpoints(H, "ns")] == ["192.168.0.1", "10.0.0.2", "10.0.0.1"]
    assert index.source_endpoints(H, "ns", "External") == (ep("192.168.0.1"),)
    assert sorted(index.shard(H, "ns")) == ["External", "Kubernetes"]

    assert index.update(H, "ns", "External", ()) is True
    assert [e.address for e in index.endpoints(H, "ns")] == ["10.0.0.2", "10.0.0.1"]
    # removing a source that is not there changes nothing
    assert index.update(H, "ns", "External", ()) is False
    assert index.update("other", "ns", "External", ()) is False

    assert index.update(H, "ns", "Kubernetes", ()) is True
    assert index.endpoints(H, "ns") == ()
    assert (H, "ns") not in index
    assert len(index) == 0


def test_shards_are_keyed_by_hostname_and_namespace() -> None:
    index = EndpointIndex()
    index.update(H, "a", "External", (ep("1.1.1.1"),))
    index.update(H, "b", "External", (ep("2.2.2.2"),))
    assert index.endpoints(H, "a") == (ep("1.1.1.1"),)
    assert index.endpoints(H, "b") == (ep("2.2.2.2"),)
    assert (H, "a") in index and (H, "b") in index and len(index) == 2


def test_merged_view_is_cached_until_the_shard_changes() -> None:
    index = EndpointIndex()
    index.update(H, "ns", "A", (ep("1.1.1.1"),))
    index.update(H, "ns", "B", (ep("2.2.2.2"),))
    first = index.endpoints(H, "ns")
    assert index.endpoints(H, "ns") is first
    index.update(H, "ns", "B", (ep("3.3.3.3"),))
    second = index.endpoints(H, "ns")
    assert second is not first
    assert [e.address for e in second] == ["1.1.1.1", "3.3.3.3"]


def test_delete_service_drops_every_source() -> None:
    index = EndpointIndex()
    index.update(H, "ns", "A", (ep("1.1.1.1"),))
    index.update(H, "ns", "B", (ep("2.2.2.2"),))
    index.endpoints(H, "ns")
    assert index.delete_service(H, "ns") is True
    assert index.endpoints(H, "ns") == ()
    assert index.delete_service(H, "ns") is False
