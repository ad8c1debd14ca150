"""Durations as Go's time.ParseDuration reads them (``100ms``, ``1h30m``, ``87600h0m0s``), for
what istiod and the API server write that way: Istio config fields, istiod's environment
settings, the timeout of a webhook call."""

from __future__ import annotations

import re
from decimal import Decimal

_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")
# the whole text, checked before it is split into parts: findall of the parts over a long run of
# digits with no unit retries from every digit (quadratic: 16,000 digits took 7 s)
_WHOLE = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ns|us|µs|ms|s|m|h))+")
_UNIT_SECONDS = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}


def go_duration_seconds(text: str) -> Decimal | None:
    """The seconds, exactly, of an unsigned Go duration (ASCII digits, each number with its unit);
    None for anything else."""
    if not _WHOLE.fullmatch(text):
        return None
    return sum((Decimal(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(text)), Decimal(0))
