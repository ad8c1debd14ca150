"""Config may be wide: a Service of any number of ports (Kubernetes bounds an EndpointSlice's
ports, not a Service's), a DestinationRule of many subsets, many rules, VirtualServices or
ServiceEntries for one host. Each becomes clusters, assignments, listeners or routes of every
proxy that sees it, and generation runs on the event loop: it must grow with them, not with their
square. Measured for one proxy before the fixes, every other stream stalled meanwhile:

* a Service of 5,000 ports: 6 s for its EDS (each assignment hashed the whole port list and
  scanned it for its port);
* a rule of 4,000 subsets: 3 s for its EDS (each assignment scanned the subsets);
* 500 rules for one host: 12 s for its EDS (their key hashed again for each of them);
* 2,000 VirtualServices for one host: 0.9 s for its CDS (each compared with those listed);
* 2,000 ServiceEntries of one host: 80 s to load (the host made again from all of its entries
  after each one);
* 2,000 WorkloadEntries one ServiceEntry selects: 10 s to load (its endpoints made again from all
  of them after each one);
* a Service's EndpointSlices, as a start-up lists them: all of them merged again after each.

No wall clock: the work is counted, as the lines of pilotfish's code run to connect a proxy or to
load the entries (a deterministic count), and compared when the width doubles.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import app
import app.registry.kube as kube_registry
from app.config.loader import load_documents
from app.config.objects import ConfigEvent, EventType
from app.environment import Environment
from app.model.service import Endpoint
from tests.support.bookinfo_mesh import Mesh

_APP = str(Path(app.__file__).parent)
_GENERATED = "<string>"  # the methods dataclasses generate (__eq__, __hash__) run as such code


def lines_run(call: Callable[[], object]) -> int:
    """How many lines of app/ code (and of its dataclasses' generated methods) ``call`` runs."""
    count = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
            return trace
        if event != "call":
            return None
        where = frame.f_code.co_filename
        return trace if where.startswith(_APP) or where == _GENERATED else None

    sys.settrace(trace)
    try:
        call()
    finally:
        sys.settrace(None)
    return count


def wide_service(ports: int) -> str:
    listed = "\n".join(f"  - {{name: http-{i}, port: {20000 + i}, targetPort: {20000 + i}}}" for i in range(ports))
    return f"""apiVersion: v1
kind: Service
metadata: {{name: wide, namespace: bookinfo}}
spec:
  clusterIP: 10.96.77.77
  selector: {{app: details}}
  ports:
{listed}
"""


def wide_rule(subsets: int) -> str:
    listed = "\n".join(f"  - {{name: s{i}, labels: {{v: '{i}'}}}}" for i in range(subsets))
    return f"""apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: reviews, namespace: bookinfo}}
spec:
  host: reviews
  subsets:
{listed}
"""


def work_to_connect(config: str, clusters: str, expected: int) -> int:
    mesh = Mesh()
    mesh.apply(config)
    eds: list[str] = []

    def connect() -> None:
        eds.extend(mesh.connect(listeners=True)[1])

    work = lines_run(connect)
    assert sum(clusters in name for name in eds) == expected
    return work


def test_a_proxy_s_config_grows_with_a_service_s_ports_not_with_their_square() -> None:
    fewer = work_to_connect(wide_service(200), "|wide.bookinfo.", 200)
    more = work_to_connect(wide_service(400), "|wide.bookinfo.", 400)
    assert more < 2.2 * fewer, (fewer, more)  # 1.96-fold; 2.65 before


def test_a_proxy_s_config_grows_with_a_rule_s_subsets_not_with_their_square() -> None:
    fewer = work_to_connect(wide_rule(400), "|reviews.bookinfo.", 400 + 1)
    more = work_to_connect(wide_rule(800), "|reviews.bookinfo.", 800 + 1)
    assert more < 2.2 * fewer, (fewer, more)  # 1.96-fold; 2.48 before


def entries_of_one_host(count: int) -> str:
    return "\n---\n".join(
        f"""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: e{i}, namespace: shop, creationTimestamp: "2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"}}
spec:
  hosts: [same.example.com]
  ports: [{{number: {8000 + i}, name: http-{i}, protocol: HTTP}}]
  resolution: DNS
"""
        for i in range(count)
    )


def work_to_load(text: str) -> tuple[int, Environment]:
    env = Environment()
    events = [ConfigEvent(EventType.ADD, obj) for obj in load_documents(text, "entries.yaml").objects]
    return lines_run(lambda: env.apply(events)), env


def test_reading_many_entries_of_one_host_grows_with_them_not_with_their_square() -> None:
    def work(count: int) -> int:
        done, env = work_to_load(entries_of_one_host(count))
        [service] = [s for s in env.registry.services() if s.hostname == "same.example.com"]
        assert [p.port for p in service.ports] == [8000 + i for i in range(count)]  # the oldest's first
        return done

    fewer, more = work(100), work(200)
    assert more < 2.2 * fewer, (fewer, more)  # 1.99-fold; 5.5 before


def many_on_reviews(kind: str, count: int, spec: str) -> str:
    """``count`` objects of ``kind`` for the reviews host, each with the ``spec`` made of its index."""
    return "\n---\n".join(
        f"""apiVersion: networking.istio.io/v1
kind: {kind}
metadata: {{name: x{i}, namespace: bookinfo, creationTimestamp: "2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"}}
spec:
{spec.format(i=i)}
"""
        for i in range(count)
    )


RULE = "  host: reviews\n  subsets: [{{name: s{i}, labels: {{v: '{i}'}}}}]"
ROUTES = (
    "  hosts: [reviews]\n  http: [{{match: [{{uri: {{prefix: /p{i}}}}}], route: [{{destination: {{host: reviews}}}}]}}]"
)


def test_many_rules_of_one_host_grow_a_proxy_s_config_with_them_not_with_their_square() -> None:
    """Each cluster and assignment of a host depends on every rule merged for it (any of them
    changing rebuilds it, as istiod's dependent configs), recorded as one group: it was
    quadratic, each entry recording every rule (800 rules: 1 s for one proxy's EDS), and cubic
    before that, the rules' key hashed again for each of them (500 rules: 12 s)."""
    # bookinfo's own reviews rule has three subsets: the merged rule has them and one per object
    fewer = work_to_connect(many_on_reviews("DestinationRule", 100, RULE), "|reviews.bookinfo.", 1 + 3 + 100)
    more = work_to_connect(many_on_reviews("DestinationRule", 200, RULE), "|reviews.bookinfo.", 1 + 3 + 200)
    assert more < 2.2 * fewer, (fewer, more)  # 1.82-fold; 2.71 before


def test_many_virtual_services_of_one_host_grow_a_scope_with_them_not_with_their_square() -> None:
    """A scope listed its VirtualServices once each by comparing every one with those listed
    (2,000 of them for one host: 0.9 s for one proxy's CDS)."""
    fewer = work_to_connect(many_on_reviews("VirtualService", 200, ROUTES), "|reviews.bookinfo.", 1 + 3)
    more = work_to_connect(many_on_reviews("VirtualService", 400, ROUTES), "|reviews.bookinfo.", 1 + 3)
    assert more < 2.2 * fewer, (fewer, more)  # 1.82-fold; 2.84 before


def workload_entries(count: int) -> str:
    entry = """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vms, namespace: shop}
spec:
  hosts: [vm.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  location: MESH_INTERNAL
  workloadSelector: {labels: {app: vm}}
"""
    return "\n---\n".join(
        [
            entry,
            *(
                f"""apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {{name: vm-{i}, namespace: shop}}
spec: {{address: 10.9.{i // 250}.{i % 250 + 1}, labels: {{app: vm}}}}
"""
                for i in range(count)
            ),
        ]
    )


def test_reading_many_workload_entries_an_entry_selects_grows_with_them_not_with_their_square() -> None:
    def work(count: int) -> int:
        done, env = work_to_load(workload_entries(count))
        assert len(env.registry.endpoints("vm.example.com", "shop")) == count
        return done

    fewer, more = work(100), work(200)
    assert more < 2.2 * fewer, (fewer, more)  # 1.97-fold; 3.7 before


def pods_and_slices(pods: int) -> str:
    """A Service, its Pods, then its EndpointSlices of 100 endpoints (as the Kubernetes source
    hands a start-up's lists over: the slices after the Pods)."""
    service = """apiVersion: v1
kind: Service
metadata: {name: big, namespace: shop}
spec:
  clusterIP: 10.96.0.99
  selector: {app: big}
  ports: [{name: http, port: 80, targetPort: 8080}]
"""

    def ip(i: int) -> str:
        return f"10.8.{i // 250}.{i % 250 + 1}"

    def pod(i: int) -> str:
        return f"""apiVersion: v1
kind: Pod
metadata: {{name: big-{i}, namespace: shop, labels: {{app: big}}}}
spec: {{containers: [{{name: app, image: app}}]}}
status: {{podIP: {ip(i)}, phase: Running, conditions: [{{type: Ready, status: "True"}}]}}
"""

    def endpoint(i: int) -> str:
        ref = f"{{kind: Pod, name: big-{i}, namespace: shop}}"
        return f"{{addresses: [{ip(i)}], conditions: {{ready: true}}, targetRef: {ref}}}"

    def endpoint_slice(n: int) -> str:
        endpoints = ", ".join(endpoint(i) for i in range(n * 100, (n + 1) * 100))
        return f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: big-{n}, namespace: shop, labels: {{kubernetes.io/service-name: big}}}}
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints: [{endpoints}]
"""

    return "\n---\n".join([service, *map(pod, range(pods)), *map(endpoint_slice, range(pods // 100))])


def test_a_service_s_slices_listed_together_are_merged_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The work here is merging a Service's slices into its endpoints: each endpoint is merged
    once when the start-up's list brings its slices together (it was merged again after each
    slice: 20 slices, 21,000 endpoint merges for 2,000 endpoints)."""
    merged = 0
    merge = kube_registry._merge_slices

    def counted(parts: list[tuple[Endpoint, ...]], keys: list[frozenset[tuple[str, str]]]) -> tuple[Endpoint, ...]:
        nonlocal merged
        merged += sum(map(len, parts))
        return merge(parts, keys)

    monkeypatch.setattr(kube_registry, "_merge_slices", counted)
    _, env = work_to_load(pods_and_slices(2000))
    assert len(env.registry.endpoints("big.shop.svc.cluster.local", "shop")) == 2000
    assert merged == 2000
