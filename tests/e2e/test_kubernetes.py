"""``pilotfish serve --kubeconfig``: the mesh lives in a Kubernetes API server (the emulator,
over HTTPS with a bearer token, read by the real kubernetes-asyncio client), a real Envoy
carries traffic with the config pilotfish derives from it, a VirtualService changed in the API
server moves that traffic without a restart, and a status write pushes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.e2e.backends import Backends
from tests.e2e.conftest import StartEnvoy, new_config_dir
from tests.e2e.harness import KubernetesRegistration, backends_seen, free_port, routed_to, wait_until
from tests.e2e.processes import SIDECAR, Pilotfish, run_pilotfish
from tests.support.kube_api import KubeApi, serve_in_thread

ADDRESSES = {"v1": "127.0.0.71", "v2": "127.0.0.72"}
FQDN = "app.default.svc.cluster.local"
# a rule in a namespace the sleep sidecar's Sidecar does not import
MARKER = {
    "apiVersion": "networking.istio.io/v1",
    "kind": "DestinationRule",
    "metadata": {"name": "marker", "namespace": "apps"},
    "spec": {"host": "marker.apps.svc.cluster.local"},
}


@dataclass
class Cluster:
    api: KubeApi
    change: object  # runs a change of the emulator on its loop
    egress_port: int


def load_into(api: KubeApi, config_dir: Path) -> None:
    """Every object the e2e templates rendered, as ``kubectl apply`` would; the MeshConfig as the
    ``istio`` ConfigMap istiod reads."""
    for path in sorted(config_dir.glob("*.yaml")):
        if path.name == "mesh.yaml":
            api.apply(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "istio", "namespace": "istio-system"},
                    "data": {"mesh": path.read_text()},
                }
            )
        else:
            api.apply(path.read_text())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Cluster, Path, Backends]]:
    backends = Backends(ADDRESSES).start()
    try:
        egress_port = free_port()
        rendered = new_config_dir(tmp_path / "rendered")
        KubernetesRegistration(ADDRESSES, cluster_ip="10.96.0.70", service_port=egress_port).write(
            rendered, backends.port
        )
        rendered.render("subsets.yaml", "app-destinationrule.yaml", namespace="default", host=FQDN)
        rendered.render("sidecar/virtualservice.yaml", "app-virtualservice.yaml")
        rendered.render("sidecar/sidecar.yaml", egress_port=egress_port)
        api = KubeApi()
        load_into(api, rendered.path)
        with serve_in_thread(api, tmp_path / "kube") as (kubeconfig, change):
            yield Cluster(api, change, egress_port), kubeconfig, backends
    finally:
        backends.stop()


def route_default_to(subset: str) -> dict[str, object]:
    vs = yaml.safe_load((Path(__file__).parents[1] / "data/e2e/sidecar/virtualservice.yaml").read_text())
    vs["spec"]["http"][1]["route"][0]["destination"]["subset"] = subset
    return vs


def test_a_virtual_service_changed_in_the_api_server_moves_traffic(
    cluster: tuple[Cluster, Path, Backends], start_envoy: StartEnvoy, tmp_path: Path
) -> None:
    kube, kubeconfig, _ = cluster
    port = kube.egress_port
    with run_pilotfish(None, tmp_path, kubeconfig=kubeconfig) as server:
        envoy = start_envoy(server, SIDECAR)
        wait_until(routed_to(port, "v1", host=FQDN), "the egress listener to route app to v1")
        assert backends_seen(port, 10, host=FQDN) == {"v1": 10}
        stream = envoy.xds_stream()

        kube.change(lambda: kube.api.apply(route_default_to("v2")))  # type: ignore[operator]
        wait_until(routed_to(port, "v2", host=FQDN), "the changed VirtualService to move traffic to v2")
        assert backends_seen(port, 10, host=FQDN) == {"v2": 10}

        # a status write and a re-apply of the same spec, then a marker the proxy's scope does not
        # import: once the marker's push was skipped, the two before it were seen, and pushed nothing
        before = _pushes(server)
        kube.change(lambda: kube.api.set_status("VirtualService", "default", "app", {"observedGeneration": 2}))  # type: ignore[operator]
        kube.change(lambda: kube.api.apply(route_default_to("v2")))  # type: ignore[operator]
        kube.change(lambda: kube.api.apply(MARKER))  # type: ignore[operator]
        wait_until(lambda: sum(_pushes(server)) > sum(before), "the marker's push")
        assert _pushes(server) == (before[0], before[1] + 1), "a status write or an unchanged object pushed"
        assert envoy.xds_stream() == stream, "the xDS stream was re-established"
        envoy.assert_nothing_rejected()


def _pushes(server: Pilotfish) -> tuple[int, int]:
    """(pushes that sent something, pushes the dependency filter skipped) of the one stream."""
    [stream] = server.sync_status()
    return int(stream["pushes"]), int(stream["pushesSkipped"])
