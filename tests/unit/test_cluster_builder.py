"""Cluster builders and the CDS generator against istiod's behaviour, field by field.

Each test pins one behaviour of istiod's cluster_builder.go / cluster_traffic_policy.go /
cluster_tls.go that is easy to get subtly wrong; the last test runs a real Envoy in validate
mode over every cluster shape the builders emit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.extensions.network.dns_resolver.cares.v3 import cares_dns_resolver_pb2
from envoy.extensions.transport_sockets.proxy_protocol.v3 import upstream_proxy_protocol_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from google.protobuf import json_format

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.config.mesh import default_mesh_config
from app.model.destination_rule import ConsolidatedDestinationRule
from app.model.proxy import Proxy, ProxyType
from app.model.push_context import PushContext, PushInputs
from app.model.service import Endpoint, HealthStatus, Protocol, Registry, Resolution, Service, ServicePort
from app.translate.cluster.builder import (
    build_blackhole_cluster,
    build_inbound_cluster,
    build_inbound_passthrough_cluster,
    build_outbound_clusters,
    build_passthrough_cluster,
    service_identities,
)
from app.translate.cluster.policy import HTTP_PROTOCOL_OPTIONS_KEY
from app.xds.generators.reference import generate_clusters
from tests.support.envoy import agent_bootstrap, validate_bootstrap
from tests.support.mesh import (
    config_doc,
    endpoint_slice,
    kube_pod,
    kube_service,
    push_context,
    push_context_from_dir,
    router_proxy,
    sidecar_proxy,
    slice_endpoint,
)

C = cluster_pb2.Cluster
MAX = 4294967295
HOST = "reviews.default.svc.cluster.local"
SA_REVIEWS = "spiffe://cluster.local/ns/default/sa/reviews"
SA_OTHER = "spiffe://cluster.local/ns/default/sa/reviews-v2"
HTTP = ServicePort("http", 9080, Protocol.HTTP)
GRPC = ServicePort("grpc", 9090, Protocol.GRPC)
TCP = ServicePort("tcp", 9000, Protocol.TCP)
AUTO = ServicePort("auto", 8000, Protocol.UNSUPPORTED)
SIDECAR = sidecar_proxy("productpage-1.default", "10.0.0.1", {"app": "productpage"}, locality="us-east1/us-east1-b")
GATEWAY = router_proxy("ingress-1.istio-system", "10.0.0.9")


def mesh(**fields: Any) -> MeshConfig:
    m = default_mesh_config()
    json_format.ParseDict(fields, m)
    return m


MESH = mesh()


def service(
    host: str = HOST,
    ports: Sequence[ServicePort] = (HTTP, GRPC, TCP, AUTO),
    *,
    resolution: Resolution = Resolution.CLIENT_SIDE_LB,
    registry: Registry = Registry.KUBERNETES,
    mesh_external: bool = False,
    service_accounts: tuple[str, ...] = (),
) -> Service:
    return Service(
        hostname=host,
        namespace="default",
        ports=tuple(ports),
        registry=registry,
        name=host.split(".")[0],
        resolution=resolution,
        mesh_external=mesh_external,
        service_accounts=service_accounts,
    )


REVIEWS = service()


def rule(spec: Mapping[str, Any], *, name: str = "reviews", namespace: str = "default") -> ConsolidatedDestinationRule:
    dr = json_format.ParseDict({"host": HOST, **spec}, net.DestinationRule())
    return ConsolidatedDestinationRule(dr, name, namespace, (f"{namespace}/{name}",), frozenset({"*"}))


def build(
    port: ServicePort = HTTP,
    dr: ConsolidatedDestinationRule | None = None,
    *,
    svc: Service = REVIEWS,
    proxy: Proxy = SIDECAR,
    mesh_config: MeshConfig = MESH,
    endpoints: Sequence[Endpoint] = (),
    identities: Sequence[str] = (SA_REVIEWS,),
) -> dict[str, cluster_pb2.Cluster]:
    built = build_outbound_clusters(proxy, mesh_config, svc, port, endpoints, dr, identities)
    return {c.name: c for c in built}


def default_of(clusters: Mapping[str, cluster_pb2.Cluster], port: int = 9080, host: str = HOST) -> cluster_pb2.Cluster:
    return clusters[f"outbound|{port}||{host}"]


def http_options(c: cluster_pb2.Cluster) -> http_protocol_options_pb2.HttpProtocolOptions | None:
    if HTTP_PROTOCOL_OPTIONS_KEY not in c.typed_extension_protocol_options:
        return None
    opts = http_protocol_options_pb2.HttpProtocolOptions()
    assert c.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS_KEY].Unpack(opts)
    return opts


def tls_context(socket: Any) -> tls_pb2.UpstreamTlsContext:
    assert socket.name == "envoy.transport_sockets.tls"
    out = tls_pb2.UpstreamTlsContext()
    assert socket.typed_config.Unpack(out)
    return out


def istio_md(c: cluster_pb2.Cluster) -> dict[str, Any]:
    return json_format.MessageToDict(c.metadata.filter_metadata["istio"])


def sans(ctx: tls_pb2.UpstreamTlsContext) -> list[str]:
    v = ctx.common_tls_context.combined_validation_context.default_validation_context
    return [m.exact for m in v.match_subject_alt_names]


# --- base shape ----------------------------------------------------------------------------


def test_default_eds_cluster_has_istiod_defaults_and_auto_mtls_matches() -> None:
    c = default_of(build())
    assert c.type == C.EDS
    assert c.alt_stat_name == f"outbound|9080||{HOST};"
    eds = c.eds_cluster_config
    assert eds.service_name == c.name
    assert eds.eds_config.HasField("ads")
    assert eds.eds_config.HasField("initial_fetch_timeout") and eds.eds_config.initial_fetch_timeout.seconds == 0
    assert eds.eds_config.resource_api_version == 2  # V3
    assert c.connect_timeout.seconds == 10
    assert c.lb_policy == C.LEAST_REQUEST
    assert c.common_lb_config.HasField("healthy_panic_threshold")  # 0 %: PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS
    assert c.common_lb_config.healthy_panic_threshold.value == 0
    [t] = c.circuit_breakers.thresholds
    assert (t.max_connections.value, t.max_pending_requests.value, t.max_requests.value, t.max_retries.value) == (
        MAX,
        MAX,
        MAX,
        MAX,
    )
    assert t.track_remaining is False  # DISABLE_TRACK_REMAINING_CB_METRICS defaults to true
    assert http_options(c) is None  # plain HTTP/1 port: nothing to say
    assert istio_md(c) == {"services": [{"host": HOST, "name": "reviews", "namespace": "default"}]}
    assert not c.HasField("transport_socket")
    istio, plain = c.transport_socket_matches
    assert istio.name == "tlsMode-istio"
    assert json_format.MessageToDict(istio.match) == {"tlsMode": "istio"}
    ctx = tls_context(istio.transport_socket)
    assert ctx.sni == f"outbound_.9080_._.{HOST}"
    assert list(ctx.common_tls_context.alpn_protocols) == ["istio-peer-exchange", "istio"]
    assert sans(ctx) == [SA_REVIEWS]
    [cert] = ctx.common_tls_context.tls_certificate_sds_secret_configs
    assert cert.name == "default"
    api = cert.sds_config.api_config_source
    assert api.grpc_services[0].envoy_grpc.cluster_name == "sds-grpc"
    assert api.set_node_on_first_message_only
    assert ctx.common_tls_context.combined_validation_context.validation_context_sds_secret_config.name == "ROOTCA"
    assert plain.name == "tlsMode-disabled"
    assert plain.HasField("match") and len(plain.match.fields) == 0
    assert plain.transport_socket.name == "envoy.transport_sockets.raw_buffer"


def test_http2_and_grpc_ports_get_explicit_h2_and_h2_alpn() -> None:
    c = default_of(build(GRPC), 9090)
    opts = http_options(c)
    assert opts is not None and opts.explicit_http_config.HasField("http2_protocol_options")
    ctx = tls_context(c.transport_socket_matches[0].transport_socket)
    assert list(ctx.common_tls_context.alpn_protocols) == ["istio-peer-exchange", "istio", "h2"]


def test_sniffed_port_uses_downstream_protocol_on_sidecars_only() -> None:
    opts = http_options(default_of(build(AUTO), 8000))
    assert opts is not None
    udp = opts.use_downstream_protocol_config
    assert udp.HasField("http_protocol_options") and udp.HasField("http2_protocol_options")
    assert http_options(default_of(build(AUTO, proxy=GATEWAY), 8000)) is None


# --- DestinationRule merge -----------------------------------------------------------------


def test_port_level_settings_replace_the_rule_policy_without_inheriting() -> None:
    dr = rule(
        {
            "trafficPolicy": {
                "connectionPool": {"tcp": {"maxConnections": 100}},
                "outlierDetection": {"consecutive5xxErrors": 7},
                "portLevelSettings": [{"port": {"number": 9080}, "loadBalancer": {"simple": "ROUND_ROBIN"}}],
            }
        }
    )
    on_port = default_of(build(HTTP, dr))
    assert on_port.lb_policy == C.ROUND_ROBIN
    assert on_port.circuit_breakers.thresholds[0].max_connections.value == MAX  # not inherited
    assert not on_port.HasField("outlier_detection")
    other = default_of(build(TCP, dr), 9000)
    assert other.lb_policy == C.LEAST_REQUEST
    assert other.circuit_breakers.thresholds[0].max_connections.value == 100
    assert other.outlier_detection.consecutive_5xx.value == 7


def test_subset_policy_overrides_the_rule_part_by_part() -> None:
    dr = rule(
        {
            "trafficPolicy": {
                "loadBalancer": {"simple": "ROUND_ROBIN"},
                "connectionPool": {"http": {"http2MaxRequests": 50}},
            },
            "subsets": [
                {"name": "v1", "labels": {"version": "v1"}},
                {"name": "v2", "labels": {"version": "v2"}, "trafficPolicy": {"loadBalancer": {"simple": "RANDOM"}}},
            ],
        }
    )
    out = build(HTTP, dr)
    assert list(out) == [f"outbound|9080||{HOST}", f"outbound|9080|v1|{HOST}", f"outbound|9080|v2|{HOST}"]
    v1, v2 = out[f"outbound|9080|v1|{HOST}"], out[f"outbound|9080|v2|{HOST}"]
    assert v1.lb_policy == C.ROUND_ROBIN
    assert v2.lb_policy == C.RANDOM
    assert v2.circuit_breakers.thresholds[0].max_requests.value == 50  # kept from the rule
    assert v2.eds_cluster_config.service_name == f"outbound|9080|v2|{HOST}"
    md = istio_md(v2)
    assert md["subset"] == "v2"
    assert md["config"] == "/apis/networking.istio.io/v1/namespaces/default/destination-rule/reviews"


def test_subset_without_policy_still_gets_the_rules_port_level_settings() -> None:
    dr = rule(
        {
            "trafficPolicy": {
                "loadBalancer": {"simple": "RANDOM"},
                "portLevelSettings": [{"port": {"number": 9080}, "loadBalancer": {"simple": "ROUND_ROBIN"}}],
            },
            "subsets": [{"name": "v1", "labels": {"version": "v1"}}],
        }
    )
    assert build(HTTP, dr)[f"outbound|9080|v1|{HOST}"].lb_policy == C.ROUND_ROBIN


def test_subset_port_level_settings_beat_the_subset_policy() -> None:
    dr = rule(
        {
            "subsets": [
                {
                    "name": "v1",
                    "labels": {"version": "v1"},
                    "trafficPolicy": {
                        "connectionPool": {"tcp": {"maxConnections": 5}},
                        "portLevelSettings": [{"port": {"number": 9080}, "loadBalancer": {"simple": "RANDOM"}}],
                    },
                }
            ]
        }
    )
    v1 = build(HTTP, dr)[f"outbound|9080|v1|{HOST}"]
    assert v1.lb_policy == C.RANDOM
    assert v1.circuit_breakers.thresholds[0].max_connections.value == MAX


# --- TLS -----------------------------------------------------------------------------------


def test_istio_mutual_sni_names_the_subset_and_sans_default_to_service_identities() -> None:
    dr = rule(
        {
            "trafficPolicy": {"tls": {"mode": "ISTIO_MUTUAL"}},
            "subsets": [{"name": "v1", "labels": {"version": "v1"}}],
        }
    )
    out = build(HTTP, dr, identities=(SA_REVIEWS, SA_OTHER))
    default, v1 = out[f"outbound|9080||{HOST}"], out[f"outbound|9080|v1|{HOST}"]
    # user-specified TLS: a plain transport socket, no tlsMode matches
    assert len(default.transport_socket_matches) == 0
    assert tls_context(default.transport_socket).sni == f"outbound_.9080_._.{HOST}"
    v1_ctx = tls_context(v1.transport_socket)
    assert v1_ctx.sni == f"outbound_.9080_.v1_.{HOST}"
    assert sans(v1_ctx) == [SA_REVIEWS, SA_OTHER]
    assert "alpn_override" not in istio_md(default)


def test_istio_mutual_keeps_user_sni_and_sans() -> None:
    dr = rule({"trafficPolicy": {"tls": {"mode": "ISTIO_MUTUAL", "sni": "x.example", "subjectAltNames": ["a"]}}})
    ctx = tls_context(default_of(build(HTTP, dr)).transport_socket)
    assert ctx.sni == "x.example"
    assert sans(ctx) == ["a"]


def test_auto_mtls_matches_absent_for_mesh_external_headless_passthrough_and_when_disabled() -> None:
    external = service("api.example.com", (HTTP,), registry=Registry.EXTERNAL, mesh_external=True)
    assert not default_of(build(svc=external), host="api.example.com").transport_socket_matches
    assert not default_of(build(mesh_config=mesh(enableAutoMtls=False))).transport_socket_matches
    headless = default_of(build(svc=service(resolution=Resolution.PASSTHROUGH)))
    assert headless.type == C.ORIGINAL_DST and not headless.transport_socket_matches
    passthrough = rule({"trafficPolicy": {"loadBalancer": {"simple": "PASSTHROUGH"}}})
    c = default_of(build(HTTP, passthrough))
    assert c.type == C.ORIGINAL_DST and c.lb_policy == C.CLUSTER_PROVIDED
    assert not c.HasField("eds_cluster_config") and not c.transport_socket_matches


def test_tls_disable_turns_auto_mtls_off() -> None:
    c = default_of(build(HTTP, rule({"trafficPolicy": {"tls": {"mode": "DISABLE"}}})))
    assert not c.HasField("transport_socket") and not c.transport_socket_matches


def test_simple_tls_with_file_ca_is_served_over_sds_with_auto_sni_and_san() -> None:
    dr = rule({"trafficPolicy": {"tls": {"mode": "SIMPLE", "caCertificates": "/etc/ca.pem"}}})
    c = default_of(build(HTTP, dr))
    ctx = tls_context(c.transport_socket)
    assert ctx.sni == ""
    common = ctx.common_tls_context
    assert len(common.tls_certificate_sds_secret_configs) == 0
    assert common.combined_validation_context.validation_context_sds_secret_config.name == "file-root:/etc/ca.pem"
    assert not common.alpn_protocols
    assert common.tls_params.tls_minimum_protocol_version == common_pb2.TlsParameters.TLSv1_2
    assert common.tls_params.tls_maximum_protocol_version == common_pb2.TlsParameters.TLSv1_3
    opts = http_options(c)
    assert opts is not None
    assert opts.upstream_http_protocol_options.auto_sni and opts.upstream_http_protocol_options.auto_san_validation
    assert opts.explicit_http_config.HasField("http_protocol_options")  # Envoy needs a protocol
    assert istio_md(c)["alpn_override"] == "false"


def test_simple_tls_with_sni_and_sans_has_no_auto_sni() -> None:
    dr = rule({"trafficPolicy": {"tls": {"mode": "SIMPLE", "sni": "api.example", "subjectAltNames": ["api.example"]}}})
    c = default_of(build(HTTP, dr))
    ctx = tls_context(c.transport_socket)
    assert ctx.sni == "api.example" and sans(ctx) == ["api.example"]
    # no CA given: the system trust store, through the agent
    assert ctx.common_tls_context.combined_validation_context.validation_context_sds_secret_config.name == (
        "file-root:system"
    )
    assert http_options(c) is None


def test_simple_tls_insecure_skip_verify_has_an_empty_validation_context() -> None:
    dr = rule({"trafficPolicy": {"tls": {"mode": "SIMPLE", "insecureSkipVerify": True}}})
    c = default_of(build(HTTP, dr))
    common = tls_context(c.transport_socket).common_tls_context
    assert common.WhichOneof("validation_context_type") == "validation_context"
    opts = http_options(c)
    assert opts is not None
    assert opts.upstream_http_protocol_options.auto_sni and not opts.upstream_http_protocol_options.auto_san_validation


def test_mutual_tls_file_certs_and_missing_key_leaves_the_cluster_plaintext() -> None:
    tls = {"mode": "MUTUAL", "clientCertificate": "/c.pem", "privateKey": "/k.pem", "caCertificates": "/ca.pem"}
    ctx = tls_context(default_of(build(GRPC, rule({"trafficPolicy": {"tls": tls}})), 9090).transport_socket)
    [cert] = ctx.common_tls_context.tls_certificate_sds_secret_configs
    assert cert.name == "file-cert:/c.pem~/k.pem"
    assert cert.sds_config.api_config_source.grpc_services[0].envoy_grpc.cluster_name == "sds-grpc"
    assert list(ctx.common_tls_context.alpn_protocols) == ["h2"]
    broken = default_of(build(HTTP, rule({"trafficPolicy": {"tls": {"mode": "MUTUAL", "clientCertificate": "/c"}}})))
    assert not broken.HasField("transport_socket") and not broken.transport_socket_matches


def test_credential_name_is_fetched_over_ads_on_gateways_and_withheld_from_unscoped_sidecars() -> None:
    spec = {"trafficPolicy": {"tls": {"mode": "MUTUAL", "credentialName": "client-cert", "subjectAltNames": ["s"]}}}
    ctx = tls_context(default_of(build(HTTP, rule(spec), proxy=GATEWAY)).transport_socket)
    [cert] = ctx.common_tls_context.tls_certificate_sds_secret_configs
    assert cert.name == "kubernetes://client-cert" and cert.sds_config.HasField("ads")
    root = ctx.common_tls_context.combined_validation_context.validation_context_sds_secret_config
    assert root.name == "kubernetes://client-cert-cacert" and root.sds_config.HasField("ads")
    assert sans(ctx) == ["s"]
    unscoped = default_of(build(HTTP, rule(spec)))
    assert not unscoped.HasField("transport_socket")
    scoped = rule({**spec, "workloadSelector": {"matchLabels": {"app": "productpage"}}})
    assert default_of(build(HTTP, scoped)).HasField("transport_socket")


def test_external_service_simple_tls_uses_service_entry_subject_alt_names() -> None:
    ext = service("api.example.com", (HTTP,), registry=Registry.EXTERNAL, mesh_external=True)
    dr = rule({"host": "api.example.com", "trafficPolicy": {"tls": {"mode": "SIMPLE"}}})
    c = build(HTTP, dr, svc=ext, identities=("api.example.com",))["outbound|9080||api.example.com"]
    assert sans(tls_context(c.transport_socket)) == ["api.example.com"]
    assert istio_md(c)["external"] is True


# --- connection pool, h2 upgrade, outlier, LB ----------------------------------------------


def test_connection_pool_settings() -> None:
    pool = {
        "tcp": {
            "maxConnections": 10,
            "connectTimeout": "2s",
            "maxConnectionDuration": "60s",
            "idleTimeout": "30s",
            "tcpKeepalive": {"time": "20s"},
        },
        "http": {
            "http1MaxPendingRequests": 11,
            "http2MaxRequests": 12,
            "maxRequestsPerConnection": 13,
            "maxRetries": 14,
            "idleTimeout": "5s",
            "maxConcurrentStreams": 15,
            "http2KeepAlive": {"interval": "30s", "timeout": "5s"},
        },
    }
    m = mesh(tcpKeepalive={"probes": 3, "time": "7s", "interval": "9s"})
    c = default_of(build(GRPC, rule({"trafficPolicy": {"connectionPool": pool}}), mesh_config=m), 9090)
    t = c.circuit_breakers.thresholds[0]
    assert (t.max_connections.value, t.max_pending_requests.value, t.max_requests.value, t.max_retries.value) == (
        10,
        11,
        12,
        14,
    )
    assert c.connect_timeout.seconds == 2
    ka = c.upstream_connection_options.tcp_keepalive
    assert (ka.keepalive_probes.value, ka.keepalive_time.value, ka.keepalive_interval.value) == (3, 20, 9)
    opts = http_options(c)
    assert opts is not None
    common = opts.common_http_protocol_options
    assert common.idle_timeout.seconds == 5  # HTTP idle timeout wins over TCP's
    assert common.max_requests_per_connection.value == 13
    assert common.max_connection_duration.seconds == 60
    assert opts.explicit_http_config.http2_protocol_options.max_concurrent_streams.value == 15
    ping = opts.explicit_http_config.http2_protocol_options.connection_keepalive
    assert (ping.interval.seconds, ping.timeout.seconds) == (30, 5)  # HTTP/2 PINGs (istiod http2KeepAlive)


def test_tcp_idle_timeout_is_used_without_an_http_one_and_streams_only_limit_h2() -> None:
    pool = {"tcp": {"idleTimeout": "30s"}, "http": {"maxConcurrentStreams": 4, "http2KeepAlive": {"interval": "1s"}}}
    opts = http_options(default_of(build(HTTP, rule({"trafficPolicy": {"connectionPool": pool}}))))
    assert opts is not None
    assert opts.common_http_protocol_options.idle_timeout.seconds == 30
    assert not opts.explicit_http_config.HasField("http2_protocol_options")


def test_h2_upgrade_from_mesh_policy_and_rule_overrides() -> None:
    up = mesh(h2UpgradePolicy="UPGRADE")
    assert http_options(default_of(build(HTTP, mesh_config=up))).explicit_http_config.HasField(  # type: ignore[union-attr]
        "http2_protocol_options"
    )
    assert http_options(default_of(build(TCP, mesh_config=up), 9000)) is None
    keep = rule({"trafficPolicy": {"connectionPool": {"http": {"h2UpgradePolicy": "DO_NOT_UPGRADE"}}}})
    assert http_options(default_of(build(HTTP, keep, mesh_config=up))) is None
    force = rule({"trafficPolicy": {"connectionPool": {"http": {"h2UpgradePolicy": "UPGRADE"}}}})
    opts = http_options(default_of(build(AUTO, force), 8000))
    assert opts is not None and opts.explicit_http_config.HasField("http2_protocol_options")
    client = rule({"trafficPolicy": {"connectionPool": {"http": {"useClientProtocol": True}}}})
    opts = http_options(default_of(build(GRPC, client, mesh_config=up), 9090))
    assert opts is not None and opts.HasField("use_downstream_protocol_config")


def test_outlier_detection() -> None:
    od = {
        "consecutive5xxErrors": 0,
        "consecutiveGatewayErrors": 3,
        "consecutiveErrors": 9,  # deprecated: istiod no longer translates it
        "interval": "10s",
        "baseEjectionTime": "30s",
        "maxEjectionPercent": 50,
        "minHealthPercent": 40,
        "splitExternalLocalOriginErrors": True,
        "consecutiveLocalOriginFailures": 2,
    }
    c = default_of(build(HTTP, rule({"trafficPolicy": {"outlierDetection": od}})))
    o = c.outlier_detection
    assert o.consecutive_5xx.value == 0 and o.HasField("enforcing_consecutive_5xx")
    assert o.enforcing_consecutive_5xx.value == 0
    assert (o.consecutive_gateway_failure.value, o.enforcing_consecutive_gateway_failure.value) == (3, 100)
    assert o.HasField("enforcing_success_rate") and o.enforcing_success_rate.value == 0
    assert (o.interval.seconds, o.base_ejection_time.seconds, o.max_ejection_percent.value) == (10, 30, 50)
    assert o.split_external_local_origin_errors
    assert (o.consecutive_local_origin_failure.value, o.enforcing_consecutive_local_origin_failure.value) == (2, 100)
    assert o.HasField("enforcing_local_origin_success_rate")
    assert c.common_lb_config.healthy_panic_threshold.value == 40


def test_outlier_detection_alone_disables_the_panic_threshold() -> None:
    c = default_of(build(HTTP, rule({"trafficPolicy": {"outlierDetection": {"consecutive5xxErrors": 5}}})))
    assert c.common_lb_config.HasField("healthy_panic_threshold")
    assert c.common_lb_config.healthy_panic_threshold.value == 0
    assert not c.outlier_detection.HasField("consecutive_gateway_failure")


@pytest.mark.parametrize(
    ("consistent_hash", "policy", "ring", "table"),
    [
        ({"httpHeaderName": "x", "ringHash": {"minimumRingSize": 2048}}, C.RING_HASH, 2048, None),
        ({"httpHeaderName": "x", "maglev": {"tableSize": 65537}}, C.MAGLEV, None, 65537),
        ({"httpHeaderName": "x", "maglev": {}}, C.MAGLEV, None, None),
        ({"httpHeaderName": "x", "minimumRingSize": 4096}, C.RING_HASH, 4096, None),
        ({"useSourceIp": True}, C.RING_HASH, 1024, None),
    ],
)
def test_consistent_hash_ring_vs_maglev(
    consistent_hash: dict[str, Any], policy: int, ring: int | None, table: int | None
) -> None:
    c = default_of(build(HTTP, rule({"trafficPolicy": {"loadBalancer": {"consistentHash": consistent_hash}}})))
    assert c.lb_policy == policy
    assert c.HasField("ring_hash_lb_config") == (ring is not None)
    if ring is not None:
        assert c.ring_hash_lb_config.minimum_ring_size.value == ring
    assert c.HasField("maglev_lb_config") == (table is not None)
    if table is not None:
        assert c.maglev_lb_config.table_size.value == table


def test_simple_lb_policies_and_warmup() -> None:
    def lb(spec: dict[str, Any]) -> cluster_pb2.Cluster:
        return default_of(build(HTTP, rule({"trafficPolicy": {"loadBalancer": spec}})))

    assert lb({"simple": "RANDOM"}).lb_policy == C.RANDOM
    assert lb({"simple": "LEAST_CONN"}).lb_policy == C.LEAST_REQUEST
    rr = lb({"simple": "ROUND_ROBIN", "warmupDurationSecs": "60s"})
    assert rr.lb_policy == C.ROUND_ROBIN
    assert rr.round_robin_lb_config.slow_start_config.slow_start_window.seconds == 60
    assert not rr.round_robin_lb_config.slow_start_config.HasField("aggression")
    warm = lb({"warmup": {"duration": "30s", "aggression": 2.0}}).least_request_lb_config.slow_start_config
    assert warm.slow_start_window.seconds == 30
    assert (warm.aggression.default_value, warm.aggression.runtime_key) == (2.0, "(")
    assert warm.min_weight_percent.value == 10.0


def test_retry_budget_and_proxy_protocol() -> None:
    dr = rule({"trafficPolicy": {"retryBudget": {"percent": 25}, "proxyProtocol": {"version": "V2"}}})
    c = default_of(build(TCP, dr), 9000)
    budget = c.circuit_breakers.thresholds[0].retry_budget
    assert (budget.budget_percent.value, budget.min_retry_concurrency.value) == (25.0, 3)
    for m in c.transport_socket_matches:  # each auto-mTLS branch is wrapped
        assert m.transport_socket.name == "envoy.transport_sockets.upstream_proxy_protocol"
        pp = upstream_proxy_protocol_pb2.ProxyProtocolUpstreamTransport()
        assert m.transport_socket.typed_config.Unpack(pp)
        assert pp.config.version == 1  # V2
    plain = default_of(build(TCP, dr, mesh_config=mesh(enableAutoMtls=False)), 9000)
    assert plain.transport_socket.name == "envoy.transport_sockets.upstream_proxy_protocol"


# --- DNS, headless, locality ----------------------------------------------------------------

EXT = "db.example.com"


def dns_endpoints() -> list[Endpoint]:
    return [
        Endpoint("db-b.example.com", 5432, "tcp", {"version": "v2"}, "us-east1/us-east1-c", weight=3),
        Endpoint("db-a.example.com", 5432, "tcp", {"version": "v1"}, "us-east1/us-east1-b", tls_mode="istio"),
        Endpoint("db-c.example.com", 5432, "tcp", {"version": "v1"}, "europe-west1/z", health=HealthStatus.UNHEALTHY),
        Endpoint("db-d.example.com", 5433, "other", {"version": "v1"}, "us-east1/us-east1-b"),
    ]


def ready_dns_endpoints() -> list[Endpoint]:
    return [e for e in dns_endpoints() if e.health is not HealthStatus.UNHEALTHY]


def dns_service(resolution: Resolution = Resolution.DNS_LB) -> Service:
    return service(EXT, (ServicePort("tcp", 5432, Protocol.TCP),), resolution=resolution, registry=Registry.EXTERNAL)


def test_dns_cluster_embeds_its_endpoints_grouped_by_locality() -> None:
    dr = rule({"host": EXT, "subsets": [{"name": "v1", "labels": {"version": "v1"}}]})
    port = dns_service().ports[0]
    out = build(port, dr, svc=dns_service(), endpoints=dns_endpoints())
    c = out[f"outbound|5432||{EXT}"]
    assert c.type == C.STRICT_DNS
    assert not c.HasField("eds_cluster_config")
    assert c.dns_lookup_family == C.V4_ONLY
    assert c.respect_dns_ttl and c.dns_refresh_rate.seconds == 60
    assert c.dns_jitter.nanos == 100_000_000
    assert c.typed_dns_resolver_config.name == "envoy.network.dns_resolver.cares"
    cares = cares_dns_resolver_pb2.CaresDnsResolverConfig()
    assert c.typed_dns_resolver_config.typed_config.Unpack(cares) and cares.udp_max_queries.value == 100
    la = c.load_assignment
    assert la.cluster_name == c.name
    assert [(g.locality.region, g.locality.zone) for g in la.endpoints] == [
        ("europe-west1", "z"),
        ("us-east1", "us-east1-b"),
        ("us-east1", "us-east1-c"),
    ]  # the other port's endpoint left out
    # the unready one is sent UNHEALTHY, as istiod's EndpointBuilder sends it to DNS clusters too
    # (PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS); Envoy does not balance onto it (panic threshold 0 %)
    assert la.endpoints[0].lb_endpoints[0].health_status == 2
    a = la.endpoints[1].lb_endpoints[0]
    assert (a.endpoint.address.socket_address.address, a.endpoint.address.socket_address.port_value) == (
        "db-a.example.com",
        5432,
    )
    assert a.health_status == 1 and a.load_balancing_weight.value == 1
    assert json_format.MessageToDict(a.metadata.filter_metadata["envoy.transport_socket_match"]) == {"tlsMode": "istio"}
    assert a.metadata.filter_metadata["istio"].fields["workload"].string_value == ";default;;v1;Kubernetes"
    assert la.endpoints[2].load_balancing_weight.value == 3
    assert "envoy.transport_socket_match" not in la.endpoints[2].lb_endpoints[0].metadata.filter_metadata
    v1 = out[f"outbound|5432|v1|{EXT}"]
    assert v1.type == C.STRICT_DNS
    assert [
        e.endpoint.address.socket_address.address for g in v1.load_assignment.endpoints for e in g.lb_endpoints
    ] == ["db-c.example.com", "db-a.example.com"]  # the v1 subset's, the unready one too


def test_dns_round_robin_is_logical_dns_and_a_dns_cluster_without_endpoints_is_dropped() -> None:
    port = dns_service().ports[0]
    round_robin = dns_service(Resolution.DNS_ROUND_ROBIN_LB)
    rr = build(port, svc=round_robin, endpoints=ready_dns_endpoints())[f"outbound|5432||{EXT}"]
    assert rr.type == C.LOGICAL_DNS
    # Envoy takes exactly one endpoint here; more would NACK all of CDS (deliberate deviation)
    [group] = rr.load_assignment.endpoints
    assert [e.endpoint.address.socket_address.address for e in group.lb_endpoints] == ["db-a.example.com"]
    dr = rule({"host": EXT, "subsets": [{"name": "v9", "labels": {"version": "v9"}}]})
    assert build(port, dr, svc=dns_service(), endpoints=()) == {}
    only_default = build(port, dr, svc=dns_service(), endpoints=dns_endpoints())
    assert list(only_default) == [f"outbound|5432||{EXT}"]  # the empty subset is not built


def test_dns_lookup_family_follows_the_proxy_ip_family() -> None:
    v6 = Proxy(type=ProxyType.SIDECAR, id="a.default", ip_addresses=("fd00::1",), namespace="default", dns_domain="d")
    port = dns_service().ports[0]
    assert (
        build(port, svc=dns_service(), endpoints=dns_endpoints(), proxy=v6)[f"outbound|5432||{EXT}"].dns_lookup_family
        == C.V6_ONLY
    )


def test_dns_locality_failover_sets_priorities_only_with_outlier_detection() -> None:
    port = dns_service().ports[0]
    lb = {"localityLbSetting": {"failover": [{"from": "us-east1", "to": "us-west1"}]}}
    with_od = rule(
        {"host": EXT, "trafficPolicy": {"loadBalancer": lb, "outlierDetection": {"consecutive5xxErrors": 1}}}
    )
    c = build(port, with_od, svc=dns_service(), endpoints=ready_dns_endpoints())[f"outbound|5432||{EXT}"]
    assert c.common_lb_config.HasField("locality_weighted_lb_config")
    # proxy in us-east1/us-east1-b: its own zone first, then the rest of the region
    assert [g.priority for g in c.load_assignment.endpoints] == [0, 1]
    without = build(
        port,
        rule({"host": EXT, "trafficPolicy": {"loadBalancer": lb}}),
        svc=dns_service(),
        endpoints=ready_dns_endpoints(),
    )
    c2 = without[f"outbound|5432||{EXT}"]
    assert [g.priority for g in c2.load_assignment.endpoints] == [0, 0]
    assert not c2.common_lb_config.HasField("locality_weighted_lb_config")


def test_dns_locality_distribute_weights() -> None:
    port = dns_service().ports[0]
    lb = {"localityLbSetting": {"distribute": [{"from": "us-east1/*", "to": {"us-east1/us-east1-c/*": 100}}]}}
    c = build(
        port,
        rule({"host": EXT, "trafficPolicy": {"loadBalancer": lb}}),
        svc=dns_service(),
        endpoints=ready_dns_endpoints(),
    )[f"outbound|5432||{EXT}"]
    assert c.common_lb_config.HasField("locality_weighted_lb_config")
    b, other = c.load_assignment.endpoints
    assert len(b.lb_endpoints) == 0  # not a destination: emptied
    assert other.load_balancing_weight.value == 100


def test_headless_is_original_dst_on_sidecars_and_eds_on_gateways() -> None:
    headless = service(resolution=Resolution.PASSTHROUGH)
    c = default_of(build(svc=headless))
    assert (c.type, c.lb_policy) == (C.ORIGINAL_DST, C.CLUSTER_PROVIDED)
    assert not c.HasField("eds_cluster_config")
    assert default_of(build(svc=headless, proxy=GATEWAY)).type == C.EDS


def test_subset_of_a_rule_level_passthrough_inherits_original_dst() -> None:
    dr = rule(
        {
            "trafficPolicy": {"loadBalancer": {"simple": "PASSTHROUGH"}},
            "subsets": [{"name": "v1", "labels": {"v": "1"}}],
        }
    )
    v1 = build(HTTP, dr)[f"outbound|9080|v1|{HOST}"]
    assert v1.type == C.ORIGINAL_DST and not v1.HasField("eds_cluster_config")


# --- inbound and catch-all clusters --------------------------------------------------------


def targets() -> list[tuple[Service, ServicePort, Endpoint]]:
    ep = Endpoint("10.0.0.1", 8080, "http", {"app": "productpage"})
    pp = service("productpage.default.svc.cluster.local", (ServicePort("http", 9080, Protocol.HTTP),))
    alias = service("pp-alias.default.svc.cluster.local", (ServicePort("http", 9080, Protocol.HTTP),))
    return [(pp, pp.ports[0], ep), (alias, alias.ports[0], ep)]


def test_inbound_cluster_is_original_dst_bound_to_127_0_0_6_by_default() -> None:
    dr = rule(
        {
            "host": "productpage.default.svc.cluster.local",
            "trafficPolicy": {
                "connectionPool": {"tcp": {"maxConnections": 7}},
                "outlierDetection": {"consecutive5xxErrors": 1},
                "loadBalancer": {"simple": "RANDOM"},
                "tls": {"mode": "ISTIO_MUTUAL"},
            },
        },
        name="pp",
    )
    c = build_inbound_cluster(SIDECAR, MESH, targets(), dr)
    assert c.name == "inbound|8080||"  # the workload port, not the service port
    assert (c.type, c.lb_policy) == (C.ORIGINAL_DST, C.CLUSTER_PROVIDED)
    assert c.alt_stat_name == "inbound|8080||;"
    assert c.cleanup_interval.seconds == 9223372035
    src = c.upstream_bind_config.source_address
    assert (src.address, src.port_value) == ("127.0.0.6", 0)
    assert c.circuit_breakers.thresholds[0].max_connections.value == 7  # server side gets the pool
    assert not c.HasField("outlier_detection") and not c.HasField("transport_socket")
    assert not c.transport_socket_matches
    md = istio_md(c)
    assert [s["host"] for s in md["services"]] == [
        "productpage.default.svc.cluster.local",
        "pp-alias.default.svc.cluster.local",
    ]
    assert md["config"] == "/apis/networking.istio.io/v1/namespaces/default/destination-rule/pp"


def test_inbound_cluster_localhost_mode_is_static_to_loopback() -> None:
    c = build_inbound_cluster(SIDECAR, mesh(inboundTrafficPolicy={"mode": "LOCALHOST"}), targets())
    assert (c.type, c.lb_policy) == (C.STATIC, C.ROUND_ROBIN)  # inbound: no LB policy is applied
    sock = c.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    assert (sock.address, sock.port_value) == ("127.0.0.1", 8080)
    assert not c.HasField("upstream_bind_config") and not c.HasField("cleanup_interval")


def test_blackhole_passthrough_and_inbound_passthrough_shapes() -> None:
    bh = build_blackhole_cluster(MESH)
    assert bh.lb_policy == C.ROUND_ROBIN
    assert json_format.MessageToDict(bh) == {
        "name": "BlackHoleCluster",
        "type": "STATIC",
        "connectTimeout": "10s",
        "altStatName": "BlackHoleCluster;",
    }
    pt = build_passthrough_cluster(MESH)
    assert (pt.name, pt.type, pt.lb_policy) == ("PassthroughCluster", C.ORIGINAL_DST, C.CLUSTER_PROVIDED)
    assert pt.alt_stat_name == "PassthroughCluster;"
    assert pt.circuit_breakers.thresholds[0].max_retries.value == MAX
    opts = http_options(pt)
    assert opts is not None and opts.common_http_protocol_options.idle_timeout.seconds == 300
    assert opts.HasField("use_downstream_protocol_config")
    dual = Proxy(type=ProxyType.SIDECAR, id="a.b", ip_addresses=("10.0.0.1", "fd00::1"), namespace="b", dns_domain="b")
    ipt = build_inbound_passthrough_cluster(dual, MESH)
    assert ipt.name == "InboundPassthroughCluster"
    assert ipt.alt_stat_name == "PassthroughCluster;"  # istiod renames the cluster, not its stats
    assert ipt.upstream_bind_config.source_address.address == "127.0.0.6"
    assert [e.address.address for e in ipt.upstream_bind_config.extra_source_addresses] == ["::6"]
    v4 = build_inbound_passthrough_cluster(SIDECAR, MESH)
    assert not v4.upstream_bind_config.extra_source_addresses


def test_service_identities_merge_endpoints_service_and_trust_domain_aliases() -> None:
    svc = service(service_accounts=("spiffe://cluster.local/ns/default/sa/extra",))
    eps = [Endpoint("1.1.1.1", 80, "http", service_account=SA_REVIEWS), Endpoint("1.1.1.2", 80, "http")]
    assert service_identities(svc, eps, ("td2",)) == (
        "spiffe://cluster.local/ns/default/sa/extra",
        SA_REVIEWS,
        "spiffe://td2/ns/default/sa/extra",
        "spiffe://td2/ns/default/sa/reviews",
    )


# --- the generator over a real PushContext ---------------------------------------------------

BOOKINFO = Path(__file__).resolve().parents[2] / "examples" / "bookinfo"

WORKLOADS = (
    kube_service(
        "reviews",
        "[{name: http, port: 9080, targetPort: 8080}, {name: udp-dns, port: 53, protocol: UDP}]",
        cluster_ip="10.96.0.20",
        selector="app: reviews",
    )
    + kube_pod(
        "reviews-v1-0",
        "10.1.0.20",
        "app: reviews, version: v1",
        service_account="reviews",
        container_ports="[{containerPort: 8080, name: http}]",
    )
    + endpoint_slice(
        "reviews", "[{name: http, port: 8080, protocol: TCP}]", slice_endpoint("10.1.0.20", "reviews-v1-0")
    )
    + config_doc("DestinationRule", "reviews", "host: reviews\nsubsets: [{name: v1, labels: {version: v1}}]")
)


def test_generator_sidecar_gets_outbound_inbound_and_catch_all_clusters_sorted() -> None:
    push = push_context(WORKLOADS)
    proxy = sidecar_proxy("reviews-v1-0.default", "10.1.0.20", {"app": "reviews", "version": "v1"})
    names = [c.name for c in generate_clusters(proxy, push)]
    assert names == [
        "BlackHoleCluster",
        "InboundPassthroughCluster",
        "PassthroughCluster",
        "inbound|8080||",
        f"outbound|9080|v1|{HOST}",
        f"outbound|9080||{HOST}",
    ]  # the UDP port has no cluster


def test_generator_gateway_gets_no_inbound_or_passthrough_clusters() -> None:
    push = push_context(WORKLOADS)
    names = [c.name for c in generate_clusters(GATEWAY, push)]
    assert names == ["BlackHoleCluster", f"outbound|9080|v1|{HOST}", f"outbound|9080||{HOST}"]


class _NoEndpoints:
    def endpoints(self, hostname: str, namespace: str) -> tuple[Endpoint, ...]:
        return ()

    def service_targets(self, ip: str) -> list[tuple[Service, ServicePort, Endpoint]]:
        return []


def test_generator_skips_alias_services() -> None:
    alias = Service(
        "old.default.svc.cluster.local",
        "default",
        (HTTP,),
        Registry.KUBERNETES,
        name="old",
        resolution=Resolution.ALIAS,
    )
    inputs = PushInputs(MESH, (alias, REVIEWS), (), (), (), (), _NoEndpoints())
    names = {c.name for c in generate_clusters(GATEWAY, PushContext.build(None, inputs))}
    assert not any("old.default" in n for n in names)
    assert f"outbound|9080||{HOST}" in names


# --- a real Envoy accepts every shape ----------------------------------------------------------


def _every_shape() -> list[cluster_pb2.Cluster]:
    shapes: list[cluster_pb2.Cluster] = []
    specs: list[dict[str, Any]] = [
        {},
        {"trafficPolicy": {"tls": {"mode": "ISTIO_MUTUAL"}, "proxyProtocol": {"version": "V1"}}},
        {"trafficPolicy": {"tls": {"mode": "SIMPLE", "caCertificates": "/etc/ca.pem", "caCrl": "/etc/crl.pem"}}},
        {"trafficPolicy": {"tls": {"mode": "SIMPLE", "insecureSkipVerify": True}}},
        {"trafficPolicy": {"tls": {"mode": "MUTUAL", "clientCertificate": "/c", "privateKey": "/k"}}},
        {
            "trafficPolicy": {"tls": {"mode": "MUTUAL", "credentialName": "cred"}},
            "workloadSelector": {"matchLabels": {"app": "productpage"}},
        },
        {
            "trafficPolicy": {
                "connectionPool": {
                    "tcp": {"maxConnections": 1, "connectTimeout": "1s", "tcpKeepalive": {"time": "5s"}},
                    "http": {"idleTimeout": "5s", "maxRequestsPerConnection": 2, "maxConcurrentStreams": 3},
                },
                "outlierDetection": {"consecutive5xxErrors": 1, "splitExternalLocalOriginErrors": True},
                "retryBudget": {"percent": 10},
            }
        },
        {
            "trafficPolicy": {
                "loadBalancer": {"consistentHash": {"httpHeaderName": "x", "maglev": {"tableSize": 65537}}}
            }
        },
        {"trafficPolicy": {"loadBalancer": {"consistentHash": {"httpCookie": {"name": "c"}, "ringHash": {}}}}},
        {"trafficPolicy": {"loadBalancer": {"simple": "ROUND_ROBIN", "warmup": {"duration": "10s"}}}},
        {"trafficPolicy": {"loadBalancer": {"simple": "PASSTHROUGH"}}},
        {
            "subsets": [
                {"name": "v1", "labels": {"version": "v1"}, "trafficPolicy": {"loadBalancer": {"simple": "RANDOM"}}}
            ]
        },
    ]
    for i, spec in enumerate(specs):
        for port in (HTTP, GRPC, TCP, AUTO):
            for c in build(port, rule(spec), proxy=GATEWAY if i == 5 else SIDECAR).values():
                c.name = f"{c.name}-{i}"
                if c.HasField("eds_cluster_config"):
                    c.eds_cluster_config.service_name = c.name
                if c.HasField("load_assignment"):
                    c.load_assignment.cluster_name = c.name
                shapes.append(c)
    dns = rule(
        {
            "host": EXT,
            "trafficPolicy": {
                "loadBalancer": {"localityLbSetting": {"failover": [{"from": "us-east1", "to": "eu"}]}},
                "outlierDetection": {"consecutiveGatewayErrors": 2},
            },
            "subsets": [{"name": "v1", "labels": {"version": "v1"}}],
        }
    )
    for resolution in (Resolution.DNS_LB, Resolution.DNS_ROUND_ROBIN_LB):
        shapes += build(
            dns_service().ports[0], dns, svc=dns_service(resolution), endpoints=dns_endpoints()[:2]
        ).values()
        shapes[-1].name = shapes[-1].load_assignment.cluster_name = f"{shapes[-1].name}-{resolution.value}"
        shapes[-2].name = shapes[-2].load_assignment.cluster_name = f"{shapes[-2].name}-{resolution.value}"
    shapes += build(svc=service(resolution=Resolution.PASSTHROUGH)).values()
    shapes.append(build_inbound_cluster(SIDECAR, MESH, targets()))
    local = build_inbound_cluster(SIDECAR, mesh(inboundTrafficPolicy={"mode": "LOCALHOST"}), targets())
    local.name = local.load_assignment.cluster_name = "inbound|8080||-localhost"
    shapes.append(local)
    shapes += [build_blackhole_cluster(MESH), build_passthrough_cluster(MESH)]
    shapes.append(build_inbound_passthrough_cluster(SIDECAR, MESH))
    return shapes


NODE_ID = "sidecar~10.0.0.1~productpage-1.default~default.svc.cluster.local"


def test_real_envoy_accepts_every_cluster_shape(tmp_path: Path) -> None:
    shapes = _every_shape()
    assert len({c.name for c in shapes}) == len(shapes)
    validate_bootstrap(agent_bootstrap(NODE_ID, shapes, node_cluster="productpage.default"), tmp_path)


def test_bookinfo_example_clusters_pass_envoy_validation(tmp_path: Path) -> None:
    proxy = sidecar_proxy("productpage-v1-0.bookinfo", "10.1.0.10", {"app": "productpage", "version": "v1"})
    clusters = generate_clusters(proxy, push_context_from_dir(BOOKINFO))
    assert "inbound|9080||" in {c.name for c in clusters}
    validate_bootstrap(agent_bootstrap(NODE_ID, clusters, node_cluster="productpage.default"), tmp_path)
