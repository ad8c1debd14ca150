"""An encoded xDS resource, shared by every stream served it, and the versions responses carry.

Versions are content hashes, so "has the client got this?" is a string comparison and an
unchanged resource is never resent (nor a NACKed one, until its content changes).
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import repeat

from google.protobuf import any_pb2
from google.protobuf.message import Message


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
    return _encoded(name, body)


def encode_serialized(name: str, type_url: str, value: bytes) -> Resource:
    """A resource whose message is already serialized (deterministically): ``value``."""
    return _encoded(name, any_pb2.Any(type_url=type_url, value=value))


def _encoded(name: str, body: any_pb2.Any) -> Resource:
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


def repeated_field(number: int, values: Iterable[bytes]) -> bytes:
    """A repeated length-delimited field, one element per value. Values under 128 bytes (a
    resource name, nearly always) take C-level passes only: a push that narrows a scope removes
    hundreds of names from each of thousands of responses."""
    listed = values if isinstance(values, list) else list(values)
    if not listed:
        return b""
    key = _varint(number << 3 | 2)
    if max(map(len, listed)) < 0x80:
        return b"".join(map(b"".join, zip(repeat(key), map(_ONE_BYTE_LENGTHS.__getitem__, map(len, listed)), listed)))
    return b"".join(field_bytes(number, value) for value in listed)


_ONE_BYTE_LENGTHS = [bytes((n,)) for n in range(0x80)]


def _varint(n: int) -> bytes:
    if n < 0x80:  # field keys and short lengths: most of what encode writes
        return _ONE_BYTE_LENGTHS[n]
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_NAME = operator.attrgetter("name")
_VERSION = operator.attrgetter("version")


def set_version(resources: Iterable[Resource]) -> str:
    """The version of a whole response: a hash over names and resource versions, in order.

    Python's own hash of the two tuples, not a digest of their text: every name and version is
    a string shared by the streams served it, whose (keyed) hash CPython computes once and
    keeps, so a connecting proxy's first answers, thousands of resources each, cost a pass of
    cached hashes (a third of the digest's time). The value is only compared in this process
    (a Delta client never sends it back; a SotW stream's first request is always answered), so
    it need not be the same in another process or replica, as istiod's push versions are not."""
    listed = resources if isinstance(resources, (list, tuple)) else list(resources)
    return format(hash((tuple(map(_NAME, listed)), tuple(map(_VERSION, listed)))) & _HASH_MASK, "016x")


_HASH_MASK = (1 << 64) - 1
