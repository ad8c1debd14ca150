"""Why an xDS stream ends: one error per reason, each naming the gRPC status it ends with.

A ``StreamError`` ends its stream only; the server and the other streams go on (DESIGN §5).
The status is a name of gRPC's status codes, kept here as a plain enum so the sans-I/O parts
raise these without importing grpc; the server (app/xds/server.py ``grpc_status``) maps it in
one place.
"""

from __future__ import annotations

import enum
from typing import ClassVar

from app.errors import PilotfishError


class Status(enum.Enum):
    """The gRPC status codes a stream ends with (names as grpc.StatusCode's)."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    CANCELLED = "CANCELLED"


class StreamError(PilotfishError):
    """Ends one stream with ``status`` and the error's message."""

    status: ClassVar[Status]


class ProtocolError(StreamError):
    """A request no well-behaved client sends."""

    status = Status.INVALID_ARGUMENT


class InvalidNode(StreamError):
    """The node of a stream's first request cannot identify a client (the resource source's
    reading of it failed; its message says what in the node)."""

    status = Status.INVALID_ARGUMENT


class QuotaExceeded(StreamError):
    """A stream asked for more than it may make the server hold or do (its NameQuota, its
    IdleAnswers: app/xds/limits.py)."""

    status = Status.RESOURCE_EXHAUSTED


class Refused(StreamError):
    """A secure-port stream that may not have config: counted and listed as refused, ``who``
    names the caller (a peer address or a proxy id)."""

    def __init__(self, message: str, who: str) -> None:
        super().__init__(message)
        self.who = who


class DebugUnauthenticated(Refused):
    """A debug type asked for on a stream the secure port did not authenticate."""

    status = Status.UNAUTHENTICATED

    def __init__(self, who: str) -> None:
        super().__init__("authentication required", who)


class Unauthorized(Refused):
    """A secure-port stream whose identity may not have the config its node asks for."""

    status = Status.PERMISSION_DENIED


class SendTimeout(StreamError):
    """A response was not taken by the transport within the send timeout: the client stopped
    reading (istiod's "timeout sending")."""

    status = Status.DEADLINE_EXCEEDED

    def __init__(self) -> None:
        super().__init__("timeout sending")


class CallEnded(StreamError):
    """A write failed in gRPC core: the call is over (the client left, the server stops), and
    nothing more, not even a status, can go to it."""

    status = Status.CANCELLED
