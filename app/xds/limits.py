"""The per-stream request budget: what one xDS stream may make the server hold or do.

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
* A NACK's ``error_detail.message`` is cut to ``MAX_ERROR_DETAIL`` characters as it is parsed
  (``cut_error_detail``), as Envoy cuts its own (Config::Utility::truncateGrpcStatusMessage): it
  is logged, kept on the watch, in the latest rejections of /debug/rejections and on push traces,
  so uncut, 100 NACKs of 4 MiB made the server keep 400 MiB after their stream had left.
* A request naming more than ``ANSWER_PART`` resources of a type subscribed by name (EDS, RDS)
  is answered in responses of that many names each, one written before the next is built
  (app/xds/connection.py ``_in_parts``): the answer's work is its size, but no single stretch of
  the event loop is longer than a part's (one request for 100,000 names took it 3 s in one go).
Dropped: the count of names per request and per watch (100,000, refusing meshes istiod serves)
and the budget for stale nonces, repeated ACKs and subscription changes (it ended streams istiod
keeps; none of those requests costs more than its own size now).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection
from typing import Any

from app.errors import shown
from app.xds.errors import ProtocolError, QuotaExceeded
from app.xds.watch import WatchedResource

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
# names per response of an answer in parts: at most ~80 ms of the event loop for names that
# resolve to nothing (the costliest: no memo holds their answers), a few ms for known ones; a
# mesh-1k sidecar names 2,400 EDS clusters, so Envoy's own requests stay whole well past that
ANSWER_PART = 4096


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


# Envoy sends at most this many characters of a rejection's message, then "...(truncated)"
MAX_ERROR_DETAIL = 4096
_CUT = "...(truncated)"


def cut_error_detail(req: Any) -> None:
    """Cut ``req``'s NACK message (a DiscoveryRequest or DeltaDiscoveryRequest) to what Envoy
    itself would send, in place; a message within the bound is left alone."""
    if req.HasField("error_detail") and len(req.error_detail.message) > MAX_ERROR_DETAIL + len(_CUT):
        req.error_detail.message = req.error_detail.message[:MAX_ERROR_DETAIL] + _CUT


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
