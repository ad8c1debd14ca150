"""The load benchmark's config-dir mode at a tiny scale (bench/xds_load.py): the full mesh, the
Sidecar-scoped mesh and each one's floor, with the scoped changes reaching only their namespace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.scenarios import SCOPED
from bench.xds_load import benchmark, parse_args, report, summary


async def test_the_sidecar_scoped_mesh_has_its_own_floor_and_scoped_changes(tmp_path: Path) -> None:
    scenarios = ",".join(("storm", *SCOPED))
    args = parse_args(["--services", "4", "--namespaces", "2", "--proxies", "4", "--scenarios", scenarios])
    args.timeout = 30.0
    runs: dict[str, Any] = await benchmark(args, tmp_path)

    scoped, floor = runs["pilotfish_sidecars"], runs["floor_sidecars"]
    for run in (scoped, floor):
        assert run["storm"]["completed"] == 4 and not run["storm"]["timed_out"], run["storm"]
    for name in SCOPED:
        for run in (scoped, floor):
            push = run[name]
            assert not push["timed_out"] and push["expected_received"] == push["expected_proxies"] == 2, (name, push)
            # ns-0's two sidecars get svc-0's change; ns-1's, whose Sidecar does not import ns-0, nothing
            assert push["namespace"]["proxies_received"] == 2 and push["namespace"]["bytes_total"] > 0
            assert push["other_namespaces"]["proxies_received"] == 0
            assert push["other_namespaces"]["bytes_total"] == 0
        assert runs["ratio_to_floor_sidecars"][name]["p99_s"] > 0
    # an endpoint added: its assignments only
    sent = scoped["sidecar-endpoint-add"]["namespace"]["per_type"]
    assert sent["eds"]["bytes"] > 0 and sent["cds"]["bytes"] == sent["lds"]["bytes"] == sent["rds"]["bytes"] == 0
    assert runs["ratio_to_floor_sidecars"]["storm"]["seconds"] > 0
    # the full mesh ran its storm against its own floor; the scoped pushes are not its
    assert set(runs["ratio_to_floor"]) == {"storm"}

    text = summary(report(args, runs, 0.0))
    line = next(row for row in text.splitlines() if "sidecar-endpoint-add" in row)
    assert "other namespaces: 0/2 received, 0 B" in line
    assert f"| floor p99 {floor['sidecar-endpoint-add']['namespace']['p99_s']} s, " in line
