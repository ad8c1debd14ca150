"""Golden tests: config dir + proxy -> expected resources as YAML under tests/golden/<case>/.

Each case in tests/data/golden/<case>/ has ``config/`` (a config dir) and ``proxies.yaml``
(name -> nodeId, labels, node metadata). Run with UPDATE_GOLDEN=1 to rewrite the expected files, then read
the diff before committing. Every case is rendered twice through the served path
(``app.xds.generators``): once plain, once with the cache in assertion mode, which compares each
shared build with the one made for the very proxy served and fails on a difference.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.debug.dump import dump_clusters, dump_endpoints, dump_listeners, dump_name_table, dump_routes, dump_scope
from app.environment import Environment
from app.model.proxy import Proxy, build_proxy
from app.model.push_context import PushContext
from app.sources.files import FileSource
from app.xds.generators.reference import reference_source
from app.xds.generators.source import XdsGenerator

DATA = Path(__file__).parent.parent / "data" / "golden"
GOLDEN = Path(__file__).parent
DUMPS = {
    "cds": dump_clusters,
    "eds": dump_endpoints,
    "lds": dump_listeners,
    "rds": dump_routes,
    "nds": dump_name_table,
}
SCOPE = "scope"  # not generated: the SidecarScope itself


def _cases() -> list[Any]:
    out = []
    for case in sorted(p for p in DATA.iterdir() if p.is_dir()):
        proxies = yaml.safe_load((case / "proxies.yaml").read_text())
        for proxy in proxies:
            out.append(pytest.param(case.name, proxy, SCOPE, False, id=f"{case.name}-{proxy}-{SCOPE}"))
            for kind in DUMPS:
                for verify in (False, True):
                    mode = "assert" if verify else "served"
                    out.append(pytest.param(case.name, proxy, kind, verify, id=f"{case.name}-{proxy}-{kind}-{mode}"))
    return out


def _dump(kind: str, proxy: Proxy, push: PushContext, source: XdsGenerator) -> dict[str, Any]:
    return dump_scope(proxy, push) if kind == SCOPE else DUMPS[kind](proxy, push, source)


def _render(case: str, proxy_name: str, kind: str, verify: bool) -> str:
    source = FileSource(DATA / case / "config")
    env = Environment()
    env.apply(source.load())
    assert source.rejections() == [], source.rejections()
    spec: dict[str, Any] = yaml.safe_load((DATA / case / "proxies.yaml").read_text())[proxy_name]
    proxy = build_proxy(spec["nodeId"], {**spec.get("metadata", {}), "LABELS": spec.get("labels", {})})
    # through JSON: the dump is what `config-dump` prints (Any fields come back as OrderedDicts);
    # keys sorted because protobuf map (Struct) order is not stable
    push = env.build_push_context(None)
    dumped = json.loads(json.dumps(_dump(kind, proxy, push, reference_source(push, verify=verify))))
    return yaml.safe_dump(dumped, sort_keys=True, default_flow_style=False, width=120)


@pytest.mark.parametrize(("case", "proxy", "kind", "verify"), _cases())
def test_golden(case: str, proxy: str, kind: str, verify: bool) -> None:
    got = _render(case, proxy, kind, verify)
    path = GOLDEN / case / f"{proxy}.{kind}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1"
    assert got == path.read_text(), f"{path} differs: run with UPDATE_GOLDEN=1 and review the diff"
