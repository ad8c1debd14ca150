"""Soak: does pilotfish give back what reconnecting proxies used? Its RSS per round of churn.

pilotfish runs on a generated mesh (bench/mesh.py) with a fleet of simulated Envoy sidecars
(bench/fleet.py), as in bench/xds_load.py. After the connect storm, each round reconnects a
tenth of the sidecars at once (the same tenth, or with ``--rotate`` the next one, as pods roll),
presenting what they hold (the churn scenario of bench/scenarios.py), waits until the fleet is
quiet, then ``--pause`` seconds, and reads the server's RSS (VmRSS). Figures, not limits: the
report lists the RSS after the storm and after every round, the growth from the first round to
the last, and each round's churn figures.

``--probe`` runs the server under bench/heap_probe.py and probes it after the storm and after
each round (gc-tracked objects by type and what grew; ``--tracemalloc N`` also traces
allocations N frames deep, which slows the server severalfold; ``--sweep`` collects frozen
cycles before each probe; ``--trim`` reports the RSS after ``malloc_trim``). Usage:
    python -m bench.reconnect_soak [--services 200] [--namespaces 10] [--proxies 400]
        [--rounds 10] [--rotate] [--pause 5] [--probe [--tracemalloc 8] [--sweep] [--trim]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import uvloop

from bench.fleet import Fleet
from bench.mesh import Mesh, MeshSpec, sidecars
from bench.processes import BENCH_ROOT, ServerProcess, log_warnings, pilot_env, start_pilotfish
from bench.scenarios import Run, churn, connect_storm

PROBE_TIMEOUT = 600.0
Figures = dict[str, object]


async def soak(args: argparse.Namespace, work: Path) -> Figures:
    mesh = Mesh(MeshSpec(args.services, args.namespaces), work / "config")
    mesh.write()
    env: dict[str, str] = {}
    probes = work / "probes.jsonl"
    if args.probe:
        env["PILOTFISH_HEAP_PROBE"] = str(probes)
        env |= {"PILOTFISH_HEAP_PROBE_SWEEP": "1"} if args.sweep else {}
        env |= {"PILOTFISH_HEAP_PROBE_TRIM": "1"} if args.trim else {}
        env |= {"PYTHONTRACEMALLOC": str(args.tracemalloc)} if args.tracemalloc else {}
    log = work / "pilotfish.log"
    module = "bench.heap_probe" if args.probe else "app.cli"
    server = await asyncio.to_thread(start_pilotfish, args.server_root, mesh.root, log, env, module)
    figures: Figures = {"ready_rss_mb": round(server.rss_mb(), 1)}
    rounds: list[Figures] = []
    figures["rounds"] = rounds
    try:
        spec = MeshSpec(args.services, args.namespaces)
        async with Fleet(sidecars(spec, args.proxies), "delta", server.xds_address, None) as fleet:
            run = Run(fleet, server, args.timeout)
            storm = await connect_storm(run)
            figures["storm"] = {k: storm[k] for k in ("completed", "timed_out", "seconds", "server_cpu_s")}
            await asyncio.sleep(args.pause)
            figures["storm_rss_mb"] = round(server.rss_mb(), 1)
            if args.probe:
                figures["storm_probe"] = await _probe(server, probes)
            _print(f"storm: {figures['storm']}, RSS {figures['storm_rss_mb']} MiB")
            for number in range(1, args.rounds + 1):
                wave = await churn(run, number - 1 if args.rotate else 0, not args.same_connection)
                await asyncio.sleep(args.pause)
                row: Figures = {
                    "round": number,
                    "rss_mb": round(server.rss_mb(), 1),
                    "churned": wave["proxies_churned"],
                    "timed_out": wave["timed_out"],
                    "window_s": wave["window_s"],
                    "server_cpu_s": wave["server_cpu_s"],
                    "stream_errors": wave["stream_errors"],
                }
                if args.probe:
                    row["probe"] = await _probe(server, probes)
                rounds.append(row)
                _print(f"round {number}: RSS {row['rss_mb']} MiB, churn {wave['window_s']} s")
        figures["peak_rss_mb"] = round(server.peak_rss_mb())
    finally:
        server.stop()
    if rounds:
        first, last = rounds[0]["rss_mb"], rounds[-1]["rss_mb"]
        assert isinstance(first, float) and isinstance(last, float)
        figures["growth_first_to_last_round_mb"] = round(last - first, 1)
        figures["growth_storm_to_last_round_mb"] = round(last - float(str(figures["storm_rss_mb"])), 1)
    figures["server_log"] = log_warnings(log)
    return figures


async def _probe(server: ServerProcess, probes: Path) -> Figures:
    """Signal the heap probe and wait for its line."""
    before = _lines(probes)
    server.popen.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + PROBE_TIMEOUT
    while len(lines := _lines(probes)) <= len(before):
        server.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError("the heap probe did not answer")
        await asyncio.sleep(0.2)
    found: Figures = json.loads(lines[-1])
    return found


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _print(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--namespaces", type=int, default=10)
    parser.add_argument("--proxies", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--rotate", action="store_true", help="a different tenth each round (pods rolling), else the same tenth"
    )
    parser.add_argument(
        "--same-connection", action="store_true", help="a reconnect opens a new stream, not a new HTTP/2 connection"
    )
    parser.add_argument("--pause", type=float, default=5.0, help="seconds after a round settles before RSS is read")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per storm or round")
    parser.add_argument("--probe", action="store_true", help="run the server under bench/heap_probe.py")
    parser.add_argument("--tracemalloc", type=int, default=0, help="with --probe: trace allocations, N frames")
    parser.add_argument("--sweep", action="store_true", help="with --probe: collect frozen cycles first")
    parser.add_argument("--trim", action="store_true", help="with --probe: report RSS after malloc_trim")
    parser.add_argument("--server-root", type=Path, default=BENCH_ROOT, help="the pilotfish checkout to run")
    parser.add_argument("--out", type=Path, help="default bench/results/reconnect_soak.json")
    args = parser.parse_args()
    args.server_root = args.server_root.resolve()
    out = args.out or BENCH_ROOT / "bench" / "results" / "reconnect_soak.json"
    work = Path(tempfile.mkdtemp(prefix="reconnect_soak-"))
    try:
        figures = uvloop.run(soak(args, work))
    except BaseException:
        print(f"reconnect_soak failed; server log and config are in {work}", file=sys.stderr)
        raise
    shutil.rmtree(work)
    commit = subprocess.run(["git", "-C", str(args.server_root), "rev-parse", "HEAD"], capture_output=True, text=True)
    result = {
        "benchmark": "reconnect_soak",
        "machine": {"cores": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2)},
        "pilotfish": {"root": str(args.server_root), "commit": commit.stdout.strip()},
        "parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "server_env": pilot_env(),
        "figures": figures,
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    rss = [r["rss_mb"] for r in figures["rounds"]]  # type: ignore[attr-defined]
    print(f"reconnect_soak: RSS after storm {figures['storm_rss_mb']} MiB, per round {rss}; written to {out}")


if __name__ == "__main__":
    main()
