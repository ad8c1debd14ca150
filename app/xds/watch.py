"""What one xDS stream watches, per type (istiod's WatchedResource), and the request outcomes
both protocol sessions share.

Plain mutable state owned by one session (one stream, one coroutine). What a client may make a
stream hold or do is app/xds/limits.py; the resources and their versions app/xds/resource.py.
"""

from __future__ import annotations

import enum
import sys
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from app.xds.cause import Cause
from app.xds.type_urls import EXPLICIT_TYPES

WILDCARD = "*"
_EMPTY: Mapping[str, str] = {}
_MIN_PRUNED = 8  # a held mapping's successors kept before the dead ones are dropped

NonceSource = Callable[[], str]


def counter_nonces(prefix: str = "") -> NonceSource:
    """A deterministic nonce source: ``prefix1``, ``prefix2``, ... (inject for tests)."""
    count = 0

    def nonce() -> str:
        nonlocal count
        count += 1
        return f"{prefix}{count}"

    return nonce


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
    # until its content changes); a HeldVersions shared with other streams, or a dict of its own
    client_versions: dict[str, str] = field(default_factory=dict)
    # the resource source's own note for this watch, opaque to the transport, which only keeps
    # it with the watch (app/xds/source.py): the mesh's generator notes there the full set the
    # client was last brought to, so the next push can send the difference without diffing
    # every resource
    synced: object = None
    cost: int = 0  # what ``names`` is charged against the stream's NameQuota (app/xds/limits.py)

    def wants(self, name: str) -> bool:
        return self.wildcard or name in self.names


class HeldVersions(dict[str, str]):
    """What Delta clients hold of a type (name -> version), one mapping for every stream that
    holds exactly this: the streams of a proxy class are brought to the same set, and a private
    dict each was 130 KB per proxy at mesh-1k (bench/push_cost.py). Never changed in place: a
    stream changing it alone takes a copy first (``own_versions``); one that a response brings
    to a new state takes the mapping ``NameSets.after`` makes once per base and response."""

    __slots__ = ("__weakref__", "answered", "answers", "live", "successors")

    def __init__(self, items: Mapping[str, str] = _EMPTY) -> None:
        super().__init__(items)
        # what a response (sent, removed) made of this mapping, while some stream holds it;
        # ``live`` of them at the last pruning (pruned when twice as many: rehashing is costly)
        self.successors: dict[Hashable, weakref.ref[HeldVersions]] = {}
        self.live = 0
        # the Delta push responses worked out against this mapping, for the next stream of the
        # class given the same resources (app/xds/delta.py); they go with the mapping once every
        # stream has moved on from it; ``answered`` of them at the last pruning
        self.answers: dict[Hashable, object] = {}
        self.answered = 0


def own_versions(w: WatchedResource) -> dict[str, str]:
    """The watch's held versions as a dict of its own, to change in place."""
    if isinstance(w.client_versions, HeldVersions):
        w.client_versions = dict(w.client_versions)
    return w.client_versions


class NameSets:
    """Subscribed-name sets held once: the streams of a proxy class subscribe to the same
    thousand-odd names, so their watches share one frozenset instead of holding a set each, and
    the names of a set new here are interned, so sets that differ a little share their strings.
    A set is found here while some watch holds it (weak references): what the pool keeps is
    what the live streams' quotas pay for, never a set a closed stream left behind. The same for
    the versions Delta clients hold (``versions``, ``after``: HeldVersions)."""

    def __init__(self) -> None:
        self._sets: dict[int, list[weakref.ref[frozenset[str]]]] = {}
        self._versions: weakref.WeakValueDictionary[str, HeldVersions] = weakref.WeakValueDictionary()
        self._nothing = HeldVersions()  # what a new watch holds

    def versions(self, digest: str, held: Mapping[str, str]) -> HeldVersions:
        """The shared mapping equal to ``held``, a reconnected stream's whole set once its
        first answer brought it up to date (``digest``: that set's hash)."""
        found = self._versions.get(digest)
        if found is None or found != held:
            found = self._versions[digest] = HeldVersions(held)
        return found

    def shared(self, held: Mapping[str, str]) -> HeldVersions | None:
        """``held`` as a shared mapping (nothing held: the empty one every new watch starts
        from); None for a stream's own dict."""
        if isinstance(held, HeldVersions):
            return held
        return None if held else self._nothing

    def after(
        self,
        base: Mapping[str, str],
        sent_version: str,
        sent: Iterable[tuple[str, str]],
        removed: tuple[str, ...] | frozenset[str],
    ) -> HeldVersions:
        """``base`` (a shared mapping, or nothing held) once a response sent ``sent`` (name,
        version; ``sent_version`` their hash, the response's version) and removed ``removed``
        (or the client unsubscribed them: nothing sent): made once, for every stream that gets
        this response. Keyed by the hash, not the pairs: a connecting proxy's first answer is
        thousands of them, and the key is kept."""
        if not isinstance(base, HeldVersions):
            assert not base, "a stream's own versions are changed in place"
            base = self._nothing
        key = (sent_version, removed)
        found = self.successor(base, sent_version, removed)
        if found is None:
            changed = dict(base)
            changed.update(sent)
            for name in removed:
                del changed[name]
            found = HeldVersions(changed)
            successors = base.successors
            if len(successors) >= max(_MIN_PRUNED, 2 * base.live):  # drop those no stream holds
                base.successors = successors = {k: r for k, r in successors.items() if r() is not None}
                base.live = len(successors)
            successors[key] = weakref.ref(found)
        return found

    @staticmethod
    def successor(
        base: HeldVersions, sent_version: str, removed: tuple[str, ...] | frozenset[str]
    ) -> HeldVersions | None:
        """What ``after`` made of ``base`` for this change, while some stream holds it."""
        ref = base.successors.get((sent_version, removed))
        return ref() if ref is not None else None

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
        unsubscribed); returns the names gained and the names lost. Set operations, not a
        loop per name: a Sidecar narrowing a class's scope has each of its streams drop
        hundreds of endpoint names in one request."""
        lost_added = self._added & unsubscribe
        lost_base = (self._base & unsubscribe) - self._removed
        self._added -= lost_added
        self._removed |= lost_base
        wanted = set(subscribe) - unsubscribe - self._added
        back = wanted & self._removed  # in the shared set, dropped earlier: held again
        fresh = wanted - self._base
        self._removed -= back
        self._added |= fresh
        changes = len(self._added) + len(self._removed)
        if changes > FOLD_AFTER and changes > len(self._base) // 4:
            self._base = self._sets((self._base - self._removed) | self._added)
            self._added, self._removed = set(), set()
        return [*back, *fresh], [*lost_added, *lost_base]


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
    # a NACK: the config objects the rejected resources were made from (the source's word)
    causes: tuple[Cause, ...] = ()
