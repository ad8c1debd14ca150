"""AuthorizationPolicy's CUSTOM action: the mesh config's ext_authz extension providers, as
istiod's authz builder renders them (pilot/pkg/security/authz/builder/extauthz.go, builder.go).

Per provider a workload's CUSTOM policies name, two filters: an RBAC filter that only evaluates
(the policies are its shadow rules, with the stat prefix ``istio_ext_authz_``, so a matching
request leaves its policy name in the filter's dynamic metadata) and the ext_authz filter, which
calls the provider only when that metadata names one of the provider's policies (rule names
``istio-ext-authz-PROVIDER-ns[NS]-policy[NAME]-rule[I]``). Dry-run policies go to the RBAC
filter's enforced rules under the same names, as istiod puts them (they too make ext_authz call).

A provider that cannot be used (not defined, invalid, its service unknown) and more than one
provider on a workload without PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS give RBAC filters
that deny what the policies match (names suffixed ``-deny-due-to-bad-CUSTOM-action``). On TCP
chains only a gRPC provider applies (an HTTP one adds nothing there).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envoy.config.core.v3 import base_pb2, config_source_pb2, grpc_service_pb2, http_uri_pb2
from envoy.config.listener.v3 import listener_components_pb2 as lc
from envoy.config.rbac.v3 import rbac_pb2
from envoy.extensions.filters.http.ext_authz.v3 import ext_authz_pb2 as http_ext_authz_pb2
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2 as http_rbac_pb2
from envoy.extensions.filters.network.ext_authz.v3 import ext_authz_pb2 as network_ext_authz_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.filters.network.rbac.v3 import rbac_pb2 as network_rbac_pb2
from envoy.type.matcher.v3 import metadata_pb2, string_pb2, value_pb2
from envoy.type.v3 import http_status_pb2
from google.protobuf import duration_pb2

from app.api.mesh import MeshConfig
from app.config.go_strconv import go_int
from app.config.objects import ConfigObject
from app.model.service import Service
from app.translate.listener.authz import HTTP_RBAC, NETWORK_RBAC, TCP_STAT_PREFIX, action_rules
from app.translate.listener.filters import pack
from app.translate.listener.lookup import lookup_cluster

HTTP_EXT_AUTHZ = "envoy.filters.http.ext_authz"
NETWORK_EXT_AUTHZ = "envoy.filters.network.ext_authz"
EXT_AUTHZ_PREFIX = "istio-ext-authz"
BAD_SUFFIX = "-deny-due-to-bad-CUSTOM-action"
SHADOW_STAT_PREFIX = "istio_ext_authz_"
# where the RBAC filter leaves the name of the shadow policy a request matched
_EFFECTIVE_POLICY_KEY = SHADOW_STAT_PREFIX + "shadow_effective_policy_id"
_DEFAULT_TIMEOUT = duration_pb2.Duration(seconds=600)
_PROVIDER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_V3 = config_source_pb2.ApiVersion.V3
_STATUS_CODES = frozenset(http_status_pb2.StatusCode.values())

_Provider = MeshConfig.ExtensionProvider
_HttpProvider = _Provider.EnvoyExternalAuthorizationHttpProvider
_GrpcProvider = _Provider.EnvoyExternalAuthorizationGrpcProvider
_EXT_AUTHZ_KINDS = ("envoy_ext_authz_http", "envoy_ext_authz_grpc")


@dataclass(frozen=True, slots=True)
class ResolvedProvider:
    """One provider a workload's CUSTOM policies name: the mesh config's provider and the
    service it calls, or why it cannot be used. Resolved at every push (cheap: lookups); its
    filters are built only when the listeners are."""

    name: str
    provider: _Provider | None = None  # None: not usable (``error``)
    hostname: str = ""
    cluster: str = ""
    error: str = ""

    @property
    def http(self) -> http_ext_authz_pb2.ExtAuthz | None:
        """The HTTP ext_authz filter's config; None for a provider that cannot be used."""
        if self.provider is None:
            return None
        if self.provider.WhichOneof("provider") == "envoy_ext_authz_http":
            config = self.provider.envoy_ext_authz_http
            status, _ = _status_on_error(config.status_on_error)
            return _http_config(self.hostname, self.cluster, status, config, self.name)
        return self._grpc()[0]

    @property
    def tcp(self) -> network_ext_authz_pb2.ExtAuthz | None:
        """The network ext_authz filter's config: a gRPC provider's only."""
        if self.provider is None or self.provider.WhichOneof("provider") != "envoy_ext_authz_grpc":
            return None
        return self._grpc()[1]

    def _grpc(self) -> tuple[http_ext_authz_pb2.ExtAuthz, network_ext_authz_pb2.ExtAuthz]:
        assert self.provider is not None
        config = self.provider.envoy_ext_authz_grpc
        status, _ = _status_on_error(config.status_on_error)
        return _grpc_config(self.hostname, self.cluster, status, config, self.name)


@dataclass(frozen=True, slots=True)
class CustomAuthz:
    """A workload's CUSTOM policies and the providers they name, resolved (compared by value
    between snapshots: the listeners built from it are reused while it holds)."""

    policies: tuple[ConfigObject, ...] = ()
    providers: tuple[ResolvedProvider, ...] = ()
    multiple_providers: bool = False  # PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS


NO_CUSTOM = CustomAuthz()


def resolve_custom(
    mesh: MeshConfig,
    policies: Sequence[ConfigObject],
    by_hostname: Mapping[str, Mapping[str, Service]],
    multiple_providers: bool,
) -> CustomAuthz:
    """The providers ``policies`` name, resolved against the mesh config's extension providers
    (one per name, as the mesh config merges them) and the services (istiod
    processExtensionProvider and getExtAuthz)."""
    if not policies:
        return NO_CUSTOM
    defined = {provider.name: provider for provider in mesh.extension_providers}
    names = sorted({obj.spec.provider.name for obj in policies})
    resolved = tuple(_resolve(name, defined, by_hostname) for name in names)
    return CustomAuthz(tuple(policies), resolved, multiple_providers)


def _resolve(
    name: str, defined: Mapping[str, _Provider], by_hostname: Mapping[str, Mapping[str, Service]]
) -> ResolvedProvider:
    provider = defined.get(name)
    if provider is None or provider.WhichOneof("provider") not in _EXT_AUTHZ_KINDS:
        return ResolvedProvider(name, error=f"extension provider {name!r} is not defined as an ext_authz provider")
    errors = []
    if not _PROVIDER_NAME.fullmatch(name):
        errors.append(f"invalid provider name {name!r}: lowercase letters, digits and '-', at most 63")
    http = provider.envoy_ext_authz_http if provider.WhichOneof("provider") == "envoy_ext_authz_http" else None
    config = http if http is not None else provider.envoy_ext_authz_grpc
    if not 1 <= config.port <= 65535:
        errors.append(f"port must be in the range [1, 65535], found: {config.port}")
    hostname, cluster, error = lookup_cluster(config.service, config.port, by_hostname)
    if error:
        errors.append(error)
    _, error = _status_on_error(config.status_on_error)
    if error:
        errors.append(error)
    if http is not None:
        errors.extend(_http_errors(http))
    if errors:
        return ResolvedProvider(name, error=f"failed to parse extension provider {name!r}: {'; '.join(errors)}")
    return ResolvedProvider(name, provider, hostname, cluster)


def _status_on_error(text: str) -> tuple[http_status_pb2.HttpStatus | None, str]:
    if not text:
        return None, ""
    code = go_int(text)
    if code is None:
        return None, f"invalid statusOnError {text!r}"
    if code not in _STATUS_CODES:
        return None, f"unsupported statusOnError {text}"
    return http_status_pb2.HttpStatus(code=code), ""


def _http_errors(http: _HttpProvider) -> list[str]:
    errors = []
    if http.path_prefix and not http.path_prefix.startswith("/"):
        errors.append(f"pathPrefix must begin with `/`, found: {http.path_prefix!r}")
    for field, values in (
        ("IncludeRequestHeadersInCheck", http.include_request_headers_in_check),
        ("IncludeHeadersInCheck", http.include_headers_in_check),
        ("HeadersToDownstreamOnDeny", http.headers_to_downstream_on_deny),
        ("HeadersToDownstreamOnAllow", http.headers_to_downstream_on_allow),
        ("HeadersToUpstreamOnAllow", http.headers_to_upstream_on_allow),
    ):
        if "*" in values:
            errors.append(f'a single wildcard ("*") is not supported, use a prefix or suffix match: {field}')
    return errors


def _headers(headers: Sequence[str]) -> string_pb2.ListStringMatcher | None:
    """generateHeaders: ``*x`` a suffix, ``x*`` a prefix, else exact; case ignored."""
    if not headers:
        return None
    patterns = []
    for header in headers:
        if header.startswith("*"):
            patterns.append(string_pb2.StringMatcher(suffix=header[1:], ignore_case=True))
        elif header.endswith("*"):
            patterns.append(string_pb2.StringMatcher(prefix=header[:-1], ignore_case=True))
        else:
            patterns.append(string_pb2.StringMatcher(exact=header, ignore_case=True))
    return string_pb2.ListStringMatcher(patterns=patterns)


def _enabled_by(filter_name: str, provider: str) -> metadata_pb2.MetadataMatcher:
    """generateFilterMatcherForProvider: the RBAC filter matched one of this provider's policies."""
    return metadata_pb2.MetadataMatcher(
        filter=filter_name,
        path=[metadata_pb2.MetadataMatcher.PathSegment(key=_EFFECTIVE_POLICY_KEY)],
        value=value_pb2.ValueMatcher(string_match=string_pb2.StringMatcher(prefix=f"{EXT_AUTHZ_PREFIX}-{provider}")),
    )


def _with_body(config: _Provider.EnvoyExternalAuthorizationRequestBody) -> http_ext_authz_pb2.BufferSettings:
    return http_ext_authz_pb2.BufferSettings(
        max_request_bytes=config.max_request_bytes,
        allow_partial_message=config.allow_partial_message,
        pack_as_bytes=config.pack_as_bytes,
    )


def _timeout(config: _HttpProvider | _GrpcProvider) -> duration_pb2.Duration:
    return config.timeout if config.HasField("timeout") else _DEFAULT_TIMEOUT


def _http_config(
    hostname: str,
    cluster: str,
    status: http_status_pb2.HttpStatus | None,
    config: _HttpProvider,
    provider: str,
) -> http_ext_authz_pb2.ExtAuthz:
    """generateHTTPConfig."""
    service = http_ext_authz_pb2.HttpService(
        path_prefix=config.path_prefix,
        # the uri is required and never used: the cluster is where the check goes
        server_uri=http_uri_pb2.HttpUri(uri=f"http://{hostname}", cluster=cluster, timeout=_timeout(config)),
    )
    additional = config.include_additional_headers_in_check
    if additional:
        service.authorization_request.headers_to_add.extend(
            base_pb2.HeaderValue(key=k, value=additional[k]) for k in sorted(additional)
        )
    upstream, on_deny, on_allow = (
        config.headers_to_upstream_on_allow,
        config.headers_to_downstream_on_deny,
        config.headers_to_downstream_on_allow,
    )
    if upstream or on_deny or on_allow:
        response = service.authorization_response
        response.SetInParent()
        for field, headers in (
            ("allowed_upstream_headers", upstream),
            ("allowed_client_headers", on_deny),
            ("allowed_client_headers_on_success", on_allow),
        ):
            if (matcher := _headers(headers)) is not None:
                getattr(response, field).CopyFrom(matcher)
    out = http_ext_authz_pb2.ExtAuthz(
        failure_mode_allow=config.fail_open,
        transport_api_version=_V3,
        http_service=service,
        filter_enabled_metadata=_enabled_by(HTTP_RBAC, provider),
    )
    if status is not None:
        out.status_on_error.CopyFrom(status)
    if config.HasField("include_request_body_in_check"):
        out.with_request_body.CopyFrom(_with_body(config.include_request_body_in_check))
    # IncludeHeadersInCheck is the deprecated name, read only when the new one is unset
    allowed = _headers(config.include_request_headers_in_check) or _headers(config.include_headers_in_check)
    if allowed is not None:
        out.allowed_headers.CopyFrom(allowed)
    return out


def _grpc_config(
    hostname: str,
    cluster: str,
    status: http_status_pb2.HttpStatus | None,
    config: _GrpcProvider,
    provider: str,
) -> tuple[http_ext_authz_pb2.ExtAuthz, network_ext_authz_pb2.ExtAuthz]:
    """generateGRPCConfig: the HTTP filter and the network filter."""
    grpc = grpc_service_pb2.GrpcService(
        envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=cluster, authority=hostname),
        timeout=_timeout(config),
    )
    http = http_ext_authz_pb2.ExtAuthz(
        failure_mode_allow=config.fail_open,
        grpc_service=grpc,
        filter_enabled_metadata=_enabled_by(HTTP_RBAC, provider),
        transport_api_version=_V3,
    )
    if status is not None:
        http.status_on_error.CopyFrom(status)
    if config.HasField("include_request_body_in_check"):
        http.with_request_body.CopyFrom(_with_body(config.include_request_body_in_check))
    tcp = network_ext_authz_pb2.ExtAuthz(
        stat_prefix=TCP_STAT_PREFIX,
        failure_mode_allow=config.fail_open,
        transport_api_version=_V3,
        grpc_service=grpc,
        filter_enabled_metadata=_enabled_by(NETWORK_RBAC, provider),
    )
    return http, tcp


def _by_provider(custom: CustomAuthz, tcp: bool) -> list[tuple[ResolvedProvider, rbac_pb2.RBAC, rbac_pb2.RBAC | None]]:
    """Per provider: (its resolution, the enforced policies' rules, the dry-run ones' or None)."""
    out = []
    for provider in custom.providers:
        policies = [obj for obj in custom.policies if obj.spec.provider.name == provider.name]
        enforce, dry_run = action_rules(policies, rbac_pb2.RBAC.DENY, tcp, f"{EXT_AUTHZ_PREFIX}-{provider.name}-")
        out.append((provider, enforce or rbac_pb2.RBAC(action=rbac_pb2.RBAC.DENY), dry_run))
    return out


def _bad(rules: rbac_pb2.RBAC) -> rbac_pb2.RBAC:
    """getBadCustomDenyRules: deny what the enforced policies match."""
    out = rbac_pb2.RBAC(action=rbac_pb2.RBAC.DENY)
    for name, policy in rules.policies.items():
        out.policies[name + BAD_SUFFIX].CopyFrom(policy)
    return out


def _usable(custom: CustomAuthz, provider: ResolvedProvider) -> bool:
    return not provider.error and (custom.multiple_providers or len(custom.providers) == 1)


def custom_http_filters(custom: CustomAuthz) -> list[hcm_pb2.HttpFilter]:
    """The CUSTOM filters of a workload's HTTP chains, first among its HTTP filters."""
    out = []
    for provider, rules, dry_run in _by_provider(custom, tcp=False):
        ext_authz = provider.http if _usable(custom, provider) else None
        if ext_authz is None:
            out.append(hcm_pb2.HttpFilter(name=HTTP_RBAC, typed_config=pack(http_rbac_pb2.RBAC(rules=_bad(rules)))))
            continue
        rbac = http_rbac_pb2.RBAC(shadow_rules=rules, shadow_rules_stat_prefix=SHADOW_STAT_PREFIX)
        if dry_run is not None and len(dry_run.policies):
            rbac.rules.CopyFrom(dry_run)
        out.append(hcm_pb2.HttpFilter(name=HTTP_RBAC, typed_config=pack(rbac)))
        out.append(hcm_pb2.HttpFilter(name=HTTP_EXT_AUTHZ, typed_config=pack(ext_authz)))
    return out


def custom_network_filters(custom: CustomAuthz) -> list[lc.Filter]:
    """The CUSTOM filters of a workload's TCP chains, first among its network filters; an HTTP
    provider has none there."""
    out = []
    for provider, rules, dry_run in _by_provider(custom, tcp=True):
        if not _usable(custom, provider):
            bad = network_rbac_pb2.RBAC(rules=_bad(rules), stat_prefix=TCP_STAT_PREFIX)
            out.append(lc.Filter(name=NETWORK_RBAC, typed_config=pack(bad)))
            continue
        ext_authz = provider.tcp
        if ext_authz is None:
            continue
        rbac = network_rbac_pb2.RBAC(
            shadow_rules=rules, stat_prefix=TCP_STAT_PREFIX, shadow_rules_stat_prefix=SHADOW_STAT_PREFIX
        )
        if dry_run is not None and len(dry_run.policies):
            rbac.rules.CopyFrom(dry_run)
        out.append(lc.Filter(name=NETWORK_RBAC, typed_config=pack(rbac)))
        out.append(lc.Filter(name=NETWORK_EXT_AUTHZ, typed_config=pack(ext_authz)))
    return out
