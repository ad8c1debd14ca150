"""``pilotfish proxy-status``: ``/debug/syncz`` as a table, like ``istioctl proxy-status``. Pure:
the rows from the decoded JSON; the CLI fetches it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

TYPES = ("cds", "lds", "eds", "rds")


def sync_state(watch: Mapping[str, Any] | None) -> str:
    """SYNCED: the latest response is ACKed; STALE: sent, not (yet) ACKed (a NACK leaves it
    so); NOT SENT: not watched or nothing sent."""
    if not watch or not watch.get("nonceSent"):
        return "NOT SENT"
    return "SYNCED" if watch.get("nonceAcked") == watch.get("nonceSent") else "STALE"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns three spaces apart, as istioctl prints them."""
    lines = [list(header), *(list(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)


def status_table(streams: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for stream in sorted(streams, key=lambda s: (str(s.get("proxy")), str(s.get("connectionID")))):
        watches = stream.get("watches") or {}
        nacks = [f"{t.upper()}: {w['lastError']}" for t, w in sorted(watches.items()) if w.get("lastError")]
        if stream.get("refused"):
            nacks = [f"REFUSED {stream['refused']}"]
        rows.append(
            (
                _name(str(stream.get("proxy", ""))),
                str(stream.get("protocol", "")),
                *(sync_state(watches.get(t)) for t in TYPES),
                "; ".join(nacks)[:120],
            )
        )
    return table(("NAME", "PROTOCOL", *(t.upper() for t in TYPES), "LAST NACK"), rows)


def _name(node_id: str) -> str:
    """``POD.NAMESPACE`` from ``TYPE~IP~POD.NAMESPACE~DOMAIN``, as istioctl names proxies."""
    parts = node_id.split("~")
    return parts[2] if len(parts) == 4 else node_id
