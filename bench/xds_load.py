"""Benchmark: what pushes cost at scale, measured from outside the server, against a transport floor.

pilotfish runs as ``python -m app.cli serve`` (a child process) on a generated mesh (bench/mesh.py;
mesh-1k by default: 1,000 services in 50 namespaces, 100 DestinationRules and VirtualServices),
and 2,000 simulated Envoy sidecars in this process (bench/envoy.py, app/xds/client.py) each
hold one ADS stream, Delta or SotW, on its own HTTP/2 connection, speaking as Envoy does. The
same sidecars are then run against the transport floor (bench/floor_server.py): a trivial server
that sends the bytes pilotfish sent, pre-serialized, so every pilotfish figure is also a ratio.

Runs, in order:
1. pilotfish on the mesh: ``storm`` (connect storm), then ``dr-change`` (one DestinationRule's
   maxConnections), ``endpoint-add`` (a Pod and its endpoint added to one service), ``churn``
   (10 % of the sidecars reconnect presenting what they hold), ``service-entry-add``,
   ``service-delete`` (a Service and its pods removed: every proxy drops its clusters, listener
   and route, and Envoy its endpoint names). One sidecar per namespace records
   the bytes it received, for the floor.
2. pilotfish on the same mesh plus one Sidecar per namespace (egress ``./*``, ``istio-system/*``):
   ``storm`` then the scoped changes ``sidecar-dr-change`` (the DestinationRule change again) and
   ``sidecar-endpoint-add`` (an endpoint added to the same service): its namespace's sidecars
   should get them, the other namespaces' nothing. Recorded for a floor of its own.
3. the floor of 1: ``storm``, and ``dr-change`` / ``endpoint-add`` replayed (when they ran in 1);
   ``ratio_to_floor`` in the report.
4. the floor of 2 (when it ran): ``storm`` and the scoped changes replayed;
   ``ratio_to_floor_sidecars`` (a scoped change's ratios are its namespace's sidecars').
A connect storm that does not complete within ``--timeout`` skips the rest of that server's
scenarios (they would measure the storm's backlog instead). The storm always runs.

One client process, one channel per sidecar: 2,000 grpc.aio channels in one process connect in
~1.5 s, so several processes are not needed. The client is not free, though: decoding and ACKing
costs it ~8 ms of Python per sidecar at mesh-1k plus grpc's receive path, ~170 MB/s of xDS in
all on this 2-core machine. Against the floor at full scale the client is the bottleneck (its CPU
about equals the wall time): storm ratios there are lower bounds, the server CPU ratio is the
sharper figure. While the floor sends faster than the client decodes, arrived responses wait in
the client: at mesh-1k with 2,000 sidecars it peaks at ~11-13 GB RSS (``load_client`` in the
report). Ratios are left out for a scenario that timed out on either side.

``--kube`` (bench/kube_load.py) puts the mesh in a real API server instead (etcd, kube-apiserver,
kube-controller-manager from .peers/bin; the endpointslice controller makes the slices) and runs
pilotfish (``serve --kubeconfig``) and then istiod (``pilot-discovery discovery``) on it, each
driven by the same sidecars sending pilot-agent's node metadata, then the floor; the changes go
through the API server (and the scoped changes are preceded by ``sidecar-add``, the Sidecars
applied in the same run; the floor replays all three); the report adds a table of every figure as
pilotfish / istiod and pilotfish / floor (to bench/results/xds_load-<protocol>-kube.json by
default), and the summary its headline rows first. ``--repeat N`` runs pilotfish and istiod N
times each, alternated on the same cluster, and reports every figure as its median (each run's
in ``runs.repeats``): one run's figures vary by up to ±20 % on this machine.

Figures (times in seconds from the change, nothing subtracted), server CPU (utime + stime from
/proc, of the server process and its live descendants: pilotfish's config and informer workers,
a floor's other processes) per scenario and in total, the server's peak RSS (VmHWM), this process's CPU, go to
bench/results/xds_load-<protocol>.json (``--out``) with the machine, the parameters and the
server's git commit; a summary is printed, each figure with its floor's and the ratio. On a
shared 2-core machine figures vary from run to run (the load average at the start is in the
report). Usage:
    python -m bench.xds_load [--protocol delta|sotw] [--services 1000] [--namespaces 50]
        [--proxies 2000] [--agents N] [--scenarios storm,dr-change,...] [--timeout 180] [--server-root DIR]
        [--kube [--repeat N]] [--floor-processes N]
    # developing: --services 200 --namespaces 10 --proxies 200 (well under a minute)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import grpc
import uvloop

from bench.envoy import SimulatedEnvoy
from bench.figures import median_figures, ratios
from bench.fleet import Fleet
from bench.floor_server import CONTROL_METHOD
from bench.kube_load import control_plane_run, format_table, headline, istiod_server, pilotfish_server, table
from bench.kube_mesh import KubeMesh
from bench.mesh import CHANGED_SERVICE, DELETED_SERVICE, NAMESPACES, SERVICES, Mesh, MeshSpec, sidecars
from bench.processes import (
    BENCH_ROOT,
    checkout,
    istiod_env,
    log_warnings,
    otlp_env,
    pilot_env,
    start_floor,
    start_otlp_sink,
    start_pilotfish,
    stop_otlp_sink,
)
from bench.profile import Profiler
from bench.recording import Recorder, Recording
from bench.scenarios import SCOPED, Run, Trigger, churn, connect_storm, namespace_groups, push, storm_then
from tests.support.cluster import Cluster, running_cluster

SCENARIOS = ("storm", "dr-change", "endpoint-add", "churn", "service-entry-add", "service-delete", *SCOPED)
FLOOR_PUSHES = ("dr-change", "endpoint-add")  # what the full mesh's floor replays
KUBE_FLOOR_PUSHES = (*FLOOR_PUSHES, "sidecar-add", *SCOPED)  # the Sidecars come in the same run there
Figures = dict[str, object]


async def pilotfish_run(args: argparse.Namespace, spec: MeshSpec, recording: Recording, work: Path) -> Figures:
    """Start pilotfish on ``spec``'s mesh, connect the fleet, run the scenarios asked for; what one
    sidecar per namespace received goes into ``recording``, for the floor."""
    mesh = Mesh(spec, work / "config")
    mesh.write()
    log = work / "pilotfish.log"
    sink = start_otlp_sink() if args.tracing else None
    tracing_env = {} if sink is None else otlp_env(sink)
    server = await asyncio.to_thread(start_pilotfish, args.server_root, mesh.root, log, tracing_env)
    figures: Figures = {}
    try:
        recorder = Recorder(recording)
        identities = sidecars(spec, args.proxies, args.agents)
        async with Fleet(identities, args.protocol, server.xds_address, recorder) as fleet:
            run = Run(fleet, server, args.timeout, recorder, _profiler(args, work.name))
            figures.update(
                await storm_then(run, _pilotfish_scenarios(run, mesh, spec), lambda name: name in args.scenarios)
            )
        figures["server_total"] = {"cpu_s": round(server.cpu_seconds(), 2), "peak_rss_mb": round(server.peak_rss_mb())}
    finally:
        server.stop()
        if sink is not None:
            figures["otlp_received"] = stop_otlp_sink(sink)
    figures["server_log"] = log_warnings(log)
    return figures


def _pilotfish_scenarios(run: Run, mesh: Mesh, spec: MeshSpec) -> dict[str, Callable[[], Awaitable[Figures]]]:
    envoys = run.fleet.envoys

    async def change_rule() -> float:
        return mesh.change_destination_rule(CHANGED_SERVICE)

    async def add_endpoint() -> float:
        return mesh.add_endpoint(CHANGED_SERVICE)

    async def add_service_entry() -> float:
        return mesh.add_service_entry()

    async def delete_service() -> float:
        return mesh.delete_service(DELETED_SERVICE)

    # agents (NDS beside the Envoy types) and Envoy-only proxies, reported apart
    kinds = {"agents": [e for e in envoys if e.identity.agent], "envoys": [e for e in envoys if not e.identity.agent]}
    by_kind = {name: members for name, members in kinds.items() if members}

    if spec.sidecars:
        scoped = namespace_groups(envoys, spec.namespace_of(CHANGED_SERVICE))
        return {
            "sidecar-dr-change": lambda: push(run, "sidecar-dr-change", change_rule, scoped["namespace"], scoped),
            "sidecar-endpoint-add": lambda: push(
                run, "sidecar-endpoint-add", add_endpoint, scoped["namespace"], scoped
            ),
        }
    return {
        "dr-change": lambda: push(run, "dr-change", change_rule, envoys),
        "endpoint-add": lambda: push(run, "endpoint-add", add_endpoint, envoys),
        "churn": lambda: churn(run),
        "service-entry-add": lambda: push(run, "service-entry-add", add_service_entry, envoys, by_kind),
        "service-delete": lambda: push(run, "service-delete", delete_service, envoys),
    }


async def floor_run(
    args: argparse.Namespace, spec: MeshSpec, recording: Recording, work: Path, pushes: Sequence[str]
) -> Figures:
    """The same fleet against the floor server replaying ``recording``: the storm, then each of
    ``pushes`` that was recorded, in that order."""
    work.mkdir(parents=True)
    path = work / "recording.pickle"
    recording.save(path)
    log = work / "floor.log"
    server = await asyncio.to_thread(start_floor, path, log, args.floor_processes)
    figures: Figures = {"namespaces_recorded": len(recording.initial)}
    try:
        async with (
            grpc.aio.insecure_channel(server.xds_address) as control,
            Fleet(sidecars(spec, args.proxies), args.protocol, server.xds_address, None) as fleet,
        ):
            run = Run(fleet, server, args.timeout)
            figures["storm"] = await connect_storm(run)
            for name in pushes:
                if name in recording.pushes:
                    expected = [e for e in fleet.envoys if recording.push_for(name, e.identity.namespace)]
                    groups = _floor_groups(name, fleet.envoys, spec)
                    figures[name] = await push(run, name, _floor_trigger(control, name), expected, groups)
        figures["server_total"] = {"cpu_s": round(server.cpu_seconds(), 2), "peak_rss_mb": round(server.peak_rss_mb())}
    finally:
        server.stop()
    figures["server_log"] = log_warnings(log)
    return figures


def _floor_groups(
    scenario: str, envoys: Sequence[SimulatedEnvoy], spec: MeshSpec
) -> dict[str, list[SimulatedEnvoy]] | None:
    """The groups pilotfish reported ``scenario``'s figures in, so that each has a floor figure:
    a scoped push's namespace and other namespaces; ``sidecar-add``'s Envoy-only proxies (all the
    floor's); else every sidecar as "received"."""
    if scenario in SCOPED:
        return namespace_groups(envoys, spec.namespace_of(CHANGED_SERVICE))
    if scenario == "sidecar-add":
        return {"envoys": list(envoys)}
    return None


def _floor_trigger(control: grpc.aio.Channel, scenario: str) -> Trigger:
    push_rpc = control.unary_unary(CONTROL_METHOD)

    async def trigger() -> float:
        t0 = time.monotonic()
        await push_rpc(scenario.encode())
        return t0

    return trigger


async def kube_benchmark(args: argparse.Namespace, kube: Cluster, system: str, work: Path) -> Figures:
    """The Kubernetes mode (bench/kube_load.py): the mesh into ``kube`` (root namespace
    ``system``), pilotfish then istiod reading it, then the floor; every figure side by side."""
    spec = MeshSpec(args.services, args.namespaces)
    mesh = KubeMesh(spec, kube, system)
    runs: Figures = {"cluster_load_s": await asyncio.to_thread(mesh.load)}
    recording = Recording(args.protocol)
    repeats: list[dict[str, Figures]] = []
    for n in range(args.repeat):  # alternated, so a slow spell of the machine falls on both
        repeat: dict[str, Figures] = {}
        with pilotfish_server(args.server_root, mesh, work / f"pilotfish{n}") as server:
            profiler = _profiler(args, f"pilotfish{n}")
            repeat["pilotfish"] = await control_plane_run(args, mesh, server, recording if n == 0 else None, profiler)
        await asyncio.to_thread(mesh.reset)
        with istiod_server(mesh, work / f"istiod{n}") as server:
            repeat["istiod"] = await control_plane_run(args, mesh, server, None)
        await asyncio.to_thread(mesh.reset)
        repeats.append(repeat)
    for name in ("pilotfish", "istiod"):
        runs[name] = median_figures([repeat[name] for repeat in repeats]) if args.repeat > 1 else repeats[0][name]
    if args.repeat > 1:
        runs["repeats"] = repeats
    if recording.initial:
        runs["floor"] = await floor_run(args, spec, recording, work / "floor", KUBE_FLOOR_PUSHES)
    runs["table"] = table(runs)
    return runs


async def benchmark(args: argparse.Namespace, work: Path) -> Figures:
    """The config-dir mode: the full mesh (``pilotfish``), the Sidecar-scoped one when a scoped
    scenario is asked (``pilotfish_sidecars``), then each one's floor (``floor``,
    ``floor_sidecars``) and the ratios to it (``ratio_to_floor``, ``ratio_to_floor_sidecars``)."""
    spec = MeshSpec(args.services, args.namespaces)
    sidecar_spec = replace(spec, sidecars=True)
    meshes = [("", spec, Recording(args.protocol), FLOOR_PUSHES)]
    if any(name in args.scenarios for name in SCOPED):
        meshes.append(("_sidecars", sidecar_spec, Recording(args.protocol), SCOPED))
    runs: Figures = {}
    for suffix, mesh_spec, recording, _ in meshes:
        runs[f"pilotfish{suffix}"] = await pilotfish_run(args, mesh_spec, recording, work / f"pilotfish{suffix}")
    for suffix, mesh_spec, recording, pushes in meshes:
        if recording.initial:
            floor = await floor_run(args, mesh_spec, recording, work / f"floor{suffix}", pushes)
            runs[f"floor{suffix}"] = floor
            runs[f"ratio_to_floor{suffix}"] = floor_ratios(_mapping(runs[f"pilotfish{suffix}"]), floor)
    return runs


def floor_ratios(measured: Mapping[str, object], floor: Mapping[str, object]) -> dict[str, dict[str, float]]:
    """Per scenario both ran, pilotfish / floor of its timings; a scoped push's are its
    namespace's sidecars' (the other namespaces are expected to receive nothing)."""
    return {
        name: ratios(_mapping(measured[name]), _mapping(floor[name]), "namespace" if name in SCOPED else "received")
        for name in ("storm", *FLOOR_PUSHES, *SCOPED)
        if name in measured and name in floor
    }


def _profiler(args: argparse.Namespace, label: str) -> Profiler | None:
    """py-spy on a pilotfish run's scenarios, with ``--profile``."""
    return Profiler(args.profile, label) if args.profile is not None else None


def _mapping(value: object) -> Mapping[str, object]:
    assert isinstance(value, Mapping)
    return value


def report(args: argparse.Namespace, runs: Figures, loadavg: float) -> Figures:
    return {
        "benchmark": "xds_load",
        "machine": {
            "platform": platform.platform(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_1m_at_start": round(loadavg, 2),
        },
        "load_client": {
            "processes": 1,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        },
        "pilotfish": checkout(args.server_root),
        "parameters": {
            "protocol": args.protocol,
            "services": args.services,
            "namespaces": args.namespaces,
            "proxies": args.proxies,
            "agents": args.agents,
            "tracing": args.tracing,
            "kube": args.kube,
            "floor_processes": args.floor_processes,
            "scenarios": list(args.scenarios),
            "timeout_s": args.timeout,
            "repeat": args.repeat,
            "server_env": pilot_env(),
            **({"istiod_env": istiod_env()} if args.kube else {}),
        },
        "runs": runs,
    }


def summary(result: Figures) -> str:
    params, runs = _mapping(result["parameters"]), _mapping(result["runs"])
    lines = [
        f"xds_load {params['protocol']}: {params['services']} services, {params['namespaces']} namespaces, "
        f"{params['proxies']} proxies; pilotfish {str(_mapping(result['pilotfish'])['commit'])[:10]}",
    ]
    for suffix, run_name in (("", "pilotfish"), ("_sidecars", "sidecars")):
        run = _mapping(runs.get(f"pilotfish{suffix}", {}))
        floor = _mapping(runs.get(f"floor{suffix}", {}))
        to_floor = _mapping(runs.get(f"ratio_to_floor{suffix}", {}))
        for name, value in run.items():
            if isinstance(value, Mapping) and name not in ("server_total", "server_log", "otlp_received"):
                text = _line(value) + _floor_note(name, _mapping(floor.get(name, {})), _mapping(to_floor.get(name, {})))
                lines.append(f"  {run_name:9} {name:20} {text}")
        if "skipped" in run:
            lines.append(f"  {run_name:9} {run['skipped']}")
        if "otlp_received" in run:
            lines.append(f"  {run_name:9} OTLP sink received {run['otlp_received']}")
    return "\n".join(lines)


def kube_summary(result: Figures) -> str:
    params, runs = _mapping(result["parameters"]), _mapping(result["runs"])
    head = (
        f"xds_load --kube {params['protocol']}: {params['services']} services, {params['namespaces']} namespaces, "
        f"{params['proxies']} proxies ({params['agents']} agents); "
        f"pilotfish {str(_mapping(result['pilotfish'])['commit'])[:10]}"
    )
    notes = [
        f"  {run}: {_mapping(runs[run])['skipped']}"
        for run in ("pilotfish", "istiod")
        if "skipped" in _mapping(runs.get(run, {}))
    ]
    rows = runs["table"]
    assert isinstance(rows, list)
    return "\n".join(
        [
            head,
            f"  cluster load (s): {runs['cluster_load_s']}",
            *notes,
            "  headline (a scoped change: its namespace's sidecars, and what the others received)",
            format_table(headline(rows)),
            "  every figure",
            format_table(rows),
        ]
    )


def _line(figures: Mapping[str, object]) -> str:
    got = _mapping(figures.get("received", {}))
    if "completed" in figures:
        done = "timed out" if figures["timed_out"] else f"all in {figures['seconds']} s"
        text = f"{figures['completed']}/{figures['proxies']} complete, {done}"
        text += f" (p50 {figures['p50_s']}, p99 {figures['p99_s']}), {figures['streams_failed']} streams failed"
    else:
        group = got or _mapping(figures.get("namespace", figures.get("envoys", figures.get("agents", {}))))
        text = f"{group.get('proxies_received')} received, p50 {group.get('p50_s')} p99 {group.get('p99_s')}"
        text += f" max {group.get('max_s')} s, {group.get('bytes_per_proxy_received')} B/proxy"
        if "agents" in figures and "envoys" in figures:
            agents = _mapping(figures["agents"])
            nds = _mapping(_mapping(agents["per_type"]).get("nds", {})).get("bytes", 0)
            text += f"; agents: {agents['proxies_received']} received, p99 {agents['p99_s']} s,"
            text += f" {agents['bytes_per_proxy_received']} B/proxy ({nds} B NDS in all)"
        if "other_namespaces" in figures:
            others = _mapping(figures["other_namespaces"])
            text += f"; other namespaces: {others['proxies_received']}/{others['proxies']} received,"
            text += f" {others['bytes_total']} B"
    return text + f"; server CPU {figures['server_cpu_s']} s"


def _floor_note(name: str, floor: Mapping[str, object], to_floor: Mapping[str, object]) -> str:
    """`` | floor <its figure>, <pilotfish / floor>x``: the storm's time to the last sidecar
    complete, a push's p99 (a scoped push's: its namespace's sidecars)."""
    if not floor:
        return ""
    if "completed" in floor:
        key, text = "seconds", "timed out" if floor["timed_out"] else f"all in {floor['seconds']} s"
    else:
        group = _mapping(floor.get("namespace" if name in SCOPED else "received", {}))
        key, text = "p99_s", f"p99 {group.get('p99_s')} s"
    ratio = to_floor.get(key)
    return f" | floor {text}, " + ("no ratio" if ratio is None else f"{ratio}x")


def _scenarios(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown scenarios {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--protocol", choices=("delta", "sotw"), default="delta")
    parser.add_argument("--services", type=int, default=SERVICES)
    parser.add_argument("--namespaces", type=int, default=NAMESPACES)
    parser.add_argument("--proxies", type=int, default=2000)
    parser.add_argument(
        "--agents", type=int, default=0, help="how many of the proxies connect as node agents (NDS too; not the floor)"
    )
    parser.add_argument("--scenarios", type=_scenarios, default=SCENARIOS, help=",".join(SCENARIOS))
    parser.add_argument(
        "--floor-processes", type=int, default=1, help="processes the floor serves from (one port, SO_REUSEPORT)"
    )
    parser.add_argument(
        "--tracing", action="store_true", help="pilotfish exports push traces over OTLP/gRPC to a local receiver"
    )
    parser.add_argument(
        "--kube",
        action="store_true",
        help="the mesh in a real API server; pilotfish (serve --kubeconfig) and istiod side by side (bench/kube_load)",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="--kube: run pilotfish and istiod N times, alternated; medians reported"
    )
    parser.add_argument(
        "--profile", type=Path, help="py-spy on pilotfish in each scenario, recorded in this directory (bench/profile)"
    )
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per scenario (default 180)")
    parser.add_argument("--server-root", type=Path, default=BENCH_ROOT, help="the pilotfish checkout to run")
    parser.add_argument("--out", type=Path, help="default bench/results/xds_load-<protocol>[-kube].json")
    args = parser.parse_args(argv)
    args.server_root = args.server_root.resolve()
    if args.kube and args.tracing:
        parser.error("--tracing is for the config-dir mode")
    if args.repeat < 1 or (args.repeat > 1 and not args.kube):
        parser.error("--repeat is a positive count, for --kube")
    return args


async def _kube_main(args: argparse.Namespace, work: Path) -> Figures:
    with running_cluster(work / "cluster") as kube:
        return await kube_benchmark(args, kube, "istio-system", work)


def main() -> None:
    args = parse_args()
    mode = "-kube" if args.kube else ""
    out = args.out or BENCH_ROOT / "bench" / "results" / f"xds_load-{args.protocol}{mode}.json"
    loadavg = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="xds_load-"))
    try:
        runs = uvloop.run(_kube_main(args, work) if args.kube else benchmark(args, work))
    except BaseException:
        print(f"xds_load failed; server logs and config are in {work}", file=sys.stderr)
        raise
    shutil.rmtree(work)
    result = report(args, runs, loadavg)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(kube_summary(result) if args.kube else summary(result))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
