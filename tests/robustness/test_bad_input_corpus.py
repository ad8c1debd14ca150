"""Bad input never takes the mesh down (DESIGN §5), case by case against the real running server.

One runtime serves a config dir for the whole module (xDS and debug HTTP on free ports). Every
case (tests/robustness/corpus.py) has a file of its own holding a good version of one object,
there when the runtime starts (the mesh's cases, which share one identity, write theirs in
turn); the case turns it into the hostile version and asserts through the debug HTTP server:
the rejection names the file (and the object, where its identity is readable); the object's
last good version is what is in force; the sentinel objects of another file are untouched and
still served to a proxy; nothing failed in the push pipeline or logged a traceback; ``/ready``
still answers. Then the file is removed. One file-system event per case keeps the corpus fast.
``/debug/configz`` shows the Istio kinds in force and every rejection (as istiod's, in Kubernetes
form: app/debug/configz.py); what else is in force is read from the runtime's sources.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from app.config.objects import ISTIO_KINDS, ConfigObject, Kind
from app.debug.configz import SOURCE_ANNOTATION, is_rejection
from app.model.proxy import build_proxy
from app.runtime import Runtime
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, ROUTE
from app.xds.watch import WatchedResource
from tests.robustness.corpus import CASES, GOOD, KINDS, NS, Case, good_text, write_text
from tests.robustness.serving import get_json, ready, serving
from tests.support import waiting

pytestmark = pytest.mark.asyncio(loop_scope="module")

SENTINEL = f"""apiVersion: v1
kind: Namespace
metadata: {{name: {NS}, resourceVersion: sentinel}}
---
apiVersion: v1
kind: Service
metadata: {{name: sentinel, namespace: {NS}, resourceVersion: sentinel}}
spec:
  selector: {{app: sentinel}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: sentinel-0, namespace: {NS}, resourceVersion: sentinel, labels: {{app: sentinel}}}}
spec: {{containers: [{{name: app, ports: [{{containerPort: 8080}}]}}]}}
status: {{podIP: 10.7.0.1, phase: Running}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: sentinel, namespace: {NS}, resourceVersion: sentinel}}
spec:
  host: sentinel.{NS}.svc.cluster.local
  trafficPolicy: {{connectionPool: {{tcp: {{maxConnections: 7}}}}}}
"""
SENTINEL_OBJECTS = {
    ("Namespace", "", NS),
    ("Service", NS, "sentinel"),
    ("Pod", NS, "sentinel-0"),
    ("DestinationRule", NS, "sentinel"),
}
SENTINEL_CLUSTER = f"outbound|80||sentinel.{NS}.svc.cluster.local"
PROXY = build_proxy(f"sidecar~10.7.0.1~sentinel-0.{NS}~{NS}.svc.cluster.local", {"LABELS": {"app": "sentinel"}})
WAIT = 10.0


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def runtime(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Runtime]:
    config = tmp_path_factory.mktemp("corpus") / "config"
    config.mkdir()
    (config / "sentinel.yaml").write_text(SENTINEL)
    for index, case in enumerate(CASES):
        if case.kind != "mesh":
            write_text(case_file(config, index), good_text(case.kind, f"c{index}", GOOD))
    async with serving(config) as rt:
        yield rt


def case_file(config: Path, index: int) -> Path:
    return config / f"case-{index:03d}.yaml"


def identity(case: Case, name: str) -> tuple[str, str, str]:
    kind, namespaced = KINDS[case.kind]
    if case.kind == "mesh":
        return kind, "", "mesh"
    return kind, NS if namespaced else "", name


def object_words(case: Case, name: str) -> tuple[str, ...]:
    """How an error line names the object (either will do)."""
    kind, ns, obj = identity(case, name)
    if case.kind == "mesh":
        return ("MeshConfig mesh", "ConfigMap istio-system/istio")
    # without a readable namespace the line names the object by kind and name
    return (f"{kind} {ns}/{obj}", f"{kind} {obj}:") if ns else (f"{kind} {obj}",)


def objects_in_force(rt: Runtime) -> list[ConfigObject]:
    return [obj for source in rt.sources for obj in source.objects()]


def key_of(obj: ConfigObject) -> tuple[str, str, str]:
    return str(obj.kind), obj.meta.namespace, obj.meta.name


def in_force(rt: Runtime, key: tuple[str, str, str]) -> ConfigObject | None:
    return next((obj for obj in objects_in_force(rt) if key_of(obj) == key), None)


def version(rt: Runtime, key: tuple[str, str, str], case: Case) -> str | None:
    """The version in force: the resourceVersion, or for the mesh its connect timeout."""
    obj = in_force(rt, key)
    if obj is None:
        return None
    if case.kind == "mesh":
        return GOOD if rt.env.store.mesh.connect_timeout.seconds == 7 else "other"
    return obj.meta.resource_version


def ident(item: dict[str, Any]) -> tuple[str, str, str]:
    return item["kind"], item["metadata"]["namespace"], item["metadata"]["name"]


def source_of(item: dict[str, Any]) -> str:
    return str(item["metadata"]["annotations"][SOURCE_ANNOTATION])


def held_sources(rt: Runtime, configz: list[dict[str, Any]], key: tuple[str, str, str]) -> list[str]:
    """Where the object ``key`` in force comes from: ``/debug/configz`` for the Istio kinds it
    shows (in Kubernetes form), the runtime's sources for the others."""
    if Kind(key[0]) in ISTIO_KINDS:
        return [source_of(o) for o in configz if not is_rejection(o) and ident(o) == key]
    return [obj.source for obj in objects_in_force(rt) if key_of(obj) == key]


def of_file(lines: list[str], file: Path) -> list[str]:
    """The rejection lines about ``file`` (its documents ``#i``, or the ConfigMap inside it)."""
    return [line for line in lines if line.startswith((f"{file}:", f"{file}#", f"{file} ("))]


async def until(what: str, done: Callable[[], bool]) -> None:
    await waiting.until(what, done, within=WAIT, every=0.01)


async def settled(rt: Runtime) -> None:
    """Every config change so far has been pushed (the PushContext rebuilt)."""
    await until("the debouncer caught up", lambda: rt.debouncer.committed == rt.debouncer.received)


def remove(file: Path) -> None:
    for path in (file, file.with_name(f"{file.stem}-loop.yml")):
        if path.is_symlink() or path.exists():
            path.unlink()


def served_clusters(rt: Runtime) -> set[str]:
    """Generate what the sentinel's sidecar is served, every type: nothing may raise."""
    names: set[str] = set()
    for type_url in (CLUSTER, ENDPOINT, LISTENER, ROUTE):
        resources = rt.generator.generate(type_url, PROXY, WatchedResource(type_url, True)) or []
        if type_url == CLUSTER:
            names = {r.name for r in resources}
    return names


class NotRejected(AssertionError):
    """The input was taken: a gap's expected failure (any other failure still fails the case)."""


class LastGoodLost(AssertionError):
    """The input was rejected, but its last good version is not what is in force."""


def params() -> list[Any]:
    out = []
    for case in CASES:
        marks = []
        if case.gap:
            marks.append(pytest.mark.xfail(strict=True, raises=NotRejected, reason=f"gap: {case.gap}"))
        if case.bug:
            marks.append(pytest.mark.xfail(strict=True, raises=LastGoodLost, reason=f"bug: {case.bug}"))
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


@pytest.mark.asyncio(loop_scope="module")
async def test_the_corpus_is_large_and_covers_every_kind() -> None:
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)
    assert {c.kind for c in CASES} == set(KINDS)


@pytest.mark.parametrize("case", params())
async def test_bad_input(runtime: Runtime, case: Case, caplog: pytest.LogCaptureFixture) -> None:
    rt = runtime
    config = rt.settings.config_dir
    assert config is not None
    index = CASES.index(case)
    name = f"c{index}"
    file = case_file(config, index)
    key = identity(case, name)
    caplog.set_level(logging.INFO)
    try:
        if case.kind == "mesh":
            write_text(file, good_text(case.kind, name, GOOD))
        await until("the good version is in force", lambda: version(rt, key, case) == GOOD)
        await settled(rt)
        failures = rt.debouncer.failures

        case.make(name, file)

        def reacted() -> bool:
            return bool(of_file([str(e) for e in rt.rejections()], file)) or version(rt, key, case) != GOOD

        await until("the bad input was read", reacted)
        await settled(rt)

        lines = of_file(await get_json(rt, "/debug/rejections"), file)
        configz = await get_json(rt, "/debug/configz")
        held = held_sources(rt, configz, key)

        # first, for every case (a gap's accepted object included): everything else is
        # untouched and still served, nothing failed
        sentinel_file = str(config / "sentinel.yaml")
        shown = {ident(o) for o in configz if not is_rejection(o) and source_of(o).startswith(sentinel_file)}
        assert shown == {o for o in SENTINEL_OBJECTS if Kind(o[0]) in ISTIO_KINDS}
        sentinel = {key_of(o) for o in objects_in_force(rt) if o.source.startswith(sentinel_file)}
        assert sentinel == SENTINEL_OBJECTS
        assert not [r for r in configz if is_rejection(r) and source_of(r).startswith(sentinel_file)]
        assert SENTINEL_CLUSTER in served_clusters(rt)
        assert rt.debouncer.failures == failures, "a push failed"
        assert await ready(rt)
        bad_logs = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
        assert not bad_logs, [r.getMessage() for r in bad_logs]

        # then what this input must come to
        if case.expect == "rejected":
            if not lines:
                raise NotRejected(f"no rejection names {file}")
            line = next((line for line in lines if case.says in line), lines[0])
            assert case.says in line, line
            if case.names_object:
                assert any(words in line for words in object_words(case, name)), line
            # the last good version stays in force, from this file
            if not (len(held) == 1 and held[0].startswith(str(file)) and version(rt, key, case) == GOOD):
                raise LastGoodLost(f"in force: {held}")
        elif case.expect == "accepted":
            assert not lines, lines
            assert version(rt, key, case) not in (None, GOOD)
        else:
            assert case.expect == "deleted"
            assert not lines and not held, (lines, held)
    finally:
        remove(file)
        if case.kind == "mesh":  # the next mesh case brings its own
            await until("the mesh's file is gone", lambda: in_force(rt, key) is None)


async def test_after_the_corpus_nothing_of_it_is_left(runtime: Runtime) -> None:
    rt = runtime
    config = rt.settings.config_dir
    assert config is not None
    for index in range(len(CASES)):  # each case removed its file; not so when run alone
        remove(case_file(config, index))

    def clean() -> bool:
        objects = {key_of(o) for o in objects_in_force(rt)}
        return objects == SENTINEL_OBJECTS and not rt.rejections()

    await until("only the sentinel is left", clean)
    await settled(rt)
    assert SENTINEL_CLUSTER in served_clusters(rt)


async def test_the_config_dir_vanishing_keeps_the_last_good_config(runtime: Runtime) -> None:
    # the directory is unknown, not empty: nothing is deleted while it is away, and it is read
    # again when it is back (its watch restarts with backoff)
    rt = runtime
    config = rt.settings.config_dir
    assert config is not None
    before = rt.config_status()
    away = config.with_name("config-away")
    os.rename(config, away)
    try:
        await asyncio.sleep(0.5)
        assert rt.config_status() == before
        assert SENTINEL_CLUSTER in served_clusters(rt)
        assert await ready(rt)
    finally:
        os.rename(away, config)
    file = config / "back.yaml"
    write_text(file, good_text("se", "back", GOOD))
    try:
        await until("the directory is followed again", lambda: in_force(rt, ("ServiceEntry", NS, "back")) is not None)
    finally:
        remove(file)
        await until("back.yaml is gone", lambda: in_force(rt, ("ServiceEntry", NS, "back")) is None)
