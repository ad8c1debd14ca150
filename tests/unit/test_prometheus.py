"""The Prometheus text rendering: cumulative buckets with +Inf, _sum and _count, escaped label
values, counters without a _total suffix (istiod's exposition)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from app.telemetry.prometheus import Histogram, Metric, render


def test_histograms_are_cumulative_and_counters_keep_their_name() -> None:
    h = Histogram("pilot_debounce_time", "Delay.", (0.1, 1))
    for value in (0.05, 0.5, 1, 5):  # a value on a bound is in its bucket ("le")
        h.observe(value)
    c = Metric("pilot_xds_pushes", "Pushes.", "counter")
    c.add(type="cds")
    c.add(2, type="cds")
    c.add(node='a"b\\c', type="eds")
    text = render([h, c])
    assert 'pilot_debounce_time_bucket{le="0.1"} 1' in text
    assert 'pilot_debounce_time_bucket{le="1"} 3' in text
    assert 'pilot_debounce_time_bucket{le="+Inf"} 4' in text
    assert "pilot_debounce_time_sum 6.55" in text and "pilot_debounce_time_count 4" in text
    assert 'pilot_xds_pushes{type="cds"} 3' in text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    [escaped] = [s for s in families["pilot_xds_pushes"].samples if s.labels["type"] == "eds"]
    assert escaped.labels["node"] == 'a"b\\c'
