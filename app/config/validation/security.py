"""istiod's checks of the security kinds (pkg/config/validation ValidatePeerAuthentication,
ValidateAuthorizationPolicy, ValidateRequestAuthentication, security.Check* helpers), and the
selector and policy-target checks they share with the networking kinds (validateWorkloadSelector,
ValidateAlphaWorkloadSelector, validateOneOfSelectorType, validatePolicyTargetReference).

Each raises FieldError naming the field path; parsing (app/config/schema.py), with the CRDs'
OpenAPI bounds, came first.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Sequence

import re2

from app.api import security as sec
from app.api.istio.telemetry.v1alpha1 import telemetry_pb2 as tpb
from app.api.istio.type.v1beta1 import selector_pb2
from app.config.go_strconv import go_int
from app.config.validation.fields import check_duration, check_workload_selector, fail, quoted

# --- selectors and policy targets, shared with the networking kinds ---------------------------


# istiod allowedTargetRefs: (canonical group, kind); the core group is "" or "core"
_TARGET_REF_KINDS = (
    ("core", "Service"),
    ("networking.istio.io", "ServiceEntry"),
    ("gateway.networking.k8s.io", "Gateway"),
    ("gateway.networking.k8s.io", "GatewayClass"),
)


def check_target_ref(path: str, ref: selector_pb2.PolicyTargetReference) -> None:
    """istiod validatePolicyTargetReference: a name, no namespace (no cross-namespace
    references), and a Service, ServiceEntry, Gateway API Gateway or GatewayClass."""
    if not ref.name:
        raise fail(f"{path}.name", "is required")
    if ref.namespace:
        raise fail(f"{path}.namespace", "must not be set: cross namespace referencing is not supported")
    if (ref.group or "core", ref.kind) not in _TARGET_REF_KINDS:
        allowed = ", ".join(f"{group}/{kind}" for group, kind in _TARGET_REF_KINDS)
        raise fail(path, f"must be to one of {allowed}, but was {quoted(ref.group)}/{quoted(ref.kind)}")


def check_policy_targets(
    spec: sec.AuthorizationPolicy | sec.RequestAuthentication | sec.PeerAuthentication | tpb.Telemetry,
) -> None:
    """What istiod checks of a policy's selector and targets, in its order: one of them at most
    (validateOneOfSelectorType), the selector's labels, each target reference."""
    if isinstance(spec, sec.PeerAuthentication):
        check_workload_selector("selector.matchLabels", spec.selector.match_labels)
        return
    chosen = [
        name for name, is_set in (
            ("selector", spec.HasField("selector")),
            ("targetRef", spec.HasField("targetRef")),
            ("targetRefs", len(spec.targetRefs) > 0),
        ) if is_set
    ]  # fmt: skip
    if len(chosen) > 1:
        found = " and ".join(chosen)
        raise fail(chosen[1], f"only one of selector, targetRef or targetRefs can be set (found {found})")
    check_workload_selector("selector.matchLabels", spec.selector.match_labels)
    if spec.HasField("targetRef"):
        check_target_ref("targetRef", spec.targetRef)
    for i, ref in enumerate(spec.targetRefs):
        check_target_ref(f"targetRefs[{i}]", ref)


# --- PeerAuthentication -----------------------------------------------------------------------


def validate_peer_authentication(pa: sec.PeerAuthentication, namespace: str) -> None:
    """istiod validation.ValidatePeerAuthentication: port-level modes need a workload selector
    (a mesh or namespace policy has no workload ports), port numbers are ports, and the
    selector's labels are labels (an empty ``portLevelMtls`` is the CRD's bound, schema.py)."""
    # an empty selector is accepted as namespace-wide (istiod warns)
    if len(pa.port_level_mtls) and not pa.selector.match_labels:
        raise fail("portLevelMtls", "mesh/namespace peer authentication cannot have port level mTLS")
    for port in pa.port_level_mtls:
        if not 1 <= port <= 65535:
            raise fail(f"portLevelMtls.{port}", "port must be in the range 1..65535")
    check_policy_targets(pa)


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
            raise fail(f"{path}[{i}]", f"{value!r} is not an IP address or CIDR") from None


def _check_ports(path: str, values: Iterable[str]) -> None:
    for i, value in enumerate(values):
        port = go_int(value, signed=False)  # istiod: strconv.ParseUint
        if port is None or port > 65535:
            raise fail(f"{path}[{i}]", f"{quoted(value)} is not a port number")


def _check_not_empty(path: str, values: Iterable[str]) -> None:
    """istiod CheckEmptyValues. A `*` anywhere is accepted, as istiod accepts it: only a
    leading or trailing one is a wildcard, elsewhere it is matched as written."""
    for i, value in enumerate(values):
        if not value:
            raise fail(f"{path}[{i}]", "empty value not allowed")


def _check_trust_domains(path: str, values: Iterable[str]) -> None:
    """istiod CheckTrustDomainValues: non-empty, at most one `*` and only at an end, no `/`."""
    for i, value in enumerate(values):
        inner = value[1:-1] if len(value) > 1 else ""
        if not value or "/" in value or value.count("*") > 1 or "*" in inner:
            raise fail(f"{path}[{i}]", f"{value!r}: a trust domain, with `*` only at its start or end")


def _check_service_accounts(path: str, values: Sequence[str]) -> None:
    """istiod CheckServiceAccount: at most 16, ``sa`` or ``namespace/sa``, no wildcard."""
    if len(values) > 16:
        raise fail(path, "may not have more than 16 values")
    for i, value in enumerate(values):
        ns, sep, sa = value.partition("/")
        if not value or "*" in value or "/" in sa or len(value) > 320 or (sep and not (ns and sa)):
            raise fail(f"{path}[{i}]", f"{value!r}: want 'serviceAccount' or 'namespace/serviceAccount' (no '*')")


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
                    raise fail(f"{path}[{i}]", f"{value!r}: {{**}} must be the last operator")
                seen_any = glob == _MATCH_ANY
                continue
            if "{" in glob or "}" in glob:
                raise fail(f"{path}[{i}]", f"{value!r}: '{{' or '}}' beyond a supported path template")
            if templated and not _PATH_LITERAL.match(glob):
                raise fail(f"{path}[{i}]", f"{value!r}: segment {glob!r} is not a valid literal")


# what a CUSTOM policy cannot match on (istiod: "... is currently not supported with CUSTOM action")
_CUSTOM_UNSUPPORTED_SOURCE = (
    "namespaces", "not_namespaces", "service_accounts", "not_service_accounts", "trust_domains",
    "not_trust_domains", "principals", "not_principals", "request_principals", "not_request_principals",
)  # fmt: skip
_CUSTOM_UNSUPPORTED_KEYS = frozenset(
    {"source.namespace", "source.serviceAccount", "source.trustDomain", "source.principal"}
)
_NO_RULES = (
    "action without rules is meaningless as it is never triggered "
    "(add an empty rule {} to trigger it for every request)"
)


def validate_authorization_policy(ap: sec.AuthorizationPolicy, namespace: str) -> None:
    """istiod validation.ValidateAuthorizationPolicy."""
    Action = sec.AuthorizationPolicy.Action
    check_policy_targets(ap)
    if ap.action == Action.CUSTOM:
        if not ap.rules:
            raise fail("rules", f"a CUSTOM {_NO_RULES}")
        if not ap.provider.name:
            raise fail("provider.name", "is required for action CUSTOM")
        for r, rule in enumerate(ap.rules):
            for f, source in enumerate(getattr(rule, "from")):
                for name in _CUSTOM_UNSUPPORTED_SOURCE:
                    if getattr(source.source, name):
                        where = f"rules[{r}].from[{f}].source.{_camel(name)}"
                        raise fail(where, "is not supported with action CUSTOM")
            for w, cond in enumerate(rule.when):
                if cond.key in _CUSTOM_UNSUPPORTED_KEYS or cond.key.startswith("request.auth."):
                    raise fail(f"rules[{r}].when[{w}].key", f"{quoted(cond.key)} is not supported with action CUSTOM")
    if ap.action != Action.CUSTOM and ap.HasField("provider"):
        raise fail("provider", "is only allowed with action CUSTOM")
    if ap.action == Action.DENY and not ap.rules:
        raise fail("rules", f"a DENY {_NO_RULES}")
    for r, rule in enumerate(ap.rules):
        here = f"rules[{r}]"
        for f, source in enumerate(getattr(rule, "from")):
            where = f"{here}.from[{f}].source"
            if not source.HasField("source") or not source.source.ListFields():
                raise fail(where, "must set at least one field")
            s = source.source
            if (s.principals or s.not_principals or s.namespaces or s.not_namespaces) and (
                s.service_accounts or s.not_service_accounts
            ):
                raise fail(where, "cannot set serviceAccounts with namespaces or principals")
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
            for name in ("trust_domains", "not_trust_domains"):
                _check_trust_domains(f"{where}.{_camel(name)}", getattr(s, name))
        for t, to in enumerate(rule.to):
            where = f"{here}.to[{t}].operation"
            if not to.HasField("operation") or not to.operation.ListFields():
                raise fail(where, "must set at least one field")
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
                raise fail(f"{where}.key", "is required")
            if key not in AUTHZ_KEYS and not key.startswith(AUTHZ_KEY_PREFIXES):
                raise fail(f"{where}.key", f"unknown attribute {key!r}")
            if key.startswith(AUTHZ_KEY_PREFIXES[:2]) and not (key.endswith("]") and len(key) > key.index("[") + 2):
                raise fail(f"{where}.key", f"{key!r}: the name goes in brackets, e.g. request.headers[User-Agent]")
            if not len(cond.values) and not len(cond.not_values):
                raise fail(where, "values or notValues is required")
            if key in _AUTHZ_IP_KEYS:
                _check_cidrs(f"{where}.values", cond.values)
                _check_cidrs(f"{where}.notValues", cond.not_values)
            if key == "destination.port":
                _check_ports(f"{where}.values", cond.values)
                _check_ports(f"{where}.notValues", cond.not_values)


# istiod validStrictHeaderNameRegex: the header an outputClaimToHeaders entry writes
_STRICT_HEADER_NAME = re.compile(r"[-_A-Za-z0-9]+")
_URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")


def validate_request_authentication(ra: sec.RequestAuthentication, namespace: str) -> None:
    """istiod validation.ValidateRequestAuthentication and validateJwtRule: the selector and
    targets, a jwksUri that is an http(s) URL (security.ParseJwksURI), JWKS text that parses,
    header names, a timeout as ValidateDuration. Stricter than istiod: every rule names an
    issuer (istiod takes a jwksUri alone), and no two rules the same one."""
    check_policy_targets(ra)
    issuers: set[str] = set()
    for i, rule in enumerate(ra.jwt_rules):
        here = f"jwtRules[{i}]"
        if not rule.issuer:
            raise fail(f"{here}.issuer", "is required")
        if rule.issuer in issuers:
            raise fail(f"{here}.issuer", f"{rule.issuer!r} is used by another rule")
        issuers.add(rule.issuer)
        if rule.jwks_uri:
            scheme = _URL_SCHEME.match(rule.jwks_uri)
            printable = rule.jwks_uri.isprintable()
            if scheme is None or scheme.group(1).lower() not in ("http", "https") or not printable:
                raise fail(f"{here}.jwksUri", f"{quoted(rule.jwks_uri)} is not an http or https URL")
        if rule.jwks:
            try:
                keys = json.loads(rule.jwks)
            except ValueError:
                raise fail(f"{here}.jwks", "is not JSON") from None
            if not isinstance(keys, dict) or not isinstance(keys.get("keys"), list):
                raise fail(f"{here}.jwks", "must be a JWKS: an object with a 'keys' list")
        for j, header in enumerate(rule.from_headers):
            if not header.name:
                raise fail(f"{here}.fromHeaders[{j}].name", "is required")
        lists = (("audiences", rule.audiences), ("fromParams", rule.from_params), ("fromCookies", rule.from_cookies))
        for name, values in lists:
            for j, value in enumerate(values):
                if not value:
                    raise fail(f"{here}.{name}[{j}]", "must not be empty")
        for j, claim in enumerate(rule.output_claim_to_headers):
            where = f"{here}.outputClaimToHeaders[{j}]"
            if not claim.claim or not claim.header:
                raise fail(where, "header and claim must be non-empty strings")
            if not _STRICT_HEADER_NAME.fullmatch(claim.header):
                raise fail(f"{where}.header", f"{quoted(claim.header)} is not a valid header name")
        if rule.HasField("timeout"):
            check_duration(f"{here}.timeout", rule.timeout)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)
