"""EnvoyFilter validation as istiod's (pkg/config/validation/envoyfilter ValidateEnvoyFilter), error
for error and warning for warning, and a patch value read as istiod reads it (pkg/config/xds
BuildXDSObjectFromStruct: the Struct through jsonpb into the Envoy message its applyTo names).

Each case names what istiod says of it; ``test_istioctl_validate_gives_the_same_verdicts`` asks
the pinned ``istioctl validate`` (the same validation, offline) about every case and holds
pilotfish to its verdict, its warnings and, but for the words of a JSON decoder, its errors.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import struct_pb2

from app.api.istio.networking.v1alpha3.envoy_filter_pb2 import EnvoyFilter
from app.config.envoy_filter_value import PatchValueError, message_class, patch_value
from app.config.loader import load_documents
from app.config.validation.envoy_filter import GENERAL_WARNING
from app.config.validation.spec import istio_warnings, object_warnings
from app.webhook.admission import review
from tests.support.peers import peer_binary

HCM = "envoy.filters.network.http_connection_manager"
LUA_TYPE = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"
HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
LUA = {"@type": LUA_TYPE, "inlineCode": "function envoy_on_request(h) end"}
VALUE = "configPatches[0].patch.value"
VERSION = "configPatches[0].match.proxy.proxyVersion"
BAD_REGEX = "Envoy filter: invalid regex for proxy version, [error parsing regexp: "
UNKNOWN_TYPE = "referenced type unknown: Envoy filter: could not resolve Any message type: type.googleapis.com/"
BUFFER_LIMIT = "per_connection_buffer_limit_bytes"
FILTER = "configPatches[0].match.listener.filterChain.filter"


def patch(apply_to: str, operation: str = "ADD", value: Any = None, match: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"applyTo": apply_to, "patch": {"operation": operation}}
    if value is not None:
        out["patch"]["value"] = value
    if match is not None:
        out["match"] = match
    return out


def listener(filter_match: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"listener": {"filterChain": {"filter": filter_match} if filter_match is not None else {}}}


def one(cp: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {**spec, "configPatches": [cp]}


def doc(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": name, "namespace": "default"}
    return {"apiVersion": "networking.istio.io/v1alpha3", "kind": "EnvoyFilter", "metadata": meta, "spec": spec}


# name -> (spec, what istiod says: the refusal's (field, reason), or the warnings after its general one)
Verdict = tuple[str, str] | list[str]
CASES: dict[str, tuple[dict[str, Any], Verdict]] = {
    # --- accepted as they are
    "lua": (
        one(
            patch(
                "HTTP_FILTER",
                "INSERT_BEFORE",
                {"name": "envoy.filters.http.lua", "typed_config": LUA},
                listener({"name": HCM, "subFilter": {"name": "envoy.filters.http.router"}}),
            )
        ),
        [],
    ),
    "remove-needs-no-value": (one(patch("CLUSTER", "REMOVE")), []),
    "an-empty-value": (one(patch("CLUSTER", "MERGE", {})), []),
    "proxy-version": (one(patch("CLUSTER", "REMOVE", match={"proxy": {"proxyVersion": r"^1\.2.*"}})), []),
    "an-enum-by-number": (one(patch("CLUSTER", "ADD", {"name": "x", "type": 1})), []),
    "an-integer-as-a-string": (one(patch("CLUSTER", "ADD", {"name": "x", BUFFER_LIMIT: "1024"})), []),
    # jsonpb: Go's durations, the last declared member of a oneof, null in a list its zero value,
    # a field by its proto and its JSON name (the JSON one wins)
    "go-durations": (one(patch("CLUSTER", "ADD", {"connect_timeout": "1h30m", "dns_refresh_rate": "0"})), []),
    "a-oneof-set-twice": (
        one(patch("HTTP_ROUTE", "MERGE", {"route": {"cluster": "a"}, "redirect": {"host_redirect": "b"}})),
        [],
    ),
    "null-in-a-list": (one(patch("LISTENER", "ADD", {"name": "x", "filter_chains": [None]})), []),
    "both-names-of-a-field": (one(patch("CLUSTER", "ADD", {"alt_stat_name": "a", "altStatName": "b"})), []),
    # "@type" where no Any is: data (a Struct's), or under a field ignored
    "a-type-in-a-struct": (
        one(
            patch(
                "HTTP_FILTER",
                "INSERT_FIRST",
                {
                    "name": "x",
                    "typed_config": {
                        "@type": "type.googleapis.com/udpa.type.v1.TypedStruct",
                        "type_url": "t",
                        "value": {"@type": "nope"},
                    },
                },
            )
        ),
        [],
    ),
    "the-istio-proxy-s-stats-config": (
        one(
            patch(
                "HTTP_FILTER",
                "MERGE",
                {
                    "typed_config": {
                        "@type": "type.googleapis.com/stats.PluginConfig",
                        "metrics": [{"name": "requests_total"}],
                    }
                },
            )
        ),
        [],
    ),
    "a-waypoint-patch-is-not-validated": (
        one(patch("HTTP_FILTER", "ADD", {"name": 5, "bogus": 1}, {"context": "WAYPOINT", "waypoint": {}})),
        [],
    ),
    # --- refused
    "missing-apply-to": (
        {"configPatches": [{"patch": {"operation": "ADD", "value": {"name": "x"}}}]},
        ("configPatches[0].applyTo", "Envoy filter: missing applyTo"),
    ),
    "missing-patch": (
        {"configPatches": [{"applyTo": "CLUSTER"}]},
        ("configPatches[0].patch", "Envoy filter: missing patch"),
    ),
    "missing-operation": (
        {"configPatches": [{"applyTo": "CLUSTER", "patch": {"value": {"name": "x"}}}]},
        ("configPatches[0].patch.operation", "Envoy filter: missing patch operation"),
    ),
    "missing-value": (
        one(patch("CLUSTER", "ADD")),
        (VALUE, "Envoy filter: missing patch value for non-remove operation"),
    ),
    "a-proxy-version-go-does-not-compile": (
        one(patch("CLUSTER", "REMOVE", match={"proxy": {"proxyVersion": "1.2("}})),
        (VERSION, f"{BAD_REGEX}missing closing ): `1.2(`]"),
    ),
    "a-perl-lookahead": (
        one(patch("CLUSTER", "REMOVE", match={"proxy": {"proxyVersion": "a(?=b)"}})),
        (VERSION, f"{BAD_REGEX}invalid or unsupported Perl syntax: `(?=`]"),
    ),
    "re2-s-any-byte-go-lacks": (
        one(patch("CLUSTER", "REMOVE", match={"proxy": {"proxyVersion": r"1\C"}})),
        (VERSION, f"{BAD_REGEX}invalid escape sequence: `\\C`]"),
    ),
    "a-listener-patch-matching-a-cluster": (
        one(patch("LISTENER", "REMOVE", match={"cluster": {"name": "x"}})),
        ("configPatches[0].match", "Envoy filter: applyTo for listener class objects cannot have non listener match"),
    ),
    "a-route-patch-matching-a-listener": (
        one(patch("VIRTUAL_HOST", "REMOVE", match=listener())),
        (
            "configPatches[0].match",
            "Envoy filter: applyTo for http route class objects cannot have non route configuration match",
        ),
    ),
    "a-cluster-patch-matching-a-route": (
        one(patch("CLUSTER", "REMOVE", match={"routeConfiguration": {"name": "x"}})),
        ("configPatches[0].match", "Envoy filter: applyTo for cluster class objects cannot have non cluster match"),
    ),
    "a-filter-match-without-a-name": (
        one(patch("NETWORK_FILTER", "REMOVE", match=listener({"name": ""}))),
        (f"{FILTER}.name", "Envoy filter: filter match has no name to match on"),
    ),
    "a-subfilter-match-not-of-an-http-filter": (
        one(patch("NETWORK_FILTER", "REMOVE", match=listener({"name": HCM, "subFilter": {"name": "x"}}))),
        (f"{FILTER}.subFilter", "Envoy filter: subfilter match can be used with applyTo HTTP_FILTER only"),
    ),
    "a-subfilter-match-not-in-the-hcm": (
        one(patch("HTTP_FILTER", "REMOVE", match=listener({"name": "tcp", "subFilter": {"name": "x"}}))),
        (f"{FILTER}.subFilter", f"Envoy filter: subfilter match requires filter match with {HCM}"),
    ),
    "a-subfilter-match-without-a-name": (
        one(patch("HTTP_FILTER", "REMOVE", match=listener({"name": HCM, "subFilter": {}}))),
        (f"{FILTER}.subFilter.name", "Envoy filter: subfilter match has no name to match on"),
    ),
    "a-wildcard-in-the-selector": (
        one(patch("CLUSTER", "REMOVE"), workloadSelector={"labels": {"app": "a*"}}),
        ("workloadSelector.labels.app", "wildcard is not supported in selector: 'app=a*'"),
    ),
    "an-unknown-type": (
        one(patch("HTTP_FILTER", "ADD", {"name": "x", "typed_config": {"@type": "type.googleapis.com/foo.Bar"}})),
        (VALUE, f"{UNKNOWN_TYPE}foo.Bar"),
    ),
    "a-v2-type": (
        one(
            patch(
                "HTTP_FILTER",
                "INSERT_FIRST",
                {
                    "name": "x",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.config.filter.http.lua.v2.Lua",
                        "inline_code": "x",
                    },
                },
            )
        ),
        (
            VALUE,
            "referenced type unknown (hint: try using the v3 XDS API): Envoy filter: could not resolve Any "
            "message type: type.googleapis.com/envoy.config.filter.http.lua.v2.Lua",
        ),
    ),
    "a-frozen-type": (
        one(
            patch(
                "HTTP_FILTER",
                "INSERT_FIRST",
                {
                    "name": "x",
                    "typed_config": {"@type": "type.googleapis.com/envoy.type.matcher.StringMatcher", "exact": "a"},
                },
            )
        ),
        (VALUE, f"{UNKNOWN_TYPE}envoy.type.matcher.StringMatcher"),
    ),
    "an-unknown-type-in-an-any": (
        one(
            patch(
                "NETWORK_FILTER",
                "INSERT_FIRST",
                {
                    "name": HCM,
                    "typed_config": {
                        "@type": HCM_TYPE,
                        "http_filters": [{"name": "x", "typed_config": {"@type": "nope.Nope"}}],
                    },
                },
            )
        ),
        (
            VALUE,
            f"referenced type unknown: Envoy filter: can't unmarshal Any nested proto {HCM_TYPE}: could not "
            "resolve Any message type: nope.Nope",
        ),
    ),
    "an-any-without-a-type": (
        one(patch("HTTP_FILTER", "INSERT_FIRST", {"name": "x", "typed_config": {"inline_code": "x"}})),
        (VALUE, "Envoy filter: Any JSON doesn't have '@type'"),
    ),
    "an-any-of-a-well-known-type-without-its-value": (
        one(patch("HTTP_FILTER", "ADD", {"name": "x", "typed_config": {"@type": "google.protobuf.Struct"}})),
        (VALUE, "Envoy filter: Any JSON doesn't have 'value'"),
    ),
    "an-unknown-enum-name": (
        one(patch("CLUSTER", "ADD", {"name": "x", "type": "BOGUS"})),
        (VALUE, 'Envoy filter: unknown value "\\"BOGUS\\"" for enum envoy.config.cluster.v3.Cluster.DiscoveryType'),
    ),
    "a-duration-go-does-not-read": (
        one(patch("CLUSTER", "ADD", {"name": "x", "connect_timeout": "soon"})),
        (VALUE, 'Envoy filter: bad Duration: time: invalid duration "soon"'),
    ),
    # the JSON decoder's words are json_format's (jsonpb: "json: cannot unmarshal ...")
    "a-number-for-a-string": (one(patch("CLUSTER", "ADD", {"name": 80})), (VALUE, "")),
    "a-fraction-for-an-integer": (one(patch("CLUSTER", "ADD", {BUFFER_LIMIT: 1.5})), (VALUE, "")),
    "a-negative-unsigned": (one(patch("CLUSTER", "ADD", {BUFFER_LIMIT: -1})), (VALUE, "")),
    "a-string-for-a-bool": (one(patch("CLUSTER", "ADD", {"name": "x", "respect_dns_ttl": "true"})), (VALUE, "")),
    # --- accepted with istiod's warnings
    "a-selector-without-labels": (
        one(patch("CLUSTER", "REMOVE"), workloadSelector={}),
        ["Envoy filter: workload selector specified without labels, will be applied to all services in namespace"],
    ),
    "a-proxy-version-too-long-to-compile": (
        one(patch("CLUSTER", "REMOVE", match={"proxy": {"proxyVersion": "(" * 1025}})),
        [
            "configPatches[0].match.proxy.proxyVersion: Envoy filter: proxyVersion match exceeds 1024 characters and "
            "will be ignored"
        ],
    ),
    "a-filter-match-on-a-listener-patch": (
        one(patch("LISTENER", "REMOVE", match=listener({"name": HCM}))),
        [f"{FILTER}: Envoy filter: filter match has no effect when used with LISTENER"],
    ),
    "deprecated-filter-names": (
        one(
            patch(
                "HTTP_FILTER",
                "REMOVE",
                match=listener({"name": "envoy.http_connection_manager", "subFilter": {"name": "envoy.router"}}),
            )
        ),
        [
            f'{FILTER}.name: using deprecated filter name "envoy.http_connection_manager"; use "{HCM}" instead',
            f'{FILTER}.subFilter.name: using deprecated filter name "envoy.router"; use "envoy.filters.http.router" '
            "instead",
        ],
    ),
    "an-unknown-field": (
        one(patch("CLUSTER", "ADD", {"name": "x", "bogus": {"@type": "type.googleapis.com/nope.X"}})),
        [f'{VALUE}: Envoy filter: unknown field "bogus" in envoy.config.cluster.v3.Cluster'],
    ),
    "an-unknown-field-in-an-any": (
        one(patch("HTTP_FILTER", "INSERT_FIRST", {"name": "x", "typed_config": {**LUA, "bogus": 2}})),
        [
            f'{VALUE}: Envoy filter: can\'t unmarshal Any nested proto {LUA_TYPE}: unknown field "bogus" in '
            "envoy.extensions.filters.http.lua.v3.Lua"
        ],
    ),
    "an-extension-key": (
        one(patch("CLUSTER", "ADD", {"name": "x", "[foo.bar]": 1})),
        [f'{VALUE}: Envoy filter: unknown field "[foo.bar]" in envoy.config.cluster.v3.Cluster'],
    ),
    "a-filter-named-without-its-typed-config": (
        one(patch("HTTP_FILTER", "INSERT_FIRST", {"name": "envoy.filters.http.cors"})),
        [f"{VALUE}: using deprecated types by name without typed_config; envoy.filters.http.cors"],
    ),
    "a-transport-socket-named-without-its-typed-config": (
        one(patch("CLUSTER", "ADD", {"name": "x", "transport_socket": {"name": "envoy.transport_sockets.tls"}})),
        [f"{VALUE}: using deprecated types by name without typed_config; envoy.transport_sockets.tls"],
    ),
    "warnings-in-istiod-s-order": (
        {
            "workloadSelector": {},
            "configPatches": [
                patch("LISTENER", "MERGE", {"bogus": 1}, listener({"name": "envoy.tcp_proxy"})),
                patch("CLUSTER", "REMOVE", match={"proxy": {"proxyVersion": "x" * 1025}}),
            ],
        },
        [
            "Envoy filter: workload selector specified without labels, will be applied to all services in namespace",
            f"{FILTER}: Envoy filter: filter match has no effect when used with LISTENER",
            f'{FILTER}.name: using deprecated filter name "envoy.tcp_proxy"; use "envoy.filters.network.tcp_proxy" '
            "instead",
            f'{VALUE}: Envoy filter: unknown field "bogus" in envoy.config.listener.v3.Listener',
            "configPatches[1].match.proxy.proxyVersion: Envoy filter: proxyVersion match exceeds 1024 characters and "
            "will be ignored",
        ],
    ),
}


def judged(name: str, spec: dict[str, Any]) -> tuple[tuple[str, str] | None, list[str]]:
    """The file source's refusal (field, reason), or None and the object's warnings."""
    result = load_documents(yaml.safe_dump(doc(name, spec)), f"{name}.yaml", strict=False)
    if result.rejected:
        [rejected] = result.rejected
        return (rejected.error.field, rejected.error.reason), []
    [obj] = result.objects
    return None, object_warnings(obj)


@pytest.mark.parametrize("name", CASES)
def test_istiod_s_verdict_error_for_error_and_warning_for_warning(name: str) -> None:
    spec, want = CASES[name]
    refusal, warnings = judged(name, spec)
    if isinstance(want, tuple):
        assert refusal is not None, warnings
        assert refusal[0] == want[0] and (not want[1] or refusal[1] == want[1]), refusal
        assert refusal[1].startswith(("Envoy filter: ", "referenced type unknown", "wildcard")), refusal
    else:
        assert refusal is None, refusal
        assert warnings == [GENERAL_WARNING, *want]


def test_the_webhook_answers_with_the_warnings_kubectl_prints() -> None:
    spec, want = CASES["deprecated-filter-names"]
    request = {"uid": "u", "operation": "CREATE", "namespace": "default", "object": doc("names", spec)}
    answer = review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})["response"]
    assert answer["allowed"] is True and answer["warnings"] == [GENERAL_WARNING, *want]


# --- the patch value ------------------------------------------------------------------------


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


def test_a_lua_http_filter_is_an_http_filter_with_its_typed_config() -> None:
    built = patch_value(EnvoyFilter.HTTP_FILTER, struct({"name": "envoy.filters.http.lua", "typed_config": LUA}))
    assert built is not None and built.DESCRIPTOR.full_name == (
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter"
    )
    assert built.name == "envoy.filters.http.lua"  # type: ignore[attr-defined]
    typed = built.typed_config  # type: ignore[attr-defined]
    assert typed.type_url == LUA_TYPE
    lua = message_class("envoy.extensions.filters.http.lua.v3.Lua")
    assert lua is not None and lua.FromString(typed.value).inline_code == LUA["inlineCode"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("apply_to", "full_name"),
    [
        (EnvoyFilter.CLUSTER, "envoy.config.cluster.v3.Cluster"),
        (EnvoyFilter.LISTENER, "envoy.config.listener.v3.Listener"),
        (EnvoyFilter.ROUTE_CONFIGURATION, "envoy.config.route.v3.RouteConfiguration"),
        (EnvoyFilter.FILTER_CHAIN, "envoy.config.listener.v3.FilterChain"),
        (EnvoyFilter.HTTP_FILTER, "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter"),
        (EnvoyFilter.NETWORK_FILTER, "envoy.config.listener.v3.Filter"),
        (EnvoyFilter.VIRTUAL_HOST, "envoy.config.route.v3.VirtualHost"),
        (EnvoyFilter.HTTP_ROUTE, "envoy.config.route.v3.Route"),
        (EnvoyFilter.EXTENSION_CONFIG, "envoy.config.core.v3.TypedExtensionConfig"),
        (EnvoyFilter.BOOTSTRAP, "envoy.config.bootstrap.v3.Bootstrap"),
        (EnvoyFilter.LISTENER_FILTER, "envoy.config.listener.v3.ListenerFilter"),
    ],
)
def test_each_apply_to_builds_its_envoy_message(apply_to: int, full_name: str) -> None:
    built = patch_value(apply_to, struct({}))
    assert built is not None and built.DESCRIPTOR.full_name == full_name
    assert patch_value(apply_to, None) is None  # a REMOVE's


def test_an_unknown_field_is_ignored_unless_strict() -> None:
    value = struct({"name": "x", "bogus": 1, "connect_timeout": "250ms"})
    built = patch_value(EnvoyFilter.CLUSTER, value)
    assert built is not None and built.connect_timeout.ToMilliseconds() == 250  # type: ignore[attr-defined]
    with pytest.raises(
        PatchValueError, match=r'^Envoy filter: unknown field "bogus" in envoy.config.cluster.v3.Cluster$'
    ):
        patch_value(EnvoyFilter.CLUSTER, value, strict=True)


def test_jsonpb_s_reading_where_json_format_s_differs() -> None:
    route = patch_value(EnvoyFilter.HTTP_ROUTE, struct({"route": {"cluster": "a"}, "redirect": {"host_redirect": "b"}}))
    assert route is not None and route.WhichOneof("action") == "redirect"  # type: ignore[attr-defined]
    listener_ = patch_value(EnvoyFilter.LISTENER, struct({"filter_chains": [None, {"name": "b"}]}))
    assert listener_ is not None and [c.name for c in listener_.filter_chains] == ["", "b"]  # type: ignore[attr-defined]
    cluster = patch_value(
        EnvoyFilter.CLUSTER, struct({"connect_timeout": "1h0.5s", "per_connection_buffer_limit_bytes": 80})
    )
    assert cluster is not None and cluster.connect_timeout.ToNanoseconds() == 3600_500_000_000  # type: ignore[attr-defined]
    with pytest.raises(PatchValueError, match="unknown value"):
        patch_value(EnvoyFilter.CLUSTER, struct({"type": "BOGUS"}))  # never dropped as unknown


def test_a_type_url_never_imports_a_module_outside_envoy_s_api() -> None:
    # a webhook request names any type it likes: only packages of Envoy's protos are imported
    assert "this" not in sys.modules
    with pytest.raises(PatchValueError, match="referenced type unknown"):
        patch_value(
            EnvoyFilter.HTTP_FILTER, struct({"name": "x", "typed_config": {"@type": "type.googleapis.com/this.Zen"}})
        )
    assert "this" not in sys.modules
    assert message_class("this.Zen") is None and "this" not in sys.modules
    assert message_class("envoy.config.cluster.v3.Cluster.CommonLbConfig") is not None  # a nested message
    assert message_class("envoy._main.X") is None


def test_istio_warnings_carry_istiod_s_warnings() -> None:
    spec, want = CASES["a-filter-named-without-its-typed-config"]
    [obj] = load_documents(yaml.safe_dump(doc("w", spec)), "w.yaml").objects
    assert istio_warnings(obj.spec) == [GENERAL_WARNING, *want]


# --- against the pinned istioctl ----------------------------------------------------------------

_LINE = re.compile(r"^\s*\* EnvoyFilter/default/([^:]+): (.*)$")


def istioctl_verdicts(directory: Path) -> dict[str, tuple[list[str], list[str]]]:
    """``istioctl validate -f DIR``: each object's errors and warnings."""
    done = subprocess.run(
        [str(peer_binary("istioctl")), "validate", "-f", str(directory)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out: dict[str, tuple[list[str], list[str]]] = {}
    errors = False
    for line in (done.stdout + done.stderr).splitlines():
        if line.startswith("Error:"):
            errors = True
        elif line.startswith('"'):
            errors = False
        elif m := _LINE.match(line):
            errs, warns = out.setdefault(m.group(1), ([], []))
            (errs if errors else warns).append(m.group(2))
    return out


def test_istioctl_validate_gives_the_same_verdicts(tmp_path: Path) -> None:
    for name, (spec, _) in CASES.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc(name, spec)))
    istioctl = istioctl_verdicts(tmp_path)
    assert set(istioctl) == set(CASES)
    for name, (spec, want) in CASES.items():
        errors, warnings = istioctl[name]
        refusal, ours = judged(name, spec)
        if name == "a-wildcard-in-the-selector":
            assert refusal is not None and errors == ['wildcard is not supported in selector: "app=a*"']
            continue
        assert (refusal is not None) == bool(errors), (name, refusal, errors)
        if refusal is not None:
            assert len(errors) == 1, (name, errors)
            if isinstance(want, tuple) and want[1]:
                assert refusal[1] == errors[0], name
            continue
        # pilotfish's warning names the field, then says what istiod says
        assert len(ours) == len(warnings), (name, ours, warnings)
        for mine, theirs in zip(ours, warnings, strict=True):
            assert mine == theirs or mine.endswith(f": {theirs}"), (name, mine, theirs)
