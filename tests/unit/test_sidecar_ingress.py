"""Sidecar ``ingress`` listeners and inbound connection pools, as istiod builds them
(listener_inbound.go buildInboundChainConfigs / buildInboundListeners, cluster.go
buildInboundClusters / buildInboundClustersFromSidecar, cluster_builder.go buildInboundCluster,
sidecar.go InboundConnectionPoolForPort), checked against a real Envoy too."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2

from app.api import networking as net
from app.model.features import Features
from app.model.proxy import Proxy
from app.model.push_context import PushContext
from app.model.sidecar_ingress import default_endpoint_address, global_unicast_ip, inbound_connection_pool
from app.xds.generators.reference import generate_clusters, generate_listeners
from tests.support.envoy import agent_bootstrap, validate_bootstrap
from tests.support.mesh import endpoint_slice, kube_pod, kube_service, push_context, sidecar_proxy, slice_endpoint

C = cluster_pb2.Cluster
CREATED = "2026-01-01T00:00:00Z"
ORIGINAL_DST = "envoy.filters.listener.original_dst"
HCM = "envoy.filters.network.http_connection_manager"
MAX = 4294967295

# web-0 (10.1.0.1) serves web on 8080 (HTTP) and web-admin on 9000 (TCP)
WEB_0 = slice_endpoint("10.1.0.1", "web-0")
WORKLOADS = "".join(
    [
        kube_service("web", "[{name: http, port: 80, targetPort: 8080}]", cluster_ip="10.96.1.1", selector="app: web"),
        kube_service("web-admin", "[{name: tcp-admin, port: 9000}]", cluster_ip="10.96.1.9", selector="app: web"),
        kube_pod("web-0", "10.1.0.1", "app: web", service_account="web"),
        endpoint_slice("web", "[{name: http, port: 8080, protocol: TCP}]", WEB_0),
        endpoint_slice("web-admin", "[{name: tcp-admin, port: 9000, protocol: TCP}]", WEB_0),
    ]
)


def sidecar(spec: str, name: str = "web", namespace: str = "default") -> str:
    return f"""
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: {name}, namespace: {namespace}}}
spec:
{spec}
"""


def destination_rule(spec: str, name: str = "web") -> str:
    return f"""
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: {name}, namespace: default, creationTimestamp: "{CREATED}"}}
spec:
{spec}
"""


DISABLE = """
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: default}
spec: {mtls: {mode: DISABLE}}
"""


def proxy(interception: str = "REDIRECT") -> Proxy:
    return sidecar_proxy("web-0.default", "10.1.0.1", {"app": "web"}, interception_mode=interception)


def listeners(push: PushContext, p: Proxy | None = None) -> dict[str, listener_pb2.Listener]:
    return {m.name: m for m in generate_listeners(p or proxy(), push)}


def clusters(push: PushContext, p: Proxy | None = None) -> dict[str, cluster_pb2.Cluster]:
    return {c.name: c for c in generate_clusters(p or proxy(), push) if c.name.startswith("inbound|")}


def port_chains(listener: listener_pb2.Listener) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for chain in listener.filter_chains:
        port = chain.filter_chain_match.destination_port.value
        if port and chain.name != "virtualInbound-blackhole":
            out.setdefault(port, []).append(chain.name)
    return out


def route_decorator(chain: object) -> str:
    [f] = [f for f in chain.filters if f.name == HCM]  # type: ignore[attr-defined]
    manager = hcm_pb2.HttpConnectionManager()
    f.typed_config.Unpack(manager)
    return str(manager.route_config.virtual_hosts[0].routes[0].decorator.operation)


def thresholds(c: cluster_pb2.Cluster) -> tuple[int, int]:
    t = c.circuit_breakers.thresholds[0]
    return t.max_connections.value, t.max_pending_requests.value


# --- pure parts -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "ips", "expected"),
    [
        ("", ["10.1.0.1"], ("", 0)),
        ("127.0.0.1:8080", ["10.1.0.1"], ("127.0.0.1", 8080)),
        ("127.0.0.1:8080", ["fd00::1"], ("::1", 8080)),  # loopback of the proxy's own family
        ("[::1]:8080", ["10.1.0.1"], ("127.0.0.1", 8080)),
        ("[::1]:8080", ["10.1.0.1", "fd00::1"], ("::1", 8080)),
        ("0.0.0.0:8080", ["fd00::1", "10.1.0.1"], ("10.1.0.1", 8080)),  # the pod's IPv4
        ("0.0.0.0:8080", ["fd00::1"], ("127.0.0.1", 8080)),
        ("[::]:8080", ["10.1.0.1", "fd00::1"], ("fd00::1", 8080)),
        ("unix:///var/run/app.sock", ["10.1.0.1"], ("unix:///var/run/app.sock", 0)),
        ("localhost", ["10.1.0.1"], None),
        ("127.0.0.1:+8080", ["10.1.0.1"], ("127.0.0.1", 8080)),  # strconv.Atoi, as validation reads it
        ("127.0.0.1:\u00b2", ["10.1.0.1"], None),
    ],
)
def test_default_endpoint_as_build_inbound_clusters_from_sidecar_reads_it(
    endpoint: str, ips: list[str], expected: tuple[str, int] | None
) -> None:
    assert default_endpoint_address(endpoint, ips) == expected


def test_global_unicast_ip_skips_loopback_and_link_local_but_not_private() -> None:
    assert global_unicast_ip(["127.0.0.1", "169.254.1.1", "fe80::1", "10.1.0.1"]) == "10.1.0.1"
    assert global_unicast_ip(["127.0.0.1"]) == ""


def test_inbound_connection_pool_for_port_prefers_the_entry_then_the_sidecar() -> None:
    sc = net.Sidecar()
    entry = sc.ingress.add()
    entry.port.number = 8080
    entry.connection_pool.tcp.max_connections = 5
    sc.ingress.add().port.number = 9000
    assert inbound_connection_pool(sc, 9000) is None
    sc.inbound_connection_pool.tcp.max_connections = 50
    assert inbound_connection_pool(sc, 8080).tcp.max_connections == 5  # type: ignore[union-attr]
    assert inbound_connection_pool(sc, 9000).tcp.max_connections == 50  # type: ignore[union-attr]
    assert inbound_connection_pool(None, 8080) is None


# --- listeners --------------------------------------------------------------------------------


INGRESS_8080 = """
  ingress:
  - port: {number: 8080, protocol: HTTP, name: http}
    defaultEndpoint: 127.0.0.1:18080
"""


def test_ingress_entries_replace_the_service_ports_on_virtual_inbound() -> None:
    vi = listeners(push_context(WORKLOADS, sidecar(INGRESS_8080)))["virtualInbound"]
    # 9000 (web-admin) is gone: a Sidecar with ingress entries declares the inbound ports
    by_port = port_chains(vi)
    assert list(by_port) == [8080]
    # bind: the proxy's global unicast IP names the chain (istiod getSidecarInboundBindIPs)
    assert set(by_port[8080]) == {"10.1.0.1_8080"}
    chain = next(c for c in vi.filter_chains if c.filter_chain_match.destination_port.value == 8080)
    md = chain.metadata.filter_metadata["istio"].fields["config"].string_value
    assert md == "/apis/networking.istio.io/v1/namespaces/default/sidecar/web"
    # the Sidecar stands in for the service in telemetry names: SIDECAR.NAMESPACE
    assert route_decorator(chain) == "web.default:8080/*"


def test_without_ingress_entries_every_service_port_gets_chains() -> None:
    vi = listeners(push_context(WORKLOADS, sidecar("  egress: [{hosts: ['./*']}]")))["virtualInbound"]
    assert list(port_chains(vi)) == [8080, 9000]
    assert set(port_chains(vi)[8080]) == {"0.0.0.0_8080"}


def test_merge_flag_keeps_the_service_ports_the_entries_leave_free() -> None:
    # PILOT_ALLOW_SIDECAR_SERVICE_INBOUND_LISTENER_MERGE
    features = Features(sidecar_service_inbound_listener_merge=True)
    push = push_context(WORKLOADS, sidecar(INGRESS_8080), features=features)
    by_port = port_chains(listeners(push)["virtualInbound"])
    assert list(by_port) == [8080, 9000]
    assert set(by_port[8080]) == {"10.1.0.1_8080"} and set(by_port[9000]) == {"0.0.0.0_9000"}
    assert sorted(clusters(push)) == ["inbound|8080||", "inbound|9000||"]


def test_capture_mode_none_entry_is_a_listener_of_its_own() -> None:
    spec = """
  ingress:
  - port: {number: 8080, protocol: HTTP, name: http}
    captureMode: NONE
    bind: 10.1.0.1
    defaultEndpoint: 127.0.0.1:18080
  - port: {number: 9000, protocol: TCP, name: tcp}
"""
    got = listeners(push_context(WORKLOADS, sidecar(spec)))
    bound = got["10.1.0.1_8080"]
    sock = bound.address.socket_address
    assert (sock.address, sock.port_value) == ("10.1.0.1", 8080)
    assert ORIGINAL_DST not in [f.name for f in bound.listener_filters]  # it binds: nothing redirected
    assert not bound.transparent.value
    assert list(port_chains(bound)) == [8080]
    assert list(port_chains(got["virtualInbound"])) == [9000]


def test_proxy_without_capture_gets_bound_ingress_listeners_and_no_virtual_inbound() -> None:
    got = listeners(push_context(WORKLOADS, sidecar(INGRESS_8080)), proxy("NONE"))
    assert "virtualInbound" not in got
    assert "10.1.0.1_8080" in got
    assert sorted(clusters(push_context(WORKLOADS, sidecar(INGRESS_8080)), proxy("NONE"))) == ["inbound|8080||"]
    # and without a Sidecar, nothing inbound at all: the app listens on its own ports
    assert not clusters(push_context(WORKLOADS), proxy("NONE"))
    assert not [n for n in listeners(push_context(WORKLOADS), proxy("NONE")) if n.startswith("10.1.0.1_")]


def test_ingress_on_an_envoy_static_port_is_skipped_only_for_http_or_wildcard_binds() -> None:
    # istiod CanBindToPort with no push: ingress binds are checked against 15021/15090 only
    spec = """
  ingress:
  - port: {number: 15021, protocol: HTTP, name: http}
  - port: {number: 15090, protocol: TCP, name: tcp}
  - port: {number: 15006, protocol: HTTP, name: http-capture}
"""
    assert list(port_chains(listeners(push_context(WORKLOADS, sidecar(spec)))["virtualInbound"])) == [15006, 15090]


def test_ingress_tls_needs_the_flag_and_a_disable_mode() -> None:
    spec = """
  ingress:
  - port: {number: 8443, protocol: HTTPS, name: https}
    defaultEndpoint: 127.0.0.1:8080
    tls: {mode: SIMPLE, serverCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem}
"""
    # ENABLE_TLS_ON_SIDECAR_INGRESS off (istiod's default): the entry's tls is ignored
    off = listeners(push_context(WORKLOADS, sidecar(spec), DISABLE))["virtualInbound"]
    [plain] = [c for c in off.filter_chains if c.filter_chain_match.destination_port.value == 8443]
    assert plain.filter_chain_match.transport_protocol == "raw_buffer"
    features = Features(tls_on_sidecar_ingress=True)
    on = listeners(push_context(WORKLOADS, sidecar(spec), DISABLE, features=features))["virtualInbound"]
    [chain] = [c for c in on.filter_chains if c.filter_chain_match.destination_port.value == 8443]
    assert chain.filter_chain_match.transport_protocol == "tls"
    ctx = tls_pb2.DownstreamTlsContext()
    chain.transport_socket.typed_config.Unpack(ctx)
    [cert] = ctx.common_tls_context.tls_certificates
    assert cert.certificate_chain.filename == "/etc/certs/cert.pem"
    assert [f.name for f in chain.filters][-1] == HCM  # HTTPS terminated: HTTP inside


# --- clusters ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "kind", "address", "bind"),
    [
        ("127.0.0.1:18080", C.STATIC, ("127.0.0.1", 18080), None),
        ("0.0.0.0:18080", C.STATIC, ("10.1.0.1", 18080), "127.0.0.6"),
        ("", C.ORIGINAL_DST, None, "127.0.0.6"),
    ],
)
def test_ingress_cluster_sends_to_the_default_endpoint(
    endpoint: str, kind: int, address: tuple[str, int] | None, bind: str | None
) -> None:
    spec = f"""
  ingress:
  - port: {{number: 8080, protocol: HTTP, name: http}}
    defaultEndpoint: "{endpoint}"
"""
    c = clusters(push_context(WORKLOADS, sidecar(spec)))["inbound|8080||"]
    assert c.type == kind
    if address is None:
        assert not c.load_assignment.endpoints
    else:
        sock = c.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
        assert (sock.address, sock.port_value) == address
    assert (c.upstream_bind_config.source_address.address or None) == bind


def test_ingress_cluster_to_a_unix_socket() -> None:
    spec = """
  ingress:
  - port: {number: 7070, protocol: TCP, name: tcp}
    defaultEndpoint: unix:///var/run/app.sock
"""
    c = clusters(push_context(WORKLOADS, sidecar(spec)))["inbound|7070||"]
    assert c.type == C.STATIC
    assert c.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.pipe.path == "/var/run/app.sock"
    # no service targets port 7070: a stand-in mesh-external service, so no services metadata
    assert "services" not in c.metadata.filter_metadata["istio"].fields


POOL_DR = destination_rule(
    """
  host: web.default.svc.cluster.local
  trafficPolicy:
    connectionPool: {tcp: {maxConnections: 7}, http: {http1MaxPendingRequests: 3}}
""",
)
SELECTOR_DR = destination_rule(
    """
  host: web.default.svc.cluster.local
  workloadSelector: {matchLabels: {app: web}}
  trafficPolicy:
    connectionPool: {tcp: {maxConnections: 99}}
""",
    name="web-selected",
)


def test_inbound_cluster_takes_the_selectorless_rules_pool_even_when_a_selector_rule_matches() -> None:
    # istiod SidecarScope.DestinationRule(TrafficDirectionInbound): workloadSelector rules are
    # honoured outbound only
    c = clusters(push_context(WORKLOADS, POOL_DR, SELECTOR_DR))["inbound|8080||"]
    assert thresholds(c) == (7, 3)
    assert c.metadata.filter_metadata["istio"].fields["config"].string_value.endswith("/destination-rule/web")
    # outbound, the selector rule is the one the proxy applies
    out = {c.name: c for c in generate_clusters(proxy(), push_context(WORKLOADS, POOL_DR, SELECTOR_DR))}
    assert thresholds(out["outbound|80||web.default.svc.cluster.local"])[0] == 99


def test_sidecar_inbound_connection_pool_replaces_the_rules_pool_whole() -> None:
    # cluster_builder.go buildInboundCluster: opts.policy.ConnectionPool = sidecarConnPool, so
    # the rule's http1MaxPendingRequests returns to the default
    push = push_context(WORKLOADS, POOL_DR, sidecar("  inboundConnectionPool: {tcp: {maxConnections: 50}}"))
    got = clusters(push)
    assert thresholds(got["inbound|8080||"]) == (50, MAX)
    assert thresholds(got["inbound|9000||"]) == (50, MAX)


def test_ingress_entry_pool_beats_the_sidecar_wide_pool() -> None:
    spec = """
  inboundConnectionPool: {tcp: {maxConnections: 50}}
  ingress:
  - port: {number: 8080, protocol: HTTP, name: http}
    defaultEndpoint: 127.0.0.1:18080
    connectionPool: {tcp: {maxConnections: 5}}
  - port: {number: 9000, protocol: TCP, name: tcp}
    defaultEndpoint: 127.0.0.1:19000
"""
    got = clusters(push_context(WORKLOADS, POOL_DR, sidecar(spec)))
    assert thresholds(got["inbound|8080||"])[0] == 5
    assert thresholds(got["inbound|9000||"])[0] == 50


# --- a real Envoy -----------------------------------------------------------------------------


def all_config(push: PushContext, p: Proxy) -> tuple[Sequence[cluster_pb2.Cluster], Sequence[listener_pb2.Listener]]:
    return generate_clusters(p, push), generate_listeners(p, push)


@pytest.mark.parametrize("interception", ["REDIRECT", "NONE"])
def test_real_envoy_accepts_sidecar_ingress_config(interception: str, tmp_path: Path) -> None:
    spec = """
  inboundConnectionPool: {http: {http2MaxRequests: 20}}
  ingress:
  - port: {number: 8080, protocol: HTTP, name: http}
    defaultEndpoint: 127.0.0.1:18080
  - port: {number: 9000, protocol: TCP, name: tcp}
    captureMode: NONE
    bind: 127.0.0.1
    defaultEndpoint: unix:///tmp/pilotfish-test-app.sock
  - port: {number: 9443, protocol: TLS, name: tls}
"""
    p = proxy(interception)
    cds, lds = all_config(push_context(WORKLOADS, sidecar(spec)), p)
    validate_bootstrap(agent_bootstrap(p.id, cds, lds), tmp_path)


def test_a_root_namespace_sidecar_names_ingress_chains_after_the_proxys_namespace() -> None:
    # istiod convertToSidecarScope(ps, rootSidecar, proxy.ConfigNamespace): the scope's
    # namespace is the proxy's, and so are the chain metadata and the stand-in host
    root = sidecar(INGRESS_8080, name="default", namespace="istio-system")
    vi = listeners(push_context(WORKLOADS, root))["virtualInbound"]
    chain = next(c for c in vi.filter_chains if c.filter_chain_match.destination_port.value == 8080)
    md = chain.metadata.filter_metadata["istio"].fields["config"].string_value
    assert md == "/apis/networking.istio.io/v1/namespaces/default/sidecar/default"
    assert route_decorator(chain) == "default.default:8080/*"


def test_grpc_ingress_ports_get_no_inbound_retry_policy() -> None:
    # istiod BuildDefaultHTTPInboundRoute: "reset-before-request" retries never on gRPC ports
    spec = """
  ingress:
  - port: {number: 8080, protocol: GRPC, name: grpc}
    defaultEndpoint: 127.0.0.1:18080
  - port: {number: 9000, protocol: HTTP, name: http}
    defaultEndpoint: 127.0.0.1:19000
"""
    vi = listeners(push_context(WORKLOADS, sidecar(spec)))["virtualInbound"]
    retries = {}
    for chain in vi.filter_chains:
        port = chain.filter_chain_match.destination_port.value
        for f in chain.filters:
            if f.name == HCM:
                manager = hcm_pb2.HttpConnectionManager()
                f.typed_config.Unpack(manager)
                action = manager.route_config.virtual_hosts[0].routes[0].route
                retries[port] = action.retry_policy.retry_on
    assert retries == {0: "reset-before-request", 8080: "", 9000: "reset-before-request"}  # 0: passthrough
