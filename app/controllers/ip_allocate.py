"""ServiceEntry address auto-allocation, the decisions without the I/O (istiod's
pilot/pkg/controllers/ipallocate/ipallocate.go; ip_allocate_controller.py does the reads and
writes).

* Which entries get addresses: ``PILOT_ENABLE_IP_AUTOALLOCATE`` on, resolution not NONE, no
  ``spec.addresses`` of their own, not opted out with the label
  ``networking.istio.io/enable-autoallocate-ip: "false"`` (ShouldV2AutoAllocateIP: the same
  rule app/registry/serviceentry.py applies when it reads ``status.addresses``, so allocation
  and use agree). Each host gets one IPv4 address from 240.240.0.0/16 and one IPv6 from
  2001:2::/48 (istiod's PILOT_IP_AUTOALLOCATE_IPV4/6_PREFIX), written to ``status.addresses``
  as ``{value, host}``; wildcard hosts only with DYNAMIC_DNS (keepHost).
* Stable: before allocating anything the allocator is warmed with every address already in a
  status (and every ``spec.addresses`` inside the ranges), so a restart or a new leader keeps what
  was given; a host that has addresses keeps them; new ones are the next free after the last
  given (wrapping once round the range).
* Conflicts (one address claimed by two entries, or by an entry's own ``spec.addresses``): the
  entries holding it in their status are ordered by creationTimestamp; the oldest keeps it unless
  a user's ``spec.addresses`` claims it, and the others are given new addresses (resolveConflict).
* An entry that no longer qualifies has its addresses cleared (clearStaleAddresses) and freed;
  a deleted entry's addresses stay taken, as istiod keeps them (no quick reuse).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.config.host import is_wildcard

logger = logging.getLogger("pilotfish.controllers")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
IPV4_PREFIX = "240.240.0.0/16"  # PILOT_IP_AUTOALLOCATE_IPV4_PREFIX
IPV6_PREFIX = "2001:2::/48"  # PILOT_IP_AUTOALLOCATE_IPV6_PREFIX
AUTOALLOCATE_LABEL = "networking.istio.io/enable-autoallocate-ip"


def parse_address(text: Any) -> Address | None:
    """An address as netip.ParseAddr reads it, an IPv4-mapped IPv6 one as IPv4 (Unmap)."""
    try:
        address = ipaddress.ip_address(str(text))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True, slots=True)
class Entry:
    """What the allocator reads of one ServiceEntry."""

    namespace: str
    name: str
    created: str  # creationTimestamp (RFC 3339, so its text sorts as its time)
    resource_version: str
    hosts: tuple[str, ...]
    resolution: str  # NONE, STATIC, DNS, DNS_ROUND_ROBIN, DYNAMIC_DNS
    spec_addresses: tuple[str, ...]
    labels: Mapping[str, str]
    status: Mapping[str, Any] | None  # as written, None when there is none

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Entry:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status")
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            created=str(meta.get("creationTimestamp") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            hosts=tuple(str(h) for h in spec.get("hosts") or ()),
            resolution=str(spec.get("resolution") or "NONE"),
            spec_addresses=tuple(str(a) for a in spec.get("addresses") or ()),
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            status=status if isinstance(status, Mapping) else None,
        )

    @property
    def owner(self) -> str:
        return f"{self.namespace}/{self.name}"

    def status_entries(self) -> list[Any]:
        entries = (self.status or {}).get("addresses")
        return list(entries) if isinstance(entries, list) else []

    def host_addresses(self) -> dict[str, list[Address]]:
        """``status.addresses`` by host; entries that do not parse are skipped, as istiod does."""
        out: dict[str, list[Address]] = {}
        for entry in self.status_entries():
            if isinstance(entry, Mapping) and (address := parse_address(entry.get("value"))) is not None:
                out.setdefault(str(entry.get("host") or ""), []).append(address)
        return out

    def auto_addresses(self) -> list[Address]:
        return [a for addresses in self.host_addresses().values() for a in addresses]

    def user_addresses(self) -> list[Address]:
        return [a for a in map(parse_address, self.spec_addresses) if a is not None]


def should_allocate(entry: Entry, enabled: bool = True) -> bool:
    """ShouldV2AutoAllocateIP."""
    if not enabled or entry.resolution == "NONE" or entry.spec_addresses:
        return False
    return entry.labels.get(AUTOALLOCATE_LABEL, "").lower() != "false"


def kept_hosts(entry: Entry) -> list[str]:
    """The hosts that get addresses, once each in spec order (keepHost: a wildcard only with
    DYNAMIC_DNS)."""
    return list(dict.fromkeys(h for h in entry.hosts if not is_wildcard(h) or entry.resolution == "DYNAMIC_DNS"))


@dataclass
class PrefixUse:
    """The addresses of one range in use, by owner, and where the next search starts."""

    prefix: Network
    used: dict[Address, str] = field(default_factory=dict)
    next: Address | None = None

    def __post_init__(self) -> None:
        self.next = self._first()

    def _first(self) -> Address:
        return self.prefix.network_address + 1

    def _after(self, address: Address) -> Address | None:
        try:
            following = address + 1
        except ipaddress.AddressValueError:
            return None
        return following if following in self.prefix else None

    def allocate_next(self, owner: str) -> Address | None:
        """The next free address (None: the range is exhausted)."""
        n = self.next if self.next is not None and self.next in self.prefix else None
        looped = n is None
        if n is None:
            n = self._first()
        while n in self.used:
            following = self._after(n)
            if following is None:
                if looped:
                    return None
                looped, following = True, self._first()
            n = following
        self.used[n] = owner
        self.next = self._after(n)
        return n

    def mark_used(self, address: Address, owner: str) -> tuple[bool, bool]:
        """Record ``address`` as ``owner``'s: (was it used already, by that owner)."""
        if address not in self.prefix:
            return False, False
        found = self.used.get(address)
        if found is not None:
            return True, found == owner
        self.used[address] = owner
        return False, False

    def free(self, address: Address, owner: str) -> None:
        if self.used.get(address) == owner:
            del self.used[address]
            if self.next is None or self.next not in self.prefix or int(address) < int(self.next):
                self.next = address


@dataclass(frozen=True, slots=True)
class Conflict:
    """Addresses ``owner`` claims that another entry holds."""

    owner: str
    addresses: tuple[Address, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """What to write for one entry: ``addresses`` ({value, host} entries; None: nothing to
    write), the addresses allocated for it (freed if the write fails) and the conflicts seen."""

    addresses: list[dict[str, str]] | None
    allocated: tuple[Address, ...] = ()
    conflicts: tuple[Conflict, ...] = ()


class Allocator:
    def __init__(self, ipv4_prefix: str = IPV4_PREFIX, ipv6_prefix: str = IPV6_PREFIX) -> None:
        """Raises ValueError naming a prefix that is not one."""
        v4, v6 = _network(ipv4_prefix, 4), _network(ipv6_prefix, 6)
        self.v4, self.v6 = PrefixUse(v4), PrefixUse(v6)

    def _range(self, address: Address) -> PrefixUse:
        return self.v6 if address.version == 6 else self.v4

    def mark_used(self, addresses: Iterable[Address], owner: str) -> tuple[Conflict, ...]:
        """markUsedOrQueueConflict: the conflict, if another holds some of them."""
        taken = tuple(a for a in addresses if self._range(a).mark_used(a, owner) == (True, False))
        return (Conflict(owner, taken),) if taken else ()

    def free(self, addresses: Iterable[Address], owner: str) -> None:
        for address in addresses:
            self._range(address).free(address, owner)

    def next_addresses(self, owner: str) -> list[Address]:
        out = []
        for use in (self.v4, self.v6):
            address = use.allocate_next(owner)
            if address is None:
                logger.error("ServiceEntry %s: no address left in %s", owner, use.prefix)
            else:
                out.append(address)
        return out

    def warm(self, entries: Iterable[Entry]) -> tuple[Conflict, ...]:
        """Every address in a status (and every spec address in the ranges) taken, before any
        allocation (populateControllerDatastructures)."""
        conflicts: list[Conflict] = []
        for entry in entries:
            conflicts.extend(self.mark_used(entry.user_addresses(), entry.owner))
            conflicts.extend(self.mark_used(entry.auto_addresses(), entry.owner))
        return tuple(conflicts)

    def plan(self, entry: Entry, *, forced: bool = False) -> Plan:
        """statusPatchForAddresses: the addresses ``entry`` should have; ``forced`` gives every
        host new ones (the entry lost a conflict)."""
        existing = entry.host_addresses()
        conflicts = () if forced else self.mark_used(entry.auto_addresses(), entry.owner)
        hosts = kept_hosts(entry)
        if set(hosts) == set(existing) and not forced:
            return Plan(None, (), conflicts)
        allocated: list[Address] = []
        addresses: list[dict[str, str]] = []
        for host in hosts:
            if host in existing and not forced:
                given = existing[host]
            else:
                given = self.next_addresses(entry.owner)
                allocated.extend(given)
            addresses.extend({"value": str(a), "host": host} for a in given)
        return Plan(addresses, tuple(allocated), conflicts)


def to_reassign(entries: Iterable[Entry], conflict: Conflict) -> list[Entry]:
    """resolveConflict: the entries that must give up the conflicting addresses: every entry
    holding one in its status but the oldest, or all of them when a user's spec.addresses
    claims one."""
    wanted = set(conflict.addresses)
    auto: dict[str, Entry] = {}
    user = False
    for entry in entries:
        if wanted & set(entry.auto_addresses()):
            auto[entry.owner] = entry
        if wanted & set(entry.user_addresses()):
            user = True
    ordered = sorted(auto.values(), key=lambda e: (e.created, e.owner))
    return ordered if user else ordered[1:]


def status_patch(entry: Entry, addresses: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    """A JSON patch of the status subresource setting ``status.addresses``, applied only to the
    entry as read (its resourceVersion is tested: istiod tests the old addresses, to the same
    end of never writing over a change it has not seen)."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion", "value": entry.resource_version}]
    if entry.status is None:
        ops.append({"op": "add", "path": "/status", "value": {}})
    ops.append({"op": "add", "path": "/status/addresses", "value": [dict(a) for a in addresses]})
    return ops


def _network(text: str, version: int) -> Network:
    try:
        network = ipaddress.ip_network(text.strip(), strict=False)  # as netip.ParsePrefix
    except ValueError as e:
        raise ValueError(f"IPv{version} auto-allocation prefix {text!r}: {e}") from None
    if network.version != version:
        raise ValueError(f"IPv{version} auto-allocation prefix {text!r}: not an IPv{version} prefix")
    return network
