"""Istio networking kinds: strict parsing (app/config/schema.py) plus istiod's semantic checks.

The checks are the ones a user hits in practice (pilot pkg/config/validation): hosts, ports,
required fields, conflicting settings. Each raises FieldError naming the field path. The
traffic kinds' checks (DestinationRule, VirtualService) are in traffic.py, the field
checks every kind shares in fields.py.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from google.protobuf.message import Message

from app.api import networking as net
from app.api import security as sec
from app.api.istio.networking.v1alpha3.envoy_filter_pb2 import EnvoyFilter
from app.api.istio.networking.v1beta1.proxy_config_pb2 import ProxyConfig
from app.api.istio.telemetry.v1alpha1.telemetry_pb2 import Telemetry
from app.config.go_strconv import go_int
from app.config.host import is_ip_address, validate_fqdn
from app.config.objects import ConfigObject, Kind
from app.config.schema import parse_message
from app.config.validation.envoy_filter import envoy_filter_warnings, validate_envoy_filter
from app.config.validation.fields import (
    PROTOCOLS,
    check_address,
    check_export_to,
    check_host,
    check_labels,
    check_port_number,
    check_protocol,
    check_workload_selector,
    fail,
    is_dns1123_label,
    quoted,
)
from app.config.validation.not_applied import not_applied
from app.config.validation.security import (
    validate_authorization_policy,
    validate_peer_authentication,
    validate_request_authentication,
)
from app.config.validation.telemetry import validate_telemetry
from app.config.validation.traffic import check_connection_pool, validate_destination_rule, validate_virtual_service
from app.errors import FieldError

# the spec message of each Istio kind
SPEC_MESSAGES: Mapping[Kind, type[Message]] = {
    Kind.DESTINATION_RULE: net.DestinationRule,
    Kind.VIRTUAL_SERVICE: net.VirtualService,
    Kind.SERVICE_ENTRY: net.ServiceEntry,
    Kind.WORKLOAD_ENTRY: net.WorkloadEntry,
    Kind.SIDECAR: net.Sidecar,
    Kind.GATEWAY: net.Gateway,
    Kind.PEER_AUTHENTICATION: sec.PeerAuthentication,
    Kind.AUTHORIZATION_POLICY: sec.AuthorizationPolicy,
    Kind.REQUEST_AUTHENTICATION: sec.RequestAuthentication,
    Kind.PROXY_CONFIG: ProxyConfig,
    Kind.TELEMETRY: Telemetry,
    Kind.ENVOY_FILTER: EnvoyFilter,
}


def parse_istio_spec(
    kind: Kind, spec: Any, namespace: str, *, strict: bool = True, unknown: list[str] | None = None
) -> Message:
    """Parse and validate the ``spec`` of an Istio object; not ``strict``, a field Istio does
    not define is dropped and its path appended to ``unknown``."""
    if spec is None:
        raise FieldError("spec", "is required")
    msg = parse_message(spec, SPEC_MESSAGES[kind], strict=strict, unknown=unknown)
    _VALIDATORS[kind](msg, namespace)
    return msg


def object_warnings(obj: ConfigObject) -> list[str]:
    """Every warning about an accepted object: what reading it ignored (an unknown field in a
    file) and what pilotfish cannot honour yet (``istio_warnings``)."""
    return [*obj.warnings, *istio_warnings(obj.spec)]


def istio_warnings(spec: object) -> list[str]:
    """What an accepted object asks for that pilotfish cannot honour yet, one line per field;
    shown in ``/debug/configz`` and logged when the object comes in."""
    out: list[str] = not_applied(spec) if isinstance(spec, Message) else []
    if isinstance(spec, EnvoyFilter):
        out.extend(envoy_filter_warnings(spec))
    if isinstance(spec, net.ServiceEntry) and spec.resolution == net.ServiceEntry.DYNAMIC_DNS:
        out.append(
            "resolution DYNAMIC_DNS: accepted, but pilotfish builds no dynamic forward proxy clusters yet "
            "(requests to these hosts find no cluster)"
        )
    return out


# --- ServiceEntry / WorkloadEntry -------------------------------------------------------


def _validate_workload_entry_object(we: net.WorkloadEntry, namespace: str) -> None:
    _validate_workload_entry(we)


def _check_unix_address(path: str, address: str) -> None:
    """istiod ValidateUnixAddress: an absolute file path, or an abstract ``@name``."""
    if not address:
        raise fail(path, "unix address must not be empty")
    if not address.startswith("@") and (not address.startswith("/") or address.endswith("/")):
        raise fail(path, f"{address} is not an absolute path to a file")


def _validate_workload_entry(
    we: net.WorkloadEntry, path: str = "", *, ip_only: bool = False, ports: Collection[str] | None = None
) -> None:
    """istiod validateWorkloadEntry; ``ports``: the ServiceEntry's port names, for its endpoints."""
    prefix = f"{path}." if path else ""
    if not we.address and not we.network:
        raise fail(f"{prefix}address", "is required")
    if we.address.startswith("unix://"):
        _check_unix_address(f"{prefix}address", we.address.removeprefix("unix://"))
        if we.ports:
            raise fail(f"{prefix}ports", f"unix endpoint {we.address} must not include ports")
        if ports is not None and len(ports) != 1:
            raise fail(f"{prefix}address", "exactly 1 service port required for unix endpoints")
    elif ip_only and we.address:
        check_address(f"{prefix}address", we.address, cidr=False)
    elif we.address and not is_ip_address(we.address):
        reason = validate_fqdn(we.address)
        if reason:
            raise fail(f"{prefix}address", f"{we.address!r} is not a valid FQDN or an IP address: {reason}")
    for name, number in we.ports.items():
        if ports is not None and name not in ports:
            raise fail(f"{prefix}ports.{name}", "names no port of this ServiceEntry")
        if not is_dns1123_label(name):
            raise fail(f"{prefix}ports.{name}", "invalid port name")
        check_port_number(f"{prefix}ports.{name}", number)
    check_labels(f"{prefix}labels", we.labels)
    if we.weight > 0xFFFF_FFFF:
        raise fail(f"{prefix}weight", "out of range")


_SE = net.ServiceEntry
# what a dynamic forward proxy can carry (istiod ValidateServiceEntry, DYNAMIC_DNS)
_DYNAMIC_DNS_PROTOCOLS = frozenset({"HTTP", "TLS", "GRPC", "HTTP2"})
# protocols that tell a ServiceEntry's hosts apart on one port (istio protocol IsHTTP / IsTLS)
_HOST_AWARE_PROTOCOLS = frozenset({"HTTP", "HTTP2", "GRPC", "GRPC-WEB", "HTTPS", "TLS"})


def _validate_service_entry(se: net.ServiceEntry, namespace: str) -> None:
    """istiod ValidateServiceEntry (its warnings are not errors here either)."""
    resolution = _SE.Resolution.Name(se.resolution)
    check_workload_selector("workloadSelector.labels", se.workload_selector.labels)
    if se.endpoints and se.HasField("workload_selector"):
        raise fail("workloadSelector", "only one of workloadSelector or endpoints is allowed")
    if not se.hosts:
        raise fail("hosts", "at least one host is required")
    for i, h in enumerate(se.hosts):
        if h == "*":
            raise fail(f"hosts[{i}]", "'*' is not allowed in a ServiceEntry")
        check_host(f"hosts[{i}]", h)
    for i, a in enumerate(se.addresses):
        check_address(f"addresses[{i}]", a, cidr=True)
        if "/" in a and se.resolution not in (_SE.NONE, _SE.STATIC):
            raise fail(f"addresses[{i}]", "CIDR addresses are allowed only for NONE/STATIC resolution types")
    names: set[str] = set()
    numbers: set[int] = set()
    for i, p in enumerate(se.ports):
        here = f"ports[{i}]"
        if p.name in names:
            raise fail(f"{here}.name", f"service entry port name {p.name!r} already defined")
        if p.number in numbers:
            raise fail(f"{here}.number", f"service entry port {p.number} already defined")
        names.add(p.name)
        numbers.add(p.number)
        if p.target_port:
            check_port_number(f"{here}.targetPort", p.target_port)
        if not is_dns1123_label(p.name):
            raise fail(f"{here}.name", f"invalid port name: {p.name!r}")
        if p.protocol:
            check_protocol(f"{here}.protocol", p.protocol)
        check_port_number(f"{here}.number", p.number)
    if se.resolution == _SE.NONE:
        if se.endpoints:
            raise fail("endpoints", "no endpoints should be provided for resolution type NONE")
    elif se.resolution in (_SE.DNS, _SE.DNS_ROUND_ROBIN):
        if not se.endpoints:
            for i, h in enumerate(se.hosts):
                if reason := validate_fqdn(h):
                    raise fail(
                        f"hosts[{i}]",
                        f"hosts must be FQDN or contain only prefix wildcards if no endpoints are provided "
                        f"for resolution mode {resolution}: {reason}",
                    )
        if se.resolution == _SE.DNS_ROUND_ROBIN and len(se.endpoints) > 1:
            raise fail("endpoints", f"there must only be 0 or 1 endpoint for resolution mode {resolution}")
    elif se.resolution == _SE.DYNAMIC_DNS:
        for i, h in enumerate(se.hosts):
            if not h.startswith("*"):
                raise fail(f"hosts[{i}]", f"host must be wildcarded for resolution mode {resolution}")
        if se.addresses:
            raise fail("addresses", f"addresses cannot be set for resolution type {resolution}")
        if se.endpoints:
            raise fail("endpoints", f"endpoints cannot be set for resolution type {resolution}")
        for i, p in enumerate(se.ports):
            if p.protocol.upper() not in _DYNAMIC_DNS_PROTOCOLS:
                raise fail(
                    f"ports[{i}].protocol",
                    f"only HTTP, TLS, GRPC, and HTTP2 protocols are supported for resolution type {resolution}",
                )
    for i, ep in enumerate(se.endpoints):
        _validate_workload_entry(ep, f"endpoints[{i}]", ip_only=se.resolution == _SE.STATIC, ports=names)
    if se.resolution != _SE.NONE and len(se.hosts) > 1:
        # plain TCP cannot tell several hosts apart (HTTP has the authority, TLS the SNI)
        for i, p in enumerate(se.ports):
            if p.protocol.upper() not in _HOST_AWARE_PROTOCOLS:
                raise fail(f"ports[{i}].protocol", "multiple hosts provided with non-HTTP, non-TLS ports")
    check_export_to(se.export_to, "exportTo", namespace, none_ok=True)


# --- Sidecar / Gateway ------------------------------------------------------------------


def _check_gateway_host(path: str, text: str) -> None:
    """A Gateway server host: ``[namespace/]dnsName``."""
    ns, sep, host = text.partition("/")
    if not sep:
        host, ns = text, "*"
    if not ns:
        raise fail(path, f"{text!r}: namespace must not be empty")
    if ns not in (".", "*", "~") and (validate_fqdn(ns) or "." in ns):
        raise fail(path, f"{ns!r} is not '.', '*', '~' or a namespace name")
    if ns == "~" and host != "*":
        raise fail(path, "namespace '~' is only allowed with host '*'")
    check_host(path, host)


def _validate_sidecar(sc: net.Sidecar, namespace: str) -> None:
    """istiod validation.ValidateSidecar (an empty workloadSelector is accepted: istiod warns
    that it applies to the whole namespace)."""
    check_workload_selector("workloadSelector.labels", sc.workload_selector.labels)
    policies = sc.HasField("outbound_traffic_policy") or sc.HasField("inbound_connection_pool")
    if not (sc.egress or sc.ingress or policies):
        raise fail("spec", "sidecar: empty configuration provided")
    if sc.HasField("inbound_connection_pool"):
        check_connection_pool("inboundConnectionPool", sc.inbound_connection_pool)
    if sc.HasField("outbound_traffic_policy") and sc.outbound_traffic_policy.HasField("egress_proxy"):
        _check_egress_proxy(sc.outbound_traffic_policy)
    ports: set[int] = set()
    sockets: set[str] = set()
    for i, eg in enumerate(sc.egress):
        here = f"egress[{i}]"
        if not eg.hosts:
            raise fail(f"{here}.hosts", "at least one host is required")
        # an ill-formed host is skipped (and logged) where the SidecarScope reads it, as istiod's
        # sidecar.go does: the rest of the Sidecar stays in force
        if not eg.HasField("port"):  # the catch-all: one, and last (its bind is not checked)
            if i != len(sc.egress) - 1:
                raise fail(f"{here}.port", "the egress listener without a port must be the last one")
            continue
        port = eg.port
        if port.target_port:
            raise fail(f"{here}.port.targetPort", "has no impact on Sidecars")
        if port.name and not is_dns1123_label(port.name):
            raise fail(f"{here}.port.name", f"{port.name!r} is not a valid port name (a DNS label)")
        if port.protocol:
            check_protocol(f"{here}.port.protocol", port.protocol)
        if port.number == 0:  # istiod validateSidecarEgressPortBindAndCaptureMode: a unix socket
            if not eg.bind.startswith("unix://") or not eg.bind.removeprefix("unix://").startswith("/"):
                raise fail(f"{here}.bind", "port 0 needs a unix:///absolute/path bind")
            if eg.capture_mode not in (net.CaptureMode.DEFAULT, net.CaptureMode.NONE):
                raise fail(f"{here}.captureMode", "must be DEFAULT or NONE for a unix domain socket")
            if eg.bind in sockets:
                raise fail(f"{here}.bind", f"unix domain socket {eg.bind!r} used twice")
            sockets.add(eg.bind)
            continue
        check_port_number(f"{here}.port.number", port.number)
        if port.number in ports:
            raise fail(f"{here}.port.number", f"duplicate egress port {port.number}")
        ports.add(port.number)
        if eg.bind:
            check_address(f"{here}.bind", eg.bind, cidr=False)
    ingress_ports: set[int] = set()
    for i, ing in enumerate(sc.ingress):
        _check_sidecar_ingress(f"ingress[{i}]", ing, ingress_ports)


def _check_egress_proxy(policy: net.OutboundTrafficPolicy) -> None:
    """istiod validateSidecarOutboundTrafficPolicy."""
    here = "outboundTrafficPolicy.egressProxy"
    if policy.mode != net.OutboundTrafficPolicy.ALLOW_ANY:
        raise fail(here, "may only be set with mode ALLOW_ANY")
    proxy = policy.egress_proxy
    if not proxy.host or "*" in proxy.host:
        raise fail(f"{here}.host", f"{proxy.host!r}: want a host name without wildcards")
    check_host(f"{here}.host", proxy.host)
    if not proxy.HasField("port"):
        raise fail(f"{here}.port", "is required")
    check_port_number(f"{here}.port.number", proxy.port.number)


_DEFAULT_ENDPOINT_HOSTS = ("127.0.0.1", "0.0.0.0", "::1", "::", "")


def _check_sidecar_ingress(here: str, ing: net.IstioIngressListener, ports: set[int]) -> None:
    """istiod ValidateSidecar, for one ingress listener."""
    if not ing.HasField("port"):
        raise fail(f"{here}.port", "is required")
    port = ing.port
    check_port_number(f"{here}.port.number", port.number)
    if port.protocol:
        check_protocol(f"{here}.port.protocol", port.protocol)
    if port.target_port:
        raise fail(f"{here}.port.targetPort", "has no impact on Sidecars")
    if port.number in ports:
        raise fail(f"{here}.port.number", f"duplicate ingress port {port.number}")
    ports.add(port.number)
    if ing.bind:
        check_address(f"{here}.bind", ing.bind, cidr=False)
    if port.name and not is_dns1123_label(port.name):
        raise fail(f"{here}.port.name", f"{port.name!r} is not a valid port name (a DNS label)")
    if ing.HasField("connection_pool"):
        check_connection_pool(f"{here}.connectionPool", ing.connection_pool)
    endpoint = ing.default_endpoint
    if endpoint.startswith("unix://"):
        path = endpoint.removeprefix("unix://")
        if not path.startswith("/"):
            raise fail(f"{here}.defaultEndpoint", f"{endpoint!r}: a unix address needs an absolute path")
    elif endpoint:
        host, sep, port_text = endpoint.rpartition(":")
        if ":" in host and not (host.startswith("[") and host.endswith("]")):
            raise fail(f"{here}.defaultEndpoint", f"{endpoint!r}: an IPv6 host goes in brackets, [::1]:PORT")
        host = host.removeprefix("[").removesuffix("]")
        if not sep or host not in _DEFAULT_ENDPOINT_HOSTS:
            raise fail(
                f"{here}.defaultEndpoint",
                f"{endpoint!r}: must be 127.0.0.1:PORT, 0.0.0.0:PORT, [::1]:PORT, [::]:PORT or unix://PATH",
            )
        number = go_int(port_text)  # istiod: strconv.Atoi
        if number is None:
            raise fail(f"{here}.defaultEndpoint", f"port {quoted(port_text)} is not a number")
        check_port_number(f"{here}.defaultEndpoint", number)
    if ing.HasField("tls"):
        tls = ing.tls
        unsupported = (
            ("subjectAltNames", bool(tls.subject_alt_names)),
            ("httpsRedirect", tls.https_redirect),
            ("credentialName", bool(tls.credential_name)),
            ("credentialNames", bool(tls.credential_names)),
            ("tlsCertificates", bool(tls.tls_certificates)),
        )
        for name, present in unsupported:
            if present:
                raise fail(f"{here}.tls.{name}", "is not supported on a Sidecar ingress listener")
        if tls.mode in (net.ServerTLSSettings.ISTIO_MUTUAL, net.ServerTLSSettings.AUTO_PASSTHROUGH):
            mode = net.ServerTLSSettings.TLSmode.Name(tls.mode)
            raise fail(f"{here}.tls.mode", f"cannot be {mode} on a Sidecar ingress listener")
        if port.protocol.upper() not in ("HTTPS", "TLS"):
            raise fail(f"{here}.tls", "TLS settings need an HTTPS or TLS port")
        # istiod validateTLSOptions: files for SIMPLE and MUTUAL, a CA for MUTUAL
        if tls.mode in (net.ServerTLSSettings.SIMPLE, net.ServerTLSSettings.MUTUAL):
            if not tls.server_certificate or not tls.private_key:
                raise fail(f"{here}.tls", "SIMPLE and MUTUAL need serverCertificate and privateKey")
            if tls.mode == net.ServerTLSSettings.MUTUAL and not tls.ca_certificates:
                raise fail(f"{here}.tls.caCertificates", "is required for MUTUAL")


_TLS = net.ServerTLSSettings
_TLS_PROTOCOLS = frozenset({"HTTPS", "TLS"})
_HTTP_PROTOCOLS = frozenset({"HTTP", "HTTP2", "GRPC", "GRPC-WEB"})  # istio protocol.IsHTTP


def _validate_gateway(gw: net.Gateway, namespace: str) -> None:
    """istiod ValidateGateway and validateServer (a server's ``bind`` is not checked here)."""
    if not gw.servers:
        raise fail("servers", "at least one server is required")
    port_names: set[str] = set()
    for i, s in enumerate(gw.servers):
        here = f"servers[{i}]"
        if not s.hosts:
            raise fail(f"{here}.hosts", "at least one host is required")
        for j, h in enumerate(s.hosts):
            _check_gateway_host(f"{here}.hosts[{j}]", h)
        if not s.HasField("port"):
            raise fail(f"{here}.port", "is required")
        check_port_number(f"{here}.port.number", s.port.number)
        if not s.port.protocol:
            raise fail(f"{here}.port.protocol", "is required")
        check_protocol(f"{here}.port.protocol", s.port.protocol)
        if s.port.target_port:
            raise fail(f"{here}.port.targetPort", "has no impact on Gateways")
        if not s.port.name:
            raise fail(f"{here}.port.name", "port name must be set")
        if s.port.name in port_names:
            raise fail(f"{here}.port.name", f"port names in servers must be unique: {s.port.name!r} repeats")
        port_names.add(s.port.name)
        if s.HasField("tls"):
            _check_server_tls(f"{here}.tls", s.tls)
        proto = s.port.protocol.upper()
        if proto in _TLS_PROTOCOLS and not s.HasField("tls"):
            raise fail(f"{here}.tls", "server must have TLS settings for HTTPS/TLS protocols")
        if proto not in _TLS_PROTOCOLS and s.HasField("tls"):
            if proto not in _HTTP_PROTOCOLS and proto in PROTOCOLS:
                raise fail(f"{here}.tls", "server cannot have TLS settings for non HTTPS/TLS ports")
            passthrough = s.tls.mode in (_TLS.PASSTHROUGH, _TLS.AUTO_PASSTHROUGH)
            if not passthrough or s.tls.ca_certificates or s.tls.private_key or s.tls.server_certificate:
                raise fail(f"{here}.tls", "server cannot have TLS settings for plain text HTTP ports")


def _check_server_tls(path: str, tls: net.ServerTLSSettings) -> None:
    """istiod validateTLSOptions (its warnings are not errors here either): ISTIO_MUTUAL takes no
    certificates; one certificate source at most (credentialName, credentialNames,
    serverCertificate and privateKey, tlsCertificates); SIMPLE and MUTUAL without a credential
    need each certificate's file pair, and MUTUAL a CA bundle; a CRL neither with
    credentialName nor with SIMPLE."""
    if tls.mode == _TLS.ISTIO_MUTUAL:
        for name, is_set in (
            ("serverCertificate", bool(tls.server_certificate)),
            ("privateKey", bool(tls.private_key)),
            ("caCertificates", bool(tls.ca_certificates)),
            ("tlsCertificates", len(tls.tls_certificates) > 0),
            ("credentialName", bool(tls.credential_name)),
            ("credentialNames", len(tls.credential_names) > 0),
        ):
            if is_set:
                raise fail(f"{path}.{name}", "ISTIO_MUTUAL TLS cannot have associated certificates")
        return
    sources = [
        bool(tls.server_certificate and tls.private_key),
        bool(tls.credential_name),
        len(tls.credential_names) > 0,
        len(tls.tls_certificates) > 0,
    ]
    if sum(sources) > 1:
        sources_named = "credentialName, credentialNames, serverCertificate/privateKey, tlsCertificates"
        raise fail(path, f"only one of {sources_named} should be specified")
    terminating = tls.mode in (_TLS.SIMPLE, _TLS.MUTUAL, _TLS.OPTIONAL_MUTUAL)
    if terminating and not (tls.credential_name or tls.credential_names):  # else fetched by name
        prefix = "SIMPLE TLS" if tls.mode == _TLS.SIMPLE else "MUTUAL TLS"
        if tls.mode != _TLS.SIMPLE and not tls.ca_certificates:
            raise fail(f"{path}.caCertificates", f"{prefix} requires a client CA bundle")
        pairs = [(c.server_certificate, c.private_key) for c in tls.tls_certificates]
        for j, (certificate, key) in enumerate(pairs or [(tls.server_certificate, tls.private_key)]):
            where = f"{path}.tlsCertificates[{j}]." if pairs else f"{path}."
            if not certificate:
                raise fail(f"{where}serverCertificate", f"{prefix} requires a server certificate")
            if not key:
                raise fail(f"{where}privateKey", f"{prefix} requires a private key")
    if tls.ca_crl:
        if tls.credential_name:
            raise fail(f"{path}.caCrl", "CRL is not supported with credentialName: it has to be in the credential")
        if tls.mode == _TLS.SIMPLE:
            raise fail(f"{path}.caCrl", "CRL is not supported with SIMPLE TLS")


def _validate_proxy_config(pc: ProxyConfig, namespace: str) -> None:
    """istiod validation.ValidateProxyConfig: the selector, and a concurrency of 0 or more."""
    check_workload_selector("selector.matchLabels", pc.selector.match_labels)
    if pc.concurrency.value < 0:
        raise fail("concurrency", "concurrency must be greater than or equal to 0")


_VALIDATORS: dict[Kind, Callable[[Any, str], None]] = {
    Kind.DESTINATION_RULE: validate_destination_rule,
    Kind.VIRTUAL_SERVICE: validate_virtual_service,
    Kind.SERVICE_ENTRY: _validate_service_entry,
    Kind.WORKLOAD_ENTRY: _validate_workload_entry_object,
    Kind.SIDECAR: _validate_sidecar,
    Kind.PEER_AUTHENTICATION: validate_peer_authentication,
    Kind.AUTHORIZATION_POLICY: validate_authorization_policy,
    Kind.REQUEST_AUTHENTICATION: validate_request_authentication,
    Kind.GATEWAY: _validate_gateway,
    Kind.PROXY_CONFIG: _validate_proxy_config,
    Kind.TELEMETRY: validate_telemetry,
    Kind.ENVOY_FILTER: validate_envoy_filter,
}
