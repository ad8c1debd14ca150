"""Benchmark: wide config, one object or one host with many of something, in a small mesh.

Generation and the registry run on the event loop, so whatever one of them spends on a valid but
wide config is time every stream waits. For each shape, at two widths, a 20-service mesh
(bench/mesh.py) plus the shape's objects is loaded as the runtime loads a directory (the whole
batch applied, the first push context built), then one sidecar of the shape's namespace connects
over Delta as Envoy does (bench/push_cost.py): the seconds of the load, and the milliseconds of
its answer of each type. A shape that grows with its width takes about four times as long at the
wider one; one that grows with its square, sixteen.

Usage: python -m bench.wide_config [--shapes ports,subsets,...] [--out FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from envoy.service.discovery.v3 import discovery_pb2

from app.xds.connection import Connection
from app.xds.delta import DeltaSession
from app.xds.mesh_source import MeshSource, proxy_from_node
from app.xds.watch import NameSets, counter_nonces
from bench.mesh import Mesh, MeshSpec, sidecars
from bench.processes import BENCH_ROOT, checkout
from bench.push_cost import World, _node, connect_delta

HOST = "svc-0.ns-0.svc.cluster.local"  # a Service of the mesh, in the connecting sidecar's namespace
Doc = dict[str, Any]


def _meta(name: str, i: int = 0) -> Doc:
    return {
        "name": name,
        "namespace": "ns-0",
        "creationTimestamp": f"2026-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
    }


def ports(n: int) -> list[Doc]:
    """One Service of ``n`` ports."""
    listed = [{"name": f"http-{i}", "port": 20000 + i, "targetPort": 20000 + i} for i in range(n)]
    spec = {"clusterIP": "10.96.99.99", "selector": {"app": "wide"}, "ports": listed}
    return [{"apiVersion": "v1", "kind": "Service", "metadata": _meta("wide"), "spec": spec}]


def subsets(n: int) -> list[Doc]:
    """One DestinationRule of ``n`` subsets."""
    return [_rule("wide", {"host": HOST, "subsets": [_subset(i) for i in range(n)]})]


def rules(n: int) -> list[Doc]:
    """``n`` DestinationRules of one host, a subset each (merged into one)."""
    return [_rule(f"r{i}", {"host": HOST, "subsets": [_subset(i)]}, i) for i in range(n)]


def virtual_services(n: int) -> list[Doc]:
    """``n`` VirtualServices of one host, a route each."""
    return [
        {
            "apiVersion": "networking.istio.io/v1",
            "kind": "VirtualService",
            "metadata": _meta(f"v{i}", i),
            "spec": {
                "hosts": [HOST],
                "http": [{"match": [{"uri": {"prefix": f"/p{i}"}}], "route": [{"destination": {"host": HOST}}]}],
            },
        }
        for i in range(n)
    ]


def entries(n: int) -> list[Doc]:
    """``n`` ServiceEntries of one host, a port each (merged into one service)."""
    return [
        _entry(f"e{i}", {"hosts": ["same.example.com"], "ports": [_port(8000 + i)], "resolution": "DNS"}, i)
        for i in range(n)
    ]


def workload_entries(n: int) -> list[Doc]:
    """One ServiceEntry selecting ``n`` WorkloadEntries."""
    spec = {"hosts": ["vm.example.com"], "ports": [_port(80)], "resolution": "STATIC", "location": "MESH_INTERNAL"}
    out = [_entry("vms", {**spec, "workloadSelector": {"labels": {"app": "vm"}}})]
    for i in range(n):
        address = f"10.{100 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}"
        out.append(
            {
                "apiVersion": "networking.istio.io/v1",
                "kind": "WorkloadEntry",
                "metadata": _meta(f"vm-{i}", i),
                "spec": {"address": address, "labels": {"app": "vm"}},
            }
        )
    return out


def endpoint_slices(n: int) -> list[Doc]:
    """One Service of ``n`` slices of 100 endpoints (no Pods: the endpoints name none)."""
    spec = {
        "clusterIP": "10.96.99.98",
        "selector": {"app": "big"},
        "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
    }
    out: list[Doc] = [{"apiVersion": "v1", "kind": "Service", "metadata": _meta("big"), "spec": spec}]
    for s in range(n):
        addresses = [f"10.{50 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}" for i in range(s * 100, (s + 1) * 100)]
        out.append(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {**_meta(f"big-{s}"), "labels": {"kubernetes.io/service-name": "big"}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
            }
        )
    return out


def _subset(i: int) -> Doc:
    return {"name": f"s{i}", "labels": {"v": str(i)}}


def _rule(name: str, spec: Doc, i: int = 0) -> Doc:
    return {"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule", "metadata": _meta(name, i), "spec": spec}


def _entry(name: str, spec: Doc, i: int = 0) -> Doc:
    return {"apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry", "metadata": _meta(name, i), "spec": spec}


def _port(number: int) -> Doc:
    return {"number": number, "name": f"http-{number}", "protocol": "HTTP"}


# shape -> (its objects at a width, the two widths)
SHAPES: dict[str, tuple[Callable[[int], list[Doc]], tuple[int, int]]] = {
    "ports": (ports, (1000, 4000)),
    "subsets": (subsets, (1000, 4000)),
    "rules": (rules, (200, 800)),
    "virtual-services": (virtual_services, (500, 2000)),
    "entries": (entries, (500, 2000)),
    "workload-entries": (workload_entries, (500, 2000)),
    "endpoint-slices": (endpoint_slices, (50, 200)),
}


def measure(objects: list[Doc]) -> dict[str, float]:
    """The load of the mesh with ``objects`` and one sidecar's answers (ms per type)."""
    gc.collect()  # what the shape measured before left is not collected during this one
    spec = MeshSpec(20, 2)
    with tempfile.TemporaryDirectory(prefix="pilotfish-wide-") as tmp:
        root = Path(tmp)
        Mesh(spec, root).write()
        (root / "wide.yaml").write_text(yaml.safe_dump_all(objects))
        started = time.perf_counter()
        world = World.load(root)
        figures = {"load_s": round(time.perf_counter() - started, 3)}
        identity = sidecars(spec, 1, 0)[0]
        node = _node(identity)
        conn = Connection(
            "c",
            proxy_from_node(node),
            DeltaSession(counter_nonces(), None, NameSets()),
            MeshSource(world.discovery.generator),
        )
        answer = conn.on_request

        def timed(req: Any) -> list[discovery_pb2.DeltaDiscoveryResponse]:
            began = time.perf_counter()
            out = answer(req)
            if out:
                figures[f"{req.type_url.rsplit('.', 1)[-1]}_ms"] = round((time.perf_counter() - began) * 1000, 1)
            return out

        conn.on_request = timed  # type: ignore[method-assign]
        connect_delta(conn, node)
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=",".join(SHAPES), help=",".join(SHAPES))
    parser.add_argument("--out", type=Path, default=BENCH_ROOT / "bench" / "results" / "wide_config.json")
    args = parser.parse_args()
    runs: dict[str, dict[str, dict[str, float]]] = {}
    for shape in args.shapes.split(","):
        make, widths = SHAPES[shape]
        runs[shape] = {str(width): measure(make(width)) for width in widths}
        print(shape, json.dumps(runs[shape]), flush=True)
    report = {
        "benchmark": "wide_config",
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "pilotfish": checkout(BENCH_ROOT),
        "runs": runs,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
