"""EnvoyFilter validation as istiod's (pkg/config/validation/envoyfilter ValidateEnvoyFilter):
each patch needs what it applies to, its operation and (but for REMOVE) a value that builds into
the Envoy message it patches; the match must be of the class of what it applies to; a filter
match names its filter, a sub-filter match only an HTTP filter of an HTTP connection manager.
What istiod warns about (and still admits) is in ``envoy_filter_warnings``, in istiod's order:
the general warning, an empty workload selector, then per patch (WAYPOINT ones skipped, as
istiod skips them) a proxy version too long to compile, a filter match that has no effect, a
deprecated filter name matched, a field the value's message does not define, and a filter
named without its ``typed_config``."""

from __future__ import annotations

import functools
import json

import re2
from google.protobuf.message import Message

from app.api.istio.networking.v1alpha3.envoy_filter_pb2 import EnvoyFilter
from app.config.envoy_filter_value import PatchValueError, patch_value
from app.config.validation.fields import check_workload_selector, fail

ApplyTo = EnvoyFilter.ApplyTo
Operation = EnvoyFilter.Patch.Operation
_LISTENER_CLASS = frozenset({ApplyTo.LISTENER, ApplyTo.FILTER_CHAIN, ApplyTo.NETWORK_FILTER, ApplyTo.HTTP_FILTER})
_ROUTE_CLASS = frozenset({ApplyTo.ROUTE_CONFIGURATION, ApplyTo.VIRTUAL_HOST, ApplyTo.HTTP_ROUTE})
_HCM_NAMES = frozenset({"envoy.filters.network.http_connection_manager", "envoy.http_connection_manager"})
_SUBFILTER_NEEDS_HCM = (
    "Envoy filter: subfilter match requires filter match with envoy.filters.network.http_connection_manager"
)
# what pilotfish does not patch (istiod does)
_NOT_APPLIED = {
    ApplyTo.EXTENSION_CONFIG: "pilotfish serves no extension configuration discovery",
    ApplyTo.BOOTSTRAP: "the bootstrap is the agent's",
}
MAX_PROXY_VERSION = 1024  # istiod maxProxyVersionLen (in bytes): a longer pattern is ignored, with a warning
# istiod xds.ReverseDeprecatedFilterNames: a deprecated filter name -> the name Envoy knows it by
# ("envoy.ext_authz" was the HTTP and the network filter's: istiod's reversed map keeps either)
DEPRECATED_FILTER_NAMES = {
    "envoy.buffer": "envoy.filters.http.buffer",
    "envoy.cors": "envoy.filters.http.cors",
    "envoy.csrf": "envoy.filters.http.csrf",
    "envoy.http_dynamo_filter": "envoy.filters.http.dynamo",
    "envoy.ext_authz": "envoy.filters.http.ext_authz",
    "envoy.fault": "envoy.filters.http.fault",
    "envoy.grpc_http1_bridge": "envoy.filters.http.grpc_http1_bridge",
    "envoy.grpc_json_transcoder": "envoy.filters.http.grpc_json_transcoder",
    "envoy.grpc_web": "envoy.filters.http.grpc_web",
    "envoy.gzip": "envoy.filters.http.gzip",
    "envoy.health_check": "envoy.filters.http.health_check",
    "envoy.ip_tagging": "envoy.filters.http.ip_tagging",
    "envoy.lua": "envoy.filters.http.lua",
    "envoy.rate_limit": "envoy.filters.http.ratelimit",
    "envoy.router": "envoy.filters.http.router",
    "envoy.squash": "envoy.filters.http.squash",
    "envoy.listener.http_inspector": "envoy.filters.listener.http_inspector",
    "envoy.listener.original_dst": "envoy.filters.listener.original_dst",
    "envoy.listener.original_src": "envoy.filters.listener.original_src",
    "envoy.listener.proxy_protocol": "envoy.filters.listener.proxy_protocol",
    "envoy.listener.tls_inspector": "envoy.filters.listener.tls_inspector",
    "envoy.client_ssl_auth": "envoy.filters.network.client_ssl_auth",
    "envoy.http_connection_manager": "envoy.filters.network.http_connection_manager",
    "envoy.mongo_proxy": "envoy.filters.network.mongo_proxy",
    "envoy.ratelimit": "envoy.filters.network.ratelimit",
    "envoy.redis_proxy": "envoy.filters.network.redis_proxy",
    "envoy.tcp_proxy": "envoy.filters.network.tcp_proxy",
}
# Go's regexp compiles what RE2 does; its errors name the problem in words of their own
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the error is the rejection, not a line on stderr
_GO_REGEXP_ERRORS = {
    "missing )": "missing closing )",
    "missing ]": "missing closing ]",
    "unexpected )": "unexpected )",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid named capture group": "invalid named capture",
}
GENERAL_WARNING = (
    "EnvoyFilter exposes internal implementation details that may change at any time. "
    "Prefer other APIs if possible, and exercise extreme caution, especially around upgrades."
)


def validate_envoy_filter(spec: EnvoyFilter, namespace: str) -> None:
    """istiod validateEnvoyFilter's errors, the first one raised (FieldError naming the field),
    after the rules of the CRD's schema the API server applies first."""
    _check_schema_rules(spec)
    if spec.HasField("workload_selector"):
        check_workload_selector("workloadSelector.labels", spec.workload_selector.labels)
    for i, cp in enumerate(spec.config_patches):
        path = f"configPatches[{i}]"
        if cp.HasField("match") and cp.match.context == EnvoyFilter.PatchContext.WAYPOINT:
            continue  # istiod does not validate waypoint patches yet
        if cp.apply_to == ApplyTo.INVALID:
            raise fail(f"{path}.applyTo", "Envoy filter: missing applyTo")
        if not cp.HasField("patch"):
            raise fail(f"{path}.patch", "Envoy filter: missing patch")
        if cp.patch.operation == Operation.INVALID:
            raise fail(f"{path}.patch.operation", "Envoy filter: missing patch operation")
        if cp.patch.operation != Operation.REMOVE and not cp.patch.HasField("value"):
            raise fail(f"{path}.patch.value", "Envoy filter: missing patch value for non-remove operation")
        version = _proxy_version(cp)
        if version and len(version.encode()) <= MAX_PROXY_VERSION:
            error = _regexp_error(version)
            if error:
                reason = f"Envoy filter: invalid regex for proxy version, [{error}]"
                raise fail(f"{path}.match.proxy.proxyVersion", reason)
        _check_match(path, cp)
        try:
            patch_value(cp.apply_to, cp.patch.value if cp.patch.HasField("value") else None)
        except PatchValueError as e:
            raise fail(f"{path}.patch.value", str(e)) from None


def _proxy_version(cp: EnvoyFilter.EnvoyConfigObjectPatch) -> str:
    return cp.match.proxy.proxy_version if cp.HasField("match") and cp.match.HasField("proxy") else ""


@functools.lru_cache(maxsize=256)
def _regexp_error(pattern: str) -> str:
    """Why Go's regexp.Compile refuses ``pattern``, in its words; "" when it compiles."""
    if _has_any_byte_escape(pattern):  # RE2's \C (any byte), which Go's syntax lacks
        return "error parsing regexp: invalid escape sequence: `\\C`"
    try:
        re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as e:
        text = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        code, _, arg = text.partition(": ")
        return f"error parsing regexp: {_GO_REGEXP_ERRORS.get(code, code)}: `{arg}`"
    return ""


def _has_any_byte_escape(pattern: str) -> bool:
    i = 0
    while (i := pattern.find("\\", i)) >= 0:
        escaped = pattern[i + 1 : i + 2]
        if escaped == "C":
            return True
        if escaped == "Q":  # a literal up to \E
            end = pattern.find("\\E", i + 2)
            if end < 0:
                return False
            i = end
        i += 2
    return False


def _check_schema_rules(spec: EnvoyFilter) -> None:
    """The CRD's x-kubernetes-validations (its CEL rules), which the API server applies before
    istiod's webhook sees the object and a file source must apply itself."""
    if spec.HasField("workload_selector") and len(spec.targetRefs):
        raise fail("", "only one of targetRefs or workloadSelector can be set")
    for i, ref in enumerate(spec.targetRefs):
        if ref.namespace:
            raise fail(f"targetRefs[{i}].namespace", "cross namespace referencing is not currently supported")
    for i, cp in enumerate(spec.config_patches):
        waypoint = cp.HasField("match") and cp.match.HasField("waypoint")
        if waypoint != (cp.match.context == EnvoyFilter.PatchContext.WAYPOINT):
            raise fail(f"configPatches[{i}].match", "only support waypointMatch when context is WAYPOINT")
        if waypoint and cp.match.waypoint.port_number > 65535:
            raise fail(f"configPatches[{i}].match.waypoint.portNumber", "port must be between 1-65535")


def _check_match(path: str, cp: EnvoyFilter.EnvoyConfigObjectPatch) -> None:
    """That applyTo, match and patch line up (istiod's switch on applyTo)."""
    match = cp.match
    kind = match.WhichOneof("object_types") if cp.HasField("match") else None
    if cp.apply_to in _LISTENER_CLASS and kind is not None:
        if kind != "listener":
            raise fail(
                f"{path}.match", "Envoy filter: applyTo for listener class objects cannot have non listener match"
            )
        chain = match.listener.filter_chain
        if match.listener.HasField("filter_chain") and chain.HasField("filter"):
            if not chain.filter.name:
                raise fail(
                    f"{path}.match.listener.filterChain.filter.name",
                    "Envoy filter: filter match has no name to match on",
                )
            if chain.filter.HasField("sub_filter"):
                where = f"{path}.match.listener.filterChain.filter.subFilter"
                if cp.apply_to != ApplyTo.HTTP_FILTER:
                    raise fail(where, "Envoy filter: subfilter match can be used with applyTo HTTP_FILTER only")
                if chain.filter.name not in _HCM_NAMES:
                    raise fail(
                        where,
                        _SUBFILTER_NEEDS_HCM,
                    )
                if not chain.filter.sub_filter.name:
                    raise fail(f"{where}.name", "Envoy filter: subfilter match has no name to match on")
    elif cp.apply_to in _ROUTE_CLASS and kind is not None and kind != "route_configuration":
        raise fail(
            f"{path}.match",
            "Envoy filter: applyTo for http route class objects cannot have non route configuration match",
        )
    elif cp.apply_to == ApplyTo.CLUSTER and kind is not None and kind != "cluster":
        raise fail(f"{path}.match", "Envoy filter: applyTo for cluster class objects cannot have non cluster match")


def envoy_filter_warnings(spec: EnvoyFilter) -> list[str]:
    """What istiod's validation warns about an admitted EnvoyFilter (and what pilotfish does
    not apply), in istiod's order."""
    out = [GENERAL_WARNING]
    if spec.HasField("workload_selector") and not spec.workload_selector.labels:
        out.append(
            "Envoy filter: workload selector specified without labels, will be applied to all services in namespace"
        )
    for i, cp in enumerate(spec.config_patches):
        path = f"configPatches[{i}]"
        if cp.HasField("match") and cp.match.context == EnvoyFilter.PatchContext.WAYPOINT:
            continue  # istiod validates no waypoint patch yet
        if cp.apply_to in _NOT_APPLIED:
            name = ApplyTo.Name(cp.apply_to)
            out.append(f"{path}.applyTo: {name}: accepted, not applied by pilotfish yet ({_NOT_APPLIED[cp.apply_to]})")
        if len(_proxy_version(cp).encode()) > MAX_PROXY_VERSION:
            out.append(
                f"{path}.match.proxy.proxyVersion: Envoy filter: proxyVersion match exceeds {MAX_PROXY_VERSION} "
                "characters and will be ignored"
            )
        listener = cp.match.listener if cp.HasField("match") and cp.match.HasField("listener") else None
        if cp.apply_to in _LISTENER_CLASS and listener is not None and listener.filter_chain.HasField("filter"):
            where = f"{path}.match.listener.filterChain.filter"
            chain_filter = listener.filter_chain.filter
            if cp.apply_to in (ApplyTo.LISTENER, ApplyTo.FILTER_CHAIN):
                out.append(
                    f"{where}: Envoy filter: filter match has no effect when used with {ApplyTo.Name(cp.apply_to)}"
                )
            for name, named in ((chain_filter.name, where), (chain_filter.sub_filter.name, f"{where}.subFilter")):
                if name in DEPRECATED_FILTER_NAMES:
                    out.append(
                        f"{named}.name: using deprecated filter name {_go_quoted(name)}; "
                        f"use {_go_quoted(DEPRECATED_FILTER_NAMES[name])} instead"
                    )
        value = cp.patch.value if cp.HasField("patch") and cp.patch.HasField("value") else None
        try:
            built = patch_value(cp.apply_to, value)
        except PatchValueError:
            continue  # refused: the object has no warnings to give
        if built is None:
            continue
        try:
            patch_value(cp.apply_to, value, strict=True)
        except PatchValueError as e:
            out.append(f"{path}.patch.value: {e}")
        # istiod also warns of an Any of a FROZEN (v2) type: none resolves (envoy_filter_value)
        missing = _named_without_typed_config(built)
        if missing:
            out.append(f"{path}.patch.value: using deprecated types by name without typed_config; {', '.join(missing)}")
    return out


def _named_without_typed_config(msg: Message) -> list[str]:
    """istiod recurseMissingTypedConfig: the ``name`` of each message that has a typedConfig field
    but sets neither it nor configDiscovery (Envoy's lookup of an extension by name alone is
    going away), in the message and the singular messages it sets."""
    name = ""
    found: list[str] = []
    takes_typed_config = has_typed_config = False
    fields = msg.DESCRIPTOR.fields
    for fd in fields:
        if fd.json_name == "name":
            name = str(getattr(msg, fd.name))
    set_fields = {fd.name: value for fd, value in msg.ListFields()}
    for fd in fields:
        is_set = fd.name in set_fields
        takes_typed_config = takes_typed_config or fd.json_name == "typedConfig"
        if is_set and fd.json_name in ("typedConfig", "configDiscovery"):
            has_typed_config = True
        if is_set and fd.message_type is not None and not fd.is_repeated:  # a list or map: not a message
            found += _named_without_typed_config(set_fields[fd.name])
    if takes_typed_config and not has_typed_config:
        found.append(name)
    return found


def _go_quoted(text: str) -> str:
    """``text`` as Go's %q writes it (near enough: JSON's escapes)."""
    return json.dumps(text, ensure_ascii=False)
