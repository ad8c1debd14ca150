"""EnvoyFilter patches as a real Envoy takes them: an EnvoyFilter written while the sidecar is
connected inserts a Lua HTTP filter before the router of its egress listener (the request the
backend gets carries the header the Lua code adds), merges a setting into the upstream cluster,
and Envoy rejects neither update; deleting it takes the filter away.

The sidecar (no iptables: one egress listener on 127.0.0.1, from a Sidecar) reaches ``app``."""

from __future__ import annotations

import json

from tests.e2e.conftest import StartBackends, StartEnvoy, StartPilotfish
from tests.e2e.harness import ConfigDir, KubernetesRegistration, free_port, routed_to, send, wait_until
from tests.e2e.processes import SIDECAR

ADDRESSES = {"v1": "127.0.0.73"}
FQDN = "app.default.svc.cluster.local"
LUA = 'function envoy_on_request(handle) handle:headers():add("x-lua", "patched") end'


def _envoy_filter() -> str:
    router = {
        "name": "envoy.filters.network.http_connection_manager",
        "subFilter": {"name": "envoy.filters.http.router"},
    }
    lua = {
        "name": "envoy.lua",
        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua", "inlineCode": LUA},
    }
    patches = [
        {
            "applyTo": "HTTP_FILTER",
            "match": {"context": "SIDECAR_OUTBOUND", "listener": {"filterChain": {"filter": router}}},
            "patch": {"operation": "INSERT_BEFORE", "value": lua},
        },
        {
            "applyTo": "CLUSTER",
            "match": {"context": "SIDECAR_OUTBOUND", "cluster": {"service": FQDN}},
            "patch": {"operation": "MERGE", "value": {"per_connection_buffer_limit_bytes": 65536}},
        },
    ]
    doc = {
        "apiVersion": "networking.istio.io/v1alpha3",
        "kind": "EnvoyFilter",
        "metadata": {"name": "lua", "namespace": "default"},
        "spec": {"configPatches": patches},
    }
    return json.dumps(doc)


def test_an_envoy_filter_written_while_envoy_runs_patches_its_listener_and_cluster(
    config_dir: ConfigDir, start_backends: StartBackends, start_pilotfish: StartPilotfish, start_envoy: StartEnvoy
) -> None:
    backends = start_backends(ADDRESSES)
    port = free_port()
    KubernetesRegistration(ADDRESSES, cluster_ip="10.96.0.73", service_port=port).write(config_dir, backends.port)
    config_dir.render("sidecar/sidecar.yaml", egress_port=port)
    server = start_pilotfish(config_dir)
    envoy = start_envoy(server, SIDECAR)
    wait_until(routed_to(port, "v1", host=FQDN), f"the egress listener to route {FQDN}")
    assert "x-lua" not in send(port, host=FQDN).body["headers"]

    config_dir.write("envoy-filter.yaml", _envoy_filter())
    wait_until(lambda: send(port, host=FQDN).body["headers"].get("x-lua") == "patched", "the Lua filter's header")
    assert envoy.active_clusters()[f"outbound|{port}||{FQDN}"]["per_connection_buffer_limit_bytes"] == 65536
    envoy.assert_nothing_rejected()

    config_dir.remove("envoy-filter.yaml")
    wait_until(lambda: "x-lua" not in send(port, host=FQDN).body["headers"], "the Lua filter gone")
