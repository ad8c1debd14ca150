"""Benchmark: what one full push costs per proxy (generate + encode CDS, EDS, LDS, RDS) and
what a full PushContext build costs, for a mesh of N services (default 500).

Each service: a Kubernetes Service (http 80, tcp 5432) with 3 pods in an EndpointSlice, a
DestinationRule with two subsets and a VirtualService routing a header to v2, else v1; one
ingress Gateway routes to every service. A sidecar and the gateway are generated for
repeatedly on the same snapshot (the steady state of a push: SidecarScopes are memoised per
snapshot). Prints one JSON line and writes bench/results/generate_xds.json. Usage:
    python -m bench.generate_xds [--services N] [--repeat R]
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

from app.config.loader import load_documents
from app.config.objects import ConfigEvent, EventType
from app.environment import Environment
from app.model.proxy import Proxy, build_proxy
from app.model.push_context import PushContext
from app.translate.endpoint.for_proxy import eds_cluster_names
from app.translate.listener.for_proxy import route_names
from app.xds.cache import ResourceCache
from app.xds.generators.reference import generate_clusters, generate_listeners
from app.xds.generators.source import XdsGenerator
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, ROUTE
from app.xds.watch import WatchedResource

_SERVICE = """apiVersion: v1
kind: Service
metadata: {{name: svc-{i}, namespace: ns-{ns}}}
spec:
  clusterIP: 10.96.{a}.{b}
  selector: {{app: svc-{i}}}
  ports: [{{name: http, port: 80, targetPort: 8080}}, {{name: tcp-db, port: 5432}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: svc-{i}-1, namespace: ns-{ns}, labels: {{kubernetes.io/service-name: svc-{i}}}}}
addressType: IPv4
ports: [{{name: http, port: 8080}}, {{name: tcp-db, port: 5432}}]
endpoints:
{endpoints}---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: svc-{i}, namespace: ns-{ns}}}
spec:
  host: svc-{i}
  trafficPolicy: {{connectionPool: {{tcp: {{maxConnections: 100}}}}, outlierDetection: {{consecutive5xxErrors: 5}}}}
  subsets: [{{name: v1, labels: {{version: v1}}}}, {{name: v2, labels: {{version: v2}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: svc-{i}, namespace: ns-{ns}}}
spec:
  hosts: [svc-{i}, svc-{i}.example.com]
  gateways: [mesh, istio-system/ingress]
  http:
  - match: [{{headers: {{x-version: {{exact: v2}}}}}}]
    route: [{{destination: {{host: svc-{i}, subset: v2}}}}]
  - route: [{{destination: {{host: svc-{i}, subset: v1}}}}]
    timeout: 5s
"""
_ENDPOINT = (
    "- {{addresses: [10.{c}.{a}.{b}], conditions: {{ready: true}},"
    " targetRef: {{kind: Pod, name: p-{i}-{k}, namespace: ns-{ns}}}}}\n"
)
_POD = """apiVersion: v1
kind: Pod
metadata: {{name: p-{i}-{k}, namespace: ns-{ns}, labels: {{app: svc-{i}, version: v{v}}}}}
status: {{podIP: 10.{c}.{a}.{b}}}
"""
_GATEWAY = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 8080, name: http, protocol: HTTP}, hosts: ["*"]}]
"""
SIDECAR = "sidecar~10.200.0.1~client-0.ns-0~ns-0.svc.cluster.local"
GATEWAY = "router~10.200.0.2~ingress-0.istio-system~istio-system.svc.cluster.local"


def make_yaml(services: int) -> str:
    docs = [_GATEWAY]
    for i in range(services):
        ns, a, b = i % 20, i >> 8, i & 255
        endpoints = ""
        for k in range(3):
            endpoints += _ENDPOINT.format(i=i, k=k, a=a, b=b, c=10 + k, ns=ns)
            docs.append(_POD.format(i=i, k=k, ns=ns, v=k % 2 + 1, a=a, b=b, c=10 + k))
        docs.append(_SERVICE.format(i=i, ns=ns, a=a, b=b, endpoints=endpoints))
    return "---\n".join(docs)


def watches(proxy: Proxy, push: PushContext) -> dict[str, WatchedResource]:
    """What an Envoy watching everything subscribes to: all clusters and listeners, the EDS
    clusters' assignments and the routes the listeners name."""
    return {
        CLUSTER: WatchedResource(CLUSTER, True),
        ENDPOINT: WatchedResource(ENDPOINT, False, set(eds_cluster_names(generate_clusters(proxy, push)))),
        LISTENER: WatchedResource(LISTENER, True),
        ROUTE: WatchedResource(ROUTE, False, set(route_names(generate_listeners(proxy, push)))),
    }


def full_push(proxy: Proxy, push: PushContext, watched: dict[str, WatchedResource]) -> int:
    """Generate and encode every watched type, as one full push does; returns the bytes."""
    size = 0
    for type_url, watch in watched.items():
        # a fresh cache each time: the cost of generating for the first proxy of its kind
        generated = XdsGenerator(ResourceCache(), push).generate(type_url, proxy, watch)
        assert generated is not None
        size += sum(len(r.body.value) for r in generated)
    return size


def _best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--services", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    result = load_documents(make_yaml(args.services), "bench.yaml")
    assert not result.rejected, result.rejected[:3]
    env = Environment()
    env.apply([ConfigEvent(EventType.ADD, obj) for obj in result.objects])
    build = _best(lambda: env.build_push_context(None), args.repeat)
    push = env.build_push_context(None)
    report: dict[str, object] = {
        "benchmark": "generate_xds",
        "services": args.services,
        "push_context_build_seconds": round(build, 4),
    }
    proxies = (("sidecar", SIDECAR, {"app": "client"}), ("gateway", GATEWAY, {"istio": "ingressgateway"}))
    for name, node, labels in proxies:
        proxy = build_proxy(node, {"LABELS": labels})
        watched = watches(proxy, push)  # also warms the proxy's SidecarScope, as the first push does
        size = full_push(proxy, push, watched)
        push_ms = _best(functools.partial(full_push, proxy, push, watched), args.repeat) * 1000
        report[f"{name}_full_push_ms"] = round(push_ms, 1)
        report[f"{name}_bytes"] = size
    report["python"] = platform.python_version()
    out = Path(__file__).parent / "results" / "generate_xds.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
