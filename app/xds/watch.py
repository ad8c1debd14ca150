"""What one xDS stream watches, per type (istiod's WatchedResource), and the request outcomes,
errors and per-stream limits both protocol sessions share.

Plain mutable state owned by one session (one stream, one coroutine). Versions are content
hashes, so "has the client got this?" is a string comparison and an unchanged resource is
never resent (nor a NACKed one, until its content changes).

Per-stream limits (DESIGN §5: a hostile stream ends, never the server): a request may name at
most ``MAX_RESOURCE_NAMES`` resources and a stream watch at most as many per type and at most
``MAX_WATCHED_TYPES`` types (else ProtocolError, INVALID_ARGUMENT); requests that answer no
response are paid for from a ``RequestBudget`` (else RequestFlood, RESOURCE_EXHAUSTED).
"""

from __future__ import annotations

import enum
import hashlib
import sys
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from google.protobuf import any_pb2
from google.protobuf.message import Message

from app.model.proxy import shown
from app.xds.resources import EXPLICIT_TYPES

WILDCARD = "*"

# a request (and a stream's watch of one type) names at most this many resources. gRPC's 4 MiB
# message bound already keeps an Envoy under it for names of 40 bytes or more (cluster names are
# longer); what it stops is a request of hundreds of thousands of tiny names, each costing a set
# insert and a generator pass, and a Delta stream growing its subscriptions without end
MAX_RESOURCE_NAMES = 100_000
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
    # the latest response nonce the client answered (ACK or NACK): a second answer to it is
    # unsolicited, paid from the stream's RequestBudget
    nonce_answered: str = ""
    # Delta: name -> version the client has (or was sent: a NACKed resource is not resent
    # until its content changes)
    client_versions: dict[str, str] = field(default_factory=dict)
    # the resource source's note of the full set the client was last brought to (opaque here),
    # so the next push can send the difference without diffing every resource
    synced: object = None

    def wants(self, name: str) -> bool:
        return self.wildcard or name in self.names


class NameSets:
    """Subscribed-name sets held once: the streams of a proxy class subscribe to the same
    thousand-odd names, so their watches share one frozenset instead of holding a set each, and
    the names of a set new here are interned, so sets that differ a little share their strings.
    The ``limit`` most recently used distinct sets are kept here; one dropped lives on in the
    watches that hold it."""

    def __init__(self, limit: int = 1024) -> None:
        self._limit = limit
        self._sets: OrderedDict[frozenset[str], frozenset[str]] = OrderedDict()

    def __call__(self, names: AbstractSet[str]) -> frozenset[str]:
        key = names if isinstance(names, frozenset) else frozenset(names)
        found = self._sets.get(key)
        if found is None:
            found = frozenset(sys.intern(name) for name in key)
            self._sets[found] = found
            if len(self._sets) > self._limit:
                self._sets.popitem(last=False)
        else:
            self._sets.move_to_end(key)
        return found


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
    # neither a type's first request nor the first answer to the latest response sent for the
    # type: a stale or repeated answer, or a subscription change (see RequestBudget)
    unsolicited: bool = False


class ProtocolError(Exception):
    """A request no well-behaved client sends; the stream ends with INVALID_ARGUMENT."""


class RequestFlood(Exception):
    """A stream sent more unsolicited requests than its RequestBudget allows; it ends with
    RESOURCE_EXHAUSTED."""


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


def check_names(count: int, type_url: str, what: str = "a request") -> None:
    """Raise when ``count`` names are more than a request (or a watch) of a type may hold."""
    if count > MAX_RESOURCE_NAMES:
        raise ProtocolError(
            f"{what} for {shown(type_url, 120)} names {count:,} resources, more than {MAX_RESOURCE_NAMES:,}"
        )


def answers(w: WatchedResource | None, response_nonce: str) -> bool:
    """Whether a request with ``response_nonce`` is the first answer (ACK or NACK) to the latest
    response sent for its type; marks that response answered."""
    if w is None or not response_nonce or response_nonce != w.nonce_sent or response_nonce == w.nonce_answered:
        return False
    w.nonce_answered = response_nonce
    return True


# An Envoy sends a type's first request, then one answer (ACK or NACK) per response it gets. What
# else it sends is triggered: a stale answer when two responses of a type crossed its answer to
# the first (at most one per response), a subscription change when a response of another type
# changed what it needs (new clusters -> their endpoints), both rare next to the answers. So
# every response sent earns the stream one unsolicited request, and on top of that it may send
# UNSOLICITED_BURST at once and UNSOLICITED_PER_SECOND on average: an Envoy never gets near it
# (pushes are debounced by 100 ms and answered within milliseconds), while a client looping on
# stale nonces, repeated ACKs or subscribe/unsubscribe of one name is cut off within a second.
UNSOLICITED_BURST = 100
UNSOLICITED_PER_SECOND = 10.0


class RequestBudget:
    """A token bucket for one stream's unsolicited requests; the clock is injected."""

    def __init__(
        self,
        clock: Callable[[], float],
        burst: int = UNSOLICITED_BURST,
        per_second: float = UNSOLICITED_PER_SECOND,
    ) -> None:
        self._clock = clock
        self._burst = float(burst)
        self._rate = per_second
        self._tokens = float(burst)
        self._at = clock()

    def responded(self, count: int = 1) -> None:
        """Responses were sent: each may be answered by a stale nonce or trigger a subscription."""
        self._tokens = min(self._burst, self._tokens + count)

    def spend(self) -> None:
        """Pay for one unsolicited request; raises RequestFlood when none is left."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1:
            raise RequestFlood(
                f"more than {int(self._burst)} requests answering no response, "
                f"or {self._rate:g} a second on average (stale or repeated nonces, subscription churn)"
            )
        self._tokens -= 1
