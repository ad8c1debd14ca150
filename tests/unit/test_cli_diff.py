"""``pilotfish diff`` offline (``--config-dir``) on the bookinfo example and on a generated mesh,
and ``--server`` against a running pilotfish: the summary, ``-o json`` in the README's shape,
``--show-diff``, ``--delete``, ``--proxy``, an invalid object rejected with ``validate``'s line
while the rest previews, and ``--fail-on-reach``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from app.cli import main
from app.config.objects import Kind
from app.runtime import Runtime
from bench.mesh import Mesh, MeshSpec
from tests.support.bookinfo import BOOKINFO
from tests.support.runtime import running_bookinfo

RATINGS_DR = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings-extra, namespace: bookinfo}
spec:
  host: ratings
  trafficPolicy: {connectionPool: {tcp: {maxConnections: 7}}}
"""
BROKEN_VS = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: broken, namespace: bookinfo}
spec:
  hosts: [ratings]
  http: [{timeout: soon, route: [{destination: {host: ratings}}]}]
"""
CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
BOOKINFO_SIDECARS = 6  # the injected namespace's pods


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    status = main(["diff", *argv, "-o", "json"])
    return status, json.loads(capsys.readouterr().out)


def test_a_destination_rule_reaches_every_sidecar_that_sees_ratings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change = tmp_path / "dr.yaml"
    change.write_text(RATINGS_DR)
    status, doc = run_json(capsys, "--config-dir", str(BOOKINFO), "-f", str(change))
    assert status == 0
    assert set(doc) == {"change", "rejected", "proxies", "unaffected"}
    assert doc["change"] == [{"kind": "DestinationRule", "namespace": "bookinfo", "name": "ratings-extra", "op": "add"}]
    assert doc["rejected"] == []
    assert len(doc["proxies"]) + doc["unaffected"] == BOOKINFO_SIDECARS
    for proxy in doc["proxies"]:
        assert set(proxy) == {"id", "types"}
        cds = proxy["types"][CDS]
        assert set(cds) == {"added", "modified", "removed", "bytes"}
        assert "outbound|9080||ratings.bookinfo.svc.cluster.local" in cds["modified"] and cds["bytes"] > 0
        assert cds["added"] == cds["removed"] == []
    assert "productpage-v1-0.bookinfo" in {p["id"] for p in doc["proxies"]}


def test_summary_and_show_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    change = tmp_path / "dr.yaml"
    change.write_text(RATINGS_DR)
    argv = ["diff", "--config-dir", str(BOOKINFO), "-f", str(change), "--proxy", "productpage-v1-0.bookinfo"]
    assert main([*argv, "--show-diff"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("add DestinationRule bookinfo/ratings-extra\nproxies reached: 1 of 1\n")
    assert "  productpage-v1-0.bookinfo\n    cds: added 0, modified " in out
    assert f"--- {CDS} outbound|9080||ratings.bookinfo.svc.cluster.local" in out
    assert '+        "maxConnections": 7,' in out


def test_an_invalid_object_is_rejected_with_validates_line_and_the_rest_previews(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change = tmp_path / "change.yaml"
    change.write_text(BROKEN_VS + "---\n" + RATINGS_DR)
    assert main(["validate", str(change)]) == 1
    [validate_line] = capsys.readouterr().out.splitlines()
    assert main(["diff", "--config-dir", str(BOOKINFO), "-f", str(change)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"rejected: {validate_line}" in out
    assert "add DestinationRule bookinfo/ratings-extra" in out
    _, doc = run_json(capsys, "--config-dir", str(BOOKINFO), "-f", str(change))
    [rejected] = doc["rejected"]
    assert rejected["kind"] == "VirtualService" and (rejected["namespace"], rejected["name"]) == ("bookinfo", "broken")
    assert rejected["field"] and rejected["reason"] and rejected["reason"] in validate_line
    assert [c["name"] for c in doc["change"]] == ["ratings-extra"] and doc["proxies"]


def test_a_delete_and_an_unknown_delete(capsys: pytest.CaptureFixture[str]) -> None:
    status, doc = run_json(capsys, "--config-dir", str(BOOKINFO), "--delete", "ServiceEntry/bookinfo/httpbin-ext",
                           "--delete", "DestinationRule/bookinfo/nope")  # fmt: skip
    assert status == 0
    assert doc["change"] == [{"kind": "ServiceEntry", "namespace": "bookinfo", "name": "httpbin-ext", "op": "delete"}]
    assert [(r["name"], r["reason"]) for r in doc["rejected"]] == [("nope", "no such object in force")]
    for proxy in doc["proxies"]:
        assert proxy["types"][CDS]["removed"] == ["outbound|443||httpbin.org"]


def test_fail_on_reach(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    change = tmp_path / "dr.yaml"
    change.write_text(RATINGS_DR)
    argv = ["diff", "--config-dir", str(BOOKINFO), "-f", str(change)]
    assert main([*argv, "--fail-on-reach", "1"]) == 2
    assert "more than 1" in capsys.readouterr().err
    assert main([*argv, "--fail-on-reach", str(BOOKINFO_SIDECARS)]) == 0


def test_bad_arguments_are_clear_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "--config-dir", str(BOOKINFO), "--delete", "Nonsense/x"]) == 2
    assert "--delete 'Nonsense/x'" in capsys.readouterr().err
    assert main(["diff", "--config-dir", str(BOOKINFO), "--delete", "Sidecar/bookinfo/default", "--proxy", "nope"]) == 2
    assert "--proxy 'nope'" in capsys.readouterr().err


@pytest.fixture
def generated(tmp_path: Path) -> Path:
    """A generated mesh (bench/mesh.py): 40 services in 4 injected namespaces, a Sidecar in
    each that keeps its proxies to their own namespace (120 sidecars)."""
    root = tmp_path / "mesh"
    Mesh(MeshSpec(services=40, namespaces=4, sidecars=True), root).write()
    namespaces = [f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: ns-{n}, labels: {{istio-injection: enabled}}}}\n"
                  for n in range(4)]  # fmt: skip
    (root / "namespaces.yaml").write_text("---\n".join(namespaces))
    return root


def test_generated_mesh_an_endpoint_change_reaches_one_namespace(
    generated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change = tmp_path / "pod.yaml"
    change.write_text(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
        "metadata: {name: svc-0-2, namespace: ns-0, labels: {kubernetes.io/service-name: svc-0}}\n"
        "addressType: IPv4\nports: [{name: http, port: 8080}, {name: tcp-db, port: 5432}]\n"
        "endpoints: [{addresses: [10.20.0.0], conditions: {ready: true}}]\n"
    )
    status, doc = run_json(capsys, "--config-dir", str(generated), "-f", str(change), "--fail-on-reach", "29")
    assert status == 2  # 30 pods in ns-0 see svc-0
    assert len(doc["proxies"]) == 30 and doc["unaffected"] == 90
    assert all(p["id"].endswith(".ns-0") for p in doc["proxies"])
    for proxy in doc["proxies"]:
        assert set(proxy["types"]) == {EDS}
        assert proxy["types"][EDS]["modified"] == [
            "outbound|5432||svc-0.ns-0.svc.cluster.local",
            "outbound|80||svc-0.ns-0.svc.cluster.local",
        ]


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    async with running_bookinfo(tmp_path) as rt:
        yield rt


async def test_server_previews_against_what_it_serves(
    runtime: Runtime, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change = tmp_path / "change.yaml"
    change.write_text(BROKEN_VS + "---\n" + RATINGS_DR)
    server = f"http://127.0.0.1:{runtime.http.port}"
    argv = ["diff", "--server", server, "-f", str(change), "--delete", "Sidecar/bookinfo/default"]
    assert await asyncio.to_thread(main, argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["add DestinationRule bookinfo/ratings-extra", "delete Sidecar bookinfo/default"]
    assert out[2].startswith(f"rejected: {change}#0: VirtualService bookinfo/broken: field http[0].timeout: ")
    assert out[3] == "proxies reached: 0 of 0"  # nobody connected
    # the YAML itself as the body, deletes in the query; nothing was applied by either
    url = f"{server}/debug/diff?delete=ServiceEntry/bookinfo/httpbin-ext"
    async with aiohttp.ClientSession() as http, http.post(url, data=RATINGS_DR) as resp:
        assert resp.status == 200
        doc = (await resp.json())["preview"]
    assert [(c["name"], c["op"]) for c in doc["change"]] == [("ratings-extra", "add"), ("httpbin-ext", "delete")]
    async with aiohttp.ClientSession() as http, http.post(f"{server}/debug/diff?delete=x", data="") as resp:
        assert resp.status == 400 and "--delete 'x'" in await resp.text()
    # was: json's RecursionError, a 500 and a traceback logged at ERROR
    deep = "[" * 100_000 + "]" * 100_000
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http, http.post(f"{server}/debug/diff", data=deep, headers=headers) as resp:
        assert resp.status == 400 and "nested deeper" in await resp.text()
    assert runtime.env.store.get(Kind.DESTINATION_RULE, "bookinfo", "ratings-extra") is None
    assert runtime.env.store.get(Kind.SIDECAR, "bookinfo", "default") is not None
