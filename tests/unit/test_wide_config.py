"""A Service may have any number of ports (Kubernetes bounds an EndpointSlice's ports, not a
Service's), a DestinationRule any number of subsets, and each of them becomes clusters and
assignments (for a port also listeners and routes) of every proxy that sees them. Generation must
grow with them, not with their square: one proxy's EDS took 6 s on the event loop for a Service
of 5,000 ports and 3 s for a rule of 4,000 subsets, every other stream stalled meanwhile, as each
assignment hashed the whole port list, scanned it for its port and scanned the subsets for its
subset. So must reading many ServiceEntries of one host: 2,000 of them took 80 s to load, the
host's service and endpoints made again from all of its entries after each one, the ports merged
one entry at a time.

No wall clock: the work is counted, as the lines of pilotfish's code run to connect a proxy or
load the entries (a deterministic count). Doubling the ports (200 to 400), the subsets (400 to
800) or the entries (100 to 200) must less than 2.2-fold it: it is 1.96, 1.92 and 2.0-fold, and
was 2.57, 2.42 and 5.9-fold."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import app
from app.config.loader import load_documents
from app.config.objects import ConfigEvent, EventType
from app.environment import Environment
from tests.support.bookinfo_mesh import Mesh

_APP = str(Path(app.__file__).parent)


def lines_run(call: Callable[[], object]) -> int:
    """How many lines of app/ code ``call`` runs."""
    count = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
            return trace
        return trace if event == "call" and frame.f_code.co_filename.startswith(_APP) else None

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
    assert more < 2.2 * fewer, (fewer, more)


def test_a_proxy_s_config_grows_with_a_rule_s_subsets_not_with_their_square() -> None:
    fewer = work_to_connect(wide_rule(400), "|reviews.bookinfo.", 400 + 1)
    more = work_to_connect(wide_rule(800), "|reviews.bookinfo.", 800 + 1)
    assert more < 2.2 * fewer, (fewer, more)


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


def test_reading_many_entries_of_one_host_grows_with_them_not_with_their_square() -> None:
    def work_to_load(count: int) -> int:
        env = Environment()
        objects = load_documents(entries_of_one_host(count), "se.yaml").objects
        events = [ConfigEvent(EventType.ADD, obj) for obj in objects]
        work = lines_run(lambda: env.apply(events))
        [service] = [s for s in env.registry.services() if s.hostname == "same.example.com"]
        assert [p.port for p in service.ports] == [8000 + i for i in range(count)]  # the oldest's first
        return work

    fewer, more = work_to_load(100), work_to_load(200)
    assert more < 2.2 * fewer, (fewer, more)
