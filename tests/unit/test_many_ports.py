"""A Service may have any number of ports (Kubernetes bounds an EndpointSlice's ports, not a
Service's), and each becomes a cluster, an assignment, a listener and a route of every proxy that
sees it. Generation must grow with the ports, not with their square: one proxy's EDS for a
Service of 5,000 ports took 6 s on the event loop, every other stream stalled meanwhile, because
each assignment hashed the whole port list and looked its port up by scanning it.

No wall clock: the work is counted. Python calls made to connect a proxy grow in proportion to
the ports (doubling them, from 200 to 400, makes 2.0 times the calls; 2.6 times before), and a port is looked up
without scanning the list again."""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Iterator

from app.model.service import Protocol, Registry, Service, ServicePort
from tests.support.bookinfo_mesh import Mesh


def service(ports: int) -> str:
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


def calls_to_connect(ports: int) -> int:
    mesh = Mesh()
    mesh.apply(service(ports))
    profile = cProfile.Profile()
    profile.enable()
    conn, eds = mesh.connect(listeners=True)
    profile.disable()
    assert sum(name.endswith("|wide.bookinfo.svc.cluster.local") for name in eds) == ports
    assert conn.session.watches  # subscribed to every type
    return int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


def test_a_proxy_s_config_grows_with_a_service_s_ports_not_with_their_square() -> None:
    fewer, more = calls_to_connect(200), calls_to_connect(400)
    assert more < 2.3 * fewer, (fewer, more)


class _CountedPorts(tuple[ServicePort, ...]):
    walks = 0

    def __iter__(self) -> Iterator[ServicePort]:
        _CountedPorts.walks += 1
        return super().__iter__()


def test_a_port_of_a_service_of_many_ports_is_found_without_scanning_them_each_time() -> None:
    ports = _CountedPorts(ServicePort(f"http-{i}", 20000 + i, Protocol.HTTP) for i in range(100))
    wide = Service("wide.bookinfo.svc.cluster.local", "bookinfo", ports, Registry.KUBERNETES)
    _CountedPorts.walks = 0
    assert all(wide.port_by_number(p.port) is p for p in ports)
    assert wide.port_by_number(19999) is None
    assert _CountedPorts.walks == 1 + 1  # the comprehension above, and the index made once
