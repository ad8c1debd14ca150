"""Upstream TLS for outbound clusters, as istiod builds it (pilot/pkg/networking/core/cluster_tls.go).

Owns: which TLS settings apply (a DestinationRule's, or auto mTLS when the mesh enables it and
the rule sets none), the UpstreamTlsContext for DISABLE / SIMPLE / MUTUAL / ISTIO_MUTUAL, SDS
secret references (workload certs ``default`` / ``ROOTCA`` and mounted files ``file-cert:`` /
``file-root:`` from the agent's ``sds-grpc`` cluster; ``credentialName`` secrets over ADS), and
the ``tlsMode-istio`` / ``tlsMode-disabled`` transport socket matches of auto mTLS.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2, config_source_pb2
from envoy.extensions.transport_sockets.raw_buffer.v3 import raw_buffer_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2, tls_pb2
from envoy.type.matcher.v3 import string_pb2

from app.api import networking as net
from app.model.authn import MtlsMode
from app.model.service import Endpoint, Registry, Resolution, Service, ServicePort

if TYPE_CHECKING:
    from app.translate.cluster.policy import ClusterDraft, PolicyContext

TLS_SOCKET = "envoy.transport_sockets.tls"
RAW_BUFFER_SOCKET = "envoy.transport_sockets.raw_buffer"
SDS_CLUSTER = "sds-grpc"
SDS_DEFAULT = "default"
SDS_ROOT = "ROOTCA"
SDS_CA_SUFFIX = "-cacert"
KUBERNETES_SECRET = "kubernetes://"  # a credentialName served from a Kubernetes Secret
ALPN_IN_MESH = ("istio-peer-exchange", "istio")  # metadata exchange on, as istiod defaults
ALPN_IN_MESH_H2 = ("istio-peer-exchange", "istio", "h2")
ALPN_H2 = ("h2",)
TLS_MODE_ISTIO = "istio"
_TLS = net.ClientTLSSettings
_BUILTIN = "builtin://"
_CONFIGMAP = "configmap://"
_INVALID = "invalid://"
_KEEP_PREFIXES = (KUBERNETES_SECRET, "kubernetes-gateway://", _CONFIGMAP)


class TlsConfigError(ValueError):
    """TLS settings istiod refuses to build (the cluster is then left without TLS)."""


def infer_service_mtls_mode(
    rule_policy: net.TrafficPolicy | None, service: Service, port: ServicePort, endpoints: Sequence[Endpoint],
    namespace_mode: MtlsMode,
) -> MtlsMode:
    """istiod BestEffortInferServiceMTLSMode: unknown for a mesh-external service; a passthrough
    service (headless, or a PASSTHROUGH load balancer) is DISABLE unless every endpoint of the
    port runs a sidecar; then the destination namespace's (else the mesh's) PeerAuthentication
    mode, PERMISSIVE when none sets one."""
    if service.mesh_external:
        return MtlsMode.UNKNOWN
    passthrough_lb = (
        rule_policy is not None
        and rule_policy.HasField("load_balancer")
        and rule_policy.load_balancer.simple == net.LoadBalancerSettings.PASSTHROUGH
    )
    if service.resolution is Resolution.PASSTHROUGH or passthrough_lb:
        on_port = [ep for ep in endpoints if ep.service_port_name == port.name]
        if not on_port or any(ep.tls_mode != TLS_MODE_ISTIO for ep in on_port):
            return MtlsMode.DISABLE
    if namespace_mode is not MtlsMode.UNKNOWN:
        return namespace_mode
    return MtlsMode.PERMISSIVE


def upstream_tls_settings(
    tls: net.ClientTLSSettings | None, ctx: PolicyContext
) -> tuple[net.ClientTLSSettings | None, bool]:
    """The TLS settings to build and whether they were auto-detected (istiod buildUpstreamTLSSettings)."""
    if tls is not None:
        if tls.mode != _TLS.ISTIO_MUTUAL:
            return tls, False
        # ISTIO_MUTUAL: the user's SNI / SANs win; else the cluster's SNI and the service's identities
        return _istio_mutual(
            list(tls.subject_alt_names) or list(ctx.service_accounts), tls.sni or ctx.istio_mtls_sni
        ), False
    if (
        ctx.mesh_external
        or not ctx.mesh.enable_auto_mtls.value
        or ctx.mtls_mode in (MtlsMode.UNKNOWN, MtlsMode.DISABLE)
    ):
        return None, False
    return _istio_mutual(list(ctx.service_accounts), ctx.istio_mtls_sni), True


def _istio_mutual(sans: list[str], sni: str) -> net.ClientTLSSettings:
    return net.ClientTLSSettings(mode=_TLS.ISTIO_MUTUAL, subject_alt_names=sans, sni=sni)


def apply_upstream_tls(
    draft: ClusterDraft, tls: net.ClientTLSSettings | None, auto_detected: bool, ctx: PolicyContext
) -> None:
    try:
        tls_context = upstream_tls_context(draft, tls, ctx)
    except TlsConfigError:
        return  # istiod logs and leaves the cluster without a transport socket
    c = draft.cluster
    if tls_context is not None:
        c.transport_socket.CopyFrom(tls_socket(tls_context))
    istio_auto = tls is not None and tls.mode == _TLS.ISTIO_MUTUAL and auto_detected
    # headless (ORIGINAL_DST) clusters never get auto-mTLS matches
    if istio_auto and c.type != cluster_pb2.Cluster.ORIGINAL_DST:
        socket = base_pb2.TransportSocket()
        socket.CopyFrom(c.transport_socket)
        c.ClearField("transport_socket")
        istio = c.transport_socket_matches.add(name="tlsMode-istio")
        istio.match.fields["tlsMode"].string_value = TLS_MODE_ISTIO
        istio.transport_socket.CopyFrom(socket)
        plain = c.transport_socket_matches.add(name="tlsMode-disabled")
        plain.match.SetInParent()
        plain.transport_socket.CopyFrom(raw_buffer_socket())


def raw_buffer_socket() -> base_pb2.TransportSocket:
    ts = base_pb2.TransportSocket(name=RAW_BUFFER_SOCKET)
    ts.typed_config.Pack(raw_buffer_pb2.RawBuffer())
    return ts


def tls_socket(ctx: tls_pb2.UpstreamTlsContext) -> base_pb2.TransportSocket:
    ts = base_pb2.TransportSocket(name=TLS_SOCKET)
    ts.typed_config.Pack(ctx)
    return ts


def upstream_tls_context(
    draft: ClusterDraft, tls: net.ClientTLSSettings | None, ctx: PolicyContext
) -> tls_pb2.UpstreamTlsContext | None:
    if tls is None:
        return None
    credential = tls.credential_name
    privileged = bool(credential) and not credential.startswith(_CONFIGMAP) and credential != _INVALID
    # a sidecar only fetches credentialName secrets for rules scoped to it by workloadSelector
    if privileged and ctx.sidecar and not ctx.dr_with_selector and tls.mode in (_TLS.SIMPLE, _TLS.MUTUAL):
        return None
    if tls.mode == _TLS.ISTIO_MUTUAL:
        return _istio_mutual_context(draft, tls)
    if tls.mode in (_TLS.SIMPLE, _TLS.MUTUAL):
        return _user_tls_context(draft, tls, ctx, mutual=tls.mode == _TLS.MUTUAL)
    return None  # DISABLE


def _default_common_context() -> tls_pb2.CommonTlsContext:
    common = tls_pb2.CommonTlsContext()
    common.tls_params.tls_minimum_protocol_version = common_pb2.TlsParameters.TLSv1_2
    common.tls_params.tls_maximum_protocol_version = common_pb2.TlsParameters.TLSv1_3
    return common


def exact_matchers(values: Iterable[str]) -> list[string_pb2.StringMatcher]:
    """Exact-match StringMatchers, as istiod util.StringToExactMatch (subject alt names)."""
    return [string_pb2.StringMatcher(exact=v) for v in values]


def _istio_mutual_context(draft: ClusterDraft, tls: net.ClientTLSSettings) -> tls_pb2.UpstreamTlsContext:
    out = tls_pb2.UpstreamTlsContext(sni=tls.sni or draft.cluster.name)
    out.common_tls_context.CopyFrom(_default_common_context())
    common = out.common_tls_context
    common.tls_certificate_sds_secret_configs.append(sds_secret_config(SDS_DEFAULT))
    combined = common.combined_validation_context
    combined.default_validation_context.match_subject_alt_names.extend(exact_matchers(tls.subject_alt_names))
    combined.default_validation_context.SetInParent()
    combined.validation_context_sds_secret_config.CopyFrom(sds_secret_config(SDS_ROOT))
    common.alpn_protocols.extend(ALPN_IN_MESH_H2 if draft.is_http2 else ALPN_IN_MESH)
    return out


def _user_tls_context(
    draft: ClusterDraft, tls: net.ClientTLSSettings, ctx: PolicyContext, *, mutual: bool
) -> tls_pb2.UpstreamTlsContext:
    out = tls_pb2.UpstreamTlsContext(sni=tls.sni)
    out.common_tls_context.CopyFrom(_default_common_context())
    common = out.common_tls_context
    _set_auto_sni_and_san(draft, tls)
    sans = list(tls.subject_alt_names)
    if not sans and ctx.service is not None and ctx.service.registry is Registry.EXTERNAL:
        sans = list(ctx.service_accounts)  # a ServiceEntry's subjectAltNames
    skip_verify = tls.HasField("insecure_skip_verify") and tls.insecure_skip_verify.value
    if tls.credential_name:
        common.tls_certificate_sds_secret_configs.append(credential_sds_secret_config(tls.credential_name))
        if not skip_verify:
            combined = common.combined_validation_context
            combined.default_validation_context.SetInParent()
            combined.default_validation_context.match_subject_alt_names.extend(exact_matchers(sans))
            combined.validation_context_sds_secret_config.CopyFrom(
                credential_sds_secret_config(tls.credential_name + SDS_CA_SUFFIX)
            )
    else:
        # mounted files are served by the agent over SDS (rotation), never read by Envoy directly
        if mutual:
            if not tls.client_certificate or not tls.private_key:
                raise TlsConfigError(f"{draft.cluster.name}: client certificate and private key must not be empty")
            name = f"file-cert:{tls.client_certificate}~{tls.private_key}"
            common.tls_certificate_sds_secret_configs.append(sds_secret_config(name))
        if skip_verify:
            common.validation_context.SetInParent()
        else:
            combined = common.combined_validation_context
            combined.default_validation_context.SetInParent()
            combined.default_validation_context.match_subject_alt_names.extend(exact_matchers(sans))
            if tls.ca_crl:
                combined.default_validation_context.crl.filename = tls.ca_crl
            root = f"file-root:{tls.ca_certificates or 'system'}"
            combined.validation_context_sds_secret_config.CopyFrom(sds_secret_config(root))
    defaults = ctx.mesh.tls_defaults
    if len(defaults.ecdh_curves) > 0:
        common.tls_params.ecdh_curves.extend(defaults.ecdh_curves)
    if len(defaults.cipher_suites) > 0:
        common.tls_params.cipher_suites.extend(defaults.cipher_suites)
    if draft.is_http2:
        common.alpn_protocols.extend(ALPN_H2)
    return out


def _set_auto_sni_and_san(draft: ClusterDraft, tls: net.ClientTLSSettings) -> None:
    """No SNI in the rule: Envoy derives it from the Host header; no SNI and no SANs either:
    Envoy also verifies the certificate against that host (istiod setAutoSniAndAutoSanValidation)."""
    auto_sni = not tls.sni
    skip_verify = tls.HasField("insecure_skip_verify") and tls.insecure_skip_verify.value
    auto_san = auto_sni and len(tls.subject_alt_names) == 0 and not skip_verify
    if not (auto_sni or auto_san):
        return
    upstream = draft.http().upstream_http_protocol_options
    upstream.SetInParent()
    if auto_sni:
        upstream.auto_sni = True
    if auto_san:
        upstream.auto_san_validation = True


def sds_secret_config(name: str) -> secret_pb2.SdsSecretConfig:
    """A secret from the node agent's SDS server (the bootstrap's ``sds-grpc`` cluster)."""
    out = secret_pb2.SdsSecretConfig(name=name)
    src = out.sds_config
    src.resource_api_version = config_source_pb2.V3
    api = src.api_config_source
    api.api_type = config_source_pb2.ApiConfigSource.GRPC
    api.set_node_on_first_message_only = True
    api.transport_api_version = config_source_pb2.V3
    api.grpc_services.add().envoy_grpc.cluster_name = SDS_CLUSTER
    if name in (SDS_DEFAULT, SDS_ROOT):
        src.initial_fetch_timeout.SetInParent()  # 0s: never block warming on the workload cert
    return out


def credential_resource_name(name: str) -> str:
    """credentialName -> SDS resource name (istiod credentials.ToResourceName)."""
    if name.startswith(_BUILTIN):
        return SDS_DEFAULT
    if name.startswith(_INVALID):
        return _INVALID
    if name.startswith(_KEEP_PREFIXES):
        return name
    return KUBERNETES_SECRET + name


def credential_sds_secret_config(name: str) -> secret_pb2.SdsSecretConfig:
    """A ``credentialName`` secret, served by the control plane over ADS."""
    if name == _BUILTIN:
        return sds_secret_config(SDS_DEFAULT)
    if name == _BUILTIN + SDS_CA_SUFFIX:
        return sds_secret_config(SDS_ROOT)
    out = secret_pb2.SdsSecretConfig(name=credential_resource_name(name))
    out.sds_config.ads.SetInParent()
    out.sds_config.resource_api_version = config_source_pb2.V3
    return out
