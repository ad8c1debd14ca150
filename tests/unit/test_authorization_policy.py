"""AuthorizationPolicy: which policies a workload gets (istiod model/authorization.go), and the RBAC
filters they become, pinned to istiod's authz builder (pilot/pkg/security/authz/builder, model,
matcher): filter order, rule names, the translation of each field, dry-run, the empty ALLOW policy,
and what an HTTP-only rule does on a TCP chain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from envoy.extensions.filters.http.jwt_authn.v3 import config_pb2
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2 as http_rbac_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.filters.network.rbac.v3 import rbac_pb2 as network_rbac_pb2
from google.protobuf import json_format

from app.config.loader import load_documents
from app.model.authz import AuthorizationPolicies, RequestAuthentications, WorkloadPolicies
from app.translate.listener.authz import rbac_http_filters, rbac_network_filters
from app.translate.listener.jwt import jwt_authn_filters
from app.xds.generators.reference import generate_clusters, generate_listeners
from tests.support.envoy import agent_bootstrap, validate_bootstrap
from tests.support.mesh import endpoint_slice, kube_pod, kube_service, push_context, sidecar_proxy, slice_endpoint

ROOT = "istio-system"


def ap(name: str, ns: str, spec: str, annotations: str = "") -> str:
    meta = f"{{name: {name}, namespace: {ns}" + (f", annotations: {{{annotations}}}}}" if annotations else "}")
    return f"\n---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {meta}\nspec: {spec}\n"


def policies(*docs: str) -> AuthorizationPolicies:
    result = load_documents("".join(docs), "ap.yaml")
    assert result.rejected == [], result.rejected
    return AuthorizationPolicies.build(result.objects, ROOT)


def names(found: WorkloadPolicies) -> dict[str, list[str]]:
    return {
        action: [o.meta.name for o in getattr(found, action)]
        for action in ("allow", "deny", "audit", "custom")
        if getattr(found, action)
    }


def test_which_policies_a_workload_gets() -> None:
    # model/authorization.go: namespace-wide, selector, and the root namespace's for every namespace
    authz = policies(
        ap("mesh", ROOT, "{action: DENY, rules: [{to: [{operation: {paths: [/x]}}]}]}"),
        ap("mesh-web", ROOT, "{selector: {matchLabels: {app: web}}, rules: [{}]}"),
        ap("ns", "shop", "{action: AUDIT, rules: [{}]}"),
        ap("web", "shop", "{selector: {matchLabels: {app: web}}, rules: [{}]}"),
        ap("other", "bank", "{rules: [{}]}"),
        ap("waypoint", "shop", "{targetRefs: [{kind: Service, group: '', name: web}], rules: [{}]}"),
        ap("ext", "shop", "{action: CUSTOM, provider: {name: opa}, rules: [{}]}"),
    )
    assert names(authz.for_workload("shop", {"app": "web"})) == {
        "allow": ["mesh-web", "web"],
        "deny": ["mesh"],
        "audit": ["ns"],
        "custom": ["ext"],
    }
    assert names(authz.for_workload("shop", {"app": "db"})) == {"deny": ["mesh"], "audit": ["ns"], "custom": ["ext"]}
    assert names(authz.for_workload("bank", {"app": "web"})) == {"allow": ["mesh-web", "other"], "deny": ["mesh"]}


def http_configs(*docs: str, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    found = policies(*docs).for_workload("shop", labels or {"app": "web"})
    out = []
    for f in rbac_http_filters(found):
        assert f.name == "envoy.filters.http.rbac"
        config = http_rbac_pb2.RBAC()
        f.typed_config.Unpack(config)
        out.append(json_format.MessageToDict(config))
    return out


def test_filters_in_istiods_order_audit_deny_allow_and_rules_named_per_rule() -> None:
    configs = http_configs(
        ap("a", "shop", "{rules: [{to: [{operation: {methods: [GET]}}]}, {to: [{operation: {methods: [HEAD]}}]}]}"),
        ap("d", "shop", "{action: DENY, rules: [{to: [{operation: {paths: [/admin]}}]}]}"),
        ap("l", "shop", "{action: AUDIT, rules: [{}]}"),
    )
    # ALLOW is the enum's zero value: proto3 JSON leaves it out
    assert [c["rules"].get("action", "ALLOW") for c in configs] == ["LOG", "DENY", "ALLOW"]
    assert sorted(configs[2]["rules"]["policies"]) == ["ns[shop]-policy[a]-rule[0]", "ns[shop]-policy[a]-rule[1]"]


def test_an_allow_policy_without_rules_matches_nothing_so_denies_everything() -> None:
    [config] = http_configs(ap("deny-all", "shop", "{}"))
    assert config["rules"] == {
        "policies": {
            "ns[shop]-policy[deny-all]-rule[0]": {
                "permissions": [{"notRule": {"any": True}}],
                "principals": [{"notId": {"any": True}}],
            }
        },
    }


def test_dry_run_policies_go_to_the_shadow_rules() -> None:
    [config] = http_configs(ap("try", "shop", "{action: DENY, rules: [{}]}", 'istio.io/dry-run: "true"'))
    assert "rules" not in config
    assert config["shadowRules"]["action"] == "DENY" and config["shadowRulesStatPrefix"] == "istio_dry_run_deny_"


def one_policy(rule: str, action: str = "ALLOW") -> dict[str, Any]:
    [config] = http_configs(ap("p", "shop", f"{{action: {action}, rules: [{rule}]}}"))
    policy: dict[str, Any] = config["rules"]["policies"]["ns[shop]-policy[p]-rule[0]"]
    return policy


def test_operation_fields_hosts_methods_paths_ports_in_istiods_order() -> None:
    policy = one_policy(
        "{to: [{operation: {ports: ['8080'], paths: ['/admin*', '*.css'], notPaths: ['/admin/ok'], "
        "methods: [GET], hosts: ['*.example.com']}}]}"
    )
    [permission] = policy["permissions"]
    rules = permission["andRules"]["rules"]
    assert rules[0] == {"orRules": {"rules": [{"header": {"name": ":authority", "stringMatch": {
        "suffix": ".example.com", "ignoreCase": True}}}]}}  # fmt: skip
    assert rules[1] == {"orRules": {"rules": [{"header": {"name": ":method", "stringMatch": {"exact": "GET"}}}]}}
    assert rules[2] == {"orRules": {"rules": [
        {"urlPath": {"path": {"prefix": "/admin"}}}, {"urlPath": {"path": {"suffix": ".css"}}}]}}  # fmt: skip
    assert rules[3] == {"notRule": {"orRules": {"rules": [{"urlPath": {"path": {"exact": "/admin/ok"}}}]}}}
    assert rules[4] == {"orRules": {"rules": [{"destinationPort": 8080}]}}
    assert policy["principals"] == [{"andIds": {"ids": [{"any": True}]}}]


def test_source_fields_and_conditions() -> None:
    policy = one_policy(
        "{from: [{source: {principals: [cluster.local/ns/a/sa/b], namespaces: ['prod-*'], ipBlocks: [10.0.0.0/8]}}],"
        " when: [{key: 'request.headers[x-team]', values: [blue]}, {key: source.ip, notValues: [10.1.2.3]}]}"
    )
    [principal] = policy["principals"]
    ids = principal["andIds"]["ids"]
    assert ids[0] == {"orIds": {"ids": [{"authenticated": {"principalName": {
        "exact": "spiffe://cluster.local/ns/a/sa/b"}}}]}}  # fmt: skip
    assert ids[1] == {"orIds": {"ids": [{"authenticated": {"principalName": {"safeRegex": {
        "regex": ".*/ns/prod-.*/.*"}}}}]}}  # fmt: skip
    assert ids[2] == {"orIds": {"ids": [{"directRemoteIp": {"addressPrefix": "10.0.0.0", "prefixLen": 8}}]}}
    assert ids[3] == {"orIds": {"ids": [{"header": {"name": "x-team", "stringMatch": {"exact": "blue"}}}]}}
    assert ids[4] == {"notId": {"orIds": {"ids": [{"directRemoteIp": {"addressPrefix": "10.1.2.3", "prefixLen": 32}}]}}}


def test_source_trust_domains_match_the_peer_identity_between_accounts_and_namespaces() -> None:
    # istiod model.go: principal, requestPrincipal, serviceAccount, trustDomain, namespace, ...
    policy = one_policy("{from: [{source: {trustDomains: [td.example, '*.corp'], namespaces: [shop]}}]}")
    ids = policy["principals"][0]["andIds"]["ids"]
    assert ids[0] == {"orIds": {"ids": [
        {"authenticated": {"principalName": {"prefix": "spiffe://td.example/"}}},
        {"authenticated": {"principalName": {"safeRegex": {"regex": "spiffe://[^/]*\\.corp/.*"}}}},
    ]}}  # fmt: skip
    assert "/ns/shop/" in ids[1]["orIds"]["ids"][0]["authenticated"]["principalName"]["safeRegex"]["regex"]


def tcp_policies(*docs: str) -> list[dict[str, Any]]:
    out = []
    for f in rbac_network_filters(policies(*docs).for_workload("shop", {"app": "web"})):
        assert f.name == "envoy.filters.network.rbac"
        config = network_rbac_pb2.RBAC()
        f.typed_config.Unpack(config)
        out.append(json_format.MessageToDict(config))
    return out


def test_on_tcp_an_allow_rule_needing_http_is_dropped_and_a_deny_rule_loses_only_that_part() -> None:
    # builder.go: m.Generate(forTCP) errors for HTTP-only fields; checkError drops ALLOW rules only
    allow, deny = tcp_policies(
        ap("a", "shop", "{rules: [{to: [{operation: {paths: [/x]}}]}, {to: [{operation: {ports: ['9000']}}]}]}"),
        ap("d", "shop", "{action: DENY, rules: [{to: [{operation: {methods: [POST], ports: ['9001']}}]}]}"),
    )[::-1]
    assert allow["statPrefix"] == "tcp." and list(allow["rules"]["policies"]) == ["ns[shop]-policy[a]-rule[1]"]
    [permission] = deny["rules"]["policies"]["ns[shop]-policy[d]-rule[0]"]["permissions"]
    assert permission == {"andRules": {"rules": [{"orRules": {"rules": [{"destinationPort": 9001}]}}]}}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("{rules: [{when: [{key: request.color, values: [red]}]}]}", "rules[0].when[0].key"),
        ("{rules: [{when: [{key: source.ip}]}]}", "rules[0].when[0]"),
        ("{rules: [{from: [{source: {ipBlocks: [not-an-ip]}}]}]}", "rules[0].from[0].source.ipBlocks[0]"),
        ("{rules: [{from: [{source: {}}]}]}", "rules[0].from[0].source"),
        ("{rules: [{to: [{operation: {ports: ['99999']}}]}]}", "rules[0].to[0].operation.ports[0]"),
        ("{rules: [{to: [{operation: {paths: ['/a/{**}/{*}']}}]}]}", "rules[0].to[0].operation.paths[0]"),
        ("{rules: [{to: [{operation: {notPaths: ['/a/{b}']}}]}]}", "rules[0].to[0].operation.notPaths[0]"),
        ("{rules: [{to: [{operation: {paths: ['/a b/{*}']}}]}]}", "rules[0].to[0].operation.paths[0]"),
        ("{rules: [{to: [{operation: {methods: ['']}}]}]}", "rules[0].to[0].operation.methods[0]"),
        ("{rules: [{from: [{source: {serviceAccounts: ['ns/*']}}]}]}", "rules[0].from[0].source.serviceAccounts[0]"),
        ("{rules: [{from: [{source: {trustDomains: ['a/b']}}]}]}", "rules[0].from[0].source.trustDomains[0]"),
        ("{rules: [{from: [{source: {notTrustDomains: ['a*b']}}]}]}", "rules[0].from[0].source.notTrustDomains[0]"),
        ("{action: CUSTOM, rules: [{}]}", "provider.name"),
        ("{action: SOMETIMES}", "action"),
    ],
)
def test_invalid_policies_are_rejected_naming_the_field(spec: str, field: str) -> None:
    result = load_documents(ap("bad", "shop", spec), "ap.yaml")
    [rejection] = result.rejected
    assert field in str(rejection.error)


def test_a_star_inside_a_value_is_accepted_and_matched_as_written() -> None:
    # istiod validates these with CheckEmptyValues only; the matcher treats an inner `*` literally
    policy = one_policy("{to: [{operation: {paths: ['/a*b'], hosts: ['a*.example.com']}}]}")
    rules = policy["permissions"][0]["andRules"]["rules"]
    assert rules[1] == {"orRules": {"rules": [{"urlPath": {"path": {"exact": "/a*b"}}}]}}


def test_path_templates_become_uri_template_matchers() -> None:
    # istiod matcher.PathTemplateMatcher (authz/builder/testdata/http/allow-path-out.yaml)
    policy = one_policy("{to: [{operation: {paths: ['/api/{*}/secret', '/{**}/raw'], notPaths: ['/x/{**}']}}]}")
    rules = policy["permissions"][0]["andRules"]["rules"]
    kind = "type.googleapis.com/envoy.extensions.path.match.uri_template.v3.UriTemplateMatchConfig"
    assert rules[0] == {"orRules": {"rules": [
        {"uriTemplate": {"name": "uri-template", "typedConfig": {"@type": kind, "pathTemplate": "/api/*/secret"}}},
        {"uriTemplate": {"name": "uri-template", "typedConfig": {"@type": kind, "pathTemplate": "/**/raw"}}},
    ]}}  # fmt: skip
    assert rules[1]["notRule"]["orRules"]["rules"][0]["uriTemplate"]["typedConfig"]["pathTemplate"] == "/x/**"


MESH = "rootNamespace: istio-system\nenableAutoMtls: true\n"
WEB = (
    kube_service("web", "[{name: http, port: 80, targetPort: 8080}, {name: tcp, port: 9000}]", namespace="shop",
                 cluster_ip="10.96.0.5", selector="app: web")
    + kube_pod("web-0", "10.1.0.5", "app: web", namespace="shop")
    + endpoint_slice("web", "[{name: http, port: 8080}, {name: tcp, port: 9000}]",
                     slice_endpoint("10.1.0.5", "web-0", namespace="shop"), namespace="shop")
)  # fmt: skip


def test_inbound_chains_carry_the_rbac_filters_and_envoy_accepts_them(tmp_path: Path) -> None:
    push = push_context(
        WEB,
        ap("d", "shop", "{action: DENY, rules: [{to: [{operation: {paths: [/admin, '/api/{*}/secret/{**}']}}]}]}"),
        ap("a", "shop", "{rules: [{from: [{source: {namespaces: [shop]}}]}]}"),
        mesh=MESH,
    )
    proxy = sidecar_proxy("web-0.shop", "10.1.0.5", {"app": "web"})
    listeners = generate_listeners(proxy, push)
    [inbound] = [x for x in listeners if x.name == "virtualInbound"]
    http_chain = next(c for c in inbound.filter_chains if c.name == "0.0.0.0_8080")
    tcp_chain = next(c for c in inbound.filter_chains if c.name == "0.0.0.0_9000")
    manager = hcm_pb2.HttpConnectionManager()
    http_chain.filters[0].typed_config.Unpack(manager)
    assert [f.name for f in manager.http_filters][:2] == ["envoy.filters.http.rbac", "envoy.filters.http.rbac"]
    assert [f.name for f in tcp_chain.filters][:2] == ["envoy.filters.network.rbac", "envoy.filters.network.rbac"]
    node_id = "sidecar~10.1.0.5~web-0.shop~shop.svc.cluster.local"
    validate_bootstrap(agent_bootstrap(node_id, generate_clusters(proxy, push), listeners), tmp_path)


# --- RequestAuthentication (policy_applier.go convertToEnvoyJwtConfig) --------------------------


def ra(name: str, ns: str, spec: str, created: str = "2024-01-01T00:00:00Z") -> str:
    meta = f'{{name: {name}, namespace: {ns}, creationTimestamp: "{created}"}}'
    return f"\n---\napiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {meta}\nspec: {spec}\n"


def jwt_config(*docs: str) -> dict[str, Any]:
    result = load_documents("".join(docs), "ra.yaml")
    assert result.rejected == [], result.rejected
    found = RequestAuthentications.build(result.objects, ROOT).for_workload("shop", {"app": "web"})
    [f] = jwt_authn_filters(found)
    config = config_pb2.JwtAuthentication()
    f.typed_config.Unpack(config)
    out: dict[str, Any] = json_format.MessageToDict(config)
    return out


def test_one_provider_per_rule_and_a_missing_token_allowed() -> None:
    config = jwt_config(
        ra("b", "shop", "{jwtRules: [{issuer: b.example, jwksUri: 'https://keys.b.example/jwks.json'}]}",
           "2024-02-01T00:00:00Z"),
        ra("a", ROOT, "{jwtRules: [{issuer: a.example, jwks: '{\"keys\": []}', audiences: [web],"
           " fromHeaders: [{name: x-jwt, prefix: 'Token '}], forwardOriginalToken: true,"
           " outputPayloadToHeader: x-payload}]}"),
    )  # fmt: skip
    a, b = config["providers"]["origins-0"], config["providers"]["origins-1"]
    assert a["issuer"] == "a.example" and a["audiences"] == ["web"] and a["forward"] is True
    assert a["fromHeaders"] == [{"name": "x-jwt", "valuePrefix": "Token "}]
    assert a["localJwks"] == {"inlineString": '{"keys": []}'} and a["forwardPayloadHeader"] == "x-payload"
    assert a["payloadInMetadata"] == "payload"
    assert b["remoteJwks"]["httpUri"]["cluster"] == "outbound|443||keys.b.example"
    # two providers: any one valid, or every token valid or missing (istiod's order: the
    # providers, then the AND; tests/differential compares it with istiod's)
    [rule] = config["rules"]
    assert rule["match"] == {"prefix": "/"}
    requires = rule["requires"]["requiresAny"]["requirements"]
    assert requires[:2] == [{"providerName": "origins-0"}, {"providerName": "origins-1"}]
    inner = requires[2]["requiresAll"]["requirements"]
    assert inner[0] == {"requiresAny": {"requirements": [{"providerName": "origins-0"}, {"allowMissing": {}}]}}


def test_request_principals_match_the_verified_payload() -> None:
    policy = one_policy("{from: [{source: {requestPrincipals: [iss.example/user-1]}}]}")
    [principal] = policy["principals"]
    [either] = principal["andIds"]["ids"]
    [both] = either["orIds"]["ids"]
    iss, sub = both["andIds"]["ids"]
    assert iss["metadata"]["filter"] == "envoy.filters.http.jwt_authn"
    assert iss["metadata"]["path"] == [{"key": "payload"}, {"key": "iss"}]
    assert iss["metadata"]["value"]["orMatch"]["valueMatchers"][0] == {"stringMatch": {"exact": "iss.example"}}
    assert sub["metadata"]["path"] == [{"key": "payload"}, {"key": "sub"}]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("{jwtRules: [{jwks: '{}'}]}", "jwtRules[0].issuer"),
        ("{jwtRules: [{issuer: a}, {issuer: a}]}", "jwtRules[1].issuer"),
        ("{jwtRules: [{issuer: a, jwksUri: 'ftp://x'}]}", "jwtRules[0].jwksUri"),
        ("{jwtRules: [{issuer: a, jwks: 'not json'}]}", "jwtRules[0].jwks"),
    ],
)
def test_invalid_request_authentications_are_rejected_naming_the_field(spec: str, field: str) -> None:
    [rejection] = load_documents(ra("bad", "shop", spec), "ra.yaml").rejected
    assert field in str(rejection.error)
