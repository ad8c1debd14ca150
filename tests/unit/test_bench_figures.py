"""Repeated benchmark runs merged into one report (bench/figures.py)."""

from __future__ import annotations

import pytest

from bench.figures import median_figures


def test_repeated_runs_report_each_number_as_its_median_and_keep_the_rest_from_the_first() -> None:
    runs = [
        {"storm": {"p99_s": 1.9, "received": {"bytes_total": 10}, "timed_out": False}, "server_log": ["a"]},
        {"storm": {"p99_s": 1.2, "received": {"bytes_total": 30}, "timed_out": True}, "server_log": ["b"]},
        {"storm": {"p99_s": 1.5, "received": {"bytes_total": 20}, "timed_out": False}, "server_log": []},
    ]
    assert median_figures(runs) == {
        "storm": {"p99_s": 1.5, "received": {"bytes_total": 20}, "timed_out": False},
        "server_log": ["a"],
    }


def test_a_figure_some_runs_lack_is_the_median_of_those_that_have_it() -> None:
    runs = [{"push": {"p99_s": 0.4}}, {"push": {}}, {"push": {"p99_s": 0.2}}]
    assert median_figures(runs) == {"push": {"p99_s": pytest.approx(0.3)}}
