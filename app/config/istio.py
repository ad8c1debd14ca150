"""Istio networking kinds: strict parsing (app/config/schema.py) plus istiod's semantic checks.

The checks are the ones a user hits in practice (pilot pkg/config/validation): hosts, ports,
required fields, conflicting settings. Each raises FieldError naming the field path.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import re2
from google.protobuf.message import Message

from app.api import networking_pb2 as net
from app.api import security_pb2 as sec
from app.config.host import is_ip_address, matches, validate_fqdn, validate_wildcard_host
from app.config.model import Kind
from app.config.schema import parse_message
from app.errors import FieldError

_MESSAGES: dict[Kind, type[Message]] = {
    Kind.DESTINATION_RULE: net.DestinationRule,
    Kind.VIRTUAL_SERVICE: net.VirtualService,
    Kind.SERVICE_ENTRY: net.ServiceEntry,
    Kind.WORKLOAD_ENTRY: net.WorkloadEntry,
    Kind.SIDECAR: net.Sidecar,
    Kind.GATEWAY: net.Gateway,
    Kind.PEER_AUTHENTICATION: sec.PeerAuthentication,
    Kind.AUTHORIZATION_POLICY: sec.AuthorizationPolicy,
    Kind.REQUEST_AUTHENTICATION: sec.RequestAuthentication,
}
_PROTOCOLS = frozenset(
    {"HTTP", "HTTPS", "HTTP2", "GRPC", "GRPC-WEB", "TCP", "TLS", "MONGO", "REDIS", "MYSQL", "UDP"}
)


def parse_istio_spec(kind: Kind, spec: Any, namespace: str) -> Message:
    """Parse and validate the ``spec`` of an Istio networking object."""
    if spec is None:
        raise FieldError("spec", "is required")
    msg = parse_message(spec, _MESSAGES[kind])
    _VALIDATORS[kind](msg, namespace)
    return msg


_NO_SDS = "accepted, but pilotfish serves no credentialName secrets yet (Envoy waits for them over SDS)"


def istio_warnings(spec: object) -> list[str]:
    """What an accepted object asks for that pilotfish cannot honour yet, one line per field;
    shown in ``/debug/configz`` and logged when the object comes in."""
    out: list[str] = []
    if isinstance(spec, net.Gateway):
        for i, server in enumerate(spec.servers):
            names = list(server.tls.credential_names) or [n for n in [server.tls.credential_name] if n]
            if names:
                out.append(f"servers[{i}].tls.credentialName {', '.join(names)}: {_NO_SDS}")
    elif isinstance(spec, net.DestinationRule):
        policies = [("trafficPolicy", spec.traffic_policy)]
        policies += [(f"subsets[{i}].trafficPolicy", ss.traffic_policy) for i, ss in enumerate(spec.subsets)]
        for path, policy in policies:
            levels = [(path, policy.tls)]
            levels += [(f"{path}.portLevelSettings[{i}]", p.tls) for i, p in enumerate(policy.port_level_settings)]
            for where, tls in levels:
                if tls.credential_name:
                    out.append(f"{where}.tls.credentialName {tls.credential_name}: {_NO_SDS}")
    return out


def _fail(path: str, reason: str) -> FieldError:
    return FieldError(path, reason)


def _check_host(path: str, host: str, *, ip_ok: bool = False) -> None:
    if not host:
        raise _fail(path, "is required")
    if ip_ok and is_ip_address(host):
        return
    reason = validate_wildcard_host(host)
    if reason:
        raise _fail(path, reason)


def _check_export_to(export_to: Iterable[str], path: str, namespace: str, *, none_ok: bool = False) -> None:
    seen: set[str] = set()
    values = list(export_to)
    for i, ns in enumerate(values):
        here = f"{path}[{i}]"
        same = namespace if ns == "." else ns  # "." and the object's own namespace are the same entry
        if same in seen:
            raise _fail(here, f"duplicate entry {ns!r}")
        seen.add(same)
        if ns == "~" and not none_ok:
            raise _fail(here, "'~' is only allowed for services")
        if ns in (".", "*", "~"):
            continue
        if validate_fqdn(ns) or "." in ns:
            raise _fail(here, f"{ns!r} is not '.', '*' or a namespace name")
    if "~" in seen and len(values) > 1:
        raise _fail(path, "'~' cannot be combined with other entries")
    if "*" in seen and len(values) > 1:
        raise _fail(path, "'*' cannot be combined with other entries")


def _check_port_number(path: str, number: int) -> None:
    if not 1 <= number <= 65535:
        raise _fail(path, f"port {number} out of range 1-65535")


def _check_protocol(path: str, protocol: str) -> None:
    if protocol.upper() not in _PROTOCOLS:
        raise _fail(path, f"unknown protocol {protocol!r}")


# --- DestinationRule -----------------------------------------------------------------


def _check_traffic_policy(tp: net.TrafficPolicy, path: str, *, port_level_allowed: bool = True) -> None:
    _check_policy_parts(tp, path)
    if tp.port_level_settings and not port_level_allowed:
        raise _fail(f"{path}.portLevelSettings", "not allowed here")
    for i, pls in enumerate(tp.port_level_settings):
        here = f"{path}.portLevelSettings[{i}]"
        if not pls.HasField("port") or pls.port.number == 0:
            raise _fail(f"{here}.port", "is required")
        _check_port_number(f"{here}.port.number", pls.port.number)
        _check_policy_parts(pls, here)


def _check_policy_parts(tp: net.TrafficPolicy | net.TrafficPolicy.PortTrafficPolicy, path: str) -> None:
    if tp.HasField("outlier_detection"):
        od = tp.outlier_detection
        if not 0 <= od.max_ejection_percent <= 100:
            raise _fail(f"{path}.outlierDetection.maxEjectionPercent", "must be between 0 and 100")
        if not 0 <= od.min_health_percent <= 100:
            raise _fail(f"{path}.outlierDetection.minHealthPercent", "must be between 0 and 100")
    if tp.HasField("load_balancer"):
        lb = tp.load_balancer
        if lb.HasField("locality_lb_setting"):
            lls = lb.locality_lb_setting
            if lls.distribute and lls.failover:
                raise _fail(f"{path}.loadBalancer.localityLbSetting", "distribute and failover cannot both be set")
            for i, d in enumerate(lls.distribute):
                total = sum(d.to.values())
                if d.to and total != 100:
                    raise _fail(
                        f"{path}.loadBalancer.localityLbSetting.distribute[{i}].to",
                        f"weights must total 100, got {total}",
                    )
    if tp.HasField("tls"):
        tls = tp.tls
        if tls.mode == net.ClientTLSSettings.MUTUAL and not tls.credential_name:
            if not tls.client_certificate:
                raise _fail(f"{path}.tls.clientCertificate", "is required for mode MUTUAL")
            if not tls.private_key:
                raise _fail(f"{path}.tls.privateKey", "is required for mode MUTUAL")


def _validate_destination_rule(dr: net.DestinationRule, namespace: str) -> None:
    _check_host("host", dr.host)
    _check_export_to(dr.export_to, "exportTo", namespace)
    if dr.HasField("workload_selector") and any(e not in (".", namespace) for e in dr.export_to):
        raise _fail("exportTo", "a DestinationRule with a workloadSelector can only be exported to its own namespace")
    names: set[str] = set()
    if dr.HasField("traffic_policy"):
        _check_traffic_policy(dr.traffic_policy, "trafficPolicy")
    for i, subset in enumerate(dr.subsets):
        here = f"subsets[{i}]"
        if not subset.name:
            raise _fail(f"{here}.name", "is required")
        if subset.name in names:
            raise _fail(f"{here}.name", f"duplicate subset name {subset.name!r}")
        names.add(subset.name)
        reason = validate_fqdn(subset.name)
        if reason or "." in subset.name:
            raise _fail(f"{here}.name", f"{subset.name!r} is not a valid subset name (a DNS label)")
        if subset.HasField("traffic_policy"):
            _check_traffic_policy(subset.traffic_policy, f"{here}.trafficPolicy")
    if dr.HasField("workload_selector") and not dr.workload_selector.match_labels:
        raise _fail("workloadSelector.matchLabels", "must not be empty")


# --- VirtualService --------------------------------------------------------------------


# Envoy compiles safe_regex with RE2 and rejects the whole update for one bad pattern; istiod
# checks with Go's RE2 and caps the length (pkg/config/validation validateStringRegexp)
MAX_REGEX_LENGTH = 1024
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the error is reported as the rejection, not on stderr


def _check_regex(path: str, pattern: str) -> None:
    if len(pattern) > MAX_REGEX_LENGTH:
        raise _fail(path, f"regex is too large, max length allowed is {MAX_REGEX_LENGTH}")
    try:
        re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as e:
        reason = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise _fail(path, f"not a valid RE2 regex: {reason}") from None


def _check_string_match(path: str, sm: net.StringMatch) -> None:
    kind = sm.WhichOneof("match_type")
    if kind == "regex":
        if not sm.regex:
            raise _fail(f"{path}.regex", "regex string match should not be empty")
        _check_regex(f"{path}.regex", sm.regex)
    elif kind == "prefix" and not sm.prefix:
        raise _fail(f"{path}.prefix", "prefix string match should not be empty")


def _check_match_request(path: str, match: net.HTTPMatchRequest) -> None:
    for name in ("uri", "scheme", "method", "authority"):
        if match.HasField(name):
            _check_string_match(f"{path}.{name}", getattr(match, name))
    groups: tuple[tuple[str, Mapping[str, net.StringMatch]], ...] = (
        ("headers", match.headers),
        ("queryParams", match.query_params),
        ("withoutHeaders", match.without_headers),
    )
    for field, entries in groups:
        for key in sorted(entries):
            _check_string_match(f"{path}.{field}.{key}", entries[key])


def _check_timeout(path: str, seconds: int, nanos: int) -> None:
    """istiod agent.ValidateDuration: at least 1ms, in whole milliseconds."""
    total_ns = seconds * 1_000_000_000 + nanos
    if total_ns < 1_000_000:
        raise _fail(path, "duration must be greater than 1ms")
    if total_ns % 1_000_000:
        raise _fail(path, "only durations to ms precision are supported")


def _check_destination(dest: net.Destination, path: str) -> None:
    _check_host(f"{path}.host", dest.host)
    if dest.HasField("port") and dest.port.number:
        _check_port_number(f"{path}.port.number", dest.port.number)


def _validate_virtual_service(vs: net.VirtualService, namespace: str) -> None:
    if not vs.hosts and vs.gateways:
        raise _fail("hosts", "is required (only a delegate VirtualService, bound to no gateway, may omit it)")
    for i, h in enumerate(vs.hosts):
        _check_host(f"hosts[{i}]", h, ip_ok=True)
        if h == "*" and (not vs.gateways or "mesh" in vs.gateways):
            raise _fail(f"hosts[{i}]", "'*' is not allowed for a VirtualService bound to the mesh gateway")
        for j in range(i):
            if matches(vs.hosts[j], h):
                raise _fail(f"hosts[{i}]", f"{h!r} overlaps hosts[{j}] {vs.hosts[j]!r}")
    _check_export_to(vs.export_to, "exportTo", namespace)
    for i, g in enumerate(vs.gateways):
        if not g:
            raise _fail(f"gateways[{i}]", "must not be empty")
    for i, route in enumerate(vs.http):
        here = f"http[{i}]"
        has_route = len(route.route) > 0
        actions = [has_route, route.HasField("redirect"), route.HasField("direct_response"), route.HasField("delegate")]
        if sum(actions) == 0:
            raise _fail(here, "one of route, redirect, directResponse or delegate is required")
        if route.HasField("redirect") and has_route:
            raise _fail(here, "route and redirect cannot both be set")
        if route.HasField("direct_response") and (has_route or route.HasField("redirect")):
            raise _fail(here, "directResponse cannot be combined with route or redirect")
        for j, dest in enumerate(route.route):
            if not dest.HasField("destination"):
                raise _fail(f"{here}.route[{j}].destination", "is required")
            _check_destination(dest.destination, f"{here}.route[{j}].destination")
            if dest.weight < 0:
                raise _fail(f"{here}.route[{j}].weight", "must not be negative")
        if len(route.route) > 1 and sum(d.weight for d in route.route) == 0:
            raise _fail(f"{here}.route", "total destination weight = 0")
        for j, match in enumerate(route.match):
            _check_match_request(f"{here}.match[{j}]", match)
        if route.HasField("rewrite") and route.rewrite.HasField("uri_regex_rewrite"):
            _check_regex(f"{here}.rewrite.uriRegexRewrite.match", route.rewrite.uri_regex_rewrite.match)
        if route.HasField("cors_policy"):
            for j, origin in enumerate(route.cors_policy.allow_origins):
                _check_string_match(f"{here}.corsPolicy.allowOrigins[{j}]", origin)
        if route.HasField("timeout"):
            _check_timeout(f"{here}.timeout", route.timeout.seconds, route.timeout.nanos)
        if route.HasField("retries") and route.retries.attempts < 0:
            raise _fail(f"{here}.retries.attempts", "must not be negative")
        if route.HasField("mirror"):
            _check_host(f"{here}.mirror.host", route.mirror.host)
        if route.HasField("direct_response") and not 200 <= route.direct_response.status <= 599:
            raise _fail(f"{here}.directResponse.status", "must be an HTTP status between 200 and 599")
    l4: list[tuple[str, Sequence[net.RouteDestination]]] = [
        *((f"tcp[{i}]", r.route) for i, r in enumerate(vs.tcp)),
        *((f"tls[{i}]", r.route) for i, r in enumerate(vs.tls)),
    ]
    for where, dests in l4:
        for j, l4_dest in enumerate(dests):
            if not l4_dest.HasField("destination"):
                raise _fail(f"{where}.route[{j}].destination", "is required")
            _check_destination(l4_dest.destination, f"{where}.route[{j}].destination")
        if len(dests) > 1 and sum(d.weight for d in dests) == 0:
            raise _fail(f"{where}.route", "total destination weight = 0")
    for i, tls_route in enumerate(vs.tls):
        if not tls_route.match:
            raise _fail(f"tls[{i}].match", "is required")
        for j, m in enumerate(tls_route.match):
            if not m.sni_hosts:
                raise _fail(f"tls[{i}].match[{j}].sniHosts", "is required")


# --- ServiceEntry / WorkloadEntry -------------------------------------------------------


def _check_address(path: str, address: str, *, cidr: bool) -> None:
    try:
        if cidr:
            ipaddress.ip_network(address, strict=False)
        else:
            ipaddress.ip_address(address)
    except ValueError:
        raise _fail(path, f"{address!r} is not a valid IP {'address or CIDR' if cidr else 'address'}") from None


def _validate_workload_entry_object(we: net.WorkloadEntry, namespace: str) -> None:
    _validate_workload_entry(we)


def _validate_workload_entry(we: net.WorkloadEntry, path: str = "", *, ip_only: bool = False) -> None:
    prefix = f"{path}." if path else ""
    if not we.address and not we.network:
        raise _fail(f"{prefix}address", "is required")
    if we.address.startswith("unix://"):
        return
    if ip_only:
        _check_address(f"{prefix}address", we.address, cidr=False)
    elif we.address and not is_ip_address(we.address):
        reason = validate_fqdn(we.address)
        if reason:
            raise _fail(f"{prefix}address", reason)
    for name, number in we.ports.items():
        _check_port_number(f"{prefix}ports.{name}", number)
    if we.weight > 0xFFFF_FFFF:
        raise _fail(f"{prefix}weight", "out of range")


def _validate_service_entry(se: net.ServiceEntry, namespace: str) -> None:
    if not se.hosts:
        raise _fail("hosts", "at least one host is required")
    dns = se.resolution in (net.ServiceEntry.DNS, net.ServiceEntry.DNS_ROUND_ROBIN)
    for i, h in enumerate(se.hosts):
        _check_host(f"hosts[{i}]", h)
        if h == "*":
            raise _fail(f"hosts[{i}]", "'*' is not allowed in a ServiceEntry")
        if dns and h.startswith("*") and not se.endpoints:
            raise _fail(f"hosts[{i}]", "a wildcard host needs endpoints for resolution DNS")
    for i, a in enumerate(se.addresses):
        _check_address(f"addresses[{i}]", a, cidr=True)
    names: set[str] = set()
    numbers: set[int] = set()
    for i, p in enumerate(se.ports):
        here = f"ports[{i}]"
        _check_port_number(f"{here}.number", p.number)
        if not p.name:
            raise _fail(f"{here}.name", "is required")
        if p.name in names:
            raise _fail(f"{here}.name", f"duplicate port name {p.name!r}")
        if p.number in numbers:
            raise _fail(f"{here}.number", f"duplicate port number {p.number}")
        names.add(p.name)
        numbers.add(p.number)
        if p.protocol:
            _check_protocol(f"{here}.protocol", p.protocol)
        if p.target_port:
            _check_port_number(f"{here}.targetPort", p.target_port)
    if se.resolution == net.ServiceEntry.DNS_ROUND_ROBIN and len(se.endpoints) > 1:
        raise _fail("endpoints", "resolution DNS_ROUND_ROBIN allows at most one endpoint")
    if se.endpoints and se.HasField("workload_selector"):
        raise _fail("workloadSelector", "cannot be combined with endpoints")
    _check_export_to(se.export_to, "exportTo", namespace, none_ok=True)
    for i, ep in enumerate(se.endpoints):
        _validate_workload_entry(ep, f"endpoints[{i}]", ip_only=se.resolution == net.ServiceEntry.STATIC)
        for name in ep.ports:
            if name not in names:
                raise _fail(f"endpoints[{i}].ports.{name}", "names no port of this ServiceEntry")


# --- Sidecar / Gateway ------------------------------------------------------------------


def _check_gateway_host(path: str, text: str) -> None:
    """A Gateway server host: ``[namespace/]dnsName``."""
    ns, sep, host = text.partition("/")
    if not sep:
        host, ns = text, "*"
    if not ns:
        raise _fail(path, f"{text!r}: namespace must not be empty")
    if ns not in (".", "*", "~") and (validate_fqdn(ns) or "." in ns):
        raise _fail(path, f"{ns!r} is not '.', '*', '~' or a namespace name")
    if ns == "~" and host != "*":
        raise _fail(path, "namespace '~' is only allowed with host '*'")
    _check_host(path, host)


def _validate_sidecar(sc: net.Sidecar, namespace: str) -> None:
    if sc.HasField("workload_selector") and not sc.workload_selector.labels:
        raise _fail("workloadSelector.labels", "must not be empty")
    portless = 0
    ports: set[int] = set()
    for i, eg in enumerate(sc.egress):
        here = f"egress[{i}]"
        if not eg.hosts:
            raise _fail(f"{here}.hosts", "at least one host is required")
        # an ill-formed host is skipped (and logged) where the SidecarScope reads it, as istiod's
        # sidecar.go does: the rest of the Sidecar stays in force
        if eg.HasField("port"):
            _check_port_number(f"{here}.port.number", eg.port.number)
            if eg.port.protocol:
                _check_protocol(f"{here}.port.protocol", eg.port.protocol)
            if eg.port.number in ports:
                raise _fail(f"{here}.port.number", f"duplicate egress port {eg.port.number}")
            ports.add(eg.port.number)
        else:
            portless += 1
            if eg.bind:
                raise _fail(f"{here}.bind", "requires a port")
        if eg.bind and not eg.bind.startswith("unix://"):
            _check_address(f"{here}.bind", eg.bind, cidr=False)
    if portless > 1:
        raise _fail("egress", "only one egress listener may omit its port")
    ingress_ports: set[int] = set()
    for i, ing in enumerate(sc.ingress):
        _check_sidecar_ingress(f"ingress[{i}]", ing, ingress_ports)


_DEFAULT_ENDPOINT_HOSTS = ("127.0.0.1", "0.0.0.0", "::1", "::", "")


def _check_sidecar_ingress(here: str, ing: net.IstioIngressListener, ports: set[int]) -> None:
    """istiod ValidateSidecar, for one ingress listener."""
    if not ing.HasField("port"):
        raise _fail(f"{here}.port", "is required")
    port = ing.port
    _check_port_number(f"{here}.port.number", port.number)
    if port.protocol:
        _check_protocol(f"{here}.port.protocol", port.protocol)
    if port.target_port:
        raise _fail(f"{here}.port.targetPort", "has no impact on Sidecars")
    if port.number in ports:
        raise _fail(f"{here}.port.number", f"duplicate ingress port {port.number}")
    ports.add(port.number)
    if ing.bind:
        _check_address(f"{here}.bind", ing.bind, cidr=False)
    endpoint = ing.default_endpoint
    if endpoint and not endpoint.startswith("unix://"):
        host, sep, port_text = endpoint.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not sep or host not in _DEFAULT_ENDPOINT_HOSTS:
            raise _fail(
                f"{here}.defaultEndpoint",
                f"{endpoint!r}: must be 127.0.0.1:PORT, 0.0.0.0:PORT, [::1]:PORT, [::]:PORT or unix://PATH",
            )
        if not port_text.isdigit():
            raise _fail(f"{here}.defaultEndpoint", f"port {port_text!r} is not a number")
        _check_port_number(f"{here}.defaultEndpoint", int(port_text))
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
                raise _fail(f"{here}.tls.{name}", "is not supported on a Sidecar ingress listener")
        if tls.mode in (net.ServerTLSSettings.ISTIO_MUTUAL, net.ServerTLSSettings.AUTO_PASSTHROUGH):
            mode = net.ServerTLSSettings.TLSmode.Name(tls.mode)
            raise _fail(f"{here}.tls.mode", f"cannot be {mode} on a Sidecar ingress listener")
        if port.protocol.upper() not in ("HTTPS", "TLS"):
            raise _fail(f"{here}.tls", "TLS settings need an HTTPS or TLS port")


def _validate_gateway(gw: net.Gateway, namespace: str) -> None:
    if not gw.servers:
        raise _fail("servers", "at least one server is required")
    port_names: set[str] = set()
    for i, s in enumerate(gw.servers):
        here = f"servers[{i}]"
        if not s.HasField("port"):
            raise _fail(f"{here}.port", "is required")
        _check_port_number(f"{here}.port.number", s.port.number)
        if not s.port.protocol:
            raise _fail(f"{here}.port.protocol", "is required")
        _check_protocol(f"{here}.port.protocol", s.port.protocol)
        if s.port.name:
            if s.port.name in port_names:
                raise _fail(f"{here}.port.name", f"port names in servers must be unique: {s.port.name!r} repeats")
            port_names.add(s.port.name)
        if not s.hosts:
            raise _fail(f"{here}.hosts", "at least one host is required")
        for j, h in enumerate(s.hosts):
            _check_gateway_host(f"{here}.hosts[{j}]", h)
        proto = s.port.protocol.upper()
        if proto == "HTTPS" and not s.HasField("tls"):
            raise _fail(f"{here}.tls", "is required for an HTTPS server")
        needs_cert = s.HasField("tls") and s.tls.mode in (net.ServerTLSSettings.SIMPLE, net.ServerTLSSettings.MUTUAL)
        if needs_cert and not s.tls.credential_name and not (s.tls.server_certificate and s.tls.private_key):
            raise _fail(f"{here}.tls", "SIMPLE and MUTUAL need credentialName or serverCertificate and privateKey")


def _validate_peer_authentication(pa: sec.PeerAuthentication, namespace: str) -> None:
    """istiod validation.ValidatePeerAuthentication: port-level modes need a workload selector
    (a mesh or namespace policy has no workload ports), and port numbers are ports."""
    if pa.HasField("selector") and not pa.selector.match_labels:
        raise _fail("selector.matchLabels", "must not be empty (leave the selector out for a namespace-wide policy)")
    if len(pa.port_level_mtls) and not pa.HasField("selector"):
        raise _fail("portLevelMtls", "mesh/namespace peer authentication cannot have port level mTLS")
    for port in pa.port_level_mtls:
        if not 1 <= port <= 65535:
            raise _fail(f"portLevelMtls.{port}", "port must be in the range 1..65535")


# istiod security/authz model.go: the attributes a `when` condition may name (a bracketed key
# like request.headers[X] by its prefix)
AUTHZ_KEYS = frozenset(
    {
        "source.ip",
        "remote.ip",
        "source.namespace",
        "source.serviceAccount",
        "source.trustDomain",
        "source.principal",
        "request.auth.principal",
        "request.auth.audiences",
        "request.auth.presenter",
        "destination.ip",
        "destination.port",
        "connection.sni",
    }
)
AUTHZ_KEY_PREFIXES = ("request.headers[", "request.auth.claims[", "experimental.envoy.filters.")
_AUTHZ_IP_KEYS = frozenset({"source.ip", "remote.ip", "destination.ip"})


def _check_cidrs(path: str, values: Iterable[str]) -> None:
    for i, value in enumerate(values):
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise _fail(f"{path}[{i}]", f"{value!r} is not an IP address or CIDR") from None


def _check_ports(path: str, values: Iterable[str]) -> None:
    for i, value in enumerate(values):
        if not value.isdigit() or not 0 <= int(value) <= 65535:
            raise _fail(f"{path}[{i}]", f"{value!r} is not a port number")


def _check_not_empty(path: str, values: Iterable[str]) -> None:
    """istiod CheckEmptyValues. A `*` anywhere is accepted, as istiod accepts it: only a
    leading or trailing one is a wildcard, elsewhere it is matched as written."""
    for i, value in enumerate(values):
        if not value:
            raise _fail(f"{path}[{i}]", "empty value not allowed")


def _check_service_accounts(path: str, values: Sequence[str]) -> None:
    """istiod CheckServiceAccount: at most 16, ``sa`` or ``namespace/sa``, no wildcard."""
    if len(values) > 16:
        raise _fail(path, "may not have more than 16 values")
    for i, value in enumerate(values):
        ns, sep, sa = value.partition("/")
        if not value or "*" in value or "/" in sa or len(value) > 320 or (sep and not (ns and sa)):
            raise _fail(f"{path}[{i}]", f"{value!r}: want 'serviceAccount' or 'namespace/serviceAccount' (no '*')")


_MATCH_ONE, _MATCH_ANY = "{*}", "{**}"
# RFC 3986 pchar, as istiod's validLiteral
_PATH_LITERAL = re2.compile(r"^[a-zA-Z0-9\-._~%!$&'()+,;:@=]+$")


def _check_path_templates(path: str, values: Iterable[str]) -> None:
    """istiod CheckValidPathTemplate: ``{*}`` and ``{**}`` whole segments only, ``{**}`` last,
    no other braces, and pchar-only literals in a path that has a template."""
    for i, value in enumerate(values):
        templated = _MATCH_ONE in value or _MATCH_ANY in value
        seen_any = False
        for glob in value.strip("/").split("/"):
            if glob in (_MATCH_ONE, _MATCH_ANY):
                if seen_any:
                    raise _fail(f"{path}[{i}]", f"{value!r}: {{**}} must be the last operator")
                seen_any = glob == _MATCH_ANY
                continue
            if "{" in glob or "}" in glob:
                raise _fail(f"{path}[{i}]", f"{value!r}: '{{' or '}}' beyond a supported path template")
            if templated and not _PATH_LITERAL.match(glob):
                raise _fail(f"{path}[{i}]", f"{value!r}: segment {glob!r} is not a valid literal")


def _validate_authorization_policy(ap: sec.AuthorizationPolicy, namespace: str) -> None:
    """istiod validation.ValidateAuthorizationPolicy, for what the RBAC builder reads."""
    Action = sec.AuthorizationPolicy.Action
    if ap.HasField("selector") and not ap.selector.match_labels:
        raise _fail("selector.matchLabels", "must not be empty (leave the selector out for every workload)")
    if ap.action == Action.CUSTOM and not ap.provider.name:
        raise _fail("provider.name", "is required for action CUSTOM")
    if ap.action != Action.CUSTOM and ap.HasField("provider"):
        raise _fail("provider", "is only allowed with action CUSTOM")
    for r, rule in enumerate(ap.rules):
        here = f"rules[{r}]"
        for f, source in enumerate(getattr(rule, "from")):
            where = f"{here}.from[{f}].source"
            if not source.HasField("source") or not source.source.ListFields():
                raise _fail(where, "must set at least one field")
            s = source.source
            for name in ("ip_blocks", "not_ip_blocks", "remote_ip_blocks", "not_remote_ip_blocks"):
                _check_cidrs(f"{where}.{_camel(name)}", getattr(s, name))
            for name in (
                "principals",
                "not_principals",
                "namespaces",
                "not_namespaces",
                "request_principals",
                "not_request_principals",
                "ip_blocks",
                "not_ip_blocks",
                "remote_ip_blocks",
                "not_remote_ip_blocks",
            ):
                _check_not_empty(f"{where}.{_camel(name)}", getattr(s, name))
            for name in ("service_accounts", "not_service_accounts"):
                _check_service_accounts(f"{where}.{_camel(name)}", getattr(s, name))
        for t, to in enumerate(rule.to):
            where = f"{here}.to[{t}].operation"
            if not to.HasField("operation") or not to.operation.ListFields():
                raise _fail(where, "must set at least one field")
            op = to.operation
            _check_ports(f"{where}.ports", op.ports)
            _check_ports(f"{where}.notPorts", op.not_ports)
            for name in ("hosts", "not_hosts", "paths", "not_paths", "methods", "not_methods", "ports", "not_ports"):
                _check_not_empty(f"{where}.{_camel(name)}", getattr(op, name))
            _check_path_templates(f"{where}.paths", op.paths)
            _check_path_templates(f"{where}.notPaths", op.not_paths)
        for w, cond in enumerate(rule.when):
            where = f"{here}.when[{w}]"
            key = cond.key
            if not key:
                raise _fail(f"{where}.key", "is required")
            if key not in AUTHZ_KEYS and not key.startswith(AUTHZ_KEY_PREFIXES):
                raise _fail(f"{where}.key", f"unknown attribute {key!r}")
            if key.startswith(AUTHZ_KEY_PREFIXES[:2]) and not (key.endswith("]") and len(key) > key.index("[") + 2):
                raise _fail(f"{where}.key", f"{key!r}: the name goes in brackets, e.g. request.headers[User-Agent]")
            if not len(cond.values) and not len(cond.not_values):
                raise _fail(where, "values or notValues is required")
            if key in _AUTHZ_IP_KEYS:
                _check_cidrs(f"{where}.values", cond.values)
                _check_cidrs(f"{where}.notValues", cond.not_values)
            if key == "destination.port":
                _check_ports(f"{where}.values", cond.values)
                _check_ports(f"{where}.notValues", cond.not_values)


def _validate_request_authentication(ra: sec.RequestAuthentication, namespace: str) -> None:
    """istiod validation.ValidateRequestAuthentication: an issuer per rule, issuers unique, a
    jwksUri that is an http(s) URL, JWKS text that parses, header names."""
    if ra.HasField("selector") and not ra.selector.match_labels:
        raise _fail("selector.matchLabels", "must not be empty (leave the selector out for every workload)")
    issuers: set[str] = set()
    for i, rule in enumerate(ra.jwt_rules):
        here = f"jwtRules[{i}]"
        if not rule.issuer:
            raise _fail(f"{here}.issuer", "is required")
        if rule.issuer in issuers:
            raise _fail(f"{here}.issuer", f"{rule.issuer!r} is used by another rule")
        issuers.add(rule.issuer)
        if rule.jwks_uri and not rule.jwks_uri.startswith(("http://", "https://")):
            raise _fail(f"{here}.jwksUri", f"{rule.jwks_uri!r} is not an http or https URL")
        if rule.jwks:
            try:
                keys = json.loads(rule.jwks)
            except ValueError:
                raise _fail(f"{here}.jwks", "is not JSON") from None
            if not isinstance(keys, dict) or not isinstance(keys.get("keys"), list):
                raise _fail(f"{here}.jwks", "must be a JWKS: an object with a 'keys' list")
        for j, header in enumerate(rule.from_headers):
            if not header.name:
                raise _fail(f"{here}.fromHeaders[{j}].name", "is required")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


_VALIDATORS: dict[Kind, Callable[[Any, str], None]] = {
    Kind.DESTINATION_RULE: _validate_destination_rule,
    Kind.VIRTUAL_SERVICE: _validate_virtual_service,
    Kind.SERVICE_ENTRY: _validate_service_entry,
    Kind.WORKLOAD_ENTRY: _validate_workload_entry_object,
    Kind.SIDECAR: _validate_sidecar,
    Kind.PEER_AUTHENTICATION: _validate_peer_authentication,
    Kind.AUTHORIZATION_POLICY: _validate_authorization_policy,
    Kind.REQUEST_AUTHENTICATION: _validate_request_authentication,
    Kind.GATEWAY: _validate_gateway,
}
