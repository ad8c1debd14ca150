"""kube-apiserver restarted under a running ``pilotfish serve --kubeconfig`` (same etcd, same
port): every watch breaks without a goodbye, the reconnects meet "connection refused" for a
while, then a new server whose watch cache starts after the versions pilotfish last saw (410:
relist). pilotfish keeps serving what it had (``/ready`` stays 200, as istiod's readiness stays
once its caches synced) and changes made after the restart reach Envoy, as client-go's
reflectors bring istiod's informers back."""

from __future__ import annotations

import secrets
from pathlib import Path

from tests.e2e.harness import free_port, wait_until
from tests.e2e.processes import http_get, run_envoy, run_pilotfish
from tests.e2e.test_restart_removals import mesh_root, service, sleep_in
from tests.support.cluster import Cluster


def test_changes_after_an_api_server_restart_reach_envoy(
    kube: Cluster, pilotfish_kubeconfig: Path, tmp_path: Path
) -> None:
    selected = {"pilotfish-e2e": secrets.token_hex(4)}
    ns = kube.namespace("app", selected)
    system = mesh_root(kube, selected)
    port = free_port()
    for name in ("app", "gone"):
        kube.apply(service(name, port), namespace=ns)
    sleep = sleep_in(ns)

    def cluster(name: str) -> str:
        return f"outbound|{port}||{name}.{ns}.svc.cluster.local"

    args = ("--system-namespace", system)
    with (
        run_pilotfish(None, tmp_path, kubeconfig=pilotfish_kubeconfig, extra_args=args) as server,
        run_envoy(server, sleep, "DELTA_GRPC", tmp_path) as envoy,
    ):
        wait_until(lambda: {cluster("app"), cluster("gone")} <= set(envoy.active_clusters()), "app and gone")
        stream = envoy.xds_stream()
        kube.restart_api_server(down=5)
        assert http_get(f"http://127.0.0.1:{server.http_port}/ready")[0] == 200

        kube.delete("v1", "Service", ns, "gone")
        kube.apply(service("new", port), namespace=ns)
        wait_until(
            lambda: cluster("gone") not in envoy.active_clusters() and cluster("new") in envoy.active_clusters(),
            "the changes made after the restart",
        )
        assert cluster("app") in envoy.active_clusters()
        assert envoy.xds_stream() == stream, "Envoy's stream to pilotfish broke"
        assert server.alive()
