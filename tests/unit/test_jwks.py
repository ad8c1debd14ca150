"""RequestAuthentication jwksUri keys fetched by the control plane (istiod's default
PILOT_JWT_ENABLE_REMOTE_JWKS=false): which uris pilotfish fetches, the keys put inline in the
policies, the resolver against a real HTTP server, and a served listener carrying them."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest
from aiohttp import web
from envoy.config.listener.v3 import listener_pb2
from envoy.extensions.filters.http.jwt_authn.v3 import config_pb2 as jwt_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from google.protobuf import any_pb2

from app.config.loader import load_documents
from app.config.objects import ConfigObject
from app.model.features import Features
from app.model.jwks import ENVOY, HYBRID, ISTIOD, UNFETCHED_JWKS, fetch_mode, uris_to_fetch, with_fetched_keys
from app.security.jwks import MAX_BYTES, JwksResolver
from app.xds.client import node
from app.xds.fetch import fetch
from tests.e2e.harness import ConfigDir
from tests.e2e.processes import run_pilotfish

REPO = Path(__file__).resolve().parents[2]
KEYS = json.dumps(
    {
        "keys": [
            {
                "kty": "RSA",
                "e": "AQAB",
                "kid": "k1",
                "n": (
                    "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU"
                    "1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3"
                    "UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC"
                    "2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw"
                ),
            }
        ]
    }
)
RULE = """apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  selector: {{matchLabels: {{app: productpage}}}}
  jwtRules:
  - issuer: https://issuer.example
    jwksUri: {uri}
"""


def _policy(uri: str, name: str = "jwt", namespace: str = "bookinfo") -> list[ConfigObject]:
    result = load_documents(RULE.format(uri=uri, name=name, namespace=namespace), "jwt.yaml")
    assert not result.rejected
    return list(result.objects)


def test_istiods_modes_by_its_names() -> None:
    assert [fetch_mode(v) for v in ("false", "istiod", "true", "hybrid", "envoy", "other")] == [
        ISTIOD, ISTIOD, HYBRID, HYBRID, ENVOY, ISTIOD
    ]  # fmt: skip
    assert Features.from_env({}).jwks_fetch_mode == ISTIOD
    assert Features.from_env({"PILOT_JWT_ENABLE_REMOTE_JWKS": "envoy"}).jwks_fetch_mode == ENVOY


def test_the_control_plane_inlines_what_it_fetched_and_a_key_no_one_holds_until_then() -> None:
    policies = _policy("https://keys.example/jwks") + _policy("https://other.example/jwks", "other")
    never = lambda host: False  # noqa: E731
    wanted = uris_to_fetch(policies, ISTIOD, never)
    assert wanted == {"https://keys.example/jwks": 5.0, "https://other.example/jwks": 5.0}
    inlined = with_fetched_keys(policies, {"https://keys.example/jwks": KEYS}, ISTIOD, never)
    assert [p.spec.jwt_rules[0].jwks for p in inlined] == [KEYS, UNFETCHED_JWKS]
    assert [p.spec.jwt_rules[0].jwks_uri for p in inlined] == [
        "https://keys.example/jwks",
        "https://other.example/jwks",
    ]
    assert not policies[0].spec.jwt_rules[0].jwks  # the stored policy is left as written
    # envoy: the proxy fetches; hybrid: the proxy for a host of the mesh, the control plane else
    assert uris_to_fetch(policies, ENVOY, never) == {}
    assert with_fetched_keys(policies, {}, ENVOY, never) == tuple(policies)
    mesh = {"keys.example"}.__contains__
    assert list(uris_to_fetch(policies, HYBRID, mesh)) == ["https://other.example/jwks"]


@pytest.fixture
async def jwks_server() -> AsyncIterator[tuple[str, dict[str, tuple[int, bytes]]]]:
    """A JWKS endpoint whose answers the test sets: ``served["/path"] = (status, body)``."""
    served: dict[str, tuple[int, bytes]] = {}

    async def handle(request: web.Request) -> web.Response:
        status, body = served.get(request.path, (404, b"not found"))
        return web.Response(status=status, body=body)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", served
    finally:
        await runner.cleanup()


async def test_the_resolver_keeps_good_keys_and_refuses_what_is_not_a_key_set(
    jwks_server: tuple[str, dict[str, tuple[int, bytes]]],
) -> None:
    base, served = jwks_server
    served["/good"] = (200, KEYS.encode())
    served["/html"] = (200, b"<html>")
    served["/huge"] = (200, b'{"keys": [' + b" " * MAX_BYTES + b"]}")
    changes: list[frozenset[str]] = []
    resolver = JwksResolver(changes.append, refresh=0.2, retry=0.2)
    try:
        resolver.want({f"{base}/good": 2.0, f"{base}/html": 2.0, f"{base}/huge": 2.0, f"{base}/missing": 2.0})
        await resolver.fetched(timeout=5)
        assert resolver.keys == {f"{base}/good": KEYS}
        assert changes == [frozenset({f"{base}/good"})]
        # a failing refresh keeps the keys; a changed key set is reported again
        served["/good"] = (500, b"down")
        await asyncio.sleep(0.5)
        assert resolver.keys == {f"{base}/good": KEYS}
        rotated = KEYS.replace('"k1"', '"k2"')
        served["/good"] = (200, rotated.encode())
        for _ in range(50):
            if resolver.keys[f"{base}/good"] == rotated:
                break
            await asyncio.sleep(0.1)
        assert resolver.keys[f"{base}/good"] == rotated and len(changes) == 2
        resolver.want({})  # no policy names them any more
        assert resolver.keys == {}
    finally:
        await resolver.close()


def _jwt_providers(listeners: Mapping[str, any_pb2.Any]) -> list[jwt_pb2.JwtProvider]:
    found = []
    for packed in listeners.values():
        listener = listener_pb2.Listener.FromString(packed.value)
        for chain in listener.filter_chains:
            for f in chain.filters:
                if not f.typed_config.type_url.endswith("HttpConnectionManager"):
                    continue
                manager = hcm_pb2.HttpConnectionManager.FromString(f.typed_config.value)
                for h in manager.http_filters:
                    if h.name == "envoy.filters.http.jwt_authn":
                        config = jwt_pb2.JwtAuthentication.FromString(h.typed_config.value)
                        found.extend(config.providers.values())
    return found


async def test_a_served_sidecar_gets_the_keys_the_control_plane_fetched(
    jwks_server: tuple[str, dict[str, tuple[int, bytes]]], tmp_path: Path
) -> None:
    """``pilotfish serve`` fetches a RequestAuthentication's jwksUri before its first push and
    puts the keys inline in the workload's jwt_authn provider, as istiod does by default."""
    base, served = jwks_server
    served["/jwks"] = (200, KEYS.encode())
    config = ConfigDir(tmp_path / "config")
    shutil.copytree(REPO / "examples" / "bookinfo", config.path, dirs_exist_ok=True)
    config.write("jwt.yaml", RULE.format(uri=f"{base}/jwks", name="jwt", namespace="bookinfo"))
    productpage = node("sidecar~10.1.0.10~productpage-v1-0.bookinfo~bookinfo.svc.cluster.local", {
        "NAMESPACE": "bookinfo", "LABELS": {"app": "productpage", "version": "v1"}, "INSTANCE_IPS": "10.1.0.10",
    })  # fmt: skip
    with run_pilotfish(config, tmp_path) as pilotfish:
        # the first push waits up to FIRST_FETCH_WAIT for the fetch; on a loaded machine it may
        # go out with istiod's unfetched stand-in first, and the keys follow when they arrive
        deadline = time.monotonic() + 30
        while True:
            held = await fetch(f"127.0.0.1:{pilotfish.xds_port}", productpage)
            providers = _jwt_providers(held["lds"])
            assert providers, "no jwt_authn provider in productpage's listeners"
            inline = {p.local_jwks.inline_string for p in providers}
            if inline == {KEYS} or time.monotonic() > deadline:
                break
            assert inline == {UNFETCHED_JWKS}, inline
            await asyncio.sleep(0.5)
    assert inline == {KEYS}
    assert not any(p.HasField("remote_jwks") for p in providers)
