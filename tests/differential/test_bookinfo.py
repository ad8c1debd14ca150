"""The differential test's CI subset (issue 27): istiod and pilotfish read the same cluster (the
bookinfo sample of the pinned istio module, its DestinationRules and a VirtualService), the
productpage sidecar's node asks each for CDS, EDS, LDS and RDS, and every difference must be one
expected_differences.yaml lists (intended, or a known defect with both values)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.differential.diff import TYPES, Judged, judge, load_expected, report
from tests.differential.fetch import Resources, fetch
from tests.differential.istiod import running_istiod
from tests.differential.normalize import resource, substitute
from tests.differential.scene import Scene, bookinfo
from tests.e2e.istio_proxy import istio_version
from tests.e2e.processes import run_pilotfish
from tests.support.cluster import Cluster, chart_role

PROXY = "productpage-v1"


@pytest.fixture(scope="module")
def fetched(
    kube_cluster: Cluster, pilotfish_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, Resources], dict[str, str]]]:
    """Both control planes' config for the productpage sidecar, fetched once for the module."""
    workdir = tmp_path_factory.mktemp("differential")
    scene = Scene.create(kube_cluster)
    try:
        chart_role(kube_cluster, scene.system)
        bookinfo(scene)
        node = scene.workloads[PROXY].node(istio_version())
        args = ("--system-namespace", scene.system)
        with (
            pytest.MonkeyPatch.context() as env,
            running_istiod(kube_cluster, scene.system, workdir / "istiod") as istiod,
        ):
            env.setenv("PILOTFISH_KUBE_CONTROLLERS", "false")  # istiod writes what a leader writes
            with run_pilotfish(None, workdir, kubeconfig=pilotfish_kubeconfig, extra_args=args) as pilotfish:
                placeholders = scene.placeholders()
                yield {
                    "istiod": asyncio.run(fetch(istiod.xds_address, node)),
                    "pilotfish": asyncio.run(fetch(f"127.0.0.1:{pilotfish.xds_port}", node)),
                }, placeholders
    finally:
        kube_cluster.delete_namespaces()


def _plain(held: Resources, type_: str, placeholders: dict[str, str]) -> dict[str, Any]:
    plain: dict[str, Any] = substitute({name: resource(r) for name, r in held.get(type_, {}).items()}, placeholders)
    return plain


@pytest.mark.parametrize("type_", TYPES)
def test_no_differences_beyond_the_reviewed_list(
    fetched: tuple[dict[str, Resources], dict[str, str]], type_: str
) -> None:
    held, placeholders = fetched
    istiod, pilotfish = _plain(held["istiod"], type_, placeholders), _plain(held["pilotfish"], type_, placeholders)
    assert istiod, f"istiod sent no {type_}"
    judged: Judged = judge(type_, istiod, pilotfish, load_expected())
    text = report(f"bookinfo x {PROXY}", judged)
    print(text)
    if dump := os.environ.get("DIFFERENTIAL_DUMP"):  # every difference as JSON, for reviewing the list
        with open(dump, "a") as out:
            for d in judged.unlisted + [d for d, _ in judged.listed]:
                out.write(json.dumps(dataclasses.asdict(d)) + "\n")
    assert not judged.unlisted, text
