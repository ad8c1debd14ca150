"""AuthorizationPolicy CUSTOM: the filters of istiod's own authz builder cases (TestGenerator_GenerateHTTP
and _GenerateTCP in pilot/pkg/security/authz/builder/builder_test.go: the providers of its mesh
configs, its input policies and its expected filters, read from the pinned module), and where
they go among a workload's filters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import json_format

from app.config.loader import load_documents
from app.config.mesh import parse_mesh_config
from app.model.authz import AuthorizationPolicies
from app.model.service import Registry, Service
from app.translate.listener.ext_authz import custom_http_filters, custom_network_filters, resolve_custom
from tests.support.peers import istio_module_dir

TESTDATA = Path("pilot/pkg/security/authz/builder/testdata")
HTTPBIN = {"app": "httpbin", "version": "v1"}
HOST = "my-custom-ext-authz.foo.svc.cluster.local"
SERVICES = {HOST: {"foo": Service(HOST, "foo", (), Registry.KUBERNETES)}}

# builder_test.go's mesh configs, as a mesh config file writes them
GRPC_NO_NAMESPACE = {"name": "default", "envoyExtAuthzGrpc": {
    "service": HOST, "port": 9000, "failOpen": True, "statusOnError": "403",
}}  # fmt: skip
GRPC = {"name": "default", "envoyExtAuthzGrpc": {
    "service": f"foo/{HOST}", "port": 9000, "timeout": "0.002s", "failOpen": True, "statusOnError": "403",
    "includeRequestBodyInCheck": {"maxRequestBytes": 4096, "allowPartialMessage": True},
}}  # fmt: skip
HTTP = {"name": "default", "envoyExtAuthzHttp": {
    "service": f"foo/{HOST}", "port": 9000, "timeout": "10s", "failOpen": True, "statusOnError": "403",
    "pathPrefix": "/check", "includeRequestHeadersInCheck": ["x-custom-id", "x-prefix-*", "*-suffix"],
    "includeHeadersInCheck": ["should-not-include-when-IncludeRequestHeadersInCheck-is-set"],
    "includeAdditionalHeadersInCheck": {"x-header-1": "value-1", "x-header-2": "value-2"},
    "includeRequestBodyInCheck": {"maxRequestBytes": 2048, "allowPartialMessage": True, "packAsBytes": True},
    "headersToUpstreamOnAllow": ["Authorization", "x-prefix-*", "*-suffix"],
    "headersToDownstreamOnDeny": ["Set-cookie", "x-prefix-*", "*-suffix"],
    "headersToDownstreamOnAllow": ["Set-cookie", "x-prefix-*", "*-suffix"],
}}  # fmt: skip
INVALID = {"name": "default", "envoyExtAuthzHttp": {
    "service": "foo/my-custom-ext-authz", "port": 999999, "pathPrefix": "check", "statusOnError": "999",
}}  # fmt: skip

HTTP_CASES = [
    (GRPC_NO_NAMESPACE, "custom-simple-http-in.yaml", ["custom-grpc-provider-no-namespace-out1.yaml",
                                                      "custom-grpc-provider-no-namespace-out2.yaml"]),
    (GRPC, "custom-simple-http-in.yaml", ["custom-grpc-provider-out1.yaml", "custom-grpc-provider-out2.yaml"]),
    (HTTP, "custom-simple-http-in.yaml", ["custom-http-provider-out1.yaml", "custom-http-provider-out2.yaml"]),
    (HTTP, "custom-bad-multiple-providers-in.yaml", ["custom-bad-multiple-providers-out1.yaml",
                                                     "custom-bad-multiple-providers-out2.yaml"]),
    (INVALID, "custom-simple-http-in.yaml", ["custom-bad-out.yaml"]),
]  # fmt: skip
TCP_CASES = [
    (GRPC, "custom-both-http-tcp-in.yaml", ["custom-both-http-tcp-out1.yaml", "custom-both-http-tcp-out2.yaml"]),
    (HTTP, "custom-only-http-in.yaml", []),
]


def builder_data(name: str) -> str:
    return (istio_module_dir() / TESTDATA / name).read_text()


def custom_of(provider: dict[str, Any], policies: str, multiple: bool = False) -> Any:
    mesh = parse_mesh_config({"extensionProviders": [provider]})
    loaded = load_documents(policies, "policies.yaml")
    assert not loaded.rejected, loaded.rejected
    authz = AuthorizationPolicies.build(loaded.objects, "istio-system").for_workload("foo", HTTPBIN)
    return resolve_custom(mesh, authz.custom, SERVICES, multiple)


def istiods(name: str) -> Any:
    return yaml.safe_load(builder_data(name))


def as_dict(message: Any) -> Any:
    return json_format.MessageToDict(message)


@pytest.mark.parametrize(("provider", "policies", "want"), HTTP_CASES, ids=[w[0] for _, _, w in HTTP_CASES])
def test_http_filters_are_istiods(provider: dict[str, Any], policies: str, want: list[str]) -> None:
    got = custom_http_filters(custom_of(provider, builder_data(f"http/{policies}")))
    assert [as_dict(f) for f in got] == [istiods(f"http/{w}") for w in want]


@pytest.mark.parametrize(("provider", "policies", "want"), TCP_CASES, ids=["grpc", "http-provider"])
def test_tcp_filters_are_istiods(provider: dict[str, Any], policies: str, want: list[str]) -> None:
    got = custom_network_filters(custom_of(provider, builder_data(f"tcp/{policies}")))
    assert [as_dict(f) for f in got] == [istiods(f"tcp/{w}") for w in want]


def test_several_providers_with_the_flag_each_get_their_filters() -> None:
    """PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS: each provider its RBAC + ext_authz pair, its
    policies only; a provider the mesh does not define denies what its policies match."""
    got = custom_http_filters(custom_of(HTTP, builder_data("http/custom-bad-multiple-providers-in.yaml"), True))
    names = [f.name for f in got]
    assert names == ["envoy.filters.http.rbac", "envoy.filters.http.rbac", "envoy.filters.http.ext_authz"]
    another, default, _ = (as_dict(f)["typedConfig"] for f in got)
    assert list(another["rules"]["policies"]) == [
        "istio-ext-authz-another-ns[foo]-policy[httpbin-2]-rule[0]-deny-due-to-bad-CUSTOM-action"
    ]
    assert list(default["shadowRules"]["policies"]) == ["istio-ext-authz-default-ns[foo]-policy[httpbin-1]-rule[0]"]


def test_an_unknown_service_makes_the_provider_deny() -> None:
    unknown = {**HTTP, "envoyExtAuthzHttp": {**HTTP["envoyExtAuthzHttp"], "service": "bar/nowhere.example"}}
    custom = custom_of(unknown, builder_data("http/custom-simple-http-in.yaml"))
    (provider,) = custom.providers
    assert "could not find service bar/nowhere.example" in provider.error and provider.http is None
    (deny,) = custom_http_filters(custom)
    denied = as_dict(deny)["typedConfig"]["rules"]["policies"]
    assert denied and all(n.endswith("-deny-due-to-bad-CUSTOM-action") for n in denied)


def test_of_two_providers_of_one_name_the_later_is_the_one() -> None:
    """ApplyMeshConfig merges the providers by name over istiod's defaults (prometheus,
    stackdriver, envoy): a later one replaces an earlier one of its name."""
    unknown = {**HTTP, "envoyExtAuthzHttp": {**HTTP["envoyExtAuthzHttp"], "service": "bar/nowhere.example"}}
    mesh = parse_mesh_config({"extensionProviders": [unknown, HTTP, {"name": "envoy", "envoyFileAccessLog": {}}]})
    assert [p.name for p in mesh.extension_providers] == ["prometheus", "stackdriver", "envoy", "default"]
    assert mesh.extension_providers[2].envoy_file_access_log.path == ""
    policies = custom_of(HTTP, builder_data("http/custom-simple-http-in.yaml")).policies
    (provider,) = resolve_custom(mesh, policies, SERVICES, False).providers
    assert not provider.error and provider.http is not None
