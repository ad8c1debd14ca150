"""ServiceEntry address allocation decisions (app/controllers/ip_allocate.py) against istiod's
ipallocate rules: who gets addresses, which, stability from status, conflicts."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from app.controllers.ip_allocate import (
    Allocator,
    Conflict,
    Entry,
    PrefixUse,
    should_allocate,
    status_patch,
    to_reassign,
)


def entry(name: str, hosts: list[str], *, created: str = "2026-01-01T00:00:00Z", status: Any = None,
          resolution: str = "DNS", addresses: list[str] | None = None, labels: dict[str, str] | None = None) -> Entry:
    obj: dict[str, Any] = {
        "metadata": {"namespace": "ns", "name": name, "creationTimestamp": created, "resourceVersion": "7",
                     "labels": labels or {}},
        "spec": {"hosts": hosts, "resolution": resolution, "addresses": addresses or []},
    }  # fmt: skip
    if status is not None:
        obj["status"] = status
    return Entry.of(obj)


def addrs(entry: Entry, plan_addresses: list[dict[str, str]]) -> Entry:
    """``entry`` as it reads once the plan's addresses are written."""
    return Entry(**{**{f: getattr(entry, f) for f in Entry.__slots__}, "status": {"addresses": plan_addresses}})


def test_who_gets_addresses() -> None:
    assert should_allocate(entry("a", ["a.example.com"]))
    assert not should_allocate(entry("a", ["a.example.com"]), enabled=False)  # PILOT_ENABLE_IP_AUTOALLOCATE=false
    assert not should_allocate(entry("a", ["a.example.com"], resolution="NONE"))
    assert not should_allocate(entry("a", ["a.example.com"], addresses=["10.0.0.1"]))
    label = {"networking.istio.io/enable-autoallocate-ip": "False"}
    assert not should_allocate(entry("a", ["a.example.com"], labels=label))


def test_one_v4_and_one_v6_per_host_from_istiods_ranges_wildcards_only_for_dynamic_dns() -> None:
    alloc = Allocator()
    plan = alloc.plan(entry("a", ["a.example.com", "*.wild.com", "a.example.com", "b.example.com"]))
    assert plan.addresses == [
        {"value": "240.240.0.1", "host": "a.example.com"},
        {"value": "2001:2::1", "host": "a.example.com"},
        {"value": "240.240.0.2", "host": "b.example.com"},
        {"value": "2001:2::2", "host": "b.example.com"},
    ]
    dynamic = alloc.plan(entry("d", ["*.wild.com"], resolution="DYNAMIC_DNS"))
    wild = "*.wild.com"
    assert dynamic.addresses == [{"value": "240.240.0.3", "host": wild}, {"value": "2001:2::3", "host": wild}]


def test_stable_from_status_after_a_restart() -> None:
    first = Allocator()
    a, b = entry("a", ["a.com"]), entry("b", ["b.com"])
    a = addrs(a, first.plan(a).addresses or [])
    b = addrs(b, first.plan(b).addresses or [])
    assert first.plan(a).addresses is None  # nothing to write: every host has its addresses
    restarted = Allocator()
    assert restarted.warm([a, b]) == ()
    c = entry("c", ["c.com"])
    assert restarted.plan(a).addresses is None and restarted.plan(b).addresses is None
    assert [x["value"] for x in restarted.plan(c).addresses or []] == ["240.240.0.3", "2001:2::3"]
    # a host added keeps the others' addresses and gets the next ones
    grown = entry("a", ["a.com", "a2.com"], status=a.status)
    assert restarted.plan(grown).addresses == [*a.status_entries(), {"value": "240.240.0.4", "host": "a2.com"},
                                               {"value": "2001:2::4", "host": "a2.com"}]  # fmt: skip


def test_conflict_the_oldest_keeps_the_address_the_others_are_reassigned() -> None:
    taken = {"addresses": [{"value": "240.240.0.9", "host": "x.com"}]}
    old = entry("old", ["x.com"], created="2026-01-01T00:00:00Z", status=taken)
    claimed = {"addresses": [{"value": "240.240.0.9", "host": "y.com"}]}
    new = entry("new", ["y.com"], created="2026-02-01T00:00:00Z", status=claimed)
    alloc = Allocator()
    conflicts = alloc.warm([new, old])  # listed in any order
    assert conflicts == (Conflict("ns/old", (ipaddress.ip_address("240.240.0.9"),)),)
    assert [e.name for e in to_reassign([old, new], conflicts[0])] == ["new"]
    forced = alloc.plan(new, forced=True)
    assert forced.addresses == [{"value": "240.240.0.1", "host": "y.com"}, {"value": "2001:2::1", "host": "y.com"}]
    assert forced.allocated == (ipaddress.ip_address("240.240.0.1"), ipaddress.ip_address("2001:2::1"))


def test_a_users_spec_address_in_the_range_wins_over_every_allocation() -> None:
    auto = entry("auto", ["x.com"], created="2026-01-01T00:00:00Z",
                 status={"addresses": [{"value": "240.240.0.5", "host": "x.com"}]})  # fmt: skip
    user = entry("user", ["u.com"], created="2026-03-01T00:00:00Z", addresses=["240.240.0.5"])
    alloc = Allocator()
    conflicts = alloc.warm([auto, user])
    assert conflicts and all(c.addresses == (ipaddress.ip_address("240.240.0.5"),) for c in conflicts)
    assert [e.name for e in to_reassign([auto, user], conflicts[0])] == ["auto"]


def test_unparsable_status_entries_are_skipped_and_mapped_v6_is_v4() -> None:
    written = [{"value": "nope", "host": "a.com"}, {"value": "::ffff:240.240.0.7", "host": "a.com"}]
    e = entry("a", ["a.com"], status={"addresses": written})
    assert e.auto_addresses() == [ipaddress.ip_address("240.240.0.7")]


def test_prefix_wraps_once_then_is_exhausted_and_freed_addresses_are_reused() -> None:
    use = PrefixUse(ipaddress.ip_network("10.0.0.0/30"))
    assert [str(use.allocate_next("o")) for _ in range(3)] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert use.allocate_next("o") is None
    use.free(ipaddress.ip_address("10.0.0.2"), "someone-else")  # only the owner frees
    assert use.allocate_next("o") is None
    use.free(ipaddress.ip_address("10.0.0.2"), "o")
    assert str(use.allocate_next("o")) == "10.0.0.2"


def test_bad_prefix_names_itself() -> None:
    with pytest.raises(ValueError, match=r"IPv6 auto-allocation prefix '10\.0\.0\.0/8': not an IPv6 prefix"):
        Allocator("240.240.0.0/16", "10.0.0.0/8")


def test_status_patch_is_guarded_by_the_resource_version_and_adds_a_missing_status() -> None:
    value = [{"value": "240.240.0.1", "host": "a.com"}]
    assert status_patch(entry("a", ["a.com"]), value) == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "add", "path": "/status", "value": {}},
        {"op": "add", "path": "/status/addresses", "value": value},
    ]
    assert len(status_patch(entry("a", ["a.com"], status={"conditions": []}), value)) == 2
