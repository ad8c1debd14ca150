"""Which HTTPMatchRequests apply to a proxy, and their Envoy RouteMatch
(istiod pilot/pkg/networking/core/route/route.go: sourceMatchHTTP, TranslateRouteMatch,
IsCatchAllRoute).

Owns the translation of Istio ``StringMatch`` into Envoy string / header / query matchers
(``regex: "*"`` and an empty match mean "present"), ``@request.auth.claims`` headers into
dynamic-metadata matchers on the JWT filter's payload, and the catch-all test that lets a
VirtualService stop emitting routes. Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from envoy.config.route.v3 import route_components_pb2 as route_pb2
from envoy.type.matcher.v3 import metadata_pb2, regex_pb2, string_pb2, value_pb2

from app.api import networking as net
from app.config.labels import selector_matches

JWT_AUTHN_FILTER = "envoy.filters.http.jwt_authn"
JWT_PAYLOAD_KEY = "payload"
JWT_CLAIM_HEADER = "@request.auth.claims"
HEADER_METHOD = ":method"
HEADER_AUTHORITY = ":authority"
HEADER_SCHEME = ":scheme"


def source_matches(
    match: net.HTTPMatchRequest | None,
    gateways: frozenset[str],
    proxy_labels: Mapping[str, str],
    proxy_namespace: str,
) -> bool:
    """istiod sourceMatchHTTP: ``match.gateways`` (when given) decides alone; otherwise the
    proxy must carry ``sourceLabels`` and sit in ``sourceNamespace``."""
    if match is None:
        return True
    if match.gateways:
        return any(g in gateways for g in match.gateways)
    if selector_matches(match.source_labels, proxy_labels):
        return not match.source_namespace or match.source_namespace == proxy_namespace
    return False


def string_matcher(m: net.StringMatch) -> string_pb2.StringMatcher | None:
    """istiod util.ConvertToEnvoyMatch; None when the StringMatch names no match type."""
    kind = m.WhichOneof("match_type")
    if kind == "exact":
        return string_pb2.StringMatcher(exact=m.exact)
    if kind == "prefix":
        return string_pb2.StringMatcher(prefix=m.prefix)
    if kind == "regex":
        return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=m.regex))
    return None


def _is_present_match(m: net.StringMatch) -> bool:
    # "*" is not RE2; Istio reads it (and an empty match) as "the header is present"
    kind = m.WhichOneof("match_type")
    return kind is None or (kind == "regex" and m.regex == "*")


_Matcher = TypeVar("_Matcher", route_pb2.HeaderMatcher, route_pb2.QueryParameterMatcher)


def _match_present_or_string(out: _Matcher, m: net.StringMatch) -> _Matcher:
    if _is_present_match(m):
        out.present_match = True
        return out
    sm = string_matcher(m)
    if sm is not None:
        out.string_match.CopyFrom(sm)
    return out


def header_matcher(name: str, m: net.StringMatch) -> route_pb2.HeaderMatcher:
    return _match_present_or_string(route_pb2.HeaderMatcher(name=name), m)


def query_parameter_matcher(name: str, m: net.StringMatch) -> route_pb2.QueryParameterMatcher:
    return _match_present_or_string(route_pb2.QueryParameterMatcher(name=name), m)


def jwt_claim_path(header_name: str) -> list[str] | None:
    """``@request.auth.claims.a.b`` or ``@request.auth.claims[a][b]`` -> ``["a", "b"]``
    (istiod jwt.ToRoutingClaim); None for any other header."""
    if not header_name.lower().startswith(JWT_CLAIM_HEADER):
        return None
    rest = header_name[len(JWT_CLAIM_HEADER) :]
    if rest.startswith(".") and len(rest) > 1:
        return rest[1:].split(".")
    if rest.startswith("[") and rest.endswith("]") and len(rest) > 2:
        return rest[1:-1].split("][")
    return None


def jwt_claim_matcher(claims: list[str], m: net.StringMatch) -> metadata_pb2.MetadataMatcher:
    """istiod MetadataMatcherForJWTClaims with extended JWT: the claim matches when it is a
    string that matches, or a list holding one that matches."""
    out = metadata_pb2.MetadataMatcher(filter=JWT_AUTHN_FILTER)
    for key in (JWT_PAYLOAD_KEY, *claims):
        out.path.add(key=key)
    value = value_pb2.ValueMatcher()
    sm = string_matcher(m)
    if sm is None:
        # istiod would send a ValueMatcher with an empty StringMatcher, which Envoy rejects
        value.present_match = True
    else:
        value.string_match.CopyFrom(sm)
    either = out.value.or_match.value_matchers
    either.add().list_match.one_of.CopyFrom(value)
    either.add().CopyFrom(value)
    return out


def translate_route_match(match: net.HTTPMatchRequest | None) -> route_pb2.RouteMatch:
    """istiod TranslateRouteMatch. Headers (and withoutHeaders) are sorted by name as istiod
    sorts them; query parameters and JWT claim matchers, which istiod emits in Go map order,
    are sorted by name so the output is stable."""
    out = route_pb2.RouteMatch(prefix="/")
    if match is None:
        return out

    headers: list[route_pb2.HeaderMatcher] = []
    for name, sm in sorted(match.headers.items()):
        claims = jwt_claim_path(name)
        if claims is not None:
            out.dynamic_metadata.append(jwt_claim_matcher(claims, sm))
        else:
            headers.append(header_matcher(name, sm))
    for name, sm in sorted(match.without_headers.items()):
        claims = jwt_claim_path(name)
        if claims is not None:
            md = jwt_claim_matcher(claims, sm)
            md.invert = True
            out.dynamic_metadata.append(md)
            continue
        hm = header_matcher(name, sm)
        hm.invert_match = True
        # treat_missing_header_as_empty cannot be combined with present_match
        if not _is_present_match(sm):
            hm.treat_missing_header_as_empty = True
        headers.append(hm)
    headers.sort(key=lambda h: h.name)
    out.headers.extend(headers)

    if match.HasField("uri"):
        kind = match.uri.WhichOneof("match_type")
        if kind == "exact":
            out.path = match.uri.exact
        elif kind == "prefix":
            out.prefix = match.uri.prefix
        elif kind == "regex":
            out.safe_regex.regex = match.uri.regex
    out.case_sensitive.value = not match.ignore_uri_case

    for pseudo, field in ((HEADER_METHOD, "method"), (HEADER_AUTHORITY, "authority"), (HEADER_SCHEME, "scheme")):
        if match.HasField(field):
            out.headers.append(header_matcher(pseudo, getattr(match, field)))

    for name, sm in sorted(match.query_params.items()):
        out.query_parameters.append(query_parameter_matcher(name, sm))
    return out


def is_catch_all_route(route: route_pb2.Route) -> bool:
    """istiod IsCatchAllRoute: matches every path and has no header/query/metadata condition."""
    m = route.match
    kind = m.WhichOneof("path_specifier")
    if kind == "prefix":
        catch_all = m.prefix == "/"
    elif kind == "path_separated_prefix":
        catch_all = m.path_separated_prefix == "/"
    elif kind == "safe_regex":
        catch_all = m.safe_regex.regex == ".*"
    else:
        catch_all = False
    return catch_all and not m.headers and not m.query_parameters and not m.dynamic_metadata
