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
