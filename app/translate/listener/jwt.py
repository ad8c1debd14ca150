"""RequestAuthentication as Envoy's ``jwt_authn`` HTTP filter, as istiod's authn policy applier
builds it (pilot/pkg/security/authn/policy_applier.go convertToEnvoyJwtConfig).

One provider per JWT rule of the workload's RequestAuthentications (``origins-I``, in creation
order): issuer, audiences, where the token is read from (headers with their prefix, query
parameters, cookies; Envoy's defaults when none), forwarding, the payload and claims to headers,
and the keys (inline ``jwks``; a ``jwksUri`` fetched by Envoy through the outbound cluster of its
host, istiod's Envoy-fetch mode). The requirement lets a request without a token through (only a
token that fails verification is refused, with 401): requiring one is an AuthorizationPolicy's
job (``requestPrincipals``). Each provider writes the verified payload to the filter's dynamic
metadata under ``payload``, where the RBAC filters read JWT attributes (istiod reads the
istio_authn filter's copy, which only Istio's proxy has).
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from envoy.config.core.v3 import http_uri_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.filters.http.jwt_authn.v3 import config_pb2 as jwt_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from app.api import security as sec
from app.config.objects import ConfigObject
from app.translate.listener.filters import pack

JWT_FILTER = "envoy.filters.http.jwt_authn"
JWT_PAYLOAD = "payload"  # the dynamic metadata key of a verified token's payload
_DEFAULT_TIMEOUT_S = 5  # istiod's PILOT_JWT_PUB_KEY_REFRESH timeout for Envoy-fetched keys
_JWKS_CACHE_S = 300  # how long Envoy keeps fetched keys (istiod's RemoteJwks CacheDuration)
_SPACE_DELIMITED = ("permission", "scope")


def _cluster_for(uri: str) -> str:
    """The outbound cluster Envoy fetches ``uri`` through: its host and port (istiod names it so)."""
    parts = urlsplit(uri)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"outbound|{port}||{parts.hostname or ''}"


def _provider(rule: sec.JWTRule) -> jwt_pb2.JwtProvider:
    out = jwt_pb2.JwtProvider(
        issuer=rule.issuer,
        forward=rule.forward_original_token,
        forward_payload_header=rule.output_payload_to_header,
        payload_in_metadata=JWT_PAYLOAD,
    )
    out.normalize_payload_in_metadata.space_delimited_claims.extend(_space_delimited(rule))
    out.audiences.extend(rule.audiences)
    for header in rule.from_headers:
        out.from_headers.add(name=header.name, value_prefix=header.prefix)
    out.from_params.extend(rule.from_params)
    out.from_cookies.extend(rule.from_cookies)
    for claim in rule.output_claim_to_headers:
        out.claim_to_headers.add(header_name=claim.header, claim_name=claim.claim)
    if rule.jwks:
        out.local_jwks.inline_string = rule.jwks
    elif rule.jwks_uri:
        uri = http_uri_pb2.HttpUri(uri=rule.jwks_uri, cluster=_cluster_for(rule.jwks_uri))
        if rule.HasField("timeout"):
            uri.timeout.CopyFrom(rule.timeout)
        else:
            uri.timeout.seconds = _DEFAULT_TIMEOUT_S
        out.remote_jwks.http_uri.CopyFrom(uri)
        out.remote_jwks.cache_duration.seconds = _JWKS_CACHE_S
    return out


def _space_delimited(rule: sec.JWTRule) -> list[str]:
    """istiod buildSpaceDelimitedClaims: the claims Envoy splits on spaces in the payload it
    writes to metadata (``scope`` and ``permission`` always; the rule's own besides, sorted)."""
    if not rule.space_delimited_claims:
        return list(_SPACE_DELIMITED)
    return sorted({*rule.space_delimited_claims, *_SPACE_DELIMITED})


def jwt_authn_filters(policies: Sequence[ConfigObject]) -> list[hcm_pb2.HttpFilter]:
    """The workload's jwt_authn filter (none without a JWT rule)."""
    rules = [rule for obj in policies for rule in obj.spec.jwt_rules]
    if not rules:
        return []
    config = jwt_pb2.JwtAuthentication(bypass_cors_preflight=True)
    each: list[jwt_pb2.JwtRequirement] = []
    for i, rule in enumerate(rules):
        name = f"origins-{i}"
        config.providers[name].CopyFrom(_provider(rule))
        either = jwt_pb2.JwtRequirement()
        either.requires_any.requirements.add(provider_name=name)
        either.requires_any.requirements.add().allow_missing.SetInParent()
        each.append(either)
    if len(each) == 1:
        requirement = each[0]
    else:
        # any one provider's token valid (tokens that share a location), or every provider's
        # valid or missing: istiod's outer OR {P1, P2, ..., AND{...}}, in that order
        requirement = jwt_pb2.JwtRequirement()
        for i in range(len(rules)):
            requirement.requires_any.requirements.add(provider_name=f"origins-{i}")
        requirement.requires_any.requirements.add().requires_all.requirements.extend(each)
    route = config.rules.add()
    route.match.CopyFrom(rc.RouteMatch(prefix="/"))
    route.requires.CopyFrom(requirement)
    return [hcm_pb2.HttpFilter(name=JWT_FILTER, typed_config=pack(config))]
