"""Benchmark: how long the Kubernetes source blocks the event loop when it validates watched objects
itself (app/sources/kube/source.py ``_INLINE_BYTES``, ``_INLINE_KINDS``) instead of in its worker.

For each kind validated inline, an object grown (by repeating what the kind repeats: subsets,
endpoints, servers, ports, rules) to just under the per-batch budget of watch-event bytes, and a
typical small one, each loaded and validated as the source does (``load_object``); the median of
``--repeat`` runs, in ms and ns per byte of its JSON. The budget is right when the slowest kind at
the bound stays around a millisecond. Usage: python -m bench.inline_validation [--repeat 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from app.config.loader import load_object
from app.config.objects import Kind
from app.sources.kube.source import _INLINE_BYTES, _INLINE_KINDS
from bench.processes import BENCH_ROOT

Raw = dict[str, Any]


def _meta(name: str, **more: Any) -> Raw:
    return {"name": name, "namespace": "ns-0", "resourceVersion": "1", "generation": 1, **more}


def _istio(kind: str, group: str, spec: Raw) -> Raw:
    return {"apiVersion": f"{group}/v1", "kind": kind, "metadata": _meta(kind.lower()), "spec": spec}


# per kind: the object with n repeated parts
MAKERS: dict[Kind, Callable[[int], Raw]] = {
    Kind.DESTINATION_RULE: lambda n: _istio("DestinationRule", "networking.istio.io", {
        "host": "svc-0", "trafficPolicy": {"connectionPool": {"tcp": {"maxConnections": 100}}},
        "subsets": [{"name": f"v{i}", "labels": {"version": f"v{i}"}, "trafficPolicy": {
            "loadBalancer": {"simple": "ROUND_ROBIN"},
            "portLevelSettings": [{"port": {"number": 80}, "connectionPool": {"http": {"http2MaxRequests": 10}}}],
        }} for i in range(n)],
    }),
    Kind.SERVICE_ENTRY: lambda n: _istio("ServiceEntry", "networking.istio.io", {
        "hosts": ["h.example.com"], "ports": [{"number": 80, "name": "http", "protocol": "HTTP"}],
        "resolution": "STATIC", "location": "MESH_EXTERNAL",
        "endpoints": [{"address": f"10.1.{i // 250}.{i % 250}", "labels": {"version": f"v{i}"},
                       "ports": {"http": 8080}} for i in range(n)],
    }),
    Kind.WORKLOAD_ENTRY: lambda n: _istio("WorkloadEntry", "networking.istio.io", {
        "address": "10.1.0.1", "labels": {f"label-{i}": f"value-{i:040}" for i in range(n)}, "ports": {"http": 8080},
    }),
    Kind.SIDECAR: lambda n: _istio("Sidecar", "networking.istio.io", {
        "egress": [{"port": {"number": 1000 + i, "name": f"http-{i}", "protocol": "HTTP"},
                    "hosts": [f"ns-{j}/*" for j in range(5)]} for i in range(n)],
    }),
    Kind.GATEWAY: lambda n: _istio("Gateway", "networking.istio.io", {
        "selector": {"istio": "ingressgateway"},
        "servers": [{"port": {"number": 443, "name": f"https-{i}", "protocol": "HTTPS"},
                     "hosts": [f"ns-0/h{i}.example.com"],
                     "tls": {"mode": "SIMPLE", "credentialName": f"cred-{i}"}} for i in range(n)],
    }),
    Kind.PEER_AUTHENTICATION: lambda n: _istio("PeerAuthentication", "security.istio.io", {
        "selector": {"matchLabels": {"app": "x"}}, "mtls": {"mode": "STRICT"},
        "portLevelMtls": {str(1000 + i): {"mode": "PERMISSIVE"} for i in range(n)},
    }),
    Kind.SERVICE: lambda n: {"apiVersion": "v1", "kind": "Service", "metadata": _meta("svc"), "spec": {
        "selector": {"app": "svc-0"}, "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "type": "ClusterIP",
        "ports": [{"name": f"http-{i}", "port": 1000 + i, "targetPort": 8080, "protocol": "TCP"} for i in range(n)],
    }},
    Kind.POD: lambda n: {"apiVersion": "v1", "kind": "Pod", "metadata": _meta("pod", labels={"app": "svc-0"}), "spec": {
        "nodeName": "node-1", "serviceAccountName": "default",
        "containers": [{"name": f"c{i}", "image": "app", "ports": [{"containerPort": 8000 + i, "name": f"p{i}"}]}
                       for i in range(n)],
    }, "status": {"phase": "Running", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}],
                  "conditions": [{"type": "Ready", "status": "True"}]}},
    Kind.ENDPOINT_SLICE: lambda n: {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": _meta("svc-0-abcde", labels={"kubernetes.io/service-name": "svc-0"}),
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [f"10.0.{i // 250}.{i % 250}"], "nodeName": "node-1",
                       "conditions": {"ready": True, "serving": True, "terminating": False},
                       "targetRef": {"kind": "Pod", "name": f"svc-0-{i}", "namespace": "ns-0"}} for i in range(n)],
    },
    Kind.NAMESPACE: lambda n: {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "ns-0", "labels": {f"label-{i}": f"value-{i:040}" for i in range(n)}}},
}  # fmt: skip


def size(obj: Raw) -> int:
    return len(orjson.dumps(obj))


def at_bound(make: Callable[[int], Raw], bound: int) -> Raw:
    """The largest ``make(n)`` whose JSON fits in ``bound`` bytes."""
    n = 1
    while size(make(n * 2)) <= bound:
        n *= 2
    step = n // 2
    while step:
        if size(make(n + step)) <= bound:
            n += step
        step //= 2
    return make(n)


def seconds(obj: Raw, repeat: int) -> float:
    """The median time of loading and validating ``obj`` as the Kubernetes source does."""
    result = load_object(obj, "kube:bench", system_namespace="istio-system")
    if result.rejected or not result.objects:
        raise RuntimeError(f"{obj['kind']}: not valid: {result.rejected[:1]}")
    runs = []
    for _ in range(repeat):
        began = time.perf_counter()
        load_object(obj, "kube:bench", system_namespace="istio-system")
        runs.append(time.perf_counter() - began)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--out", type=Path, default=BENCH_ROOT / "bench" / "results" / "inline_validation.json")
    args = parser.parse_args()
    missing = _INLINE_KINDS - MAKERS.keys()
    if missing:
        raise SystemExit(f"no object to measure for {sorted(map(str, missing))}")
    kinds: dict[str, object] = {}
    for kind in sorted(_INLINE_KINDS, key=str):
        small, large = MAKERS[kind](2), at_bound(MAKERS[kind], _INLINE_BYTES)
        figures = {}
        for label, obj in (("small", small), ("at_bound", large)):
            took = seconds(obj, args.repeat)
            figures[label] = {
                "bytes": size(obj),
                "ms": round(took * 1000, 3),
                "ns_per_byte": round(took / size(obj) * 1e9),
            }
        kinds[str(kind)] = figures
        print(f"  {kind!s:22} small {figures['small']}  at the bound {figures['at_bound']}")
    slowest = max(kinds.items(), key=lambda item: item[1]["at_bound"]["ms"])  # type: ignore[index]
    report = {"benchmark": "inline_validation", "inline_bytes": _INLINE_BYTES, "repeat": args.repeat,
              "slowest_at_bound": slowest[0], "kinds": kinds}  # fmt: skip
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"slowest at the bound: {slowest[0]} {slowest[1]['at_bound']}; written to {args.out}")  # type: ignore[index]


if __name__ == "__main__":
    main()
