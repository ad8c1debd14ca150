"""AuthorizationPolicy as Envoy RBAC filters, in the shape istiod's authz builder gives them
(pilot/pkg/security/authz/builder, model and matcher packages).

Per workload: one filter per action in istiod's order, AUDIT (Envoy's LOG action), DENY, ALLOW
(CUSTOM has filters of its own, before the workload's jwt_authn: ext_authz.py). Each rule is one RBAC policy named
``ns[NS]-policy[NAME]-rule[I]``: an OR over its ``to`` operations (each an AND of hosts, methods,
paths and ports, then the permission-side conditions) and an OR over its ``from`` sources (each an
AND of principals, service accounts, namespaces, remote IP blocks and IP blocks, then the
principal-side conditions); a field's values are ORed, its not-values a NOT of their OR. A policy
without rules matches nothing. A policy annotated ``istio.io/dry-run`` true (as Go's ParseBool reads it) goes
to the shadow rules instead.

JWT attributes (requestPrincipals, request.auth.*) match the payload jwt_authn verified. What a
rule cannot say on a chain (an HTTP field on a TCP chain) is handled as istiod handles it: an
ALLOW rule that needs it is dropped (it allows less), a DENY or AUDIT rule keeps its other
conditions (it denies more).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from envoy.config.core.v3 import address_pb2, extension_pb2
from envoy.config.listener.v3 import listener_components_pb2 as lc
from envoy.config.rbac.v3 import rbac_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2 as http_rbac_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.filters.network.rbac.v3 import rbac_pb2 as network_rbac_pb2
from envoy.extensions.path.match.uri_template.v3 import uri_template_match_pb2
from envoy.type.matcher.v3 import metadata_pb2, path_pb2, regex_pb2, string_pb2, value_pb2

from app.api import security as sec
from app.config.go_strconv import go_bool, go_int
from app.config.objects import ConfigObject
from app.model.authz import WorkloadPolicies
from app.translate.listener.filters import pack
from app.translate.listener.jwt import JWT_FILTER, JWT_PAYLOAD

HTTP_RBAC = "envoy.filters.http.rbac"
NETWORK_RBAC = "envoy.filters.network.rbac"
TCP_STAT_PREFIX = "tcp."
DRY_RUN = "istio.io/dry-run"
SHADOW_PREFIX = {rbac_pb2.RBAC.ALLOW: "istio_dry_run_allow_", rbac_pb2.RBAC.DENY: "istio_dry_run_deny_"}
SPIFFE = "spiffe://"

Permission = rbac_pb2.Permission
Principal = rbac_pb2.Principal
# Envoy's generated protos are untyped here: a Permission or Principal message
Msg = Any


class _CannotSay(Exception):
    """A value a filter of this kind cannot match on (HTTP-only on TCP, or not translated)."""


# --- matchers (istiod matcher package) ---------------------------------------------------------


def _quote(text: str) -> str:
    """Go's regexp.QuoteMeta: RE2 metacharacters escaped."""
    return "".join("\\" + c if c in r"\.+*?()|[]{}^$" else c for c in text)


def _string(value: str, prefix: str = "", ignore_case: bool = False) -> string_pb2.StringMatcher:
    """istiod StringMatcherWithPrefix: ``*`` anything, ``*x`` a suffix, ``x*`` a prefix, else exact."""
    if value == "*":
        return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=".+"))
    if value.startswith("*"):
        if prefix:
            return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=prefix + ".*" + _quote(value[1:])))
        return string_pb2.StringMatcher(suffix=value[1:], ignore_case=ignore_case)
    if value.endswith("*"):
        return string_pb2.StringMatcher(prefix=prefix + value[:-1], ignore_case=ignore_case)
    return string_pb2.StringMatcher(exact=prefix + value, ignore_case=ignore_case)


def _regex(regex: str) -> string_pb2.StringMatcher:
    return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=regex))


def _header(name: str, value: str, ignore_case: bool = False) -> rc.HeaderMatcher:
    """istiod HeaderMatcher / HostMatcher: ``*`` is presence; else as _string."""
    if value == "*":
        return rc.HeaderMatcher(name=name, present_match=True)
    return rc.HeaderMatcher(name=name, string_match=_string(value, ignore_case=ignore_case))


def _cidr(value: str) -> address_pb2.CidrRange:
    try:
        net = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise _CannotSay(f"{value!r} is not an IP or CIDR") from None
    out = address_pb2.CidrRange(address_prefix=str(net.network_address))
    out.prefix_len.value = net.prefixlen
    return out


def _authenticated(matcher: Any) -> Msg:
    return Principal(authenticated=Principal.Authenticated(principal_name=matcher))


def _port(value: str) -> int:
    port = go_int(value, signed=False)  # as validation reads it (istiod: strconv.ParseUint)
    if port is None or port > 65535:
        raise _CannotSay(f"invalid port {value!r}")
    return port


def _http_only(make: Callable[[str], Msg]) -> Callable[[str, bool], Msg]:
    def build(value: str, tcp: bool) -> Msg:
        if tcp:
            raise _CannotSay("HTTP only")
        return make(value)

    return build


def _any_chain(make: Callable[[str], Msg]) -> Callable[[str, bool], Msg]:
    return lambda value, _tcp: make(value)


def _namespace(value: str) -> Msg:
    pattern = ".*".join(_quote(part) for part in value.split("*"))
    return _authenticated(_regex(f".*/ns/{pattern}/.*"))


def _service_account(policy_namespace: str) -> Callable[[str], Msg]:
    def make(value: str) -> Msg:
        ns, sep, sa = value.partition("/")
        if not sep:
            ns, sa = policy_namespace, value
        return _authenticated(_regex(f"spiffe://.+/ns/{_quote(ns)}/(.+/|)sa/{_quote(sa)}(/.+)?"))

    return make


def _trust_domain(value: str) -> Msg:
    if value == "*":
        return _authenticated(string_pb2.StringMatcher(prefix=SPIFFE))
    if "*" not in value:
        return _authenticated(string_pb2.StringMatcher(prefix=f"{SPIFFE}{value}/"))
    head, _, tail = value.partition("*")
    return _authenticated(_regex(f"spiffe://{_quote(head)}[^/]*{_quote(tail)}/.*"))


def _path(value: str) -> Msg:
    """A path, or a path template (``{*}`` one segment, ``{**}`` any): Envoy's uri_template
    matcher, named and written as istiod's matcher.PathTemplateMatcher does."""
    if "{*}" in value or "{**}" in value:
        template = value.replace("{**}", "**").replace("{*}", "*")
        config = uri_template_match_pb2.UriTemplateMatchConfig(path_template=template)
        matcher = extension_pb2.TypedExtensionConfig(name="uri-template", typed_config=pack(config))
        return Permission(uri_template=matcher)
    return Permission(url_path=path_pb2.PathMatcher(path=_string(value)))


def _unsupported(value: str, tcp: bool) -> NoReturn:
    raise _CannotSay("not translated")


def _jwt_claim(path: Sequence[str], matcher: Any) -> Msg:
    """A claim of the verified JWT, as jwt_authn put its payload in the dynamic metadata
    (app/translate/listener/jwt.py); a list claim (aud, groups) matches when one element does. istiod
    reads the istio_authn filter's copy, which upstream Envoy does not have."""
    value = value_pb2.ValueMatcher(
        or_match=value_pb2.OrMatcher(
            value_matchers=[
                value_pb2.ValueMatcher(string_match=matcher),
                value_pb2.ValueMatcher(list_match=value_pb2.ListMatcher(one_of=value_pb2.ValueMatcher(string_match=matcher))),
            ]
        )
    )
    segments = [metadata_pb2.MetadataMatcher.PathSegment(key=key) for key in (JWT_PAYLOAD, *path)]
    return Principal(metadata=metadata_pb2.MetadataMatcher(filter=JWT_FILTER, path=segments, value=value))


def _request_principal(value: str) -> Msg:
    """istiod requestPrincipalGenerator: ``ISS/SUB`` (split at the last ``/``), each side with
    ``*`` as anything, a prefix or a suffix; a value without ``/`` is the issuer."""
    any_value = _regex(".+")
    iss, sep, sub = value.rpartition("/")
    if not sep:
        iss, sub = value, ""
    if value == "*":
        match_iss, match_sub = any_value, any_value
    elif value.startswith("*"):
        if sep:
            match_iss = any_value if iss == "*" else string_pb2.StringMatcher(suffix=iss[1:])
            match_sub = string_pb2.StringMatcher(exact=sub)
        else:
            match_iss, match_sub = any_value, string_pb2.StringMatcher(suffix=value[1:])
    elif value.endswith("*"):
        if sep:
            match_iss = string_pb2.StringMatcher(exact=iss)
            match_sub = any_value if sub == "*" else string_pb2.StringMatcher(prefix=sub[:-1])
        else:
            match_iss, match_sub = string_pb2.StringMatcher(prefix=value[:-1]), any_value
    else:
        match_iss, match_sub = string_pb2.StringMatcher(exact=iss), string_pb2.StringMatcher(exact=sub)
    both = [_jwt_claim(["iss"], match_iss), _jwt_claim(["sub"], match_sub)]
    return Principal(and_ids=Principal.Set(ids=both))


def _claim_names(key: str) -> list[str]:
    """``request.auth.claims[a][b]`` -> [a, b]."""
    inner = key[len("request.auth.claims") :]
    if not inner.startswith("[") or not inner.endswith("]"):
        raise _CannotSay(f"{key!r}: want request.auth.claims[NAME]")
    return inner[1:-1].split("][")


PermissionOf = Callable[[str, bool], Msg]
PrincipalOf = Callable[[str, bool], Msg]


def _condition(key: str, policy_namespace: str) -> PermissionOf | PrincipalOf:
    """A ``when`` key's generator: a permission (destination) or principal (source) attribute."""
    if key == "destination.ip":
        return _any_chain(lambda v: Permission(destination_ip=_cidr(v)))
    if key == "destination.port":
        return _any_chain(lambda v: Permission(destination_port=_port(v)))
    if key == "connection.sni":
        return _any_chain(lambda v: Permission(requested_server_name=_string(v)))
    if key == "source.ip":
        return _any_chain(lambda v: Principal(direct_remote_ip=_cidr(v)))
    if key == "remote.ip":
        return _any_chain(lambda v: Principal(remote_ip=_cidr(v)))
    if key == "source.namespace":
        return _any_chain(_namespace)
    if key == "source.trustDomain":
        return _any_chain(_trust_domain)
    if key == "source.serviceAccount":
        return _any_chain(_service_account(policy_namespace))
    if key == "source.principal":
        return _any_chain(lambda v: _authenticated(_string(v, SPIFFE)))
    if key.startswith("request.headers[") and key.endswith("]"):
        name = key[len("request.headers[") : -1]
        return _http_only(lambda v: Principal(header=_header(name, v)))
    if key == "request.auth.principal":
        return _http_only(_request_principal)
    if key in ("request.auth.audiences", "request.auth.presenter"):
        claim = "aud" if key.endswith("audiences") else "azp"
        return _http_only(lambda v: _jwt_claim([claim], _string(v)))
    if key.startswith("request.auth.claims"):
        return _http_only(lambda v: _jwt_claim(_claim_names(key), _string(v)))
    return _unsupported  # experimental.envoy.filters.*


_PERMISSION_KEYS = frozenset({"destination.ip", "destination.port", "connection.sni"})


def _said(generate: Callable[[str, bool], Msg], values: Sequence[str], tcp: bool, strict: bool) -> list[Msg]:
    """What the values say on this chain; a value that cannot be said fails the rule when
    ``strict`` (ALLOW), else it is left out."""
    out = []
    for value in values:
        try:
            out.append(generate(value, tcp))
        except _CannotSay:
            if strict:
                raise
    return out


def _permission(
    fields: Sequence[tuple[PermissionOf, Sequence[str], Sequence[str]]], tcp: bool, strict: bool
) -> Msg:
    """AND over fields of (OR of values, NOT OR of not-values); any when nothing is set."""
    rules = []
    for generate, values, not_values in fields:
        if said := _said(generate, values, tcp, strict):
            rules.append(Permission(or_rules=Permission.Set(rules=said)))
        if said := _said(generate, not_values, tcp, strict):
            rules.append(Permission(not_rule=Permission(or_rules=Permission.Set(rules=said))))
    return Permission(and_rules=Permission.Set(rules=rules or [Permission(any=True)]))


def _principal(
    fields: Sequence[tuple[PrincipalOf, Sequence[str], Sequence[str]]], tcp: bool, strict: bool
) -> Msg:
    ids = []
    for generate, values, not_values in fields:
        if said := _said(generate, values, tcp, strict):
            ids.append(Principal(or_ids=Principal.Set(ids=said)))
        if said := _said(generate, not_values, tcp, strict):
            ids.append(Principal(not_id=Principal(or_ids=Principal.Set(ids=said))))
    return Principal(and_ids=Principal.Set(ids=ids or [Principal(any=True)]))


def _rule_policy(rule: sec.Rule, policy_namespace: str, tcp: bool, strict: bool) -> rbac_pb2.Policy:
    base_permission: list[tuple[PermissionOf, Sequence[str], Sequence[str]]] = []
    base_principal: list[tuple[PrincipalOf, Sequence[str], Sequence[str]]] = []
    for cond in rule.when:
        generate = _condition(cond.key, policy_namespace)
        if cond.key in _PERMISSION_KEYS:
            base_permission.append((generate, cond.values, cond.not_values))
        else:
            base_principal.append((generate, cond.values, cond.not_values))
    host: PermissionOf = _http_only(lambda v: Permission(header=_header(":authority", v, ignore_case=True)))
    method: PermissionOf = _http_only(lambda v: Permission(header=_header(":method", v)))
    port: PermissionOf = _any_chain(lambda v: Permission(destination_port=_port(v)))
    policy = rbac_pb2.Policy()
    for to in rule.to:
        op = to.operation
        fields = [
            (host, op.hosts, op.not_hosts),
            (method, op.methods, op.not_methods),
            (_http_only(_path), op.paths, op.not_paths),
            (port, op.ports, op.not_ports),
        ]
        policy.permissions.append(_permission([*fields, *base_permission], tcp, strict))
    if not len(rule.to):
        policy.permissions.append(_permission(base_permission, tcp, strict))
    principal: PrincipalOf = _any_chain(lambda v: _authenticated(_string(v, SPIFFE)))
    remote: PrincipalOf = _any_chain(lambda v: Principal(remote_ip=_cidr(v)))
    direct: PrincipalOf = _any_chain(lambda v: Principal(direct_remote_ip=_cidr(v)))
    sources = getattr(rule, "from")
    for source in sources:
        s = source.source
        who = [
            (principal, s.principals, s.not_principals),
            (_http_only(_request_principal), s.request_principals, s.not_request_principals),
            (_any_chain(_service_account(policy_namespace)), s.service_accounts, s.not_service_accounts),
            (_any_chain(_trust_domain), s.trust_domains, s.not_trust_domains),
            (_any_chain(_namespace), s.namespaces, s.not_namespaces),
            (remote, s.remote_ip_blocks, s.not_remote_ip_blocks),
            (direct, s.ip_blocks, s.not_ip_blocks),
        ]
        policy.principals.append(_principal([*who, *base_principal], tcp, strict))
    if not len(sources):
        policy.principals.append(_principal(base_principal, tcp, strict))
    return policy


def _never() -> rbac_pb2.Policy:
    """istiod rbacPolicyMatchNever: what a policy without rules is."""
    policy = rbac_pb2.Policy()
    policy.permissions.add().not_rule.any = True
    policy.principals.add().not_id.any = True
    return policy


# --- per action --------------------------------------------------------------------------------


def action_rules(
    policies: Sequence[ConfigObject], action: rbac_pb2.RBAC.Action.ValueType, tcp: bool, name_prefix: str = ""
) -> tuple[rbac_pb2.RBAC | None, rbac_pb2.RBAC | None]:
    """(enforced rules, dry-run rules) of the policies of one action, each None when no policy
    is of it; ``name_prefix`` before each rule's name (a CUSTOM provider's)."""
    enforce = rbac_pb2.RBAC(action=action)
    shadow = rbac_pb2.RBAC(action=action)
    used = {False: False, True: False}
    strict = action == rbac_pb2.RBAC.ALLOW
    for obj in policies:
        spec: sec.AuthorizationPolicy = obj.spec
        # isDryRun: strconv.ParseBool, a value it refuses is not a dry run
        dry_run = go_bool(obj.meta.annotations.get(DRY_RUN, "")) is True
        target = shadow if dry_run else enforce
        used[dry_run] = True
        prefix = f"{name_prefix}ns[{obj.meta.namespace}]-policy[{obj.meta.name}]-rule"
        for i, rule in enumerate(spec.rules):
            try:
                built = _rule_policy(rule, obj.meta.namespace, tcp, strict)
            except _CannotSay:
                continue  # an ALLOW rule that cannot be said is left out: it allows nothing
            target.policies[f"{prefix}[{i}]"].CopyFrom(built)
        if not len(spec.rules):
            target.policies[f"{prefix}[0]"].CopyFrom(_never())
    return (enforce if used[False] else None), (shadow if used[True] else None)


_ORDER = (
    ("audit", rbac_pb2.RBAC.LOG),
    ("deny", rbac_pb2.RBAC.DENY),
    ("allow", rbac_pb2.RBAC.ALLOW),
)


def _each(policies: WorkloadPolicies, tcp: bool) -> list[tuple[rbac_pb2.RBAC | None, rbac_pb2.RBAC | None]]:
    out = []
    for attribute, action in _ORDER:
        found: Sequence[ConfigObject] = getattr(policies, attribute)
        if found:
            out.append(action_rules(found, action, tcp))
    return out


def _shadow_prefix(shadow: rbac_pb2.RBAC | None) -> str:
    """istiod shadowRuleStatPrefix: by the shadow rules' action, and ALLOW's without shadow
    rules (Go's getter on the nil RBAC reads action 0, ALLOW), so every filter has one."""
    return SHADOW_PREFIX.get(shadow.action if shadow is not None else rbac_pb2.RBAC.ALLOW, "")


def rbac_http_filters(policies: WorkloadPolicies) -> list[hcm_pb2.HttpFilter]:
    """The RBAC HTTP filters of a workload's HTTP chains (none without policies)."""
    out = []
    for rules, shadow in _each(policies, tcp=False):
        config = http_rbac_pb2.RBAC(shadow_rules_stat_prefix=_shadow_prefix(shadow))
        if rules is not None:
            config.rules.CopyFrom(rules)
        if shadow is not None:
            config.shadow_rules.CopyFrom(shadow)
        out.append(hcm_pb2.HttpFilter(name=HTTP_RBAC, typed_config=pack(config)))
    return out


def rbac_network_filters(policies: WorkloadPolicies) -> list[lc.Filter]:
    """The RBAC network filters of a workload's TCP chains, before its tcp_proxy."""
    out = []
    for rules, shadow in _each(policies, tcp=True):
        config = network_rbac_pb2.RBAC(stat_prefix=TCP_STAT_PREFIX, shadow_rules_stat_prefix=_shadow_prefix(shadow))
        if rules is not None:
            config.rules.CopyFrom(rules)
        if shadow is not None:
            config.shadow_rules.CopyFrom(shadow)
        out.append(lc.Filter(name=NETWORK_RBAC, typed_config=pack(config)))
    return out
