"""Incremental (Delta) xDS session: subscriptions and per-resource versions, without I/O.

``on_request`` applies a DeltaDiscoveryRequest — subscribe / unsubscribe (``*`` and the
legacy empty first request mean wildcard), ``initial_resource_versions`` on reconnect,
ACK / NACK by ``response_nonce`` + ``error_detail`` — and says whether to answer.
``response`` diffs the type's current resources against what the client has: only resources
whose version differs are sent, names the client has that no longer exist go in
``removed_resources``, and a subscribed name that does not exist is simply not sent until
it appears (xDS protocol doc, "Incremental xDS"). What was sent counts as what the client
has, so a NACKed resource is not resent until its content changes. The streams of a proxy class
share one mapping of what they hold (``HeldVersions``) and take the push response the first of
them worked out against it.

Initial versions (a reconnect, after a restart of either side): versions are content hashes,
so for clusters, listeners and routes the client's are diffed against and only what differs is
sent. For endpoints (``NAMES_ONLY_ON_RECONNECT``) only the names count, so what is gone is removed
and everything watched is sent again, as istiod does for every type but WDS (it reads
``InitialResourceVersions`` nowhere else: pilot/pkg/xds/delta.go passes them on in
``PushRequest.Delta``, only workload.go reads them): a cluster the new stream re-sends, or one
still warming when the old stream broke, stays warming until an assignment arrives after it
(Envoy with ``initial_fetch_timeout: 0s``: for ever), and an EDS request cannot say which are.

A request costs what it names, not what the stream holds (app/xds/limits.py): subscriptions are
a ``SubscribedNames`` changed in place, and an answered change says which names it made wanted
(``Outcome.subscribed``), so the answer considers those alone; a name the wildcard already
covers makes nothing wanted and is not answered. A stale or unknown nonce is ignored and
counted, as istiod's (pilot_xds_expired_nonce); the subscription changes in its request are
still applied, unlike istiod, which drops the whole request: Envoy puts its pending
subscription changes in its ACKs (DeltaSubscriptionState::getNextRequestWithAck), and one that
crossed a newer response would leave its subscriptions and the server's apart.
"""

from __future__ import annotations

import operator
import sys
import weakref
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass

from envoy.service.discovery.v3 import discovery_pb2

from app.xds.limits import NameQuota, check_new_watch, check_type, name_cost
from app.xds.resource import Resource, set_version
from app.xds.response import DeltaResponse, removed_field
from app.xds.type_urls import ENDPOINT, EXPLICIT_TYPES
from app.xds.watch import (
    WILDCARD,
    HeldVersions,
    NameSets,
    NonceSource,
    Outcome,
    RequestKind,
    SubscribedNames,
    WatchedResource,
    is_wildcard_request,
    own_versions,
)

# types whose initial_resource_versions are taken as the names the client holds, not the versions:
# all of them is sent on the first request of a stream (see the module docstring)
NAMES_ONLY_ON_RECONNECT = frozenset({ENDPOINT})
# what the client is taken to hold of those: a content hash is never empty, so it differs from any
UNKNOWN_VERSION = ""
_MIN_ANSWERS = 8  # a held mapping's answers kept before those no stream can take are dropped
_NOTHING_SENT = set_version(())


class DeltaSession:
    def __init__(
        self,
        nonces: NonceSource,
        allowed_types: frozenset[str] | None,
        name_sets: NameSets | None = None,
        quota: NameQuota | None = None,
    ) -> None:
        self._nonces = nonces
        self._allowed = allowed_types
        self._name_sets = name_sets if name_sets is not None else NameSets()
        self.quota = quota if quota is not None else NameQuota()
        self.watches: dict[str, WatchedResource] = {}

    def on_request(self, req: discovery_pb2.DeltaDiscoveryRequest) -> Outcome:
        """What ``req`` means; costs time in proportion to its size, whatever the stream holds."""
        type_url = req.type_url
        check_type(type_url, self._allowed)
        subscribe = set(req.resource_names_subscribe)
        unsubscribe = set(req.resource_names_unsubscribe)
        w = self.watches.get(type_url)
        if w is None:
            check_new_watch(self.watches)
            w = WatchedResource(type_url, is_wildcard_request(type_url, subscribe))
            names = subscribe - unsubscribe - {WILDCARD}
            self.quota.charge(w, name_cost(names))
            w.names = self._name_sets(names)  # shared until the first change
            self.watches[type_url] = w
            # what the client kept from an earlier stream: diffed against, not resent (endpoints:
            # held, so what is gone is removed, but sent again)
            # interned: the strings a request carries are new for every stream, and a reconnected
            # stream kept its own copy of every name and version it held (bench/reconnect_soak.py at
            # 500 services: 50 MB for 100 reconnects); the streams of a class now share one
            initial = req.initial_resource_versions
            if type_url in NAMES_ONLY_ON_RECONNECT:
                w.client_versions.update(dict.fromkeys(map(sys.intern, initial), UNKNOWN_VERSION))
            else:
                w.client_versions.update({sys.intern(n): sys.intern(v) for n, v in initial.items()})
            if WILDCARD in unsubscribe:
                w.wildcard = False
            if not w.wildcard:
                self._forget(w, unsubscribe)
            _forget_unwatched(w)
            return Outcome(RequestKind.INITIAL, type_url, True)
        changing = bool(subscribe or unsubscribe)
        new = self._apply(w, subscribe, unsubscribe)
        respond = new is None or bool(new)
        subscribed = None if new is None or not respond else frozenset(new)
        if req.response_nonce and req.HasField("error_detail") and req.error_detail.code != 0:
            w.nacks += 1
            w.last_error = req.error_detail.message
            return Outcome(RequestKind.NACK, type_url, respond, w.last_error, req.error_detail.code, subscribed)
        if req.response_nonce and req.response_nonce == w.nonce_sent:
            w.nonce_acked = req.response_nonce
            w.last_error = ""
        if changing:
            return Outcome(RequestKind.SUBSCRIPTION, type_url, respond, subscribed=subscribed)
        if req.response_nonce and req.response_nonce != w.nonce_sent:
            # a stale or unknown nonce: ignored, as istiod's shouldRespond does ("expired nonce")
            return Outcome(RequestKind.STALE, type_url, False)
        return Outcome(RequestKind.ACK, type_url, False)

    def _apply(self, w: WatchedResource, subscribe: set[str], unsubscribe: set[str]) -> list[str] | None:
        """Apply subscription changes in time proportional to them; returns the names they made
        wanted (none for names a wildcard already covers), or None when the wildcard itself was
        subscribed (everything may be new)."""
        everything = WILDCARD in subscribe and WILDCARD not in unsubscribe and not w.wildcard
        if everything:
            w.wildcard = True
        wildcard_ended = WILDCARD in unsubscribe and w.wildcard
        if wildcard_ended:
            w.wildcard = False
        subscribe.discard(WILDCARD)
        unsubscribe.discard(WILDCARD)
        new: list[str] = []
        if subscribe or unsubscribe:  # an ACK names none: nothing to look at
            names = w.names
            if not isinstance(names, SubscribedNames):
                names = w.names = SubscribedNames(self._name_sets(names), self._name_sets)
            was_wildcard = w.wildcard and not everything
            gained, lost = names.update(subscribe, unsubscribe)
            if gained or lost:
                self.quota.charge(w, max(0, w.cost + name_cost(gained) - name_cost(lost)))
            new = [] if was_wildcard else gained
            if not w.wildcard:  # an unsubscribed name is wanted still only by a wildcard
                self._forget(w, unsubscribe)
        if wildcard_ended:
            _forget_unwatched(w)
        return None if everything else new

    def _forget(self, w: WatchedResource, unsubscribed: set[str]) -> None:
        """Drop the unsubscribed names from what the client holds: a later subscribe must send
        them again (a pass over what the request names, never over all the stream holds). The
        streams of a class unsubscribe the same names after the same push (Envoy drops a removed
        cluster's EDS name): they go on sharing one mapping, the shared one's successor without
        those names (made once, as a response's), rather than each taking a private copy it then
        keeps for the rest of the stream. A stream that holds its mapping alone changes a copy
        of its own in place from then on: a successor per change would copy all it holds for
        every one-name change it makes."""
        held = w.client_versions
        names = frozenset(filter(held.__contains__, unsubscribed))
        if not names:
            return
        if isinstance(held, HeldVersions):
            found = self._name_sets.successor(held, _NOTHING_SENT, names)
            # held by another watch too: the references are the watches' ``client_versions``,
            # ``held`` here and getrefcount's argument (CPython counts them exactly)
            if found is None and sys.getrefcount(held) > 3:
                found = self._name_sets.after(held, _NOTHING_SENT, (), names)
            if found is not None:
                w.client_versions = found
                return
        versions = own_versions(w)
        for name in names:
            del versions[name]

    def answer(self, type_url: str, resources: Sequence[Resource]) -> DeltaResponse | None:
        """The response to a request that asked for one: what the client lacks."""
        return self.response(type_url, resources)

    def response(
        self,
        type_url: str,
        resources: Sequence[Resource],
        *,
        force: bool = False,
        force_names: Collection[str] = (),
        considered: Collection[str] | None = None,
    ) -> DeltaResponse | None:
        """What the client lacks of ``resources`` (the type's complete current set) and what
        it has that is gone; None when it is up to date. ``force`` sends every watched resource
        even when unchanged, ``force_names`` those named (endpoints after their cluster was
        re-sent). With ``considered``, ``resources`` are the current ones among those names
        only (a partial push): names outside it are left as the client has them."""
        w = self.watches.get(type_url)
        if w is None:
            return None
        held_versions = w.client_versions
        base = self._name_sets.shared(held_versions)  # None: the stream's own dict
        # the streams of a class hold one mapping and are given the same resources: the first
        # works the response out, the others take it (a Sidecar narrowing 400 proxies' scopes
        # removes the same ~600 names from each: found, sorted and encoded once)
        key = None if base is None or force or force_names else _answer_key(w, resources, considered)
        known = base.answers.get(key) if base is not None and key is not None else None
        if isinstance(known, _Answer) and (successor := known.successor()) is not None:
            w.client_versions = successor
            return self._reply(w, type_url, known.version, known.send, known.removed, known.encoded_removed)
        # per-resource loops kept to comprehensions and C-level calls: a connecting proxy's
        # whole set is thousands of resources per type (bench/push_cost.py connect figures)
        if w.wildcard:
            current = {r.name: r for r in resources}
        else:
            names = w.names
            current = {r.name: r for r in resources if r.name in names}
        if force or not (held_versions or force_names):  # forced, or the client holds nothing
            send = list(current.values())
        else:
            send = [r for r in current.values() if held_versions.get(r.name) != r.version or r.name in force_names]
        held = held_versions.keys() if considered is None else held_versions.keys() & considered
        removed = tuple(sorted(held - current.keys()))
        first_wildcard = w.wildcard and not w.nonce_sent
        # the streams of a proxy class are brought to the same sets: they share one mapping of
        # what they hold (HeldVersions), derived once per response from the one they held, or
        # found by content for a reconnected stream's first answer (it presented its own; the
        # whole set's hash in the generator's order, the same for every stream of the class)
        share = base is None and considered is None and not w.nonce_sent
        if not send and not removed and not first_wildcard:
            if share:  # the reconnected client holds all of it already
                w.client_versions = self._name_sets.versions(set_version(current.values()), held_versions)
            return None
        send.sort(key=_NAME)
        # what this response carries (the complete set's hash would cost a pass over all of it)
        version = set_version(send)
        sent = zip(map(_NAME, send), map(_VERSION, send), strict=True)
        if base is not None:
            w.client_versions = successor = self._name_sets.after(base, version, sent, removed)
            if key is not None and (send or removed):  # an empty answer is a first wildcard's only
                answer = _Answer(tuple(send), removed, version, removed_field(removed), weakref.ref(successor))
                _remember(base, key, answer)
                return self._reply(w, type_url, version, answer.send, answer.removed, answer.encoded_removed)
        else:
            held_versions.update(sent)
            for name in removed:
                del held_versions[name]
            if share:
                w.client_versions = self._name_sets.versions(set_version(current.values()), held_versions)
        return self._reply(w, type_url, version, send, removed)

    def _reply(
        self,
        w: WatchedResource,
        type_url: str,
        version: str,
        send: Sequence[Resource],
        removed: Sequence[str],
        encoded_removed: bytes | None = None,
    ) -> DeltaResponse:
        resp = DeltaResponse(type_url, self._nonces(), version, send, removed, encoded_removed=encoded_removed)
        w.nonce_sent = resp.nonce
        w.version_sent = version
        return resp


@dataclass(frozen=True, slots=True)
class _Answer:
    """A response worked out against a shared HeldVersions, for every stream that holds it and is
    given the same resources; ``successor`` is what they hold after it (while one does)."""

    send: tuple[Resource, ...]
    removed: tuple[str, ...]
    version: str
    encoded_removed: bytes
    successor: weakref.ref[HeldVersions]


def _answer_key(
    w: WatchedResource, resources: Sequence[Resource], considered: Collection[str] | None
) -> Hashable | None:
    """What a push's response to a wildcard stream holding a shared mapping is made of besides
    that mapping; resources by name and content hash. None for a whole set (a first answer: its
    resources and what it sends would be held for as long as a stream holds what it led to, and
    pin superseded resources after a change) and for a watch by name (its answers are a few
    resources, and the key would hold the subscription set past the watches that hold it)."""
    if not w.wildcard or not isinstance(considered, frozenset):
        return None
    return (w.type_url, considered, tuple(map(_NAME, resources)), tuple(map(_VERSION, resources)))


def _remember(base: HeldVersions, key: Hashable, answer: _Answer) -> None:
    answers = base.answers
    if len(answers) >= max(_MIN_ANSWERS, 2 * base.answered):  # drop those no stream can take
        base.answers = answers = {
            k: a for k, a in answers.items() if isinstance(a, _Answer) and a.successor() is not None
        }
        base.answered = len(answers)
    answers[key] = answer


def _forget_unwatched(w: WatchedResource) -> None:
    """Drop the versions of names an explicit watch does not hold (the client's initial versions,
    or everything after a wildcard ends); a pass over every name, so only when those change."""
    if w.type_url in EXPLICIT_TYPES and not w.wildcard:
        for name in [n for n in w.client_versions if n not in w.names]:
            del own_versions(w)[name]


_NAME = operator.attrgetter("name")
_VERSION = operator.attrgetter("version")
