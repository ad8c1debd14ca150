"""EnvoyFilter validation as istiod's (pkg/config/validation/envoyfilter ValidateEnvoyFilter):
each patch needs what it applies to, its operation and (but for REMOVE) a value that builds into
the Envoy message it patches; the match must be of the class of what it applies to; a filter
match names its filter, a sub-filter match only an HTTP filter of an HTTP connection manager.
What istiod warns about (and still admits) is in ``envoy_filter_warnings``."""

from __future__ import annotations

import re2

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
MAX_PROXY_VERSION = 1024  # istiod maxProxyVersionLen: a longer pattern is ignored, with a warning
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
        version = cp.match.proxy.proxy_version if cp.HasField("match") and cp.match.HasField("proxy") else ""
        if version and len(version) <= MAX_PROXY_VERSION:
            try:
                re2.compile(version)
            except re2.error as e:
                reason = f"Envoy filter: invalid regex for proxy version, [{e}]"
                raise fail(f"{path}.match.proxy.proxyVersion", reason) from None
        _check_match(path, cp)
        try:
            patch_value(cp.apply_to, cp.patch.value if cp.patch.HasField("value") else None)
        except PatchValueError as e:
            raise fail(f"{path}.patch.value", str(e)) from None


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
    """What istiod's validation warns about an admitted EnvoyFilter."""
    out = [GENERAL_WARNING]
    if spec.HasField("workload_selector") and not spec.workload_selector.labels:
        out.append(
            "Envoy filter: workload selector specified without labels, will be applied to all services in namespace"
        )
    for i, cp in enumerate(spec.config_patches):
        path = f"configPatches[{i}]"
        if cp.apply_to in _NOT_APPLIED:
            name = ApplyTo.Name(cp.apply_to)
            out.append(f"{path}.applyTo: {name}: accepted, not applied by pilotfish yet ({_NOT_APPLIED[cp.apply_to]})")
        if (
            cp.HasField("match")
            and cp.match.HasField("proxy")
            and len(cp.match.proxy.proxy_version) > MAX_PROXY_VERSION
        ):
            out.append(
                f"{path}: Envoy filter: proxyVersion match exceeds {MAX_PROXY_VERSION} characters and will be ignored"
            )
        listener = cp.match.listener if cp.HasField("match") and cp.match.HasField("listener") else None
        chain_filter = listener is not None and listener.filter_chain.HasField("filter")
        if chain_filter and cp.apply_to in (ApplyTo.LISTENER, ApplyTo.FILTER_CHAIN):
            out.append(f"{path}: Envoy filter: filter match has no effect when used with {ApplyTo.Name(cp.apply_to)}")
        if cp.HasField("patch") and cp.patch.HasField("value"):
            try:
                patch_value(cp.apply_to, cp.patch.value, strict=True)
            except PatchValueError as e:
                out.append(f"{path}.patch.value: {e}")
    return out
