"""What the push pipeline and the transport tell an observer (the tracer; DESIGN §3: the
pipeline reports through an injected observer, so nothing but app/telemetry imports
OpenTelemetry), and what the transport counts (``XdsMetrics``, kept by app/telemetry).

A debounced push is announced once (``push_fired``), which hands back an opaque handle the
request then carries (``PushRequest.traces``; merged requests carry all of theirs); every stream
it was queued for reports once that it is done with it (``proxy_pushed``, with the responses
written, none when it was skipped or gone); and the client's answers to responses arrive as
``answered``. Without an observer none of this runs: the push path pays nothing.

Order: a stream reports ``proxy_pushed`` from its own coroutine, after the last write and before
it takes the next request from its inbox (server.py ``Stream.settle``), so ``answered`` for a
response always comes after the ``proxy_pushed`` that carried it, however fast the client is.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Protocol, TypeVar

from app.xds.cause import Cause
from app.xds.response import DeltaResponse, SotwResponse

# the push request (app/xds/push_request.py PushRequest): opaque to the transport, which hands it
# on; the observer (app/telemetry) knows it
P_contra = TypeVar("P_contra", contravariant=True)


class StreamObserver(Protocol[P_contra]):
    """What the transport (app/xds/server.py) tells the observer."""

    def proxy_pushed(
        self,
        stream_id: str,
        proxy_id: str,
        request: P_contra,
        dequeued: float,
        responses: Sequence[DeltaResponse | SotwResponse],
    ) -> None:
        """A stream is done with a (possibly merged) request: ``responses`` were written (none:
        skipped, or the stream closed); ``dequeued`` is when a push worker took it. Called before
        any answer to those responses is processed."""
        ...

    def answered(
        self, stream_id: str, type_url: str, nonce: str, error: str | None, causes: Sequence[Cause] = ()
    ) -> None:
        """The client ACKed (``error`` None) or NACKed a response; ``causes``: the config objects
        the rejected resources were made from (the source's word)."""
        ...

    def disconnected(self, stream_id: str) -> None:
        """The stream ended: nothing it was sent will be answered."""
        ...


class PushObserver(StreamObserver[P_contra], Protocol[P_contra]):
    """What the push pipeline (app/xds/discovery.py) tells it besides."""

    def push_fired(self, request: P_contra, fired: float) -> Hashable | None:
        """A debounced push fires at ``fired`` (monotonic seconds; ``request.start`` is its
        first event). Returns the handle its request carries, None when it is not observed
        (not sampled)."""
        ...

    def context_built(self, handle: Hashable, started: float, ended: float) -> None:
        """The push rebuilt the PushContext between these monotonic times."""
        ...

    def push_queued(self, handle: Hashable, streams: int) -> None:
        """The push was queued for this many streams; each will report ``proxy_pushed``."""
        ...

    def push_failed(self, handle: Hashable, error: BaseException) -> None:
        """Building or queueing the push raised ``error``: nothing of it will be sent."""
        ...


class XdsMetrics(Protocol):
    """What the transport counts (app/telemetry/pilot.py PilotMetrics keeps them as istiod's
    pilot_xds_* metrics)."""

    def connected(self, node: str, istio_version: str, delta: int) -> None:
        """A stream of the client ``node`` (its proxy id), of that version, connected (1) or
        ended (-1)."""
        ...

    def sent(self, type_url: str, seconds: float, size: int) -> None:
        """A response of the type took ``seconds`` to write and carried ``size`` resource bytes."""
        ...

    def pushed_type(self, type_url: str, seconds: float) -> None:
        """A response of the type, pushed or answering a request (as istiod's pushXds times
        both), took ``seconds`` to build and write."""
        ...

    def write_timeout(self) -> None:
        """A write passed the send timeout."""
        ...

    def auth_failure(self, code: str) -> None:
        """A secure-port stream was refused with that gRPC status name."""
        ...

    def rejected(self, type_url: str, node: str, code: int, error: str, causes: Sequence[Cause]) -> None:
        """A client NACKed a response of the type with that message; ``causes``: the config
        objects the rejected resources were made from."""
        ...

    def expired_nonce(self, type_url: str) -> None:
        """A request answered a response that is not the latest (ignored)."""
        ...
