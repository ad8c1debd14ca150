"""istiod's semantic checks of the traffic kinds: DestinationRule (ValidateDestinationRule,
validateTrafficPolicy, validateConnectionPool, validateOutlierDetection, validateSubset) and
VirtualService (ValidateVirtualService, validateHTTPRoute, agent.ValidateHTTPRetry,
validateHTTPFaultInjection, validateHTTPMirrors, validateCORSPolicy), for what pilotfish reads.

Each raises FieldError naming the field path; parsing (app/config/schema.py) came first.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

import re2
from google.protobuf import duration_pb2

from app.api import networking as net
from app.config.go_strconv import go_int
from app.config.host import first_overlap, validate_fqdn
from app.config.validation.fields import (
    check_duration,
    check_export_to,
    check_host,
    check_labels,
    check_locality_lb_setting,
    check_percent,
    check_percentage,
    check_port_number,
    check_workload_selector,
    fail,
    is_dns1123_label,
    quoted,
)

# --- DestinationRule -----------------------------------------------------------------


# istiod ValidateHTTPHeaderValue: no control character but tab in a header value
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f]")


def validate_destination_rule(dr: net.DestinationRule, namespace: str) -> None:
    check_host("host", dr.host)
    check_export_to(dr.export_to, "exportTo", namespace)
    if dr.HasField("workload_selector") and any(e not in (".", namespace) for e in dr.export_to):
        raise fail("exportTo", "a DestinationRule with a workloadSelector can only be exported to its own namespace")
    names: set[str] = set()
    if dr.HasField("traffic_policy"):
        _check_traffic_policy(dr.traffic_policy, "trafficPolicy")
    for i, subset in enumerate(dr.subsets):
        here = f"subsets[{i}]"
        if not subset.name:
            raise fail(f"{here}.name", "is required")
        if subset.name in names:
            raise fail(f"{here}.name", f"duplicate subset name {subset.name!r}")
        names.add(subset.name)
        reason = validate_fqdn(subset.name)
        if reason or "." in subset.name:
            raise fail(f"{here}.name", f"{subset.name!r} is not a valid subset name (a DNS label)")
        check_labels(f"{here}.labels", subset.labels)
        if subset.HasField("traffic_policy"):
            _check_traffic_policy(subset.traffic_policy, f"{here}.trafficPolicy")
    if dr.HasField("workload_selector") and not dr.workload_selector.match_labels:
        raise fail("workloadSelector.matchLabels", "must not be empty")
    check_workload_selector("workloadSelector.matchLabels", dr.workload_selector.match_labels)


def _check_traffic_policy(tp: net.TrafficPolicy, path: str) -> None:
    _check_policy_parts(tp, path)
    for i, pls in enumerate(tp.port_level_settings):
        here = f"{path}.portLevelSettings[{i}]"
        if not pls.HasField("port") or pls.port.number == 0:
            raise fail(f"{here}.port", "is required")
        check_port_number(f"{here}.port.number", pls.port.number)
        parts = ("outlier_detection", "connection_pool", "load_balancer", "tls")
        if not any(pls.HasField(part) for part in parts):
            raise fail(here, "port traffic policy must have at least one field")
        _check_policy_parts(pls, here)


def _check_policy_parts(tp: net.TrafficPolicy | net.TrafficPolicy.PortTrafficPolicy, path: str) -> None:
    if tp.HasField("outlier_detection"):
        check_outlier_detection(f"{path}.outlierDetection", tp.outlier_detection)
    if tp.HasField("connection_pool"):
        check_connection_pool(f"{path}.connectionPool", tp.connection_pool)
    if tp.HasField("load_balancer"):
        check_load_balancer(f"{path}.loadBalancer", tp.load_balancer)
    if tp.HasField("tls"):
        tls = tp.tls
        if tls.mode == net.ClientTLSSettings.MUTUAL and not tls.credential_name:
            if not tls.client_certificate:
                raise fail(f"{path}.tls.clientCertificate", "is required for mode MUTUAL")
            if not tls.private_key:
                raise fail(f"{path}.tls.privateKey", "is required for mode MUTUAL")


_MAGLEV_TABLE_SIZE_BELOW = 5_000_011


def check_load_balancer(path: str, lb: net.LoadBalancerSettings) -> None:
    """validateLoadBalancer: a consistent hash's cookie has a name and uniquely named
    attributes, a ring size is not set both ways, a Maglev table size is a prime below
    5,000,011; locality and zone-aware settings are not both set (the locality setting as
    agent.ValidateLocalityLbSetting); a warmup has a duration (ValidateDuration), a
    minimumPercent of at most 100 and a positive aggression, and is not set beside
    warmupDurationSecs (the CRD's rule)."""
    if lb.HasField("consistent_hash"):
        ch = lb.consistent_hash
        here = f"{path}.consistentHash"
        if ch.HasField("http_cookie"):
            if not ch.http_cookie.name:
                raise fail(f"{here}.httpCookie.name", "name required for HttpCookie")
            names: set[str] = set()
            for i, attribute in enumerate(ch.http_cookie.attributes):
                where = f"{here}.httpCookie.attributes[{i}].name"
                if not attribute.name:
                    raise fail(where, "cookie attribute name cannot be empty")
                if attribute.name in names:
                    raise fail(where, f"duplicate cookie attribute name: {attribute.name}")
                names.add(attribute.name)
        if ch.minimum_ring_size and ch.WhichOneof("hash_algorithm") is not None:
            raise fail(f"{here}.minimumRingSize", "only one of MinimumRingSize or Maglev/Ringhash can be specified")
        if ch.HasField("maglev"):
            size = ch.maglev.table_size
            where = f"{here}.maglev.tableSize"
            if size == 0:
                raise fail(where, "tableSize must be set for maglev")
            if size >= _MAGLEV_TABLE_SIZE_BELOW:
                raise fail(where, f"tableSize must be less than {_MAGLEV_TABLE_SIZE_BELOW} for maglev")
            if not _is_prime(size):
                raise fail(where, "tableSize must be a prime number for maglev")
    if lb.HasField("locality_lb_setting"):
        if lb.HasField("zone_aware_lb_setting"):
            raise fail(path, "only one of localityLbSetting and zoneAwareLbSetting can be set")
        check_locality_lb_setting(f"{path}.localityLbSetting", lb.locality_lb_setting)
    if lb.HasField("warmup"):
        warmup = lb.warmup
        if lb.HasField("warmup_duration_secs"):
            raise fail(f"{path}.warmup", "only one of warmupDurationSecs or warmup can be set")
        if not warmup.HasField("duration"):
            raise fail(f"{path}.warmup.duration", "duration is required")
        check_duration(f"{path}.warmup.duration", warmup.duration)
        if warmup.minimum_percent.value > 100:
            raise fail(f"{path}.warmup.minimumPercent", "minimumPercent value should be less than or equal to 100")
        if warmup.HasField("aggression") and warmup.aggression.value <= 0:
            raise fail(f"{path}.warmup.aggression", "aggression should be greater than 0")


def _is_prime(x: int) -> bool:
    """istiod isPrime, Envoy's (source/common/common/utility.cc)."""
    if 0 < x < 4:
        return True
    if x % 2 == 0:
        return False
    factor = 3
    while factor * factor <= x:
        if x % factor == 0:
            return False
        factor += 2
    return True


def check_outlier_detection(path: str, od: net.OutlierDetection) -> None:
    """validateOutlierDetection: its durations as ValidateDuration, local-origin failures only
    when split from the other errors, both percentages 0-100."""
    if od.HasField("base_ejection_time"):
        check_duration(f"{path}.baseEjectionTime", od.base_ejection_time)
    if not od.split_external_local_origin_errors and od.consecutive_local_origin_failures.value > 0:
        raise fail(
            f"{path}.consecutiveLocalOriginFailures",
            "is set, but splitExternalLocalOriginErrors is false: local origin failures are not counted apart",
        )
    if od.HasField("interval"):
        check_duration(f"{path}.interval", od.interval)
    check_percent(f"{path}.maxEjectionPercent", od.max_ejection_percent)
    check_percent(f"{path}.minHealthPercent", od.min_health_percent)


def check_connection_pool(path: str, cp: net.ConnectionPoolSettings) -> None:
    """validateConnectionPool: http or tcp set; every count non-negative; every duration as
    ValidateDuration (a tcp idleTimeout under 1ms, 0s included, turns the timeout off)."""
    if not cp.HasField("http") and not cp.HasField("tcp"):
        raise fail(path, "connection pool must have at least one field (http or tcp)")
    if cp.HasField("http"):
        http = cp.http
        counts = (
            ("http1MaxPendingRequests", http.http1_max_pending_requests),
            ("http2MaxRequests", http.http2_max_requests),
            ("maxRequestsPerConnection", http.max_requests_per_connection),
            ("maxRetries", http.max_retries),
            ("maxConcurrentStreams", http.max_concurrent_streams),
        )
        _check_counts(f"{path}.http", counts)
        if http.HasField("idle_timeout"):
            check_duration(f"{path}.http.idleTimeout", http.idle_timeout)
        upgrade = net.ConnectionPoolSettings.HTTPSettings.UPGRADE
        if http.h2_upgrade_policy == upgrade and http.use_client_protocol:
            raise fail(f"{path}.http.useClientProtocol", "must not be true when h2UpgradePolicy is UPGRADE")
        if http.HasField("http2_keep_alive"):
            ping = http.http2_keep_alive
            for name in ("interval", "timeout"):
                if not ping.HasField(name):
                    raise fail(f"{path}.http.http2KeepAlive.{name}", f"http2 keepalive {name} is required")
                check_duration(f"{path}.http.http2KeepAlive.{name}", getattr(ping, name))
    if cp.HasField("tcp"):
        tcp = cp.tcp
        _check_counts(f"{path}.tcp", (("maxConnections", tcp.max_connections),))
        durations: list[tuple[str, duration_pb2.Duration]] = []
        if tcp.HasField("connect_timeout"):
            durations.append(("connectTimeout", tcp.connect_timeout))
        if tcp.HasField("max_connection_duration"):
            durations.append(("maxConnectionDuration", tcp.max_connection_duration))
        if tcp.HasField("idle_timeout") and abs(tcp.idle_timeout.ToNanoseconds()) >= 1_000_000:
            durations.append(("idleTimeout", tcp.idle_timeout))
        if tcp.HasField("tcp_keepalive"):
            keepalive = tcp.tcp_keepalive
            if keepalive.HasField("time"):
                durations.append(("tcpKeepalive.time", keepalive.time))
            if keepalive.HasField("interval"):
                durations.append(("tcpKeepalive.interval", keepalive.interval))
        for name, d in durations:
            check_duration(f"{path}.tcp.{name}", d)


def _check_counts(path: str, counts: Sequence[tuple[str, int]]) -> None:
    for name, value in counts:
        if value < 0:
            raise fail(f"{path}.{name}", f"must be non-negative, got {value}")


# --- VirtualService --------------------------------------------------------------------


# Envoy compiles safe_regex with RE2 and rejects the whole update for one bad pattern; istiod
# checks with Go's RE2 and caps the length (pkg/config/validation validateStringRegexp)
MAX_REGEX_LENGTH = 1024
# Envoy refuses a regex whose RE2 program is larger than re2.max_program_size.error_level, which
# Istio's bootstrap (and pilotfish's agent, app/agent/bootstrap.py) set to 32768: 1024 characters
# can compile to 233,004 instructions (\pN{1000}), and every proxy would NACK the route
MAX_REGEX_PROGRAM_SIZE = 32768
# every regex of one object together, counted as Envoy compiles them (once per occurrence):
# compiling takes ~0.2 us an instruction, so this bounds what one object's regexes cost to check
# (and each proxy to compile) to a few hundred ms; a route regex is typically 10-300 instructions
MAX_REGEX_PROGRAM_TOTAL = 1 << 21
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the error is reported as the rejection, not on stderr
# compiling stops past this memory: above 1 MiB every program of up to 40,000 instructions still
# compiles (measured), so nothing Envoy accepts is refused, and a pattern far past the limit fails
# in a few ms instead of building all of its 8 MiB default
_RE2_OPTIONS.max_mem = 2 << 20


class RegexBudget:
    """The RE2 instructions one object's regexes may still compile to."""

    __slots__ = ("left",)

    def __init__(self, total: int = MAX_REGEX_PROGRAM_TOTAL) -> None:
        self.left = total


@functools.lru_cache(maxsize=1024)
def _program_size(pattern: str) -> int | str:
    """The RE2 program size of ``pattern`` (as Envoy measures it), or why it does not compile."""
    try:
        return int(re2.compile(pattern, _RE2_OPTIONS).programsize)
    except re2.error as e:
        return e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)


def _check_regex(path: str, pattern: str, budget: RegexBudget) -> None:
    if len(pattern) > MAX_REGEX_LENGTH:
        raise fail(path, f"regex is too large, max length allowed is {MAX_REGEX_LENGTH}")
    size = _program_size(pattern)
    if isinstance(size, str):
        if "pattern too large" in size:
            size = MAX_REGEX_PROGRAM_SIZE + 1
        else:
            raise fail(path, f"not a valid RE2 regex: {size}")
    if size > MAX_REGEX_PROGRAM_SIZE:
        raise fail(
            path,
            f"regex is too large: its RE2 program is more than the {MAX_REGEX_PROGRAM_SIZE} instructions "
            "Envoy accepts (re2.max_program_size.error_level)",
        )
    budget.left -= size
    if budget.left < 0:
        raise fail(
            path,
            f"the regexes of this object compile to more than {MAX_REGEX_PROGRAM_TOTAL} RE2 instructions together",
        )


def _check_string_match(path: str, sm: net.StringMatch, budget: RegexBudget) -> None:
    kind = sm.WhichOneof("match_type")
    if kind == "regex":
        if not sm.regex:
            raise fail(f"{path}.regex", "regex string match should not be empty")
        _check_regex(f"{path}.regex", sm.regex, budget)
    elif kind == "prefix" and not sm.prefix:
        raise fail(f"{path}.prefix", "prefix string match should not be empty")


def _check_match_request(path: str, match: net.HTTPMatchRequest, budget: RegexBudget) -> None:
    for name in ("uri", "scheme", "method", "authority"):
        if match.HasField(name):
            _check_string_match(f"{path}.{name}", getattr(match, name), budget)
    groups: tuple[tuple[str, Mapping[str, net.StringMatch]], ...] = (
        ("headers", match.headers),
        ("queryParams", match.query_params),
        ("withoutHeaders", match.without_headers),
    )
    for field, entries in groups:
        for key in sorted(entries):
            _check_string_match(f"{path}.{field}.{key}", entries[key], budget)
    _check_l4_match(path, match)


def _check_l4_match(path: str, match: net.HTTPMatchRequest | net.L4MatchAttributes | net.TLSMatchAttributes) -> None:
    """What validateHTTPRouteMatchRequest, validateTCPMatch and validateTLSMatch share: a port,
    when set, is a port; the source labels are labels; a source namespace is a DNS label."""
    if match.port:
        check_port_number(f"{path}.port", match.port)
    check_labels(f"{path}.sourceLabels", match.source_labels)
    if match.source_namespace and not is_dns1123_label(match.source_namespace):
        raise fail(f"{path}.sourceNamespace", f"{match.source_namespace!r} is not a namespace name")


def check_destination(dest: net.Destination, path: str) -> None:
    """validateDestination: a host (not ``*``), a subset name that is a DNS label, a port."""
    if dest.host == "*":
        raise fail(f"{path}.host", "invalid destination host '*'")
    check_host(f"{path}.host", dest.host)
    if dest.subset and not is_dns1123_label(dest.subset):
        raise fail(f"{path}.subset", f"{dest.subset!r} is not a valid subset name (a DNS label)")
    if dest.HasField("port") and dest.port.number:
        check_port_number(f"{path}.port.number", dest.port.number)


def validate_virtual_service(vs: net.VirtualService, namespace: str) -> None:
    if not vs.hosts and vs.gateways:
        raise fail("hosts", "is required (only a delegate VirtualService, bound to no gateway, may omit it)")
    mesh_bound = not vs.gateways or "mesh" in vs.gateways
    for i, h in enumerate(vs.hosts):
        check_host(f"hosts[{i}]", h, ip_ok=True)
        if h == "*" and mesh_bound:
            raise fail(f"hosts[{i}]", "'*' is not allowed for a VirtualService bound to the mesh gateway")
    # as istiod, once every host is valid: the first pair that overlaps (not every pair compared)
    overlap = first_overlap(vs.hosts)
    if overlap is not None:
        i, j = overlap
        raise fail(f"hosts[{i}]", f"{vs.hosts[i]!r} overlaps hosts[{j}] {vs.hosts[j]!r}")
    if not vs.http and not vs.tcp and not vs.tls:
        raise fail("http", "http, tcp or tls must be provided in virtual service")
    check_export_to(vs.export_to, "exportTo", namespace)
    for i, g in enumerate(vs.gateways):
        if not g:
            raise fail(f"gateways[{i}]", "must not be empty")
    budget = RegexBudget()
    for i, route in enumerate(vs.http):
        _check_http_route(f"http[{i}]", route, budget)
    l4: list[tuple[str, Sequence[net.RouteDestination]]] = [
        *((f"tcp[{i}]", r.route) for i, r in enumerate(vs.tcp)),
        *((f"tls[{i}]", r.route) for i, r in enumerate(vs.tls)),
    ]
    for where, dests in l4:
        for j, l4_dest in enumerate(dests):
            if not l4_dest.HasField("destination"):
                raise fail(f"{where}.route[{j}].destination", "is required")
            check_destination(l4_dest.destination, f"{where}.route[{j}].destination")
        if len(dests) > 1 and sum(d.weight for d in dests) == 0:
            raise fail(f"{where}.route", "total destination weight = 0")
    for i, tcp_route in enumerate(vs.tcp):
        for j, l4_match in enumerate(tcp_route.match):
            _check_l4_match(f"tcp[{i}].match[{j}]", l4_match)
    for i, tls_route in enumerate(vs.tls):
        if not tls_route.match:
            raise fail(f"tls[{i}].match", "is required")
        for j, m in enumerate(tls_route.match):
            if not m.sni_hosts:
                raise fail(f"tls[{i}].match[{j}].sniHosts", "is required")
            _check_l4_match(f"tls[{i}].match[{j}]", m)


def _check_http_route(here: str, route: net.HTTPRoute, budget: RegexBudget) -> None:
    """validateHTTPRoute, for what pilotfish reads."""
    has_route = len(route.route) > 0
    actions = [has_route, route.HasField("redirect"), route.HasField("direct_response"), route.HasField("delegate")]
    if sum(actions) == 0:
        raise fail(here, "one of route, redirect, directResponse or delegate is required")
    if route.HasField("redirect") and has_route:
        raise fail(here, "route and redirect cannot both be set")
    if route.HasField("direct_response") and (has_route or route.HasField("redirect")):
        raise fail(here, "directResponse cannot be combined with route or redirect")
    if route.HasField("headers"):
        _check_header_operations(f"{here}.headers", route.headers)
        _check_authority(here, route)
    for j, dest in enumerate(route.route):
        if not dest.HasField("destination"):
            raise fail(f"{here}.route[{j}].destination", "is required")
        check_destination(dest.destination, f"{here}.route[{j}].destination")
        if dest.HasField("headers"):
            _check_header_operations(f"{here}.route[{j}].headers", dest.headers)
        if dest.weight < 0:
            raise fail(f"{here}.route[{j}].weight", "must not be negative")
    if len(route.route) > 1 and sum(d.weight for d in route.route) == 0:
        raise fail(f"{here}.route", "total destination weight = 0")
    for j, match in enumerate(route.match):
        _check_match_request(f"{here}.match[{j}]", match, budget)
    if route.HasField("rewrite") and route.rewrite.HasField("uri_regex_rewrite"):
        _check_regex(f"{here}.rewrite.uriRegexRewrite.match", route.rewrite.uri_regex_rewrite.match, budget)
    if route.HasField("cors_policy"):
        _check_cors_policy(f"{here}.corsPolicy", route.cors_policy, budget)
    if route.HasField("fault"):
        _check_fault(f"{here}.fault", route.fault)
    _check_mirrors(here, route)
    if route.HasField("timeout"):
        check_duration(f"{here}.timeout", route.timeout)
    if route.HasField("retries"):
        check_http_retry(f"{here}.retries", route.retries)
    if route.HasField("direct_response") and not 200 <= route.direct_response.status <= 599:
        raise fail(f"{here}.directResponse.status", "must be an HTTP status between 200 and 599")


def _is_authority(name: str) -> bool:
    return name.lower() in (":authority", "host")


def _check_header_operations(path: str, headers: net.Headers) -> None:
    """istiod's header-manipulation checks (validateHTTPRoute, validateRouteDestinations): a
    request may add or set the authority (``host``, ``:authority``: a host rewrite) but no other
    ``:``-prefixed header; removing from a request and anything on a response may touch neither
    ``host`` nor a ``:``-prefixed header (Envoy refuses to modify them and NACKs the routes);
    values hold no control characters but tab."""
    for section, operations in (("request", headers.request), ("response", headers.response)):
        for op in ("add", "set"):
            for name, value in getattr(operations, op).items():
                where = f"{path}.{section}.{op}[{name}]"
                _check_header_name(where, name, authority_allowed=section == "request")
                if _CONTROL.search(value):
                    raise fail(where, f"header value configuration {value!r} is invalid")
        for j, name in enumerate(operations.remove):
            _check_header_name(f"{path}.{section}.remove[{j}]", name, authority_allowed=False)


def _check_header_name(where: str, name: str, *, authority_allowed: bool) -> None:
    if not name:
        raise fail(where, "header name cannot be empty")
    if authority_allowed and _is_authority(name):
        return
    if name.lower() == "host":
        raise fail(where, f'invalid header "{name}": cannot set Host header')
    if name.startswith(":"):
        raise fail(where, f'invalid header "{name}": header cannot have ":" prefix')


def _check_authority(here: str, route: net.HTTPRoute) -> None:
    """istiod validateAuthorityRewrite: the authority is rewritten in one place at most."""
    current = route.rewrite.authority if route.HasField("rewrite") else ""
    request = route.headers.request
    for name, value in (*request.set.items(), *request.add.items()):
        if not _is_authority(name):
            continue
        if current:
            reason = f'authority header cannot be set multiple times: have "{current}", attempting to set "{value}"'
            raise fail(f"{here}.headers.request", reason)
        current = value


def _check_cors_policy(path: str, cors: net.CorsPolicy, budget: RegexBudget) -> None:
    """validateCORSPolicy: origin regexes; maxAge as ValidateDuration, in whole seconds."""
    for j, origin in enumerate(cors.allow_origins):
        _check_string_match(f"{path}.allowOrigins[{j}]", origin, budget)
    if cors.HasField("max_age"):
        check_duration(f"{path}.maxAge", cors.max_age)
        if cors.max_age.nanos > 0:
            raise fail(f"{path}.maxAge", "max_age duration is accurate only to seconds precision")


def _check_mirrors(here: str, route: net.HTTPRoute) -> None:
    """validateHTTPRoute's mirror checks and validateHTTPMirrors: destinations as
    validateDestination, percentages between 0 and 100."""
    if route.HasField("mirror"):
        check_destination(route.mirror, f"{here}.mirror")
    if route.HasField("mirror_percent") and route.mirror_percent.value > 100:
        raise fail(f"{here}.mirrorPercent", f"must have a max value of 100 (it has {route.mirror_percent.value})")
    if route.HasField("mirror_percentage"):
        _check_mirror_percentage(f"{here}.mirrorPercentage", route.mirror_percentage.value)
    for j, mirror in enumerate(route.mirrors):
        if not mirror.HasField("destination"):
            raise fail(f"{here}.mirrors[{j}].destination", "is required for mirrors")
        check_destination(mirror.destination, f"{here}.mirrors[{j}].destination")
        if mirror.HasField("percentage"):
            _check_mirror_percentage(f"{here}.mirrors[{j}].percentage", mirror.percentage.value)


def _check_mirror_percentage(path: str, value: float) -> None:
    if value > 100:
        raise fail(path, f"mirror percentage must have a max value of 100 (it has {value:g})")
    if value < 0:
        raise fail(path, f"mirror percentage must have a min value of 0 (it has {value:g})")


# gRPC status names istiod's abort takes (pkg/util/grpc SupportedGRPCStatus), in code order
GRPC_STATUSES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)


def _check_fault(path: str, fault: net.HTTPFaultInjection) -> None:
    """validateHTTPFaultInjection (+ ...Abort, ...Delay): an abort and/or a delay; percentages
    as validatePercentage; an HTTP status 200-600, a gRPC status by name; a fixed delay as
    ValidateDuration; HTTP/2 error aborts and exponential delays are not supported."""
    if not fault.HasField("abort") and not fault.HasField("delay"):
        raise fail(path, "HTTP fault injection must have an abort and/or a delay")
    if fault.HasField("abort"):
        abort = fault.abort
        if abort.HasField("percentage"):
            check_percentage(f"{path}.abort.percentage", abort.percentage)
        kind = abort.WhichOneof("error_type")
        if kind == "grpc_status" and abort.grpc_status not in GRPC_STATUSES:
            reason = f"gRPC status {abort.grpc_status!r} is not supported (want a name such as NOT_FOUND)"
            raise fail(f"{path}.abort.grpcStatus", reason)
        if kind == "http2_error":
            raise fail(f"{path}.abort.http2Error", "HTTP/2 abort fault injection not supported yet")
        if kind == "http_status" and not 200 <= abort.http_status <= 600:
            raise fail(f"{path}.abort.httpStatus", f"HTTP status {abort.http_status} is not in range 200-599")
    if fault.HasField("delay"):
        delay = fault.delay
        if delay.HasField("percentage"):
            check_percentage(f"{path}.delay.percentage", delay.percentage)
        kind = delay.WhichOneof("http_delay_type")
        if kind == "fixed_delay":
            check_duration(f"{path}.delay.fixedDelay", delay.fixed_delay)
        elif kind == "exponential_delay":
            check_duration(f"{path}.delay.exponentialDelay", delay.exponential_delay)
            raise fail(f"{path}.delay.exponentialDelay", "exponentialDelay not supported yet")


# Envoy's retry conditions (x-envoy-retry-on and x-envoy-retry-grpc-on) istiod accepts in retryOn
RETRY_ON_POLICIES = frozenset(
    {
        "5xx",
        "gateway-error",
        "reset",
        "reset-before-request",
        "connect-failure",
        "retriable-4xx",
        "refused-stream",
        "retriable-status-codes",
        "retriable-headers",
        "envoy-ratelimited",
        "http3-post-connect-failure",
        "cancelled",
        "deadline-exceeded",
        "internal",
        "resource-exhausted",
        "unavailable",
    }
)
# the HTTP status codes Go's net/http StatusText names: istiod takes these in retryOn
HTTP_STATUS_CODES = frozenset(
    {*range(100, 104), *range(200, 209), 226, *range(300, 306), 307, 308, *range(400, 419), *range(421, 427)}
    | {428, 429, 431, 451, *range(500, 509), 510, 511}
)


def check_http_retry(path: str, retries: net.HTTPRetry) -> None:
    """agent.ValidateHTTPRetry: attempts non-negative, nothing else set when they are 0 (retries
    off), perTryTimeout and backoff as ValidateDuration, each retryOn entry an Envoy retry
    condition or an HTTP status code (split on ',' as written: no spaces)."""
    if retries.attempts < 0:
        raise fail(f"{path}.attempts", "must not be negative")
    if retries.attempts == 0:
        for name, present in (
            ("perTryTimeout", retries.HasField("per_try_timeout")),
            ("retryOn", bool(retries.retry_on)),
            ("retryRemoteLocalities", retries.HasField("retry_remote_localities")),
        ):
            if present:
                raise fail(f"{path}.{name}", "http retry policy configured when attempts are set to 0 (disabled)")
    if retries.HasField("per_try_timeout"):
        check_duration(f"{path}.perTryTimeout", retries.per_try_timeout)
    if retries.retry_on:
        for policy in retries.retry_on.split(","):
            code = go_int(policy) or 0  # istiod: strconv.Atoi, its error ignored
            if policy not in RETRY_ON_POLICIES and code not in HTTP_STATUS_CODES:
                raise fail(f"{path}.retryOn", f"{quoted(policy)} is not a valid retryOn policy")
    if retries.HasField("backoff"):
        check_duration(f"{path}.backoff", retries.backoff)
