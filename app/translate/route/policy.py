"""Per-route policies of an HTTPRoute as istiod renders them (pilot/pkg/networking/core/route
route.go and retry/retry.go): retries, fault injection, CORS, header operations, mirroring
fractions, redirects, direct responses and consistent-hash policies.

Each function maps one Istio message to its Envoy counterpart and knows nothing of routes as
a whole; route.py assembles them. Pure functions, new protos out.
"""

from __future__ import annotations

import http
from collections.abc import Mapping
from dataclasses import dataclass

from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2 as route_pb2
from envoy.extensions.filters.http.cors.v3 import cors_pb2
from envoy.extensions.filters.http.fault.v3 import fault_pb2
from envoy.extensions.retry.host.previous_hosts.v3 import previous_hosts_pb2
from envoy.extensions.retry.priority.previous_priorities.v3 import previous_priorities_config_pb2
from envoy.type.v3 import percent_pb2

from app.api import networking as net
from app.config.go_strconv import go_int
from app.config.validation.traffic import GRPC_STATUSES
from app.translate.route.match import string_matcher

HVO = base_pb2.HeaderValueOption
ConsistentHashLB = net.LoadBalancerSettings.ConsistentHashLB

DEFAULT_RETRY_ON = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
DEFAULT_RETRY_ATTEMPTS = 2
DEFAULT_HOST_SELECTION_RETRY_MAX_ATTEMPTS = 5
PREVIOUS_HOSTS_PREDICATE = "envoy.retry_host_predicates.previous_hosts"
PREVIOUS_PRIORITIES = "envoy.retry_priorities.previous_priorities"
PREVIOUS_PRIORITIES_UPDATE_FREQUENCY = 2
# status codes Go's http.StatusText knows; istiod reads such numbers in retryOn as status codes
_HTTP_STATUS_CODES = frozenset(s.value for s in http.HTTPStatus)
# gRPC status codes by name (istiod pkg/util/grpc SupportedGRPCStatus)
_GRPC_CODES = {name: code for code, name in enumerate(GRPC_STATUSES)}
_REDIRECT_CODES = {
    0: route_pb2.RedirectAction.MOVED_PERMANENTLY,
    301: route_pb2.RedirectAction.MOVED_PERMANENTLY,
    302: route_pb2.RedirectAction.FOUND,
    303: route_pb2.RedirectAction.SEE_OTHER,
    307: route_pb2.RedirectAction.TEMPORARY_REDIRECT,
    308: route_pb2.RedirectAction.PERMANENT_REDIRECT,
}


# --- percentages ---------------------------------------------------------------------------


def percent_fraction(p: net.Percent) -> percent_pb2.FractionalPercent:
    """Istio Percent (a double, 0-100) -> per-million fraction, truncated as istiod's uint32 cast."""
    million = percent_pb2.FractionalPercent.MILLION
    return percent_pb2.FractionalPercent(numerator=int(p.value * 10000), denominator=million)


def integer_fraction(p: int) -> percent_pb2.FractionalPercent:
    return percent_pb2.FractionalPercent(numerator=p, denominator=percent_pb2.FractionalPercent.HUNDRED)


# --- retries -------------------------------------------------------------------------------


def _default_retry_policy(consistent_hash: bool) -> route_pb2.RetryPolicy:
    # no retriable_status_codes: since 1.24 istiod leaves 503 out of the default
    # (EXCLUDE_UNSAFE_503_FROM_DEFAULT_RETRY=true), a 503 may come after the upstream acted
    out = route_pb2.RetryPolicy(
        retry_on=DEFAULT_RETRY_ON, host_selection_retry_max_attempts=DEFAULT_HOST_SELECTION_RETRY_MAX_ATTEMPTS
    )
    out.num_retries.value = DEFAULT_RETRY_ATTEMPTS
    # with consistent hashing a retry must stay on the hashed host
    if not consistent_hash:
        _add_previous_hosts(out)
    return out


def _add_previous_hosts(policy: route_pb2.RetryPolicy) -> None:
    predicate = policy.retry_host_predicate.add(name=PREVIOUS_HOSTS_PREDICATE)
    predicate.typed_config.Pack(previous_hosts_pb2.PreviousHostsPredicate())


def _parse_retry_on(retry_on: str) -> tuple[str, list[int]]:
    """Split ``retryOn`` into Envoy retry conditions and the HTTP status codes mixed into it."""
    conditions: list[str] = []
    codes: list[int] = []
    for raw in retry_on.split(","):
        part = raw.strip()
        if not part:
            continue
        code = go_int(part)  # as validation reads it (istiod: strconv.Atoi)
        if code is not None and code in _HTTP_STATUS_CODES:
            codes.append(code)
        else:
            conditions.append(part)
    return ",".join(conditions), codes


def retry_policy(policy: net.HTTPRetry | None, consistent_hash: bool) -> route_pb2.RetryPolicy | None:
    """istiod retry.ConvertPolicy: no policy -> the default; ``attempts: 0`` -> no retries;
    otherwise the default with the user's fields over it."""
    out = _default_retry_policy(consistent_hash)
    if policy is None:
        return out
    if policy.attempts <= 0:
        return None
    out.num_retries.value = policy.attempts
    if policy.retry_on:
        conditions, codes = _parse_retry_on(policy.retry_on)
        out.retry_on = conditions
        out.retriable_status_codes.extend(codes)
        if codes and "retriable-status-codes" not in conditions:
            out.retry_on += ",retriable-status-codes"
    if policy.HasField("per_try_timeout"):
        out.per_try_timeout.CopyFrom(policy.per_try_timeout)
    if policy.HasField("retry_ignore_previous_hosts"):
        del out.retry_host_predicate[:]
        if policy.retry_ignore_previous_hosts.value:
            _add_previous_hosts(out)
    if policy.retry_remote_localities.value:
        out.retry_priority.name = PREVIOUS_PRIORITIES
        out.retry_priority.typed_config.Pack(
            previous_priorities_config_pb2.PreviousPrioritiesConfig(
                update_frequency=PREVIOUS_PRIORITIES_UPDATE_FREQUENCY
            )
        )
    if policy.HasField("backoff"):
        out.retry_back_off.base_interval.CopyFrom(policy.backoff)
    return out


# --- fault injection -----------------------------------------------------------------------


def fault_config(fault: net.HTTPFaultInjection) -> fault_pb2.HTTPFault:
    """istiod TranslateFault. Exponential delays and HTTP/2 error aborts have no Envoy form and
    are dropped, as istiod drops them; if nothing is left the filter config is empty."""
    out = fault_pb2.HTTPFault()
    if fault.HasField("delay") and fault.delay.WhichOneof("http_delay_type") == "fixed_delay":
        d = fault.delay
        if d.HasField("percentage"):
            out.delay.percentage.CopyFrom(percent_fraction(d.percentage))
        else:
            out.delay.percentage.CopyFrom(integer_fraction(d.percent))
        out.delay.fixed_delay.CopyFrom(d.fixed_delay)
    if fault.HasField("abort"):
        a = fault.abort
        kind = a.WhichOneof("error_type")
        if kind in ("http_status", "grpc_status"):
            if a.HasField("percentage"):
                out.abort.percentage.CopyFrom(percent_fraction(a.percentage))
            if kind == "http_status":
                out.abort.http_status = a.http_status
            else:
                out.abort.grpc_status = _GRPC_CODES.get(a.grpc_status, 0)
    return out


# --- CORS ----------------------------------------------------------------------------------


def cors_policy(cors: net.CorsPolicy) -> cors_pb2.CorsPolicy:
    """istiod TranslateCORSPolicy: per-route config for the envoy.filters.http.cors filter."""
    out = cors_pb2.CorsPolicy()
    out.forward_not_matching_preflights.value = cors.unmatched_preflights != net.CorsPolicy.IGNORE
    if cors.allow_origins:
        for origin in cors.allow_origins:
            sm = string_matcher(origin)
            if sm is not None:
                out.allow_origin_string_match.append(sm)
    else:
        for exact in cors.allow_origin:  # deprecated exact-match list
            out.allow_origin_string_match.add(exact=exact)
    out.filter_enabled.default_value.CopyFrom(integer_fraction(100))
    if cors.HasField("allow_credentials"):
        out.allow_credentials.CopyFrom(cors.allow_credentials)
    out.allow_headers = ",".join(cors.allow_headers)
    out.allow_methods = ",".join(cors.allow_methods)
    out.expose_headers = ",".join(cors.expose_headers)
    if cors.HasField("max_age"):
        out.max_age = str(cors.max_age.seconds)
    return out


# --- headers -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeaderOperations:
    """istiod HeadersOperations: what one ``Headers`` block does to requests and responses."""

    request_headers_to_add: list[base_pb2.HeaderValueOption]
    response_headers_to_add: list[base_pb2.HeaderValueOption]
    request_headers_to_remove: list[str]
    response_headers_to_remove: list[str]
    authority: str  # a set/add of :authority or Host: becomes a host rewrite, not a header


def _is_internal_header(name: str) -> bool:
    # pseudo-headers and Host cannot be edited by Envoy's header mutation
    return name.startswith(":") or name.lower() == "host"


def _is_authority_header(name: str) -> bool:
    return name.lower() in (":authority", "host")


def _header_options(values: Mapping[str, str], append: bool) -> tuple[list[base_pb2.HeaderValueOption], str]:
    action = HVO.APPEND_IF_EXISTS_OR_ADD if append else HVO.OVERWRITE_IF_EXISTS_OR_ADD
    authority = ""
    out: list[base_pb2.HeaderValueOption] = []
    for key, value in sorted(values.items()):
        if _is_authority_header(key):
            authority = value
        if _is_internal_header(key):
            continue
        opt = HVO(append_action=action)
        opt.header.key, opt.header.value = key, value
        out.append(opt)
    return out, authority


def header_operations(headers: net.Headers) -> HeaderOperations:
    """istiod TranslateHeadersOperations: ``set`` overwrites, ``add`` appends, each sorted by
    name, sets before adds; an authority from ``set`` wins over one from ``add``."""
    req, resp = headers.request, headers.response
    req_set, set_authority = _header_options(req.set, append=False)
    req_add, add_authority = _header_options(req.add, append=True)
    resp_set, _ = _header_options(resp.set, append=False)
    resp_add, _ = _header_options(resp.add, append=True)
    return HeaderOperations(
        request_headers_to_add=req_set + req_add,
        response_headers_to_add=resp_set + resp_add,
        request_headers_to_remove=[h for h in req.remove if not _is_internal_header(h)],
        response_headers_to_remove=[h for h in resp.remove if not _is_internal_header(h)],
        authority=set_authority or add_authority,
    )


# --- mirroring -----------------------------------------------------------------------------


def mirror_fraction(route: net.HTTPRoute) -> base_pb2.RuntimeFractionalPercent | None:
    """istiod MirrorPercent for the single ``mirror``: mirrorPercentage, else the deprecated
    integer mirrorPercent, else 100%; an explicit 0 turns mirroring off (None)."""
    out = base_pb2.RuntimeFractionalPercent()
    if route.HasField("mirror_percentage"):
        if route.mirror_percentage.value <= 0:
            return None
        out.default_value.CopyFrom(percent_fraction(route.mirror_percentage))
    elif route.HasField("mirror_percent"):
        if route.mirror_percent.value <= 0:
            return None
        out.default_value.CopyFrom(integer_fraction(route.mirror_percent.value))
    else:
        out.default_value.CopyFrom(integer_fraction(100))
    return out


def mirror_policy_fraction(mirror: net.HTTPMirrorPolicy) -> base_pb2.RuntimeFractionalPercent | None:
    """istiod MirrorPercentByPolicy for one entry of ``mirrors``."""
    out = base_pb2.RuntimeFractionalPercent()
    if mirror.HasField("percentage"):
        if mirror.percentage.value <= 0:
            return None
        out.default_value.CopyFrom(percent_fraction(mirror.percentage))
    else:
        out.default_value.CopyFrom(integer_fraction(100))
    return out


def request_mirror_policy(
    cluster: str, fraction: base_pb2.RuntimeFractionalPercent
) -> route_pb2.RouteAction.RequestMirrorPolicy:
    out = route_pb2.RouteAction.RequestMirrorPolicy(cluster=cluster, runtime_fraction=fraction)
    out.trace_sampled.value = False
    return out


# --- redirect and direct response ----------------------------------------------------------


def redirect_action(redirect: net.HTTPRedirect, listener_port: int, tls: bool) -> route_pb2.RedirectAction | None:
    """istiod ApplyRedirect; None for a redirect code Envoy cannot send (istiod leaves such a
    route without an action, which Envoy would reject)."""
    code = _REDIRECT_CODES.get(redirect.redirect_code)
    if code is None:
        return None
    out = route_pb2.RedirectAction(host_redirect=redirect.authority, path_redirect=redirect.uri, response_code=code)
    if redirect.prefix_rewrite:
        out.prefix_rewrite = redirect.prefix_rewrite  # in place of the path (one of the two)
    if redirect.scheme:
        out.scheme_redirect = redirect.scheme
    port_kind = redirect.WhichOneof("redirect_port")
    if port_kind is not None:
        if port_kind == "port":
            out.port_redirect = redirect.port
        elif redirect.derive_port == net.HTTPRedirect.FROM_REQUEST_PORT:
            # Envoy cannot echo the request port, but these routes serve exactly one port
            out.port_redirect = listener_port
        scheme = redirect.scheme or ("https" if tls else "http")
        if (out.port_redirect, scheme) in ((80, "http"), (443, "https")):
            out.port_redirect = 0  # the scheme's default port is left implicit
    return out


def direct_response_action(response: net.HTTPDirectResponse) -> route_pb2.DirectResponseAction:
    out = route_pb2.DirectResponseAction(status=response.status)
    if response.HasField("body"):
        kind = response.body.WhichOneof("specifier")
        if kind == "string":
            out.body.inline_string = response.body.string
        elif kind == "bytes":
            out.body.inline_bytes = response.body.bytes
    return out


# --- consistent hashing --------------------------------------------------------------------


def _lb_hash(policy: net.TrafficPolicy | net.TrafficPolicy.PortTrafficPolicy) -> ConsistentHashLB | None:
    lb = policy.load_balancer
    return lb.consistent_hash if lb.HasField("consistent_hash") else None


def _port_level_hash(
    dest: net.Destination, settings: list[net.TrafficPolicy.PortTrafficPolicy]
) -> ConsistentHashLB | None:
    if not dest.HasField("port"):
        return None
    for setting in settings:
        if setting.port.number == dest.port.number:
            return _lb_hash(setting)
    return None


def load_balancer_view(rule: net.DestinationRule) -> bytes:
    """A rule's load balancer settings only, set exactly where the rule sets them (top level, per
    port, per subset), as bytes: the part of a DestinationRule that routes (consistent-hash
    policies) and TCP proxies (source-IP hashing) read. A rule that changes anything else
    builds the same routes (route keys) and needs no route push (``needs_push.update_types``)."""
    view = net.DestinationRule()
    _copy_load_balancer(rule.traffic_policy, view.traffic_policy)
    for subset in rule.subsets:
        target = view.subsets.add(name=subset.name)
        if subset.HasField("traffic_policy"):
            _copy_load_balancer(subset.traffic_policy, target.traffic_policy)
    return view.SerializeToString(deterministic=True)


def _copy_load_balancer(policy: net.TrafficPolicy, into: net.TrafficPolicy) -> None:
    if policy.HasField("load_balancer"):
        into.load_balancer.CopyFrom(policy.load_balancer)
    for level in policy.port_level_settings:
        target = into.port_level_settings.add()
        target.port.CopyFrom(level.port)
        if level.HasField("load_balancer"):
            target.load_balancer.CopyFrom(level.load_balancer)


def destination_consistent_hash(dest: net.Destination, rule: net.DestinationRule | None) -> ConsistentHashLB | None:
    """istiod hashForHTTPDestination: the most specific consistent hash of the destination's
    DestinationRule: subset port-level, subset, port-level, then top level."""
    if rule is None:
        return None
    top = rule.traffic_policy
    candidates = [_lb_hash(top), _port_level_hash(dest, list(top.port_level_settings))]
    for subset in rule.subsets:
        if subset.name == dest.subset:
            candidates.append(_lb_hash(subset.traffic_policy))
            candidates.append(_port_level_hash(dest, list(subset.traffic_policy.port_level_settings)))
            break
    for found in reversed(candidates):
        if found is not None:
            return found
    return None


def service_consistent_hash(rule: net.DestinationRule | None, port: int) -> ConsistentHashLB | None:
    """istiod hashForService: the top-level hash, overridden by the port's own if it sets one."""
    if rule is None:
        return None
    top = rule.traffic_policy
    found = _lb_hash(top)
    for setting in top.port_level_settings:
        if setting.port.number == port:
            own = _lb_hash(setting)
            if own is not None:
                found = own
            break
    return found


def hash_policy(consistent_hash: ConsistentHashLB | None) -> route_pb2.RouteAction.HashPolicy | None:
    """istiod consistentHashToHashPolicy; None when the hash key is not an HTTP one."""
    if consistent_hash is None:
        return None
    out = route_pb2.RouteAction.HashPolicy()
    kind = consistent_hash.WhichOneof("hash_key")
    if kind == "http_header_name":
        out.header.header_name = consistent_hash.http_header_name
    elif kind == "http_cookie":
        cookie = consistent_hash.http_cookie
        out.cookie.name, out.cookie.path = cookie.name, cookie.path
        if cookie.HasField("ttl"):
            out.cookie.ttl.CopyFrom(cookie.ttl)
    elif kind == "use_source_ip":
        out.connection_properties.source_ip = consistent_hash.use_source_ip
    elif kind == "http_query_parameter_name":
        out.query_parameter.name = consistent_hash.http_query_parameter_name
    else:
        return None
    return out
