"""Turning what the simulated sidecars logged into report figures: percentiles, per-type sums
and ratios to the transport floor. Pure functions over ``Event`` lists; times in seconds."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

from app.xds.client import ENVOY_ORDER, SHORT
from bench.envoy import Event, SimulatedEnvoy

# the figures (top level or in "received") that get a ratio to the floor
TIMINGS = ("seconds", "p50_s", "p99_s", "max_s", "server_cpu_s")


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """Nearest-rank p50 / p99 and the max; None for an empty sample."""
    if not values:
        return {"p50_s": None, "p99_s": None, "max_s": None}
    ordered = sorted(values)

    def rank(p: float) -> float:
        return round(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)], 3)

    return {"p50_s": rank(50), "p99_s": rank(99), "max_s": round(ordered[-1], 3)}


def in_window(envoy: SimulatedEnvoy, since: float, until: float) -> list[Event]:
    return [e for e in envoy.events if since <= e.at <= until]


def per_type(events: Iterable[Event]) -> dict[str, dict[str, int]]:
    """bytes, responses, resources and removed names received, per type (cds, eds, lds, rds)."""

    def zero() -> dict[str, int]:
        return {"bytes": 0, "responses": 0, "resources": 0, "removed": 0}

    out = {SHORT[t]: zero() for t in ENVOY_ORDER}
    for e in events:
        row = out.setdefault(SHORT.get(e.type_url, e.type_url), zero())
        row["bytes"] += e.size
        row["responses"] += 1
        row["resources"] += e.resources
        row["removed"] += e.removed
    return out


def received(envoys: Sequence[SimulatedEnvoy], since: float, until: float) -> dict[str, object]:
    """What ``envoys`` received in [since, until]: how many got anything, when each got its last
    response (its last ACK) counted from ``since``, and the per-type totals."""
    windows = [in_window(e, since, until) for e in envoys]
    reached = [w for w in windows if w]
    totals = per_type(e for w in reached for e in w)
    total_bytes = sum(row["bytes"] for row in totals.values())
    return {
        "proxies": len(envoys),
        "proxies_received": len(reached),
        **percentiles([w[-1].at - since for w in reached]),
        "bytes_total": total_bytes,
        "bytes_per_proxy_received": round(total_bytes / len(reached)) if reached else 0,
        "per_type": totals,
    }


def stream_errors(envoys: Iterable[SimulatedEnvoy], before: Mapping[int, int] | None = None) -> dict[str, int]:
    """Streams that ended, by how they ended ("CODE 'details' after N responses"); only those
    after ``before`` (id(envoy) -> count of errors it had then) when given."""
    counts: dict[str, int] = {}
    for envoy in envoys:
        for error in envoy.stream_errors[(before or {}).get(id(envoy), 0) :]:
            counts[error] = counts.get(error, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def ratios(measured: Mapping[str, object], floor: Mapping[str, object], group: str = "received") -> dict[str, float]:
    """measured / floor for every timing figure both have (top level and in ``group``: the
    sidecars the push was for); none when either side timed out (its percentiles cover only the
    sidecars that made it)."""
    out: dict[str, float] = {}
    if measured.get("timed_out") or floor.get("timed_out"):
        return out
    for scope in (measured, measured.get(group)):
        floor_scope = floor if scope is measured else floor.get(group)
        if not isinstance(scope, Mapping) or not isinstance(floor_scope, Mapping):
            continue
        for key in TIMINGS:
            mine, base = scope.get(key), floor_scope.get(key)
            if isinstance(mine, int | float) and isinstance(base, int | float) and base > 0:
                out[key] = round(mine / base, 1)
    return out


# the figures the Kubernetes mode's side-by-side table divides (bench/kube_load.py ``table``):
# times, server CPU, bytes, memory
COMPARED = (
    "ready_s",
    "seconds",
    "p50_s",
    "p99_s",
    "max_s",
    "server_cpu_s",
    "bytes_total",
    "cpu_s",
    "peak_rss_mb",
)


def median_figures(runs: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """Repeated runs' figures as one: each number the median of that number in every run that
    has it, each nested mapping merged the same way, anything else the first run's."""
    merged: dict[str, object] = {}
    for key, first in runs[0].items():
        values = [run[key] for run in runs if key in run]
        if isinstance(first, Mapping):
            merged[key] = median_figures([v for v in values if isinstance(v, Mapping)])
        elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            merged[key] = statistics.median(values)  # type: ignore[type-var]
        else:
            merged[key] = first
    return merged
