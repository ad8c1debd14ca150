"""What one xDS stream watches, per type (istiod's WatchedResource), and the request outcomes
and errors both protocol sessions share.

Plain mutable state owned by one session (one stream, one coroutine). Versions are content
hashes, so "has the client got this?" is a string comparison and an unchanged resource is
never resent (nor a NACKed one, until its content changes).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from google.protobuf import any_pb2
from google.protobuf.message import Message

from app.xds.resources import EXPLICIT_TYPES

WILDCARD = "*"

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
    """One encoded resource, ready for either protocol."""

    name: str
    version: str  # content hash
    body: any_pb2.Any


def encode(name: str, msg: Message) -> Resource:
    body = any_pb2.Any()
    body.Pack(msg, deterministic=True)
    return Resource(name, hashlib.blake2b(body.value, digest_size=8).hexdigest(), body)


def set_version(resources: Iterable[Resource]) -> str:
    """The version of a whole response: a hash over names and resource versions."""
    h = hashlib.blake2b(digest_size=8)
    for r in resources:
        h.update(r.name.encode())
        h.update(b"\0")
        h.update(r.version.encode())
        h.update(b"\0")
    return h.hexdigest()


@dataclass(slots=True)
class WatchedResource:
    type_url: str
    wildcard: bool
    names: set[str] = field(default_factory=set)  # explicit subscriptions (besides the wildcard)
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
    last_sent: frozenset[str] = frozenset()  # the names in the latest response
    # the resource source's note of the full set the client was last brought to (opaque here),
    # so the next push can send the difference without diffing every resource
    synced: object = None


    def wants(self, name: str) -> bool:
        return self.wildcard or name in self.names


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


class ProtocolError(Exception):
    """A request no well-behaved client sends; the stream ends with INVALID_ARGUMENT."""


def check_type(type_url: str, allowed: frozenset[str] | None) -> None:
    """``allowed`` None (ADS) takes any type: one the server has no generator for is watched
    but never answered, as istiod does (e.g. SDS secrets it does not serve)."""
    if not type_url:
        raise ProtocolError("request without type_url")
    if allowed is not None and type_url not in allowed:
        raise ProtocolError(f"type {type_url} is not served on this stream")
