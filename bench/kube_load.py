"""The load benchmark's Kubernetes mode (``python -m bench.xds_load --kube``): pilotfish and istiod
side by side on one mesh in a real API server, driven by the same simulated sidecars.

bench/xds_load.py starts the cluster (tests/support/cluster.py: etcd, kube-apiserver,
kube-controller-manager for the EndpointSlices, Istio's CRDs) and loads the mesh
(bench/kube_mesh.py); then each control plane in turn reads that API server and serves the fleet:
pilotfish (``serve --kubeconfig``, so it pays the same ingestion as istiod), then istiod
(``pilot-discovery discovery``, tests/differential/istiod.py, its plaintext ADS port), the cluster
reset to the loaded state between them; then the transport floor replays what pilotfish sent.

The sidecars send the node metadata pilot-agent sends (ISTIO_VERSION of the pinned istio, the
pod's name, service account, owner, ...), so istiod treats them as real sidecars; the scenarios
change the cluster through the API server: ``storm``, ``dr-change`` (a DestinationRule's
maxConnections), ``endpoint-add`` (a new pod made Ready: the endpointslice controller adds it),
``churn`` (10 % reconnect), ``service-entry-add``, ``service-delete`` (a Service deleted), and,
when a scoped scenario is asked, ``sidecar-add`` (one Sidecar per namespace applied: every proxy's
scope shrinks) then the scoped
ones: ``sidecar-dr-change`` (the DestinationRule change again) and ``sidecar-endpoint-add`` (one
more Ready pod of the same service), where its namespace's sidecars should get the change and the
other namespaces' nothing. The floor replays ``sidecar-add`` and the scoped pushes too.

``table()`` puts every figure of the three runs side by side, with pilotfish / istiod and
pilotfish / floor.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.figures import COMPARED
from bench.fleet import Fleet
from bench.kube_mesh import KubeMesh
from bench.mesh import CHANGED_SERVICE, DELETED_SERVICE, sidecars
from bench.processes import ServerProcess, istiod_env, log_warnings, start_pilotfish
from bench.profile import Profiler
from bench.recording import Recorder, Recording
from bench.scenarios import SCOPED, Run, churn, namespace_groups, push, storm_then
from tests.differential.istiod import running_istiod
from tests.e2e.istio_proxy import istio_version

Figures = dict[str, object]


@dataclass(frozen=True)
class Started:
    """A control plane ready to serve, and what reaching that took: start to ready (its informers
    synced: the ingestion of the whole mesh), and its CPU seconds by then."""

    server: ServerProcess
    ready_s: float
    cpu_at_ready_s: float

    @classmethod
    def now(cls, server: ServerProcess, began: float) -> Started:
        return cls(server, round(time.monotonic() - began, 2), round(server.cpu_seconds(), 2))


@contextmanager
def pilotfish_server(server_root: Path, mesh: KubeMesh, work: Path) -> Iterator[Started]:
    work.mkdir(parents=True, exist_ok=True)
    kube = (mesh.kube.admin_kubeconfig, mesh.system)
    server = start_pilotfish(server_root, None, work / "pilotfish.log", kube=kube)
    try:
        yield Started.now(server, server.started)
    finally:
        server.stop()


@contextmanager
def istiod_server(mesh: KubeMesh, work: Path) -> Iterator[Started]:
    began = time.monotonic()
    with running_istiod(mesh.kube, mesh.system, work, istiod_env()) as istiod:
        server = ServerProcess(istiod.process.popen, istiod.xds_address, istiod.process.log_path)
        yield Started.now(server, began)


async def control_plane_run(
    args: argparse.Namespace,
    mesh: KubeMesh,
    started: Started,
    recording: Recording | None,
    profiler: Profiler | None = None,
) -> Figures:
    """The fleet against a ready server reading ``mesh``'s cluster: the storm, then the scenarios
    asked for, each change made through the API server; ``profiler`` records the server in each."""
    server = started.server
    figures: Figures = {"start": {"ready_s": started.ready_s, "cpu_s": started.cpu_at_ready_s}}
    recorder = Recorder(recording) if recording is not None else None
    identities = sidecars(mesh.spec, args.proxies, args.agents, istio_version())
    async with Fleet(identities, args.protocol, server.xds_address, recorder) as fleet:
        run = Run(fleet, server, args.timeout, recorder, profiler)
        scoped = any(n in args.scenarios for n in SCOPED)
        figures.update(
            await storm_then(
                run, _scenarios(run, mesh), lambda name: name in args.scenarios or (name == "sidecar-add" and scoped)
            )
        )
    figures["server_total"] = {"cpu_s": round(server.cpu_seconds(), 2), "peak_rss_mb": round(server.peak_rss_mb())}
    figures["server_log"] = log_warnings(server.log)
    return figures


def _scenarios(run: Run, mesh: KubeMesh) -> dict[str, Callable[[], Awaitable[Figures]]]:
    envoys = run.fleet.envoys
    scoped = namespace_groups(envoys, mesh.spec.namespace_of(CHANGED_SERVICE))
    kinds = {"agents": [e for e in envoys if e.identity.agent], "envoys": [e for e in envoys if not e.identity.agent]}
    by_kind = {name: members for name, members in kinds.items() if members}

    def api(change: Callable[[], float]) -> Callable[[], Awaitable[float]]:
        """The change in a thread: the API requests do not hold up the sidecars' loop."""
        return lambda: asyncio.to_thread(change)

    change_rule = api(lambda: mesh.change_destination_rule(CHANGED_SERVICE))
    add_endpoint = api(lambda: mesh.add_endpoint(CHANGED_SERVICE))
    delete_service = api(lambda: mesh.delete_service(DELETED_SERVICE))
    return {
        "dr-change": lambda: push(run, "dr-change", change_rule, envoys),
        "endpoint-add": lambda: push(run, "endpoint-add", add_endpoint, envoys),
        "churn": lambda: churn(run),
        "service-entry-add": lambda: push(run, "service-entry-add", api(mesh.add_service_entry), envoys, by_kind),
        "service-delete": lambda: push(run, "service-delete", delete_service, envoys),
        "sidecar-add": lambda: push(run, "sidecar-add", api(mesh.add_sidecars), envoys, by_kind),
        "sidecar-dr-change": lambda: push(run, "sidecar-dr-change", change_rule, scoped["namespace"], scoped),
        "sidecar-endpoint-add": lambda: push(run, "sidecar-endpoint-add", add_endpoint, scoped["namespace"], scoped),
    }


# --- the side-by-side table ------------------------------------------------------------------------

RUNS = ("pilotfish", "istiod", "floor")
_NOT_SCENARIOS = ("server_log", "skipped")


def table(runs: Mapping[str, object]) -> list[dict[str, object]]:
    """One row per figure of pilotfish's run: scenario, figure (``group.key`` one level down),
    each run's value (None where it has none) and pilotfish / istiod, pilotfish / floor."""
    pilot = _mapping(runs.get("pilotfish"))
    rows: list[dict[str, object]] = []
    for scenario, figures in pilot.items():
        if scenario in _NOT_SCENARIOS or not isinstance(figures, Mapping):
            continue
        for figure in _figures(figures):
            values = {run: _lookup(_mapping(_mapping(runs.get(run)).get(scenario)), figure) for run in RUNS}
            timed_out = {run: bool(_mapping(_mapping(runs.get(run)).get(scenario)).get("timed_out")) for run in RUNS}
            row: dict[str, object] = {"scenario": scenario, "figure": figure, **values}
            for other in ("istiod", "floor"):
                mine, base = values["pilotfish"], values[other]
                usable = not timed_out["pilotfish"] and not timed_out[other]
                ok = usable and isinstance(mine, int | float) and isinstance(base, int | float) and base > 0
                row[f"pilotfish/{other}"] = round(float(mine) / float(base), 2) if ok else None  # type: ignore[arg-type]
            rows.append(row)
    return rows


# the rows that say how a scenario went: the storm's time to the last sidecar complete, each
# push's p99 (a scoped push's for its namespace's sidecars; per proxy kind where agents are
# apart), what a scoped push sent to the other namespaces (nothing, if scoping works), the
# start and the totals
HEADLINE = (
    "seconds",
    "received.p99_s",
    "envoys.p99_s",
    "agents.p99_s",
    "namespace.p99_s",
    "other_namespaces.bytes_total",
    "ready_s",
    "cpu_s",
    "peak_rss_mb",
)


def headline(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """``table()``'s rows that the summary shows first."""
    return [row for row in rows if row["figure"] in HEADLINE]


def _figures(figures: Mapping[str, object]) -> list[str]:
    out = [key for key in COMPARED if isinstance(figures.get(key), int | float)]
    for group, value in figures.items():
        if isinstance(value, Mapping):
            out += [f"{group}.{key}" for key in COMPARED if isinstance(value.get(key), int | float)]
    return out


def _lookup(figures: Mapping[str, object], figure: str) -> object:
    value: object = figures
    for part in figure.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def format_table(rows: list[dict[str, object]]) -> str:
    header = f"  {'scenario':20} {'figure':34} {'pilotfish':>10} {'istiod':>10} {'floor':>10}"
    header += f" {'pf/istiod':>9} {'pf/floor':>9}"
    lines = [header]
    for row in rows:
        cells = [_cell(row[run]) for run in RUNS] + [_cell(row["pilotfish/istiod"]), _cell(row["pilotfish/floor"])]
        lines.append(
            f"  {row['scenario']!s:20} {row['figure']!s:34} {cells[0]:>10} {cells[1]:>10} {cells[2]:>10}"
            f" {cells[3]:>9} {cells[4]:>9}"
        )
    return "\n".join(lines)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)
