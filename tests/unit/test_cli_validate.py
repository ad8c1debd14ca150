"""``pilotfish validate``: offline, like ``istioctl validate -f``: one line per problem naming
file, kind, namespace/name, field and reason; exit status 1 when there is any."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main

BAD = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: cart, namespace: shop}
spec: {host: cart, trafficPolicy: {connectionPool: {tcp: {maxConnections: lots}}}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ok, namespace: shop}
spec: {hosts: [cart], http: [{route: [{destination: {host: cart}}]}]}
"""


def test_problems_are_one_line_each_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.yaml").write_text(BAD)
    (tmp_path / "mesh.yaml").write_text("connectTimeout: soon\n")
    assert main(["validate", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{tmp_path / 'bad.yaml'}") and "DestinationRule shop/cart" in lines[0]
    assert "maxConnections" in lines[0]
    assert lines[1].startswith(f"{tmp_path / 'mesh.yaml'}") and "connectTimeout" in lines[1]


def test_valid_config_exits_0_silently(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "examples/bookinfo"]) == 0
    assert capsys.readouterr().out == ""


def test_a_missing_path_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


ENVOY_FILTERS = """apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: lua, namespace: shop}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    match: {listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}}
    patch:
      operation: INSERT_FIRST
      value: {name: envoy.lua, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua}}
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: broken, namespace: shop}
spec:
  configPatches:
  - applyTo: CLUSTER
    match: {listener: {name: virtualInbound}}
    patch: {operation: REMOVE}
"""


def test_envoy_filters_get_istioctls_warning_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "filters.yaml").write_text(ENVOY_FILTERS)
    assert main(["validate", str(tmp_path)]) == 1
    error, warning = capsys.readouterr().out.splitlines()
    assert "EnvoyFilter shop/broken" in error and "configPatches[0].match" in error
    assert "cannot have non cluster match" in error
    assert warning.startswith("warning: ") and "EnvoyFilter shop/lua" in warning
    assert "EnvoyFilter exposes internal implementation details" in warning
