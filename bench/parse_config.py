"""Benchmark: parse and validate N config objects (default 10,000) from YAML text.

Prints one JSON line and writes bench/results/parse_config.json. Usage:
    python -m bench.parse_config [--objects N]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import tracemalloc
from pathlib import Path

from app.config.loader import load_documents

_TEMPLATES = (
    """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: dr-{i}, namespace: ns-{ns}}}
spec:
  host: svc-{i}
  trafficPolicy:
    connectionPool: {{tcp: {{maxConnections: 100, connectTimeout: 30ms}}, http: {{http2MaxRequests: 1000}}}}
    outlierDetection: {{consecutive5xxErrors: 7, interval: 5m, baseEjectionTime: 15m}}
    tls: {{mode: ISTIO_MUTUAL}}
  subsets:
  - {{name: v1, labels: {{version: v1}}}}
  - {{name: v2, labels: {{version: v2}}, trafficPolicy: {{loadBalancer: {{simple: ROUND_ROBIN}}}}}}
""",
    """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs-{i}, namespace: ns-{ns}}}
spec:
  hosts: [svc-{i}]
  http:
  - match: [{{headers: {{end-user: {{exact: jason}}}}, uri: {{prefix: /api}}}}]
    route: [{{destination: {{host: svc-{i}, subset: v2}}}}]
    timeout: 10s
    retries: {{attempts: 3, perTryTimeout: 2s}}
  - route:
    - {{destination: {{host: svc-{i}, subset: v1}}, weight: 90}}
    - {{destination: {{host: svc-{i}, subset: v2}}, weight: 10}}
""",
    """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: se-{i}, namespace: ns-{ns}}}
spec:
  hosts: [ext-{i}.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{{number: 443, name: tls, protocol: TLS}}, {{number: 80, name: http, protocol: HTTP}}]
""",
    """apiVersion: v1
kind: Service
metadata: {{name: svc-{i}, namespace: ns-{ns}, labels: {{app: svc-{i}}}}}
spec:
  clusterIP: 10.{a}.{b}.{c}
  selector: {{app: svc-{i}}}
  ports: [{{name: http, port: 80, targetPort: 8080}}, {{name: grpc-api, port: 9090}}]
""",
)


def make_yaml(objects: int) -> str:
    docs = []
    for i in range(objects):
        t = _TEMPLATES[i % len(_TEMPLATES)]
        docs.append(t.format(i=i, ns=i % 50, a=(i >> 16) & 255, b=(i >> 8) & 255, c=i & 255))
    return "---\n".join(docs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    text = make_yaml(args.objects)
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        result = load_documents(text, "bench.yaml")
        times.append(time.perf_counter() - start)
    assert len(result.objects) == args.objects and not result.rejected, result.rejected[:3]
    tracemalloc.start()
    load_documents(text, "bench.yaml")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    report = {
        "benchmark": "parse_config",
        "objects": args.objects,
        "best_seconds": round(min(times), 3),
        "median_seconds": round(sorted(times)[len(times) // 2], 3),
        "objects_per_second": round(args.objects / min(times)),
        "peak_traced_mib": round(peak / 2**20, 1),
        "python": platform.python_version(),
    }
    out = Path(__file__).parent / "results" / "parse_config.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
