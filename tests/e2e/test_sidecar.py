"""A sidecar Envoy without iptables (INTERCEPTION_MODE NONE) reaches a service through the mesh.

Its Sidecar has one egress listener bound on 127.0.0.1 (captureMode NONE): that is the only
listener istiod gives such a proxy, and requests to it follow the service's VirtualService
and DestinationRule subsets. When pilotfish stops, Envoy keeps serving its last config.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.e2e.backends import Backends
from tests.e2e.conftest import StartEnvoy, StartPilotfish, new_config_dir
from tests.e2e.harness import ConfigDir, KubernetesRegistration, backends_seen, free_port, routed_to, wait_until
from tests.e2e.processes import SIDECAR, Pilotfish, run_pilotfish

ADDRESSES = {"v1": "127.0.0.31", "v2": "127.0.0.32"}
FQDN = "app.default.svc.cluster.local"


@dataclass(frozen=True)
class Mesh:
    config: ConfigDir
    backends: Backends
    egress_port: int


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """Kubernetes Service ``app`` (port = the egress port) with pods v1/v2, subsets, routes, Sidecar."""
    backends = Backends(ADDRESSES).start()
    try:
        egress_port = free_port()
        config = new_config_dir(tmp_path_factory.mktemp("sidecar") / "config")
        # the egress listener serves the services that have its port (istiod httproute.go)
        app = KubernetesRegistration(ADDRESSES, cluster_ip="10.96.0.60", service_port=egress_port)
        app.write(config, backends.port)
        config.render("subsets.yaml", "app-destinationrule.yaml", namespace="default", host=FQDN)
        config.render("sidecar/virtualservice.yaml", "app-virtualservice.yaml")
        config.render("sidecar/sidecar.yaml", egress_port=egress_port)
        yield Mesh(config, backends, egress_port)
    finally:
        backends.stop()


@pytest.fixture(scope="module")
def pilotfish(mesh: Mesh, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pilotfish]:
    with run_pilotfish(mesh.config, tmp_path_factory.mktemp("sidecar-pilotfish")) as server:
        yield server


def _assert_mesh_routes(port: int) -> None:
    assert backends_seen(port, 10, host=FQDN) == {"v1": 10}
    assert backends_seen(port, 10, host=FQDN, headers={"x-version": "v2"}) == {"v2": 10}
    # istiod's virtual host domains: the short name and host:port work from the same namespace
    assert backends_seen(port, 3, host="app") == {"v1": 3}
    assert backends_seen(port, 3, host=f"{FQDN}:{port}", headers={"x-version": "v2"}) == {"v2": 3}


def test_sidecar_egress_listener_reaches_service_through_mesh_routes(
    mesh: Mesh, pilotfish: Pilotfish, start_envoy: StartEnvoy
) -> None:
    envoy = start_envoy(pilotfish, SIDECAR)
    port = mesh.egress_port
    name = f"127.0.0.1_{port}"
    wait_until(lambda: envoy.listeners().get(name, {}).get("active_state"), f"listener {name}")
    # no iptables: no virtualOutbound / virtualInbound, nothing bound but the egress listener
    assert set(envoy.listeners()) == {name}
    address = envoy.listeners()[name]["active_state"]["listener"]["address"]["socket_address"]
    assert (address["address"], address["port_value"]) == ("127.0.0.1", port)
    wait_until(routed_to(port, "v1", host=FQDN), f"{name} to route {FQDN} to v1")
    _assert_mesh_routes(port)


def test_envoy_keeps_its_config_when_pilotfish_stops(
    mesh: Mesh, start_pilotfish: StartPilotfish, start_envoy: StartEnvoy
) -> None:
    server = start_pilotfish(mesh.config)
    envoy = start_envoy(server, SIDECAR)
    port = mesh.egress_port
    wait_until(routed_to(port, "v1", host=FQDN), f"the egress listener to route {FQDN} to v1")
    assert envoy.xds_stream()[0] == 1
    # SIGTERM with a connected Envoy: a clean exit, and the stream is closed
    assert server.stop() == 0, server.describe()
    wait_until(lambda: envoy.xds_stream()[0] == 0, "Envoy to see the control plane go away", timeout=30)
    _assert_mesh_routes(port)
