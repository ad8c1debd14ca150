"""The project's small exception tree.

Library errors are mapped to these at the edges, so callers handle a few types only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class PilotfishError(Exception):
    """Base of every error pilotfish raises on purpose."""


def shown(text: str, limit: int = 64) -> str:
    """Client input as an error message may quote it: repr'd, and cut at ``limit`` characters
    (a 100 KB node id echoed into a gRPC status exceeds what the client accepts)."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


class ConfigError(PilotfishError):
    """A config object or file was rejected.

    The message always names where the object came from (file or namespace/name), its kind,
    the field and the reason, so one line in a log is enough to fix the input.
    """

    def __init__(self, source: str, kind: str, name: str, field: str, reason: str) -> None:
        self.source = source
        self.kind = kind
        self.name = name
        self.field = field
        self.reason = reason
        where = f"{source}: " if source else ""
        obj = f"{kind} {name}".strip()
        at = f" field {field}:" if field else ""
        head = f"{where}{obj}:" if obj else where.rstrip(" ")
        super().__init__(f"{head}{at} {reason}")


class SettingsError(PilotfishError):
    """A command-line flag or environment setting is invalid."""


class FieldError(PilotfishError):
    """A field of an object being parsed is invalid; the loader adds which object it was."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}" if field else reason)


class ListenError(PilotfishError):
    """An address the server was told to serve on cannot be listened on (in use, not local)."""


@contextmanager
def listening(what: str, address: object) -> Iterator[None]:
    """Binding ``what``'s port: an OSError becomes one line naming the port and the address."""
    try:
        yield
    except OSError as e:
        raise ListenError(f"{what}: cannot listen on {address}: {e.strerror or e}") from None
