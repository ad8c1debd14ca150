"""LDS: listeners for sidecars and gateways against istiod's behaviour, and a real Envoy.

Checked against istio/istio pilot/pkg/networking/core listener.go (buildSidecarOutboundListener,
buildListenerFromEntry, buildSidecarOutboundHTTPListenerOpts), listener_builder.go
(buildVirtualOutboundListener, buildHTTPConnectionManager), listener_inbound.go,
filterchain_options.go, tls.go, networkfilter.go, gateway.go and pilot/pkg/model/gateway.go
(mergeGateways, gatewayRDSRouteName). The last tests run ``envoy --mode validate`` on bootstraps
holding the generated listeners and clusters.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from envoy.config.core.v3 import base_pb2
from envoy.config.listener.v3 import listener_components_pb2 as lc
from envoy.config.listener.v3 import listener_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from google.protobuf import json_format

from app.api.mesh import MeshConfig
from app.model.proxy import Proxy, build_proxy
from app.model.push_context import PushContext
from app.translate.listener.builder import sidecar_route_name
from app.translate.listener.for_proxy import route_names
from app.translate.listener.tls import inbound_mtls_context, trust_domains_for_validation
from app.xds.generators.reference import generate_clusters, generate_listeners
from tests.support.envoy import agent_bootstrap, validate_bootstrap
from tests.support.mesh import (
    endpoint_slice,
    kube_pod,
    kube_service,
    push_context,
    push_context_from_dir,
    router_proxy,
    sidecar_proxy,
    slice_endpoint,
)

ROOT = Path(__file__).resolve().parents[2]
BOOKINFO = ROOT / "examples" / "bookinfo"
HCM = "envoy.filters.network.http_connection_manager"
TCP = "envoy.filters.network.tcp_proxy"
H = hcm_pb2.HttpConnectionManager
WEB = "web.default.svc.cluster.local"
DB = "db.default.svc.cluster.local"
DB2 = "db2.default.svc.cluster.local"
AUTO = "auto.default.svc.cluster.local"
CREATED = "2026-01-01T00:00:00Z"

MESH = """
rootNamespace: istio-system
outboundTrafficPolicy: {mode: ALLOW_ANY}
"""


def svc(name: str, ports: str, cluster_ip: str = "", selector: str = "", ns: str = "default") -> str:
    return kube_service(name, ports, namespace=ns, cluster_ip=cluster_ip, selector=selector, created=CREATED)


def pod(name: str, ip: str, labels: str, ns: str = "default") -> str:
    """A Pod with a sidecar, running as the service account of its own name."""
    return kube_pod(name, ip, labels, namespace=ns, service_account=name)


def slice_(service: str, pod_name: str, ip: str, ports: str, ns: str = "default") -> str:
    return endpoint_slice(service, ports, slice_endpoint(ip, pod_name, namespace=ns), namespace=ns)


# the proxy under test is web-0 (10.1.0.1): its own ports are 8080 (HTTP) and 9000 (TCP)
WORKLOADS = "".join(
    [
        svc("web", "[{name: http, port: 80, targetPort: 8080}]", "10.96.1.1", "app: web"),
        svc("web-admin", "[{name: tcp-admin, port: 9000, targetPort: 9000}]", "10.96.1.9", "app: web"),
        pod("web-0", "10.1.0.1", "app: web, version: v1"),
        slice_("web", "web-0", "10.1.0.1", "[{name: http, port: 8080, protocol: TCP}]"),
        slice_("web-admin", "web-0", "10.1.0.1", "[{name: tcp-admin, port: 9000, protocol: TCP}]"),
        svc("db", "[{name: tcp-db, port: 5432}]", "10.96.1.2"),
        svc("db2", "[{name: tcp-db, port: 5433}]", "10.96.1.4"),
        svc("auto", "[{name: custom, port: 7000}]", "10.96.1.3"),
        svc("grpc", "[{name: grpc, port: 9090}]", "10.96.1.5"),
        # headless TCP: one listener per endpoint
        svc("cache", "[{name: tcp-redis, port: 6379}]", "None", "app: cache"),
        pod("cache-0", "10.1.0.7", "app: cache"),
        slice_("cache", "cache-0", "10.1.0.7", "[{name: tcp-redis, port: 6379, protocol: TCP}]"),
        """
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: default}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 443, name: tls, protocol: TLS}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db-move, namespace: default, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  hosts: [db]
  tcp:
  - route:
    - destination: {host: db2, port: {number: 5433}}
""",
    ]
)


def environment(*texts: str, mesh: str = MESH) -> PushContext:
    return push_context(*texts, mesh=mesh)


def sidecar(interception: str = "REDIRECT", ip: str = "10.1.0.1", labels: dict[str, str] | None = None) -> Proxy:
    labels = labels if labels is not None else {"app": "web", "version": "v1"}
    return sidecar_proxy("web-0.default", ip, labels, interception_mode=interception)


def by_name(listeners: Sequence[listener_pb2.Listener]) -> dict[str, listener_pb2.Listener]:
    return {listener.name: listener for listener in listeners}


def hcm(chain: lc.FilterChain) -> hcm_pb2.HttpConnectionManager:
    [f] = [f for f in chain.filters if f.name == HCM]
    out = hcm_pb2.HttpConnectionManager()
    assert f.typed_config.Unpack(out)
    return out


def tcp_proxy(chain: lc.FilterChain) -> tcp_proxy_pb2.TcpProxy:
    [f] = [f for f in chain.filters if f.name == TCP]
    out = tcp_proxy_pb2.TcpProxy()
    assert f.typed_config.Unpack(out)
    return out


def filter_names(listener: listener_pb2.Listener) -> list[str]:
    return [f.name for f in listener.listener_filters]


def tls_context(chain: lc.FilterChain) -> tls_pb2.DownstreamTlsContext:
    assert chain.transport_socket.name == "envoy.transport_sockets.tls"
    out = tls_pb2.DownstreamTlsContext()
    assert chain.transport_socket.typed_config.Unpack(out)
    return out




# --- sidecar: virtual listeners ------------------------------------------------------------


def test_virtual_outbound_passes_unknown_traffic_through_with_allow_any() -> None:
    listeners = by_name(generate_listeners(sidecar(), environment(WORKLOADS)))
    vo = listeners["virtualOutbound"]
    sock = vo.address.socket_address
    assert (sock.address, sock.port_value) == ("0.0.0.0", 15001)
    assert vo.use_original_dst.value is True
    assert vo.traffic_direction == base_pb2.OUTBOUND
    # istiod: MAX_CONNECTIONS_PER_SOCKET_EVENT_LOOP (1) on the listeners that bind
    assert vo.max_connections_to_accept_per_socket_event.value == 1
    blackhole, catch_all = vo.filter_chains
    assert blackhole.name == "virtualOutbound-blackhole"
    assert blackhole.filter_chain_match.destination_port.value == 15001  # no loop to the capture port
    assert tcp_proxy(blackhole).cluster == "BlackHoleCluster"
    assert catch_all.name == "virtualOutbound-catchall-tcp"
    assert not catch_all.HasField("filter_chain_match")
    assert (tcp_proxy(catch_all).cluster, tcp_proxy(catch_all).stat_prefix) == ("PassthroughCluster",) * 2
    # outbound listeners fall back to the same place
    fallback = listeners["0.0.0.0_80"].default_filter_chain
    assert fallback.name == "PassthroughFilterChain" and tcp_proxy(fallback).cluster == "PassthroughCluster"
    assert not fallback.HasField("transport_socket_connect_timeout")  # only the entry's own chains have it


@pytest.mark.parametrize("where", ["mesh", "sidecar"])
def test_registry_only_sends_unknown_traffic_to_the_blackhole(where: str) -> None:
    mesh = MESH.replace("ALLOW_ANY", "REGISTRY_ONLY") if where == "mesh" else MESH
    sidecar_doc = """
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: default}
spec:
  outboundTrafficPolicy: {mode: REGISTRY_ONLY}
"""
    push = environment(WORKLOADS, sidecar_doc if where == "sidecar" else "", mesh=mesh)
    listeners = by_name(generate_listeners(sidecar(), push))
    catch_all = listeners["virtualOutbound"].filter_chains[1]
    assert tcp_proxy(catch_all).cluster == "BlackHoleCluster"
    assert tcp_proxy(listeners["0.0.0.0_80"].default_filter_chain).cluster == "BlackHoleCluster"


def test_sidecar_egress_proxy_takes_the_catch_all_chains() -> None:
    # istiod buildOutboundCatchAllNetworkFiltersOnly: egressProxy replaces PassthroughCluster on
    # virtualOutbound's catch-all and on every outbound listener's fallback chain (ALLOW_ANY:
    # ValidateSidecar refuses an egressProxy with REGISTRY_ONLY)
    mode, expected = "ALLOW_ANY", "outbound|443|s1|egress.example"
    sidecar_doc = f"""
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: default, namespace: default}}
spec:
  outboundTrafficPolicy:
    mode: {mode}
    egressProxy: {{host: egress.example, subset: s1, port: {{number: 443}}}}
"""
    listeners = by_name(generate_listeners(sidecar(), environment(WORKLOADS, sidecar_doc)))
    catch_all = listeners["virtualOutbound"].filter_chains[1]
    assert (tcp_proxy(catch_all).cluster, tcp_proxy(catch_all).stat_prefix) == (expected, expected)
    assert tcp_proxy(listeners["0.0.0.0_80"].default_filter_chain).cluster == expected


def test_no_virtual_listeners_without_capture_and_every_outbound_listener_binds() -> None:
    listeners = by_name(generate_listeners(sidecar("NONE"), environment(WORKLOADS)))
    assert "virtualOutbound" not in listeners and "virtualInbound" not in listeners
    # istiod binds all of them to localhost; none waits for a redirect
    assert {"127.0.0.1_80", "127.0.0.1_5432", "127.0.0.1_7000"} <= set(listeners)
    for listener in listeners.values():
        assert listener.address.socket_address.address == "127.0.0.1"
        assert not listener.HasField("bind_to_port")  # Envoy's default: bound
        assert listener.max_connections_to_accept_per_socket_event.value == 1  # istiod, for bound listeners
    # a sniffed port on its own address gets a route of its own
    http = listeners["127.0.0.1_7000"].filter_chains[0]
    assert hcm(http).rds.route_config_name == f"{AUTO}:7000"


# --- sidecar: outbound listeners -------------------------------------------------------------


def test_http_port_shares_a_wildcard_listener_with_rds_named_by_port() -> None:
    listener = by_name(generate_listeners(sidecar(), environment(WORKLOADS)))["0.0.0.0_80"]
    assert listener.bind_to_port.value is False  # reached through virtualOutbound
    assert not listener.HasField("max_connections_to_accept_per_socket_event")  # only for listeners that bind
    assert listener.traffic_direction == base_pb2.OUTBOUND
    # istiod buildListenerFromEntry: sniffing needs only the HTTP inspector, no chain reads SNI
    assert filter_names(listener) == ["envoy.filters.listener.http_inspector"]
    assert listener.continue_on_listener_filters_timeout is True
    [chain] = listener.filter_chains
    # HTTP is sniffed on the wildcard so non-HTTP traffic to the port falls through
    assert chain.filter_chain_match.transport_protocol == "raw_buffer"
    assert list(chain.filter_chain_match.application_protocols) == ["http/1.1", "h2c"]
    # istiod buildListenerFromEntry: PILOT_GATEWAY_TRANSPORT_SOCKET_CONNECT_TIMEOUT on every chain
    assert chain.transport_socket_connect_timeout.seconds == 15
    manager = hcm(chain)
    assert manager.rds.route_config_name == "80"
    assert manager.rds.config_source.HasField("ads")
    assert manager.rds.config_source.initial_fetch_timeout.seconds == 0
    assert manager.stat_prefix == "outbound_0.0.0.0_80;"
    assert manager.use_remote_address.value is False
    assert manager.normalize_path.value is True
    assert manager.path_with_escaped_slashes_action == H.KEEP_UNCHANGED
    assert [u.upgrade_type for u in manager.upgrade_configs] == ["websocket"]
    assert manager.HasField("stream_idle_timeout") and manager.stream_idle_timeout.seconds == 0
    assert not manager.server_name and not manager.access_log
    # mesh enableTracing (default true) without Telemetry: istiod's sampling and Istio's tags
    tracing = manager.tracing
    assert (tracing.client_sampling.value, tracing.overall_sampling.value, tracing.random_sampling.value) == (
        100.0,
        100.0,
        1.0,
    )
    literals = {t.tag: t.literal.value for t in tracing.custom_tags if t.HasField("literal")}
    assert literals == {
        "istio.canonical_revision": "latest",
        "istio.canonical_service": "unknown",
        "istio.cluster_id": "Kubernetes",
        "istio.mesh_id": "unknown",
        "istio.namespace": "default",
    }
    assert [t.tag for t in tracing.custom_tags] == sorted(t.tag for t in tracing.custom_tags)
    [dry_run] = [t for t in tracing.custom_tags if t.tag == "istio.authorization.dry_run.allow_policy.name"]
    assert dry_run.metadata.metadata_key.key == "envoy.filters.http.rbac"
    assert [p.key for p in dry_run.metadata.metadata_key.path] == ["istio_dry_run_allow_shadow_effective_policy_id"]
    assert [f.name for f in manager.http_filters] == [
        "envoy.filters.http.grpc_stats",
        "envoy.filters.http.fault",
        "envoy.filters.http.cors",
        "envoy.filters.http.router",
    ]


def test_grpc_web_port_gets_the_grpc_web_filter() -> None:
    doc = svc("gw", "[{name: grpc-web, port: 8081}]", "10.96.1.8")
    listener = by_name(generate_listeners(sidecar(), environment(WORKLOADS, doc)))["0.0.0.0_8081"]
    assert hcm(listener.filter_chains[0]).http_filters[0].name == "envoy.filters.http.grpc_web"


def test_tcp_port_listens_on_the_vip_and_follows_a_virtual_service_tcp_route() -> None:
    listeners = by_name(generate_listeners(sidecar(), environment(WORKLOADS)))
    moved = listeners["10.96.1.2_5432"]
    [chain] = moved.filter_chains
    assert not chain.HasField("filter_chain_match") and not moved.HasField("default_filter_chain")
    assert not moved.listener_filters and moved.listener_filters_timeout.seconds == 0
    proxy = tcp_proxy(chain)
    assert proxy.cluster == f"outbound|5433||{DB2}"  # the VirtualService's destination
    assert proxy.stat_prefix == proxy.cluster
    config = json_format.MessageToDict(chain.metadata)["filterMetadata"]["istio"]["config"]
    assert config == "/apis/networking.istio.io/v1/namespaces/default/virtual-service/db-move"
    assert tcp_proxy(listeners["10.96.1.4_5433"].filter_chains[0]).cluster == f"outbound|5433||{DB2}"


def test_tcp_route_with_weights_and_destination_rule_settings() -> None:
    docs = """
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db-split, namespace: default, creationTimestamp: "2025-01-01T00:00:00Z"}
spec:
  hosts: [db]
  tcp:
  - route:
    - {destination: {host: db, port: {number: 5432}}, weight: 70}
    - {destination: {host: db2, port: {number: 5433}}, weight: 30}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: default}
spec:
  host: db
  trafficPolicy:
    connectionPool: {tcp: {idleTimeout: 30s, maxConnectionDuration: 1h}}
    loadBalancer: {consistentHash: {useSourceIp: true}}
"""
    listener = by_name(generate_listeners(sidecar(), environment(WORKLOADS, docs)))["10.96.1.2_5432"]
    proxy = tcp_proxy(listener.filter_chains[0])  # the older VirtualService wins
    assert proxy.stat_prefix == "db-split.default"
    assert [(c.name, c.weight) for c in proxy.weighted_clusters.clusters] == [
        (f"outbound|5432||{DB}", 70),
        (f"outbound|5433||{DB2}", 30),
    ]
    assert proxy.idle_timeout.seconds == 30 and proxy.max_downstream_connection_duration.seconds == 3600
    assert proxy.hash_policy[0].HasField("source_ip")


def test_auto_protocol_port_sniffs_http_next_to_tcp() -> None:
    listener = by_name(generate_listeners(sidecar(), environment(WORKLOADS)))["10.96.1.3_7000"]
    assert filter_names(listener) == ["envoy.filters.listener.http_inspector"]  # no chain reads SNI
    [http] = listener.filter_chains
    assert list(http.filter_chain_match.application_protocols) == ["http/1.1", "h2c"]
    # a sniffed listener on its VIP has its own route: HOST:PORT (istiod)
    assert hcm(http).rds.route_config_name == f"{AUTO}:7000"
    assert hcm(http).stat_prefix == "outbound_10.96.1.3_7000;"
    # the TCP chain matches everything else, so it is the default chain
    assert tcp_proxy(listener.default_filter_chain).cluster == f"outbound|7000||{AUTO}"


def test_tls_service_without_vip_is_told_apart_by_sni() -> None:
    listener = by_name(generate_listeners(sidecar(), environment(WORKLOADS)))["0.0.0.0_443"]
    [chain] = listener.filter_chains
    assert list(chain.filter_chain_match.server_names) == ["api.example.com"]
    assert tcp_proxy(chain).cluster == "outbound|443||api.example.com"
    assert filter_names(listener) == ["envoy.filters.listener.tls_inspector"]
    assert listener.default_filter_chain.name == "PassthroughFilterChain"


def test_headless_tcp_service_gets_a_listener_per_endpoint() -> None:
    listeners = by_name(generate_listeners(sidecar(), environment(WORKLOADS)))
    listener = listeners["10.1.0.7_6379"]
    assert tcp_proxy(listener.filter_chains[0]).cluster == "outbound|6379||cache.default.svc.cluster.local"
    assert "0.0.0.0_6379" not in listeners
    # the proxy's own address is never an outbound listener
    own = generate_listeners(sidecar(ip="10.1.0.7", labels={"app": "cache"}), environment(WORKLOADS))
    assert "10.1.0.7_6379" not in by_name(own)


def test_http_and_tcp_on_the_same_wildcard_port_merge_into_a_sniffing_listener() -> None:
    docs = """
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: legacy, namespace: default}
spec:
  hosts: [legacy.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 80, name: tcp, protocol: TCP}]
"""
    listener = by_name(generate_listeners(sidecar(), environment(WORKLOADS, docs)))["0.0.0.0_80"]
    [http] = listener.filter_chains
    assert hcm(http).rds.route_config_name == "80"
    assert tcp_proxy(listener.default_filter_chain).cluster == "outbound|80||legacy.example.com"


EGRESS_BOUND = """
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: default}
spec:
  egress:
  - port: {number: 80, protocol: HTTP, name: egress-http}
    bind: 127.0.0.1
    captureMode: NONE
    hosts: ["./web.default.svc.cluster.local"]
  - port: {number: 7000, name: egress-auto}
    bind: 127.0.0.1
    captureMode: NONE
    hosts: ["./auto.default.svc.cluster.local"]
  - hosts: ["./*"]
"""


def test_sidecar_egress_listener_bound_on_loopback_with_capture_none() -> None:
    listeners = by_name(generate_listeners(sidecar(), environment(WORKLOADS, EGRESS_BOUND)))
    bound = listeners["127.0.0.1_80"]
    sock = bound.address.socket_address
    assert (sock.address, sock.port_value) == ("127.0.0.1", 80)
    assert not bound.HasField("bind_to_port") or bound.bind_to_port.value  # a real socket
    assert not bound.listener_filters  # not the wildcard: no sniffing, one match-all chain
    [chain] = bound.filter_chains
    assert not chain.HasField("filter_chain_match")
    assert hcm(chain).rds.route_config_name == "80"
    assert hcm(chain).stat_prefix == "outbound_127.0.0.1_80;"
    # sniffed egress port on loopback: its own HOST:PORT route
    auto = listeners["127.0.0.1_7000"]
    assert hcm(auto.filter_chains[0]).rds.route_config_name == f"{AUTO}:7000"
    # the catch-all egress listener still builds the captured listeners
    assert listeners["0.0.0.0_80"].bind_to_port.value is False
    assert "virtualOutbound" in listeners


def test_route_name_rule_matches_istiod() -> None:
    assert sidecar_route_name(WEB, 80, sniffed=False, bind="0.0.0.0", wildcard="0.0.0.0") == "80"
    assert sidecar_route_name(WEB, 80, sniffed=False, bind="127.0.0.1", wildcard="0.0.0.0") == "80"
    assert sidecar_route_name(WEB, 80, sniffed=True, bind="0.0.0.0", wildcard="0.0.0.0") == "80"
    assert sidecar_route_name(WEB, 80, sniffed=True, bind="10.0.0.1", wildcard="0.0.0.0") == f"{WEB}:80"


def test_route_names_lists_every_rds_name_once_sorted() -> None:
    push = environment(WORKLOADS, EGRESS_BOUND)
    assert route_names(generate_listeners(sidecar(), push)) == ["80", "9090", f"{AUTO}:7000"]


# --- sidecar: inbound ---------------------------------------------------------------------------


def test_virtual_inbound_has_passthrough_and_permissive_chains_for_own_ports() -> None:
    vi = by_name(generate_listeners(sidecar(), environment(WORKLOADS)))["virtualInbound"]
    sock = vi.address.socket_address
    assert (sock.address, sock.port_value) == ("0.0.0.0", 15006)
    assert vi.traffic_direction == base_pb2.INBOUND
    assert filter_names(vi) == [
        "envoy.filters.listener.original_dst",
        "envoy.filters.listener.tls_inspector",
        "envoy.filters.listener.http_inspector",
    ]
    chains = list(vi.filter_chains)
    assert [c.name for c in chains[:6]] == ["virtualInbound-blackhole"] + ["virtualInbound-catchall-http"] * 2 + [
        "virtualInbound"
    ] * 3
    assert chains[0].filter_chain_match.destination_port.value == 15006
    assert tcp_proxy(chains[4]).cluster == "InboundPassthroughCluster"
    # HTTP port 8080 (service port 80): mTLS + plaintext, both HCMs with an inline route
    http = [c for c in chains if c.name == "0.0.0.0_8080"]
    assert [c.filter_chain_match.transport_protocol for c in http] == ["tls", "raw_buffer"]
    assert all(c.filter_chain_match.destination_port.value == 8080 for c in http)
    ctx = tls_context(http[0])
    assert ctx.require_client_certificate.value is True
    assert [s.name for s in ctx.common_tls_context.tls_certificate_sds_secret_configs] == ["default"]
    assert list(ctx.common_tls_context.alpn_protocols) == ["h2", "http/1.1"]
    # only peers of the mesh's trust domain (istiod ApplyToCommonTLSContext)
    validation = ctx.common_tls_context.combined_validation_context.default_validation_context
    assert [m.prefix for m in validation.match_subject_alt_names] == ["spiffe://cluster.local/"]
    manager = hcm(http[1])
    assert not http[1].HasField("transport_socket")
    assert manager.stat_prefix == "inbound_0.0.0.0_8080;"
    assert manager.server_name == "istio-envoy" and manager.forward_client_cert_details == H.APPEND_FORWARD
    rc = manager.route_config
    assert rc.name == "inbound|8080||"
    [vhost] = rc.virtual_hosts
    assert (vhost.name, list(vhost.domains)) == ("inbound|http|80", ["*"])
    [route] = vhost.routes
    assert route.route.cluster == "inbound|8080||" and route.route.timeout.seconds == 0
    assert route.decorator.operation == f"{WEB}:80/*"
    # TCP port 9000: tcp_proxy to its inbound cluster, plus a plain-TLS chain
    tcp = [c for c in chains if c.name == "0.0.0.0_9000"]
    # istiod inboundPermissiveTCPFilterChainMatchWithMxcOptions: mTLS, plain TLS, plaintext
    assert [c.filter_chain_match.transport_protocol for c in tcp] == ["tls", "tls", "raw_buffer"]
    assert all(tcp_proxy(c).cluster == "inbound|9000||" for c in tcp)
    assert list(tls_context(tcp[0]).common_tls_context.alpn_protocols) == ["istio-peer-exchange", "h2", "http/1.1"]
    assert not tcp[1].HasField("transport_socket")


def test_tracing_follows_the_proxy_config_and_names_the_proxy() -> None:
    mesh = MESH + """defaultConfig:
  tracing:
    sampling: 25
    maxPathTagLength: 99
    customTags:
      team: {literal: {value: payments}}
      user: {header: {name: x-user, defaultValue: anon}}
"""
    proxy = build_proxy(
        "sidecar~10.1.0.1~app-1.default~default.svc.cluster.local",
        {
            "INSTANCE_IPS": "10.1.0.1",
            "MESH_ID": "mesh-a",
            "CLUSTER_ID": "east",
            "LABELS": {"service.istio.io/canonical-name": "web", "service.istio.io/canonical-revision": "v2"},
        },
    )
    listener = by_name(generate_listeners(proxy, environment(WORKLOADS, mesh=mesh)))["0.0.0.0_80"]
    tracing = hcm(listener.filter_chains[0]).tracing
    assert tracing.random_sampling.value == 25.0 and tracing.max_path_tag_length.value == 99
    tags = {t.tag: t for t in tracing.custom_tags}
    assert {k: tags[k].literal.value for k in ("istio.canonical_service", "istio.canonical_revision")} == {
        "istio.canonical_service": "web",
        "istio.canonical_revision": "v2",
    }
    assert (tags["istio.mesh_id"].literal.value, tags["istio.cluster_id"].literal.value) == ("mesh-a", "east")
    assert tags["team"].literal.value == "payments"
    assert (tags["user"].request_header.name, tags["user"].request_header.default_value) == ("x-user", "anon")
    # Istio's own tags off: only the configured ones; tracing off: none at all
    quiet = mesh.replace("    sampling: 25", "    sampling: 25\n    enableIstioTags: false")
    listener = by_name(generate_listeners(proxy, environment(WORKLOADS, mesh=quiet)))["0.0.0.0_80"]
    assert [t.tag for t in hcm(listener.filter_chains[0]).tracing.custom_tags] == ["team", "user"]
    off = environment(WORKLOADS, mesh=mesh + "enableTracing: false\n")
    assert not hcm(by_name(generate_listeners(proxy, off))["0.0.0.0_80"].filter_chains[0]).HasField("tracing")


def test_inbound_mtls_accepts_the_trust_domain_its_aliases_and_the_ca_certificates_domains() -> None:
    # istiod TrustDomainsForValidation: each once, in that order, empty ones skipped
    mesh = MeshConfig(trust_domain="td.example", trust_domain_aliases=["old.example", "td.example"])
    mesh.ca_certificates.add(trust_domains=["other.example", "", "old.example"])
    assert trust_domains_for_validation(mesh) == ["td.example", "old.example", "other.example"]
    validation = inbound_mtls_context(mesh, tcp=False).common_tls_context.combined_validation_context
    assert [m.prefix for m in validation.default_validation_context.match_subject_alt_names] == [
        "spiffe://td.example/",
        "spiffe://old.example/",
        "spiffe://other.example/",
    ]


# --- gateways -----------------------------------------------------------------------------------

GATEWAY_PROXY = router_proxy("ingress-0.istio-system", "10.0.0.5", {"istio": "ingressgateway"})


def gateways(cert_dir: Path) -> str:
    cert, key = cert_dir / "cert.pem", cert_dir / "key.pem"
    return f"""
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: public, namespace: default, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: 80, name: http, protocol: HTTP}}
    hosts: ["*"]
  - port: {{number: 443, name: https-a, protocol: HTTPS}}
    hosts: ["a.example.com"]
    tls: {{mode: SIMPLE, serverCertificate: {cert}, privateKey: {key}, caCertificates: {cert}}}
  - port: {{number: 443, name: https-b, protocol: HTTPS}}
    hosts: ["./b.example.com"]
    tls: {{mode: SIMPLE, serverCertificate: {cert}, privateKey: {key}}}
  - port: {{number: 5432, name: tcp, protocol: TCP}}
    hosts: ["*"]
  - port: {{number: 8443, name: tls, protocol: TLS}}
    hosts: ["*.example.com"]
    tls: {{mode: PASSTHROUGH}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: second, namespace: istio-system, creationTimestamp: "2026-01-02T00:00:00Z"}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: 80, name: http2, protocol: HTTP}}
    hosts: ["other.example.com"]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: elsewhere, namespace: default}}
spec:
  selector: {{istio: eastwest}}
  servers:
  - port: {{number: 9999, name: http, protocol: HTTP}}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: gw-tcp, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [public]
  tcp:
  - match: [{{port: 5432}}]
    route: [{{destination: {{host: db}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: gw-tls, namespace: default}}
spec:
  hosts: ["api.example.com"]
  gateways: [public]
  tls:
  - match: [{{sniHosts: [api.example.com]}}]
    route: [{{destination: {{host: api.example.com, port: {{number: 443}}}}}}]
"""


def make_cert(directory: Path) -> None:
    """A self-signed EC certificate and key for the TLS servers (Envoy reads the files when validating)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    files = ["-keyout", str(directory / "key.pem"), "-out", str(directory / "cert.pem")]
    cmd = ["openssl", "req", "-x509", *ec, *files, "-days", "1", "-subj", "/CN=example.com"]
    subprocess.run(cmd, check=True, capture_output=True)


def test_gateway_selected_by_labels_merges_servers_by_port(tmp_path: Path) -> None:
    listeners = by_name(generate_listeners(GATEWAY_PROXY, environment(WORKLOADS, gateways(tmp_path))))
    # "elsewhere" selects another workload: no 9999 listener
    assert set(listeners) == {"0.0.0.0_80", "0.0.0.0_443", "0.0.0.0_5432", "0.0.0.0_8443"}
    http = listeners["0.0.0.0_80"]
    assert not http.HasField("bind_to_port")  # gateways bind their ports
    assert http.max_connections_to_accept_per_socket_event.value == 1
    assert not http.listener_filters and http.listener_filters_timeout.seconds == 0
    [chain] = http.filter_chains  # both gateways' port-80 servers share one HCM
    assert chain.transport_socket_connect_timeout.seconds == 15  # istiod buildGatewayListener
    manager = hcm(chain)
    assert manager.rds.route_config_name == "http.80"
    assert manager.use_remote_address.value is True
    assert manager.stat_prefix == "outbound_0.0.0.0_80;"
    assert manager.forward_client_cert_details == H.SANITIZE_SET
    assert manager.server_name == "istio-envoy" and manager.HasField("http_protocol_options")


def test_gateway_https_servers_terminate_tls_from_files_split_by_sni(tmp_path: Path) -> None:
    listener = by_name(generate_listeners(GATEWAY_PROXY, environment(WORKLOADS, gateways(tmp_path))))["0.0.0.0_443"]
    assert filter_names(listener) == ["envoy.filters.listener.tls_inspector"]
    a, b = listener.filter_chains
    assert list(a.filter_chain_match.server_names) == ["a.example.com"]
    assert list(b.filter_chain_match.server_names) == ["b.example.com"]  # the namespace prefix is dropped
    assert hcm(a).rds.route_config_name == "https.443.https-a.public.default"
    assert hcm(b).rds.route_config_name == "https.443.https-b.public.default"
    ctx = tls_context(a)
    common = ctx.common_tls_context
    assert [c.certificate_chain.filename for c in common.tls_certificates] == [str(tmp_path / "cert.pem")]
    assert [c.private_key.filename for c in common.tls_certificates] == [str(tmp_path / "key.pem")]
    assert not common.tls_certificate_sds_secret_configs  # no agent to serve file-cert: names
    assert list(common.alpn_protocols) == ["h2", "http/1.1"]
    assert ctx.HasField("require_client_certificate") and ctx.require_client_certificate.value is False
    assert not common.HasField("validation_context")  # SIMPLE does not verify clients


def test_gateway_tcp_and_passthrough_servers_forward_with_virtual_service_routes(tmp_path: Path) -> None:
    listeners = by_name(generate_listeners(GATEWAY_PROXY, environment(WORKLOADS, gateways(tmp_path))))
    [tcp] = listeners["0.0.0.0_5432"].filter_chains
    assert tcp_proxy(tcp).cluster == f"outbound|5432||{DB}"
    [sni] = listeners["0.0.0.0_8443"].filter_chains
    assert list(sni.filter_chain_match.server_names) == ["api.example.com"]
    assert tcp_proxy(sni).cluster == "outbound|443||api.example.com"
    assert not sni.HasField("transport_socket")  # passthrough: TLS stays end to end


def test_gateway_port_translates_to_the_gateway_service_target_port() -> None:
    ns, sel = "istio-system", "istio: ingressgateway"
    docs = "".join(
        [
            svc("istio-ingressgateway", "[{name: http, port: 80, targetPort: 8080}]", "10.96.0.9", sel, ns),
            pod("ingress-0", "10.0.0.5", sel, ns),
            slice_("istio-ingressgateway", "ingress-0", "10.0.0.5", "[{name: http, port: 8080, protocol: TCP}]", ns),
            """
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]
""",
        ]
    )
    listeners = generate_listeners(GATEWAY_PROXY, environment(docs))
    assert [x.name for x in listeners] == ["0.0.0.0_8080"]
    assert route_names(listeners) == ["http.8080"]


# --- a real Envoy accepts what is generated -----------------------------------------------------


def check_with_envoy(proxy: Proxy, node_id: str, push: PushContext, tmp_path: Path) -> list[listener_pb2.Listener]:
    listeners = generate_listeners(proxy, push)
    assert listeners
    validate_bootstrap(agent_bootstrap(node_id, generate_clusters(proxy, push), listeners), tmp_path)
    return listeners


@pytest.mark.parametrize("name", ["productpage", "ingress"])
def test_real_envoy_accepts_bookinfo_listeners(name: str, tmp_path: Path) -> None:
    spec = yaml.safe_load((ROOT / "tests" / "data" / "golden" / "bookinfo" / "proxies.yaml").read_text())[name]
    proxy = build_proxy(spec["nodeId"], {"LABELS": spec.get("labels", {})})
    listeners = check_with_envoy(proxy, spec["nodeId"], push_context_from_dir(BOOKINFO), tmp_path)
    expected = {"productpage": ["9080"], "ingress": ["http.8080"]}[name]
    assert route_names(listeners) == expected


MORE_SHAPES = "".join(
    [
        svc("gw", "[{name: grpc-web, port: 8081}]", "10.96.1.8"),
        svc("mongo", "[{name: mongo, port: 27017}]", "10.96.1.10"),
        svc("secure", "[{name: https, port: 8443}]", "10.96.1.11"),
        """
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: office, namespace: default}
spec:
  hosts: [office.internal]
  addresses: [10.20.0.0/16]
  location: MESH_EXTERNAL
  resolution: NONE
  ports: [{number: 3307, name: tcp, protocol: TCP}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ext-sni, namespace: default}
spec:
  hosts: [api.example.com]
  tls:
  - match: [{sniHosts: [api.example.com], port: 443}]
    route: [{destination: {host: api.example.com, port: {number: 443}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: office-split, namespace: default}
spec:
  hosts: [office.internal]
  tcp:
  - match: [{destinationSubnets: [10.20.1.0/24]}]
    route: [{destination: {host: db, port: {number: 5432}}}]
""",
    ]
)


def test_cidr_service_entry_listens_on_the_wildcard_and_matches_prefixes() -> None:
    listener = by_name(generate_listeners(sidecar(), environment(WORKLOADS, MORE_SHAPES)))["0.0.0.0_3307"]
    subnet, own = listener.filter_chains
    prefix = subnet.filter_chain_match.prefix_ranges[0]
    assert (prefix.address_prefix, prefix.prefix_len.value) == ("10.20.1.0", 24)
    assert tcp_proxy(subnet).cluster == f"outbound|5432||{DB}"
    prefix = own.filter_chain_match.prefix_ranges[0]
    assert (prefix.address_prefix, prefix.prefix_len.value) == ("10.20.0.0", 16)
    assert tcp_proxy(own).cluster == "outbound|3307||office.internal"
    assert listener.default_filter_chain.name == "PassthroughFilterChain"


def test_mongo_port_gets_the_mongo_proxy_in_front_of_tcp_proxy() -> None:
    listener = by_name(generate_listeners(sidecar(), environment(WORKLOADS, MORE_SHAPES)))["10.96.1.10_27017"]
    names = [f.name for f in listener.filter_chains[0].filters]
    assert names == ["envoy.filters.network.mongo_proxy", "envoy.filters.network.tcp_proxy"]


def test_real_envoy_accepts_every_sidecar_listener_shape(tmp_path: Path) -> None:
    push = environment(WORKLOADS, EGRESS_BOUND, MORE_SHAPES)
    node = "sidecar~10.1.0.1~web-0.default~default.svc.cluster.local"
    for mode in ("REDIRECT", "TPROXY", "NONE"):
        check_with_envoy(sidecar(mode), node, push, tmp_path)


def test_real_envoy_accepts_gateway_listeners_with_tls_files(tmp_path: Path) -> None:
    make_cert(tmp_path)
    push = environment(WORKLOADS, gateways(tmp_path))
    node = "router~10.0.0.5~ingress-0.istio-system~istio-system.svc.cluster.local"
    listeners = check_with_envoy(GATEWAY_PROXY, node, push, tmp_path)
    assert len(listeners) == 4


def test_gateway_mutual_istio_mutual_and_credential_tls_shapes_pass_envoy(tmp_path: Path) -> None:
    make_cert(tmp_path)
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    docs = f"""
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: mtls, namespace: default}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: 9443, name: https-mutual, protocol: HTTPS}}
    hosts: ["m.example.com"]
    tls: {{mode: MUTUAL, serverCertificate: {cert}, privateKey: {key}, caCertificates: {cert},
          subjectAltNames: [client.example.com], minProtocolVersion: TLSV1_3, insecureSkipVerify: true}}
  - port: {{number: 15443, name: https-mesh, protocol: HTTPS}}
    hosts: ["*"]
    tls: {{mode: ISTIO_MUTUAL}}
  - port: {{number: 10443, name: tls-cred, protocol: TLS}}
    hosts: ["*"]
    tls: {{mode: SIMPLE, credentialName: db-cert}}
  - port: {{number: 11443, name: https-cred-mutual, protocol: HTTPS}}
    hosts: ["c.example.com"]
    tls: {{mode: MUTUAL, credentialName: web-cert}}
  - port: {{number: 12443, name: https-own-ca, protocol: HTTPS}}
    hosts: ["o.example.com"]
    tls: {{mode: OPTIONAL_MUTUAL, credentialName: web-cert, caCertCredentialName: partners-cacert}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: cred-tcp, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [mtls]
  tcp: [{{route: [{{destination: {{host: db}}}}]}}]
"""
    push = environment(WORKLOADS, docs)
    node = "router~10.0.0.5~ingress-0.istio-system~istio-system.svc.cluster.local"
    listeners = by_name(check_with_envoy(GATEWAY_PROXY, node, push, tmp_path))
    mutual = tls_context(listeners["0.0.0.0_9443"].filter_chains[0])
    assert mutual.require_client_certificate.value is True
    validation = mutual.common_tls_context.validation_context
    assert validation.trusted_ca.filename == str(cert)
    assert [m.exact for m in validation.match_subject_alt_names] == ["client.example.com"]
    # insecureSkipVerify: the client's certificate is asked for and taken unverified
    assert validation.trust_chain_verification == validation.ACCEPT_UNTRUSTED
    assert mutual.common_tls_context.tls_params.tls_minimum_protocol_version == 4  # TLSv1_3
    mesh = tls_context(listeners["0.0.0.0_15443"].filter_chains[0]).common_tls_context
    assert [s.name for s in mesh.tls_certificate_sds_secret_configs] == ["default"]
    assert mesh.combined_validation_context.validation_context_sds_secret_config.name == "ROOTCA"
    assert mesh.combined_validation_context.default_validation_context.trust_chain_verification == 0  # verified
    [cred_chain] = listeners["0.0.0.0_10443"].filter_chains
    cred = tls_context(cred_chain).common_tls_context
    [secret] = cred.tls_certificate_sds_secret_configs
    assert secret.name == "kubernetes://db-cert" and secret.sds_config.HasField("ads")
    assert tcp_proxy(cred_chain).cluster == f"outbound|5432||{DB}"
    # a credential's clients are verified against its own CA, or the one caCertCredentialName names
    for port, ca in ((11443, "kubernetes://web-cert-cacert"), (12443, "kubernetes://partners-cacert")):
        common = tls_context(listeners[f"0.0.0.0_{port}"].filter_chains[0]).common_tls_context
        assert [s.name for s in common.tls_certificate_sds_secret_configs] == ["kubernetes://web-cert"]
        assert common.combined_validation_context.validation_context_sds_secret_config.name == ca
