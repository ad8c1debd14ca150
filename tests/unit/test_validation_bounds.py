"""What validating one object may cost is bounded (issue 24, item 6): the VirtualService host
overlap check grows linearly with the hosts (it compared every pair: 5,000 hosts held the event
loop for 13.9 s), and RE2 compilation has a budget: a regex whose program is larger than Envoy
accepts (``re2.max_program_size.error_level``, 32768 in Istio's bootstrap and pilotfish's agent)
is refused before it is served, and one object's regexes together compile to at most
``MAX_REGEX_PROGRAM_TOTAL`` instructions."""

from __future__ import annotations

import random
import sys
from types import FrameType
from typing import Any

import pytest

from app.config.host import matches
from app.config.loader import load_object

ROUTE = {"route": [{"destination": {"host": "app"}}]}


def vs(spec: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": "r", "namespace": "ns"}
    return {"apiVersion": "networking.istio.io/v1", "kind": "VirtualService", "metadata": meta, "spec": spec}


def rejection(spec: dict[str, Any]) -> str:
    result = load_object(vs(spec), "vs.yaml")
    return str(result.rejected[0].error) if result.rejected else ""


def regex_routes(patterns: list[str]) -> dict[str, Any]:
    return {"hosts": ["app"], "http": [{"match": [{"uri": {"regex": p}}], **ROUTE} for p in patterns]}


def test_a_regex_larger_than_envoy_compiles_is_refused() -> None:
    # 9 characters, 233,004 RE2 instructions: under istiod's length cap, over Envoy's program size
    error = rejection(regex_routes([r"\pN{1000}"]))
    assert "field http[0].match[0].uri.regex: regex is too large" in error, error
    assert "32768 instructions Envoy accepts" in error, error


def test_a_regex_just_under_envoys_program_size_is_accepted() -> None:
    assert rejection(regex_routes([r"\pN{140}"])) == ""  # 32,632 instructions


def test_the_regexes_of_one_object_are_bounded_together() -> None:
    # each ~29,800 instructions (a few ms to compile): 300 of them took 1.5 s on the event loop
    patterns = [f"/r{i:03d}/" + r"\pN{128}" for i in range(300)]
    error = rejection(regex_routes(patterns))
    assert "RE2 instructions together" in error, error
    index = int(error.split("field http[")[1].split("]")[0])
    assert 60 < index < 80, error  # ~70 fit the budget; the rest were never compiled


def test_the_budget_counts_header_cors_and_rewrite_regexes_too() -> None:
    big = r"\pN{128}"
    route = {
        "match": [{"headers": {f"h{i}": {"regex": f"{i}{big}"} for i in range(30)}}],
        "corsPolicy": {"allowOrigins": [{"regex": f"o{i}{big}"} for i in range(30)]},
        "rewrite": {"uriRegexRewrite": {"match": f"w{big}", "rewrite": "/"}},
        **ROUTE,
    }
    error = rejection({"hosts": ["app"], "http": [route, {**route}]})
    assert "together" in error, error


def test_ordinary_regexes_by_the_thousand_are_accepted() -> None:
    assert rejection(regex_routes([f"/api/v{i}/[a-z]+/.*" for i in range(5000)])) == ""


def slow_first_overlap(hosts: list[str]) -> tuple[int, int] | None:
    for i in range(len(hosts)):
        for j in range(i):
            if matches(hosts[j], hosts[i]):
                return i, j
    return None


def test_the_overlap_found_is_the_one_comparing_every_pair_finds() -> None:
    from app.config.host import first_overlap

    rng = random.Random(24)
    parts = ["a", "b", ".", "ab", "a.b", "-"]
    for _ in range(5000):
        hosts = []
        for _ in range(rng.randint(0, 8)):
            host = "".join(rng.choice(parts) for _ in range(rng.randint(0, 3)))
            hosts.append("*" + host if rng.random() < 0.4 else host)
        assert first_overlap(hosts) == slow_first_overlap(hosts), hosts


@pytest.mark.parametrize(
    ("hosts", "pair"),
    [
        (["a.com", "b.com", "*.com", "c.com"], (2, 0)),
        (["*.b.com", "x.a.com", "a.com", "*.a.com"], (3, 1)),
        (["*", "a.com"], (1, 0)),
        (["a.com", "b.com", "b.com", "a.com"], (2, 1)),
        (["*foo.com", "barfoo.com"], (1, 0)),  # a wildcard matches by suffix, as istiod's
        (["foo.com", "*.foo.com", "a.com"], None),
    ],
)
def test_the_first_overlapping_pair_is_named(hosts: list[str], pair: tuple[int, int] | None) -> None:
    gateway = {"gateways": ["ingress"]} if "*" in hosts else {}  # '*' only on a gateway
    error = rejection({"hosts": hosts, **gateway, "http": [ROUTE]})
    if pair is None:
        assert error == ""
    else:
        i, j = pair
        assert f"field hosts[{i}]: '{hosts[i]}' overlaps hosts[{j}] '{hosts[j]}'" in error, error


def python_calls(spec: dict[str, Any]) -> int:
    """How many Python function calls validating ``vs(spec)`` makes: work, without a clock."""
    calls = 0

    def count(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(count)
    try:
        load_object(vs(spec), "vs.yaml")
    finally:
        sys.setprofile(None)
    return calls


def test_checking_hosts_grows_linearly_with_the_hosts() -> None:
    def hosts(n: int) -> dict[str, Any]:
        return {"hosts": [f"h{i}.example.com" for i in range(n)] + ["*.other.com"], "http": [ROUTE]}

    small, large = python_calls(hosts(500)), python_calls(hosts(1000))
    assert large < 2.5 * small, (small, large)  # comparing every pair: 4x
