"""Downstream TLS for listeners, as istiod builds it.

Owns: the sidecar's inbound mTLS context (pilot/pkg/security/authn/utils BuildInboundTLS with
the workload certificate ``default`` and ``ROOTCA`` from the agent's SDS), and a Gateway
server's TLS context (listener.go BuildListenerTLSContext): ISTIO_MUTUAL from SDS,
``credentialName`` from the control plane over ADS, and mounted files.

Deliberate difference: istiod turns mounted certificate files into ``file-cert:`` /
``file-root:`` SDS names that only its node agent serves. Without an agent an unmodified Envoy
would wait for them forever, so file certificates are given to Envoy as plain ``filename``
data sources (no hot rotation, otherwise the same).
"""

from __future__ import annotations

from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2, tls_pb2

from app.api import networking as net
from app.api.mesh import MeshConfig
from app.translate.cluster.tls import (
    SDS_CA_SUFFIX,
    SDS_DEFAULT,
    SDS_ROOT,
    credential_sds_secret_config,
    exact_matchers,
    sds_secret_config,
)

# istiod authn utils SupportedCiphers: server side ciphers for workload mTLS
SUPPORTED_CIPHERS = (
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "AES256-GCM-SHA384",
    "AES128-GCM-SHA256",
)
ALPN_HTTP = ("h2", "http/1.1")
ALPN_DOWNSTREAM_WITH_MXC = ("istio-peer-exchange", "h2", "http/1.1")
_TLS = net.ServerTLSSettings
_P = common_pb2.TlsParameters
_MESH_TLS = MeshConfig.TLSConfig


def inbound_mtls_context(mesh: MeshConfig, tcp: bool) -> tls_pb2.DownstreamTlsContext:
    """The PERMISSIVE / STRICT server side of workload mTLS. TCP chains advertise
    istio-peer-exchange so the client's metadata exchange can run; HTTP chains must not
    advertise ``istio`` (it would break h2 negotiation)."""
    out = tls_pb2.DownstreamTlsContext()
    out.require_client_certificate.value = True
    common = out.common_tls_context
    common.alpn_protocols.extend(ALPN_DOWNSTREAM_WITH_MXC if tcp else ALPN_HTTP)
    params = common.tls_params
    params.cipher_suites.extend(list(mesh.mesh_mTLS.cipher_suites) or SUPPORTED_CIPHERS)
    v13 = mesh.mesh_mTLS.min_protocol_version == _MESH_TLS.TLSV1_3
    params.tls_minimum_protocol_version = _P.TLSv1_3 if v13 else _P.TLSv1_2
    params.tls_maximum_protocol_version = _P.TLSv1_3
    common.tls_certificate_sds_secret_configs.append(sds_secret_config(SDS_DEFAULT))
    combined = common.combined_validation_context
    combined.default_validation_context.SetInParent()
    # only peers of the mesh's trust domains, whatever else the root signed (istiod
    # ApplyToCommonTLSContext: a SPIFFE prefix per domain)
    for domain in trust_domains_for_validation(mesh):
        combined.default_validation_context.match_subject_alt_names.add(prefix=f"spiffe://{domain}/")
    combined.validation_context_sds_secret_config.CopyFrom(sds_secret_config(SDS_ROOT))
    return out


def trust_domains_for_validation(mesh: MeshConfig) -> list[str]:
    """istiod TrustDomainsForValidation (PILOT_SKIP_VALIDATE_TRUST_DOMAIN off, its default): the
    trust domain, its aliases and the caCertificates' trust domains, each once, none empty."""
    domains = [mesh.trust_domain, *mesh.trust_domain_aliases]
    for cert in mesh.ca_certificates:
        domains.extend(cert.trust_domains)
    return [d for d in dict.fromkeys(domains) if d]


def has_server_certificate(tls: net.ServerTLSSettings) -> bool:
    """Whether a terminating server names a certificate Envoy can load (validation demands one)."""
    return (
        tls.mode == _TLS.ISTIO_MUTUAL
        or bool(tls.credential_name or tls.credential_names)
        or bool(tls.server_certificate and tls.private_key)
        or any(c.server_certificate and c.private_key for c in tls.tls_certificates)
    )


def gateway_tls_context(
    tls: net.ServerTLSSettings, tcp_terminating: bool, mesh: MeshConfig
) -> tls_pb2.DownstreamTlsContext:
    """A Gateway server's DownstreamTlsContext (istiod BuildListenerTLSContext over TCP)."""
    out = tls_pb2.DownstreamTlsContext()
    common = out.common_tls_context
    mxc = tcp_terminating and tls.mode == _TLS.ISTIO_MUTUAL
    common.alpn_protocols.extend(ALPN_DOWNSTREAM_WITH_MXC if mxc else ALPN_HTTP)
    require = tls.mode in (_TLS.MUTUAL, _TLS.ISTIO_MUTUAL)
    out.require_client_certificate.value = require
    validate = require or tls.mode == _TLS.OPTIONAL_MUTUAL
    if tls.mode == _TLS.ISTIO_MUTUAL:
        common.tls_certificate_sds_secret_configs.append(sds_secret_config(SDS_DEFAULT))
        if validate:
            _sds_validation(common, tls, sds_secret_config(SDS_ROOT))
    elif tls.credential_name or tls.credential_names:
        _credential_certs(common, tls)
    else:
        _file_certs(common, tls, validate)
    if tls.mode in (_TLS.SIMPLE, _TLS.MUTUAL, _TLS.OPTIONAL_MUTUAL):
        _apply_mesh_tls_defaults(out, mesh.tls_defaults)
        _apply_server_settings(out, tls)
    return out


def _apply_mesh_tls_defaults(ctx: tls_pb2.DownstreamTlsContext, defaults: MeshConfig.TLSConfig) -> None:
    """meshConfig.tlsDefaults for SIMPLE / MUTUAL servers. istiod casts the mesh enum straight into
    Envoy's (TLSV1_2=1 would become TLSv1_0); pilotfish maps it by name."""
    params = ctx.common_tls_context.tls_params
    if len(defaults.ecdh_curves) > 0:
        params.ecdh_curves[:] = list(defaults.ecdh_curves)
    if len(defaults.cipher_suites) > 0:
        params.cipher_suites[:] = list(defaults.cipher_suites)
    if defaults.min_protocol_version == _MESH_TLS.TLSV1_2:
        params.tls_minimum_protocol_version = _P.TLSv1_2
    elif defaults.min_protocol_version == _MESH_TLS.TLSV1_3:
        params.tls_minimum_protocol_version = _P.TLSv1_3


def _apply_server_settings(out: tls_pb2.DownstreamTlsContext, tls: net.ServerTLSSettings) -> None:
    params = out.common_tls_context.tls_params
    if tls.min_protocol_version != _TLS.TLS_AUTO:
        params.tls_minimum_protocol_version = int(tls.min_protocol_version)  # the enums line up
    if len(tls.cipher_suites) > 0:
        params.cipher_suites[:] = list(tls.cipher_suites)
    if tls.max_protocol_version != _TLS.TLS_AUTO:
        params.tls_maximum_protocol_version = int(tls.max_protocol_version)


def _sds_validation(
    common: tls_pb2.CommonTlsContext, tls: net.ServerTLSSettings, root: secret_pb2.SdsSecretConfig
) -> None:
    combined = common.combined_validation_context
    combined.default_validation_context.SetInParent()
    combined.default_validation_context.match_subject_alt_names.extend(exact_matchers(list(tls.subject_alt_names)))
    if tls.ca_crl:
        combined.default_validation_context.crl.filename = tls.ca_crl
    _skip_verify(combined.default_validation_context, tls)
    combined.validation_context_sds_secret_config.CopyFrom(root)


def _skip_verify(ctx: common_pb2.CertificateValidationContext, tls: net.ServerTLSSettings) -> None:
    """``insecureSkipVerify``: a client certificate is asked for and accepted unverified (istiod
    ApplyToCommonTLSContext's allowInsecure, ApplyCredentialSDSToServerCommonTLSContext)."""
    if tls.insecure_skip_verify.value:
        ctx.trust_chain_verification = common_pb2.CertificateValidationContext.ACCEPT_UNTRUSTED


def _credential_certs(common: tls_pb2.CommonTlsContext, tls: net.ServerTLSSettings) -> None:
    names = list(tls.credential_names) or [tls.credential_name]
    for name in names:
        common.tls_certificate_sds_secret_configs.append(credential_sds_secret_config(name))
    if tls.mode in (_TLS.MUTUAL, _TLS.OPTIONAL_MUTUAL):
        combined = common.combined_validation_context
        default = combined.default_validation_context
        default.SetInParent()
        default.match_subject_alt_names.extend(exact_matchers(tls.subject_alt_names))
        default.verify_certificate_spki.extend(tls.verify_certificate_spki)
        default.verify_certificate_hash.extend(tls.verify_certificate_hash)
        _skip_verify(default, tls)
        # the first credential's CA, unless caCertCredentialName names one (istiod
        # ApplyCredentialSDSToServerCommonTLSContext)
        ca = tls.ca_cert_credential_name or names[0] + SDS_CA_SUFFIX
        combined.validation_context_sds_secret_config.CopyFrom(credential_sds_secret_config(ca))
    elif len(tls.subject_alt_names) > 0:
        common.validation_context.match_subject_alt_names.extend(exact_matchers(tls.subject_alt_names))


def _file_certs(common: tls_pb2.CommonTlsContext, tls: net.ServerTLSSettings, validate: bool) -> None:
    pairs = [(c.server_certificate, c.private_key) for c in tls.tls_certificates] or [
        (tls.server_certificate, tls.private_key)
    ]
    for cert, key in pairs:
        entry = common.tls_certificates.add()
        entry.certificate_chain.filename = cert
        entry.private_key.filename = key
    if not validate:
        return
    if not tls.ca_certificates:
        # istiod falls back to the mesh root (ROOTCA) when no CA file is given
        _sds_validation(common, tls, sds_secret_config(SDS_ROOT))
        return
    ctx = common.validation_context
    ctx.trusted_ca.filename = tls.ca_certificates
    ctx.match_subject_alt_names.extend(exact_matchers(tls.subject_alt_names))
    if tls.ca_crl:
        ctx.crl.filename = tls.ca_crl
    _skip_verify(ctx, tls)
