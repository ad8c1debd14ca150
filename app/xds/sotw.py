"""State-of-the-World xDS session: what a DiscoveryRequest means and what to send, without I/O.

One session per stream (ADS or a per-type service). ``on_request`` classifies a request as
istiod's shouldRespond does — first request for a type, ACK, NACK (``error_detail``), stale
nonce, or an ACK that changes the subscribed names — and says whether to answer.
``response`` turns the current resources of a type into a DiscoveryResponse (or None when
nothing should go out) and records the nonce and version sent.

Rules kept here (xDS protocol doc, "ACK/NACK and resource type instance version"):
* CDS and LDS responses hold the full set; EDS and RDS hold the subscribed names.
* A NACK is state: recorded with its message, the stream stays up, and the rejected
  version is never sent again; only different content goes out.
* An unchanged set is not resent unless a request asks for it or ``force`` says the client
  needs it again (endpoints after their cluster was re-sent).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from envoy.service.discovery.v3 import discovery_pb2

from app.xds.limits import NameQuota, check_new_watch, check_type, name_cost
from app.xds.resource import Resource, set_version
from app.xds.response import SotwResponse
from app.xds.type_urls import EXPLICIT_TYPES
from app.xds.watch import WILDCARD, NameSets, NonceSource, Outcome, RequestKind, WatchedResource, is_wildcard_request


class SotwSession:
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

    def on_request(self, req: discovery_pb2.DiscoveryRequest) -> Outcome:
        """What ``req`` means; costs time in proportion to its size, whatever the stream holds."""
        type_url = req.type_url
        check_type(type_url, self._allowed)
        w = self.watches.get(type_url)
        if req.HasField("error_detail") and req.error_detail.code != 0:
            message = req.error_detail.message
            if w is not None:
                w.nacks += 1
                w.last_error = message
                if req.response_nonce == w.nonce_sent:
                    w.nacked_version = w.version_sent
            return Outcome(RequestKind.NACK, type_url, False, message, req.error_detail.code)
        if w is None:
            # also a reconnect carrying a nonce from an earlier stream: answer it in full
            check_new_watch(self.watches)
            names = set(req.resource_names)
            wildcard = is_wildcard_request(type_url, names)
            names.discard(WILDCARD)
            w = WatchedResource(type_url, wildcard)
            self.quota.charge(w, name_cost(names))
            w.names = self._name_sets(names)
            self.watches[type_url] = w
            return Outcome(RequestKind.INITIAL, type_url, True)
        if req.response_nonce != w.nonce_sent:
            # a stale nonce (a response crossed this request) or one never sent: ignored, as
            # istiod's shouldRespond does ("expired nonce"), names and all
            return Outcome(RequestKind.STALE, type_url, False)
        w.nonce_acked = req.response_nonce
        w.version_acked = req.version_info
        w.last_error = w.nacked_version = ""
        if type_url in EXPLICIT_TYPES or req.resource_names:
            names = set(req.resource_names)
            wildcard = WILDCARD in names if type_url in EXPLICIT_TYPES else w.wildcard
            names.discard(WILDCARD)
            # only new names need an answer; dropped ones just stop being sent
            added = bool(names - w.names) or (wildcard and not w.wildcard)
            changed = names != w.names or wildcard != w.wildcard
            if names != w.names:
                self.quota.charge(w, name_cost(names))
                w.names = self._name_sets(names)
            w.wildcard = wildcard
            if changed:
                return Outcome(RequestKind.SUBSCRIPTION, type_url, added)
        return Outcome(RequestKind.ACK, type_url, False)

    def answer(self, type_url: str, resources: Sequence[Resource]) -> SotwResponse | None:
        """The response to a request that asked for one: always the full watched set."""
        return self.response(type_url, resources, force=True)

    def response(
        self,
        type_url: str,
        resources: Sequence[Resource],
        *,
        force: bool = False,
        force_names: Collection[str] = (),
        considered: Collection[str] | None = None,
    ) -> SotwResponse | None:
        """The response carrying ``resources`` (the type's current set, filtered here to what
        the client watches), or None when the client has it already or rejected exactly it.
        Any ``force_names`` forces it. With ``considered`` (explicitly subscribed types only),
        ``resources`` are the current ones among those names, and the response carries just
        them: Envoy updates the resources a response names and keeps the others it watches."""
        if considered is not None and type_url not in EXPLICIT_TYPES:
            raise ValueError(f"a SotW {type_url} response holds the whole watched set")
        force = force or bool(force_names)
        w = self.watches.get(type_url)
        if w is None:
            return None
        chosen = [r for r in resources if w.wants(r.name)]
        if considered is not None and not chosen:
            return None
        version = set_version(chosen)
        if version == w.nacked_version:
            return None
        if not force and w.nonce_sent and version == w.version_sent:
            return None
        resp = SotwResponse(type_url, self._nonces(), version, chosen)
        w.nonce_sent = resp.nonce
        w.version_sent = version
        return resp
