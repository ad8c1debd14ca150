"""Start to ready, pilotfish beside istiod: the ``ready`` figure of bench.xds_load --kube, alone
and repeated, since one start is too short to compare once.

``python -m bench.start_cost [--services 200] [--namespaces 10] [--repeat 7] [--server-root DIR]``

A real API server (tests/support/cluster.py) holds bench/kube_mesh.py's mesh. pilotfish
(``serve --kubeconfig``, as bench/kube_load.py starts it, its bytecode compiled as an install's
is) and istiod (``pilot-discovery discovery``) start against it in turn, ``--repeat`` times
alternated. For each start: the seconds from the process's start to its ``/ready`` answering 200
(both: every informer has listed and the first push context is built) and its CPU seconds by then.
The medians go to bench/results/start-kube-<services>svc.json with every start's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
from pathlib import Path

from bench.kube_load import Started, istiod_server, pilotfish_server
from bench.kube_mesh import KubeMesh
from bench.mesh import MeshSpec
from bench.processes import BENCH_ROOT, checkout
from tests.support.cluster import running_cluster

SYSTEM = "istio-system"


def starts(args: argparse.Namespace, work: Path) -> dict[str, object]:
    with running_cluster(work / "cluster") as kube:
        mesh = KubeMesh(MeshSpec(args.services, args.namespaces), kube, SYSTEM)
        loaded = mesh.load()
        runs: dict[str, list[dict[str, float]]] = {"pilotfish": [], "istiod": []}
        for n in range(args.repeat):  # alternated, so a slow spell of the machine falls on both
            with pilotfish_server(args.server_root, mesh, work / f"pilotfish{n}") as started:
                runs["pilotfish"].append(_figures(started))
            mesh.reset()
            with istiod_server(mesh, work / f"istiod{n}") as started:
                runs["istiod"].append(_figures(started))
            mesh.reset()
    medians = {
        name: {key: round(statistics.median(run[key] for run in each), 3) for key in ("ready_s", "cpu_s")}
        for name, each in runs.items()
    }
    ratio = round(medians["pilotfish"]["ready_s"] / medians["istiod"]["ready_s"], 2)
    return {"cluster_load_s": loaded, "median": medians, "pilotfish/istiod_ready": ratio, "starts": runs}


def _figures(started: Started) -> dict[str, float]:
    return {"ready_s": started.ready_s, "cpu_s": started.cpu_at_ready_s}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--namespaces", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=7, help="starts of each, alternated (default 7)")
    parser.add_argument("--server-root", type=Path, default=BENCH_ROOT, help="the pilotfish checkout to run")
    parser.add_argument("--out", type=Path, help="default bench/results/start-kube-<services>svc.json")
    args = parser.parse_args()
    args.server_root = args.server_root.resolve()
    if args.repeat < 1:
        parser.error("--repeat is a positive count")
    return args


def main() -> None:
    args = parse_args()
    out = args.out or BENCH_ROOT / "bench" / "results" / f"start-kube-{args.services}svc.json"
    work = Path(tempfile.mkdtemp(prefix="start_cost-"))
    runs = starts(args, work)
    shutil.rmtree(work)
    result = {
        "benchmark": "start_cost",
        "machine": {"platform": platform.platform(), "cores": os.cpu_count(), "python": platform.python_version()},
        "pilotfish": checkout(args.server_root),
        "parameters": {"services": args.services, "namespaces": args.namespaces, "repeat": args.repeat},
        "runs": runs,
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(runs["median"]), "pilotfish/istiod", runs["pilotfish/istiod_ready"])
    print(f"written to {out}")


if __name__ == "__main__":
    main()
