"""Counters, gauges and histograms rendered in the Prometheus text format (0.0.4), pure.

Written out rather than taken from a client library so the exposition is exactly istiod's:
its counters carry no ``_total`` suffix (istiod's OpenTelemetry exporter drops it), and the
label sets and buckets are istiod's own (telemetry/pilot.py)."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]


def _labels(labels: Labels, extra: Labels = ()) -> str:
    pairs = (*labels, *extra)
    if not pairs:
        return ""
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    return "{" + body + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


@dataclass
class Metric:
    name: str
    help: str
    kind: str  # counter | gauge
    values: dict[Labels, float] = field(default_factory=dict)

    def add(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        self.values[key] = self.values.get(key, 0.0) + amount

    def set(self, value: float, **labels: str) -> None:
        self.values[tuple(sorted(labels.items()))] = value

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        lines += [f"{self.name}{_labels(k)} {_number(v)}" for k, v in sorted(self.values.items())]
        return lines


@dataclass
class Histogram:
    name: str
    help: str
    buckets: Sequence[float]
    # per label set: how many values fell in each bucket alone (the last: above every bound),
    # and [sum]; made cumulative when rendered, so an observation is one search, not one step
    # per bucket (four observations per proxy in every push)
    series: dict[Labels, tuple[list[int], list[float]]] = field(default_factory=dict)

    def observe(self, value: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        counts, total = self.series.setdefault(key, ([0] * (len(self.buckets) + 1), [0.0]))
        counts[bisect.bisect_left(self.buckets, value)] += 1  # the first bound >= value ("le")
        total[0] += value

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for key, (counts, total) in sorted(self.series.items()):
            cumulative = list(itertools.accumulate(counts))
            for bound, count in zip((*self.buckets, math.inf), cumulative, strict=True):
                lines.append(f"{self.name}_bucket{_labels(key, (('le', _number(bound)),))} {count}")
            lines.append(f"{self.name}_sum{_labels(key)} {_number(total[0])}")
            lines.append(f"{self.name}_count{_labels(key)} {cumulative[-1]}")
        return lines


def render(metrics: Sequence[Metric | Histogram]) -> str:
    return "\n".join(line for metric in metrics for line in metric.render()) + "\n"
