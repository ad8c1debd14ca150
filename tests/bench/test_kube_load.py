"""The load benchmark's Kubernetes mode at a tiny scale (bench/kube_load.py): the mesh in the real
API server, pilotfish and istiod each serving the same four sidecars (two of them agents), every
scenario changing the cluster through the API server, then the floor; the side-by-side table."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.scenarios import SCOPED
from bench.xds_load import kube_benchmark, kube_summary, parse_args, report
from tests.support.cluster import Cluster

PUSHES = ("dr-change", "endpoint-add", "service-entry-add", "service-delete", "sidecar-add", *SCOPED)


async def test_pilotfish_and_istiod_serve_the_same_sidecars_the_same_resources(kube: Cluster, tmp_path: Path) -> None:
    args = parse_args(["--kube", "--services", "4", "--namespaces", "2", "--proxies", "4", "--agents", "2"])
    args.timeout = 30.0
    system = kube.namespace("bench-system")
    for n in range(args.namespaces):
        kube.track_namespace(f"ns-{n}")  # made by the mesh under its own name; deleted after
    runs: dict[str, Any] = await kube_benchmark(args, kube, system, tmp_path)

    pilotfish, istiod, floor = runs["pilotfish"], runs["istiod"], runs["floor"]
    for run in (pilotfish, istiod, floor):
        assert run["storm"]["completed"] == 4 and not run["storm"]["timed_out"], run["storm"]
        assert run["storm"]["streams_failed"] == 0
    # the same cluster state, so the same resources of every type (NDS: the agents')
    assert _resources(pilotfish["storm"]) == _resources(istiod["storm"])
    assert _resources(pilotfish["storm"])["nds"] == 2
    for run in (pilotfish, istiod):
        for name in PUSHES:
            push = run[name]
            assert not push["timed_out"] and push["expected_received"] == push["expected_proxies"] > 0, (name, push)
        assert run["churn"]["received"]["proxies_received"] == 1  # every 10th of 4: the first
        # scoped by the per-namespace Sidecars: the other namespace hears nothing of ns-0's rule
        # or of its new endpoint; ns-0's sidecars get the endpoint as an assignment only
        for name in SCOPED:
            assert run[name]["namespace"]["proxies_received"] == 2
            assert run[name]["other_namespaces"]["proxies_received"] == 0
            assert run[name]["other_namespaces"]["bytes_total"] == 0
        sent = run["sidecar-endpoint-add"]["namespace"]["per_type"]
        assert sent["eds"]["bytes"] > 0 and sent["cds"]["bytes"] == sent["lds"]["bytes"] == 0
        assert run["server_total"]["cpu_s"] > 0 and run["server_total"]["peak_rss_mb"] > 0
    # a Service deleted: every sidecar drops the same clusters from either
    dropped = [run["service-delete"]["received"]["per_type"]["cds"]["removed"] for run in (pilotfish, istiod)]
    assert dropped[0] == dropped[1] >= 4 * 2, dropped  # its two ports' clusters, at least
    # the cluster was reset between the two: istiod started on what pilotfish started on
    assert istiod["dr-change"]["received"]["proxies_received"] == 4
    rows = {(r["scenario"], r["figure"]): r for r in runs["table"]}
    storm = rows[("storm", "seconds")]
    assert storm["pilotfish/istiod"] == round(storm["pilotfish"] / storm["istiod"], 2)
    assert storm["pilotfish/floor"] is not None
    assert rows[("server_total", "peak_rss_mb")]["istiod"] == istiod["server_total"]["peak_rss_mb"]
    assert rows[("start", "ready_s")]["floor"] is None
    # the floor replays the Sidecars and the scoped changes: each scoped figure has its ratio
    for name in SCOPED:
        assert floor[name]["other_namespaces"]["bytes_total"] == 0
        row = rows[(name, "namespace.p99_s")]
        assert row["floor"] == floor[name]["namespace"]["p99_s"] and row["pilotfish/floor"] is not None
        assert row["pilotfish/istiod"] is not None
    assert rows[("sidecar-add", "envoys.p99_s")]["pilotfish/floor"] is not None
    headline = kube_summary(report(args, runs, 0.0)).split("every figure")[0]
    assert "sidecar-endpoint-add" in headline and "other_namespaces.bytes_total" in headline


def _resources(storm: Mapping[str, Any]) -> dict[str, int]:
    return {t: row["resources"] for t, row in storm["received"]["per_type"].items()}
