"""An ingress gateway Envoy on pilotfish carries real traffic and follows config changes live.

The same scenario runs with the backend service registered two ways (a ServiceEntry selecting
WorkloadEntries, and a Kubernetes Service + Pods + EndpointSlice) and over SotW and Delta ADS:
routing by header to DestinationRule subsets, then a rewritten VirtualService moving traffic,
then a removed endpoint no longer receiving any, all on one Envoy and one xDS stream.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import pytest
import yaml
from aiohttp import web
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.e2e.backends import Backends
from tests.e2e.conftest import StartBackends, StartEnvoy, StartPilotfish
from tests.e2e.harness import (
    TEMPLATES,
    ConfigDir,
    KubernetesRegistration,
    backends_seen,
    free_port,
    routed_to,
    send,
    wait_until,
)
from tests.e2e.processes import GATEWAY

VERSIONS = ("v1", "v2")


class Registration(Protocol):
    """How the two versions of the backend service are written into the config dir."""

    @property
    def host(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def addresses(self) -> Mapping[str, str]: ...

    def write(self, config: ConfigDir, target_port: int) -> None: ...

    def remove_endpoint(self, config: ConfigDir, version: str, target_port: int) -> None: ...


@dataclass(frozen=True)
class ServiceEntryRegistration:
    """``app.example.internal``: a STATIC ServiceEntry selecting one WorkloadEntry per version."""

    host: str = "app.example.internal"
    namespace: str = "apps"
    addresses = {"v1": "127.0.0.11", "v2": "127.0.0.12"}

    def write(self, config: ConfigDir, target_port: int) -> None:
        config.render("serviceentry/service.yaml", "app-serviceentry.yaml")
        for version, address in self.addresses.items():
            config.render(
                "serviceentry/workloadentry.yaml",
                f"app-{version}.yaml",
                version=version,
                address=address,
                target_port=target_port,
            )

    def remove_endpoint(self, config: ConfigDir, version: str, target_port: int) -> None:
        config.remove(f"app-{version}.yaml")


REGISTRATIONS = [
    pytest.param(ServiceEntryRegistration(), id="serviceentry"),
    pytest.param(
        KubernetesRegistration({"v1": "127.0.0.21", "v2": "127.0.0.22"}, cluster_ip="10.96.0.50"), id="kubernetes"
    ),
]


@pytest.mark.parametrize("registration", REGISTRATIONS)
def test_gateway_routes_to_subsets_and_follows_config_changes(
    registration: Registration,
    config_dir: ConfigDir,
    start_backends: StartBackends,
    start_pilotfish: StartPilotfish,
    start_envoy: StartEnvoy,
) -> None:
    backends = start_backends(registration.addresses)
    port = free_port("0.0.0.0")
    host, namespace = registration.host, registration.namespace
    config_dir.render("gateway/gateway.yaml", gateway_port=port)
    registration.write(config_dir, backends.port)
    config_dir.render("subsets.yaml", "app-destinationrule.yaml", namespace=namespace, host=host)
    config_dir.render("gateway/vs-by-header.yaml", "app-virtualservice.yaml", namespace=namespace, host=host)
    envoy = start_envoy(start_pilotfish(config_dir), GATEWAY)

    # istiod's names for a gateway: listener 0.0.0.0_PORT, its routes over RDS as http.PORT
    wait_until(lambda: envoy.listeners().get(f"0.0.0.0_{port}", {}).get("active_state"), f"listener 0.0.0.0_{port}")
    assert f"http.{port}" in envoy.route_configs()
    wait_until(routed_to(port, "v1"), "the gateway to route to v1")
    assert backends_seen(port, 10) == {"v1": 10}
    assert backends_seen(port, 10, headers={"x-version": "v2"}) == {"v2": 10}
    assert backends_seen(port, 5, headers={"x-version": "v3"}) == {"v1": 5}
    stream = envoy.xds_stream()
    assert stream[0] == 1, f"Envoy is not connected to pilotfish: {stream}"

    # the rewritten VirtualService reaches the same Envoy over the same stream
    config_dir.render("gateway/vs-moved.yaml", "app-virtualservice.yaml", namespace=namespace, host=host)
    wait_until(routed_to(port, "v2"), "the default route to move to v2")
    assert backends_seen(port, 10) == {"v2": 10}
    assert backends_seen(port, 10, headers={"x-version": "v1"}) == {"v1": 10}
    rewritten = send(port, "/legacy/items?id=7")
    assert rewritten.backend in VERSIONS, rewritten
    assert rewritten.body["path"] == "/items?id=7"
    seen: set[str | None] = set()

    def both_versions_behind_legacy() -> bool:
        seen.add(send(port, "/legacy/").backend)
        return seen >= set(VERSIONS)

    wait_until(both_versions_behind_legacy, "/legacy/ to reach both versions of the service", timeout=20)
    assert envoy.alive()
    assert envoy.xds_stream() == stream, "the xDS stream was re-established"

    # removing v2's endpoint takes it out of every cluster; no request reaches it afterwards
    removed = f"{registration.addresses['v2']}:{backends.port}"
    assert removed in envoy.cluster_hosts()[f"outbound|80|v2|{host}"]
    assert removed in envoy.cluster_hosts()[f"outbound|80||{host}"]
    registration.remove_endpoint(config_dir, "v2", backends.port)
    wait_until(
        lambda: not any(removed in hosts for hosts in envoy.cluster_hosts().values()),
        f"{removed} to leave Envoy's clusters",
    )
    hits = backends.hits["v2"]
    assert backends_seen(port, 20, "/legacy/") == {"v1": 20}
    emptied = send(port)  # the default route's subset v2 has no endpoint left
    assert (emptied.status, emptied.backend) == (503, None), emptied
    assert backends_seen(port, 5, headers={"x-version": "v1"}) == {"v1": 5}
    assert backends.hits["v2"] == hits
    assert envoy.xds_stream() == stream, "the xDS stream was re-established"


def _app_behind_the_gateway(config_dir: ConfigDir, start_backends: StartBackends) -> int:
    """The ServiceEntry app (v1 and v2 running) behind the gateway, routed by header: the
    gateway's port."""
    registration = ServiceEntryRegistration()
    backends = start_backends(registration.addresses)
    port = free_port("0.0.0.0")
    config_dir.render("gateway/gateway.yaml", gateway_port=port)
    registration.write(config_dir, backends.port)
    host, namespace = registration.host, registration.namespace
    config_dir.render("subsets.yaml", "app-destinationrule.yaml", namespace=namespace, host=host)
    config_dir.render("gateway/vs-by-header.yaml", "app-virtualservice.yaml", namespace=namespace, host=host)
    return port


DENY_ADMIN = """
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-admin, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: DENY
  rules:
  - to: [{operation: {paths: ["/admin*", "/api/{*}/secret/{**}"]}}]
"""
ALLOW_GET_ONLY = """
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: get-only, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: ALLOW
  rules:
  - to: [{operation: {methods: [GET]}}]
    when: [{key: "request.headers[x-team]", values: [blue, green]}]
"""


def test_gateway_authorization_policies_deny_a_path_and_allow_only_what_a_rule_says(
    config_dir: ConfigDir, start_backends: StartBackends, start_pilotfish: StartPilotfish, start_envoy: StartEnvoy
) -> None:
    port = _app_behind_the_gateway(config_dir, start_backends)
    envoy = start_envoy(start_pilotfish(config_dir), GATEWAY)
    wait_until(routed_to(port, "v1"), "the gateway to route to v1")

    # DENY: the RBAC filter answers 403 for the path, everything else still passes
    config_dir.write("deny-admin.yaml", DENY_ADMIN)
    wait_until(lambda: send(port, "/admin/users").status == 403, "/admin to be denied")
    assert send(port, "/admin").status == 403
    assert send(port, "/items").backend == "v1"
    # a path template (Envoy's uri_template matcher): {*} one segment, {**} the rest
    assert send(port, "/api/v1/secret/keys/a").status == 403
    assert send(port, "/api/v1/v2/secret/keys").backend == "v1"

    # ALLOW: only requests some rule matches pass; the DENY still wins for its path
    config_dir.write("get-only.yaml", ALLOW_GET_ONLY)
    wait_until(lambda: send(port, "/items").status == 403, "requests without x-team to be refused")
    assert send(port, "/items", headers={"x-team": "blue"}).backend == "v1"
    assert send(port, "/admin", headers={"x-team": "blue"}).status == 403
    assert envoy.rejected_updates().get("listener_manager.lds.update_rejected") == 0


ISSUER = "testing@secure.istio.io"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _signing_key() -> tuple[rsa.RSAPrivateKey, str]:
    """An RSA key and its JWKS (one key, RS256)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    numbers = key.public_key().public_numbers()
    jwk = {
        "kty": "RSA", "alg": "RS256", "use": "sig", "kid": "k1",
        "n": _b64(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")),
        "e": _b64(numbers.e.to_bytes(3, "big")),
    }  # fmt: skip
    return key, json.dumps({"keys": [jwk]})


def _token(key: rsa.RSAPrivateKey, subject: str = "user-1") -> str:
    header = _b64(json.dumps({"alg": "RS256", "kid": "k1", "typ": "JWT"}).encode())
    claims = {"iss": ISSUER, "sub": subject, "exp": int(time.time()) + 3600}
    signing_input = f"{header}.{_b64(json.dumps(claims).encode())}"
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64(signature)}"


def _jwt_policies(jwks: str) -> str:
    return f"""
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {{name: jwt, namespace: istio-system}}
spec:
  selector: {{matchLabels: {{istio: ingressgateway}}}}
  jwtRules:
  - issuer: {ISSUER}
    jwks: '{jwks}'
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: require-jwt, namespace: istio-system}}
spec:
  selector: {{matchLabels: {{istio: ingressgateway}}}}
  action: DENY
  rules:
  - from: [{{source: {{notRequestPrincipals: ["*"]}}}}]
    to: [{{operation: {{paths: ["/secure*"]}}}}]
"""


def test_gateway_requires_a_jwt_where_a_policy_says_and_accepts_one_signed_by_the_inline_jwks(
    config_dir: ConfigDir, start_backends: StartBackends, start_pilotfish: StartPilotfish, start_envoy: StartEnvoy
) -> None:
    port = _app_behind_the_gateway(config_dir, start_backends)
    envoy = start_envoy(start_pilotfish(config_dir), GATEWAY)
    wait_until(routed_to(port, "v1"), "the gateway to route to v1")

    key, jwks = _signing_key()
    config_dir.write("jwt.yaml", _jwt_policies(jwks))
    wait_until(lambda: send(port, "/secure/data").status == 403, "/secure without a token to be refused")
    token = _token(key)
    assert send(port, "/secure/data", headers={"Authorization": f"Bearer {token}"}).backend == "v1"
    # a token that does not verify is refused by jwt_authn itself; paths the policy leaves alone pass
    forged = _token(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    assert send(port, "/secure/data", headers={"Authorization": f"Bearer {forged}"}).status == 401
    assert send(port, "/items").backend == "v1"
    assert envoy.rejected_updates().get("listener_manager.lds.update_rejected") == 0


class _ExtAuthzServer:
    """An HTTP ext_authz service: 200 when the check carries ``x-ext-authz: allow``, else 403;
    it keeps the paths it was asked about."""

    def __init__(self, address: str) -> None:
        self.checked: list[str] = []
        self._backends = Backends({"authz": address}, self._handler)

    def _handler(self, name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def check(request: web.Request) -> web.Response:
            self.checked.append(request.path)
            allowed = request.headers.get("x-ext-authz") == "allow"
            return web.Response(status=200 if allowed else 403, headers={"x-ext-authz-result": str(allowed)})

        return check

    def __enter__(self) -> _ExtAuthzServer:
        self._backends.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._backends.stop()

    @property
    def port(self) -> int:
        return self._backends.port


def _ext_authz_config(port: int) -> str:
    return f"""
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: ext-authz, namespace: apps}}
spec:
  hosts: [authz.example.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: {port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.31}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: ext-authz, namespace: istio-system}}
spec:
  selector: {{matchLabels: {{istio: ingressgateway}}}}
  action: CUSTOM
  provider: {{name: ext-authz-http}}
  rules:
  - to: [{{operation: {{paths: ["/ext/*"]}}}}]
"""


def test_gateway_asks_the_custom_providers_service_where_a_custom_policy_says(
    config_dir: ConfigDir, start_backends: StartBackends, start_pilotfish: StartPilotfish, start_envoy: StartEnvoy
) -> None:
    """An AuthorizationPolicy CUSTOM with the mesh config's envoyExtAuthzHttp provider: the
    gateway asks the provider's service about the paths the policy names and follows its answer;
    with the provider gone from the mesh config, those paths are refused."""
    port = _app_behind_the_gateway(config_dir, start_backends)
    mesh = (TEMPLATES / "mesh.yaml").read_text()
    with _ExtAuthzServer("127.0.0.31") as authz:
        provider = {"name": "ext-authz-http", "envoyExtAuthzHttp": {
            "service": "authz.example.internal", "port": authz.port, "includeRequestHeadersInCheck": ["x-ext-authz"],
        }}  # fmt: skip
        config_dir.write("mesh.yaml", mesh + yaml.safe_dump({"extensionProviders": [provider]}))
        envoy = start_envoy(start_pilotfish(config_dir), GATEWAY)
        wait_until(routed_to(port, "v1"), "the gateway to route to v1")
        config_dir.write("ext-authz.yaml", _ext_authz_config(authz.port))
        wait_until(lambda: send(port, "/ext/data").status == 403, "/ext to be checked and refused")
        assert send(port, "/ext/data", headers={"x-ext-authz": "allow"}).backend == "v1"
        assert send(port, "/items").backend == "v1"  # not a path the policy names: never checked
        assert set(authz.checked) == {"/ext/data"}

        config_dir.write("mesh.yaml", mesh)  # the provider is gone: the policy's paths are denied
        wait_until(
            lambda: send(port, "/ext/data", headers={"x-ext-authz": "allow"}).status == 403, "/ext to be denied"
        )
        assert send(port, "/items").backend == "v1"
        assert envoy.rejected_updates().get("listener_manager.lds.update_rejected") == 0
