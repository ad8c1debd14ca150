"""What one xDS stream watches, per type (istiod's WatchedResource), and the request outcomes,
errors and per-stream limits both protocol sessions share.

Plain mutable state owned by one session (one stream, one coroutine). Versions are content
hashes, so "has the client got this?" is a string comparison and an unchanged resource is
never resent (nor a NACKed one, until its content changes).

What a client can make the server hold or do (DESIGN §5: a hostile stream ends, never the server),
bounded by memory and by the work a request can cause, never by the size of a legitimate mesh
(istiod serves a request for 100,000 names, and a mesh that size exists):

* A request is at most gRPC's 4 MiB message (istiod's ISTIO_GPRC_MAXRECVMSGSIZE default), so
  whatever a request names is handled in time proportional to its bytes; there is no count of
  names per request.
* What a stream keeps subscribed across requests (Delta adds up) is bounded by bytes:
  ``MAX_NAME_BYTES`` over all its watches, each name charged its length plus ``NAME_OVERHEAD``
  (what holding it costs: its slots in the shared set, the interned string, the client's version
  entry), so memory per name is bounded whatever the names; past it the stream ends with
  ``QuotaExceeded`` (RESOURCE_EXHAUSTED). A stream watches at most ``MAX_WATCHED_TYPES`` types
  with type URLs of at most ``MAX_TYPE_URL`` characters (else ProtocolError, INVALID_ARGUMENT).
* A request that answers nothing costs what reading it costs, so it is not rationed: a stale or
  unknown nonce is ignored, as istiod ignores it (counted in pilot_xds_expired_nonce, logged at
  debug level), and so is a repeated ACK; a Delta subscription change costs what it names
  (``SubscribedNames`` applies it without copying what the stream already holds, and the answer
  is built for the names it adds alone). A request that is answered is paced by the client
  reading the answer: one write at a time per stream, and the stream takes no further request
  while a write waits (app/xds/server.py).
* Kept, because it is the one request whose work is neither its own size nor paced by an
  answer: one the server answers by generating a type's whole set only to find nothing to send
  (``IdleAnswers``: a burst of 100, then 10 a second, else RESOURCE_EXHAUSTED). An Envoy never
  sends one (its CDS and LDS watches are wildcard), so only a loop of them is cut off.
Dropped: the count of names per request and per watch (100,000, refusing meshes istiod serves)
and the budget for stale nonces, repeated ACKs and subscription changes (it ended streams istiod
keeps; none of those requests costs more than its own size now).
"""

from __future__ import annotations

import enum
import hashlib
import itertools
import sys
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from google.protobuf import any_pb2
from google.protobuf.message import Message

from app.model.proxy import shown
from app.xds.resources import EXPLICIT_TYPES

WILDCARD = "*"

# what a stream's subscriptions may hold: each name is charged its length plus NAME_OVERHEAD
# bytes (measured: 170 for a 21-character name held by a Delta watch, in its slots of the
# shared set, the interned-string table and the client's versions, besides its characters; the
# rest is room for those tables' growth steps), and all the names a stream watches, over every
# type, at most MAX_NAME_BYTES: about 890,000 names of 45 characters, more than twice the EDS
# names of a sidecar that sees 100,000 services with two ports and a subset each, and 256 MiB
# at most that one stream can make the server keep
NAME_OVERHEAD = 256
MAX_NAME_BYTES = 256 * 1024 * 1024
# Envoy watches under 20 types (CDS, EDS, LDS, RDS, SRDS, VHDS, SDS, RTDS, ECDS, NDS, ...); ADS
# takes any type, so without a bound a stream could make a watch per made-up type URL
MAX_WATCHED_TYPES = 100
MAX_TYPE_URL = 512  # Envoy's longest type URLs are under 100 characters; each one is a watch key

NonceSource = Callable[[], str]


def counter_nonces(prefix: str = "") -> NonceSource:
    """A deterministic nonce source: ``prefix1``, ``prefix2``, ... (inject for tests)."""
    count = 0

    def nonce() -> str:
        nonlocal count
        count += 1
        return f"{prefix}{count}"

    return nonce


@dataclass(frozen=True, slots=True)
class Resource:
    """One encoded resource, ready for either protocol and shared by every proxy served it.

    ``entry`` is the resource already on the wire as one element of a Delta response's
    ``resources`` (field 2: an envoy.service.discovery.v3.Resource whose first field is the
    Any), and ``sotw`` the Any inside it as one element of a SotW response's ``resources``
    (field 2 too), so responses are assembled by joining bytes (app/xds/response.py)."""

    name: str
    version: str  # content hash
    body: any_pb2.Any
    entry: bytes
    sotw: memoryview


def encode(name: str, msg: Message) -> Resource:
    body = any_pb2.Any()
    body.Pack(msg, deterministic=True)
    version = hashlib.blake2b(body.value, digest_size=8).hexdigest()
    # discovery.v3.Resource: resource (2) first, so its encoding is also a SotW element
    element = field_bytes(2, body.SerializeToString(deterministic=True))
    inner = b"".join((element, field_bytes(1, version.encode()), field_bytes(3, name.encode())))
    entry = field_bytes(2, inner)
    start = len(entry) - len(inner)
    return Resource(name, version, body, entry, memoryview(entry)[start : start + len(element)])


def field_bytes(number: int, value: bytes) -> bytes:
    """A length-delimited protobuf field (strings, bytes, messages): key, length, value."""
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def set_version(resources: Iterable[Resource]) -> str:
    """The version of a whole response: a hash over names and resource versions."""
    text = "\0".join(f"{r.name}\0{r.version}" for r in resources)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


@dataclass(slots=True)
class WatchedResource:
    type_url: str
    wildcard: bool
    names: AbstractSet[str] = frozenset()  # explicit subscriptions (besides the wildcard)
    nonce_sent: str = ""
    version_sent: str = ""
    nonce_acked: str = ""
    version_acked: str = ""
    nacks: int = 0
    last_error: str = ""  # the latest NACK's message; cleared by the next ACK
    nacked_version: str = ""  # SotW: the version the client rejected (never resent as such)
    # Delta: name -> version the client has (or was sent: a NACKed resource is not resent
    # until its content changes)
    client_versions: dict[str, str] = field(default_factory=dict)
    # the resource source's note of the full set the client was last brought to (opaque here),
    # so the next push can send the difference without diffing every resource
    synced: object = None
    cost: int = 0  # what ``names`` is charged against the stream's NameQuota

    def wants(self, name: str) -> bool:
        return self.wildcard or name in self.names


class NameSets:
    """Subscribed-name sets held once: the streams of a proxy class subscribe to the same
    thousand-odd names, so their watches share one frozenset instead of holding a set each, and
    the names of a set new here are interned, so sets that differ a little share their strings.
    A set is found here while some watch holds it (weak references): what the pool keeps is
    what the live streams' quotas pay for, never a set a closed stream left behind."""

    def __init__(self) -> None:
        self._sets: dict[int, list[weakref.ref[frozenset[str]]]] = {}

    def __call__(self, names: AbstractSet[str]) -> frozenset[str]:
        key = names if isinstance(names, frozenset) else frozenset(names)
        digest = hash(key)
        refs = self._sets.get(digest)
        if refs is not None:
            for ref in refs:
                found = ref()
                if found is not None and found == key:
                    return found
        made = frozenset(sys.intern(name) for name in key)
        self._sets.setdefault(digest, []).append(weakref.ref(made, self._forget(digest)))
        return made

    def held(self) -> int:
        """How many distinct sets the live watches hold."""
        return sum(len(refs) for refs in self._sets.values())

    def _forget(self, digest: int) -> Callable[[weakref.ref[frozenset[str]]], None]:
        def forget(ref: weakref.ref[frozenset[str]]) -> None:
            refs = self._sets.get(digest)
            if refs is not None:
                refs.remove(ref)
                if not refs:
                    del self._sets[digest]

        return forget


# a SubscribedNames folds its changes into a new shared set once they are more than this many and
# more than a quarter of the shared set: each changed name pays for at most four in the copy
FOLD_AFTER = 64


class SubscribedNames(AbstractSet[str]):
    """A Delta watch's explicit subscriptions: a set shared through NameSets and this stream's
    changes to it, so a subscription change costs what it names, never a copy of all the stream
    holds (a client subscribing and unsubscribing one name would otherwise make the server copy
    a set of 100,000 names per request). Owned by one session; readers only read it."""

    __slots__ = ("_added", "_base", "_removed", "_sets")

    def __init__(self, base: frozenset[str], sets: NameSets) -> None:
        self._base = base
        self._sets = sets
        self._added: set[str] = set()  # not in _base
        self._removed: set[str] = set()  # in _base

    def __contains__(self, name: object) -> bool:
        return name in self._added or (name in self._base and name not in self._removed)

    def __len__(self) -> int:
        return len(self._base) - len(self._removed) + len(self._added)

    def __iter__(self) -> Iterator[str]:
        if self._removed:
            removed = self._removed
            yield from (name for name in self._base if name not in removed)
        else:
            yield from self._base
        yield from self._added

    def update(self, subscribe: AbstractSet[str], unsubscribe: AbstractSet[str]) -> tuple[list[str], list[str]]:
        """Unsubscribe, then subscribe what is not also unsubscribed (a name in both ends
        unsubscribed); returns the names gained and the names lost."""
        lost = []
        for name in unsubscribe:
            if name in self._added:
                self._added.discard(name)
                lost.append(name)
            elif name in self._base and name not in self._removed:
                self._removed.add(name)
                lost.append(name)
        gained = []
        for name in subscribe:
            if name in unsubscribe or name in self:
                continue
            if name in self._removed:
                self._removed.discard(name)
            else:
                self._added.add(name)
            gained.append(name)
        changes = len(self._added) + len(self._removed)
        if changes > FOLD_AFTER and changes > len(self._base) // 4:
            self._base = self._sets((self._base - self._removed) | self._added)
            self._added, self._removed = set(), set()
        return gained, lost


def name_cost(names: Collection[str]) -> int:
    """What holding ``names`` is charged: their characters (four bytes each in a name that is
    not ASCII: what a str of wide characters takes) and NAME_OVERHEAD each; the same for a
    name whichever names come with it, so what is charged for a name is what is refunded."""
    wide = sum(map(len, itertools.filterfalse(str.isascii, names)))
    return sum(map(len, names)) + 3 * wide + NAME_OVERHEAD * len(names)


class NameQuota:
    """What one stream's subscriptions hold, over all its watches, against MAX_NAME_BYTES."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_NAME_BYTES if limit is None else limit
        self.held = 0

    def charge(self, w: WatchedResource, cost: int) -> None:
        """``w``'s names now cost ``cost``; raises QuotaExceeded when the stream's total would
        pass the limit (the watch is left as charged before)."""
        total = self.held - w.cost + cost
        if total > self.limit:
            raise QuotaExceeded(
                f"the subscriptions for {shown(w.type_url, 120)} would take the stream's names past "
                f"{self.limit // (1024 * 1024):,} MiB (each name counts its length and {NAME_OVERHEAD} bytes)"
            )
        self.held = total
        w.cost = cost


def is_wildcard_request(type_url: str, names: Iterable[str]) -> bool:
    """A first request subscribes to everything when it names ``*``, or names nothing for a
    type that is wildcard by default (CDS, LDS: the legacy empty request)."""
    listed = list(names)
    return WILDCARD in listed or (not listed and type_url not in EXPLICIT_TYPES)


class RequestKind(enum.Enum):
    INITIAL = "initial"  # first request for a type on this stream
    ACK = "ack"
    NACK = "nack"
    STALE = "stale"  # answers a response that is not the latest: ignored
    SUBSCRIPTION = "subscription"  # an ACK (or a Delta request) that changes the names watched


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: RequestKind
    type_url: str
    respond: bool
    error: str = ""
    error_code: int = 0  # a NACK's google.rpc.Code
    # a Delta subscription change that is answered: the names it made wanted, all the answer
    # has to consider (None: the whole watch, as for a first request or a new wildcard)
    subscribed: frozenset[str] | None = None


class ProtocolError(Exception):
    """A request no well-behaved client sends; the stream ends with INVALID_ARGUMENT."""


class QuotaExceeded(Exception):
    """A stream asked for more than it may make the server hold or do (its NameQuota, its
    IdleAnswers); it ends with RESOURCE_EXHAUSTED."""


def check_type(type_url: str, allowed: frozenset[str] | None) -> None:
    """``allowed`` None (ADS) takes any type: one the server has no generator for is watched
    but never answered, as istiod does (e.g. SDS secrets it does not serve)."""
    if not type_url:
        raise ProtocolError("request without type_url")
    if len(type_url) > MAX_TYPE_URL:
        raise ProtocolError(f"type_url {shown(type_url, 120)} is longer than {MAX_TYPE_URL} characters")
    if allowed is not None and type_url not in allowed:
        raise ProtocolError(f"type {shown(type_url, 120)} is not served on this stream")


def check_new_watch(watches: Collection[str]) -> None:
    """Raise before a stream watching ``watches`` adds one more type past MAX_WATCHED_TYPES."""
    if len(watches) >= MAX_WATCHED_TYPES:
        raise ProtocolError(f"a stream may watch at most {MAX_WATCHED_TYPES} types")


# The one request whose cost is neither its own size nor paced by the client reading an answer:
# one the server answers by generating a type's whole set (a CDS or LDS subscription change, a
# Delta wildcard subscribed again, new SotW names after a NACK) only to find nothing to send. An
# Envoy never does that (its CDS and LDS watches are wildcard, and what it subscribes by name is
# answered from those names alone), so such answers are paid from a token bucket: IDLE_BURST at
# once and IDLE_PER_SECOND on average, a client looping on them is cut off within a second.
IDLE_BURST = 100
IDLE_PER_SECOND = 10.0


class IdleAnswers:
    """A token bucket for one stream's answers that generated a whole type and sent nothing;
    the clock is injected."""

    def __init__(
        self,
        clock: Callable[[], float],
        burst: int = IDLE_BURST,
        per_second: float = IDLE_PER_SECOND,
    ) -> None:
        self._clock = clock
        self._burst = float(burst)
        self._rate = per_second
        self._tokens = float(burst)
        self._at = clock()

    def spend(self) -> None:
        """Pay for one such answer; raises QuotaExceeded when none is left."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1:
            raise QuotaExceeded(
                f"more than {int(self._burst)} requests made the server generate a whole type and "
                f"send nothing, or {self._rate:g} a second on average"
            )
        self._tokens -= 1
