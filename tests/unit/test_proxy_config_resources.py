"""ProxyConfig resources (networking.istio.io/v1beta1) at injection, as istiod's webhook reads them
(GetProxyConfigOrDefault -> EffectiveProxyConfig): the root namespace's, the pod's namespace's,
the pod's proxy.istio.io/config annotation, then the resource selecting the pod; the oldest of a
level applies. The cases of EffectiveProxyConfig are istiod's TestEffectiveProxyConfig
(pilot/pkg/model/proxy_config_test.go), read here from YAML as the file source and the informer
read them."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from app.api.mesh import ProxyConfig
from app.config.loader import load_documents
from app.config.mesh import default_mesh_config
from app.config.objects import ConfigObject, Kind
from app.inject.proxy_config import ProxyConfigs, default_proxy_config
from app.inject.source import injection_source
from app.settings import Settings
from app.webhook.injection import inject_decision
from tests.support.bookinfo import EXTRA_DR, RATINGS
from tests.support.json_patch import apply_patch
from tests.support.runtime import running_bookinfo
from tests.support.waiting import until
from tests.unit.test_failed_build import Client, max_connections

ROOT = "istio-system"


def proxy_config(name: str, namespace: str, spec: Mapping[str, Any], created: str = "") -> str:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if created:
        meta["creationTimestamp"] = created
    doc = {"apiVersion": "networking.istio.io/v1beta1", "kind": "ProxyConfig", "metadata": meta, "spec": spec}
    return json.dumps(doc)


def objects(*docs: str) -> list[ConfigObject]:
    result = load_documents("\n---\n".join(docs), "proxyconfigs.yaml")
    assert not result.rejected, result.rejected
    return result.objects


def effective(
    docs: Sequence[str],
    namespace: str,
    labels: Mapping[str, str] | None = None,
    annotation: str | None = None,
    default: ProxyConfig | None = None,
) -> ProxyConfig:
    base = default_proxy_config()
    if default is not None:
        base.MergeFrom(default)
    return ProxyConfigs.of(ROOT, objects(*docs)).effective(base, namespace, labels or {}, annotation)


def expected(**fields: Any) -> ProxyConfig:
    pc = default_proxy_config()
    pc.MergeFrom(ProxyConfig(**fields))
    return pc


SELECTED = {"selector": {"matchLabels": {"test": "selector"}}}


def test_a_namespace_resource_applies_to_its_namespace() -> None:
    docs = [proxy_config("ns", "test-ns", {"concurrency": 3, "image": {"imageType": "debug"}})]
    assert effective(docs, "test-ns") == expected(concurrency={"value": 3}, image={"image_type": "debug"})
    assert effective(docs, "other") == expected()


def test_a_root_namespace_resource_takes_precedence_over_mesh_default_config() -> None:
    docs = [proxy_config("ns", ROOT, {"concurrency": 3})]
    got = effective(docs, "bar", default=ProxyConfig(concurrency={"value": 2}))
    assert got == expected(concurrency={"value": 3})


def test_a_concurrency_of_zero_replaces_the_mesh_wide_one() -> None:
    docs = [proxy_config("ns", "test-ns", {"concurrency": 0})]
    got = effective(docs, "test-ns", default=ProxyConfig(concurrency={"value": 2}))
    assert got.HasField("concurrency") and got.concurrency.value == 0


def test_a_workload_resource_takes_precedence_over_the_namespace_one() -> None:
    docs = [
        proxy_config("workload", "test-ns", {**SELECTED, "concurrency": 3}),
        proxy_config("ns", "test-ns", {"concurrency": 2}),
    ]
    assert effective(docs, "test-ns", {"test": "selector"}) == expected(concurrency={"value": 3})
    assert effective(docs, "test-ns", {"test": "other"}) == expected(concurrency={"value": 2})


def test_a_matching_workload_resource_takes_precedence_over_the_annotation() -> None:
    docs = [proxy_config("workload", "test-ns", {**SELECTED, "concurrency": 3, "image": {"imageType": "debug"}})]
    got = effective(docs, "test-ns", {"test": "selector"}, '{ "concurrency": 5 }')
    assert got == expected(concurrency={"value": 3}, image={"image_type": "debug"})
    # the annotation still applies over the namespace's resources
    docs = [proxy_config("ns", "test-ns", {"concurrency": 3})]
    assert effective(docs, "test-ns", {}, '{ "concurrency": 5 }') == expected(concurrency={"value": 5})


def test_resources_of_other_namespaces_are_ignored() -> None:
    docs = [
        proxy_config("ns", "wrong-ns", {"concurrency": 1}),
        proxy_config("workload", "wrong-ns", {**SELECTED, "concurrency": 2}),
        proxy_config("global", ROOT, {"concurrency": 3}),
    ]
    assert effective(docs, "test-ns", {"test": "selector"}) == expected(concurrency={"value": 3})


def test_of_several_matching_workload_resources_the_oldest_applies() -> None:
    docs = [
        proxy_config("workload-c", "test-ns", {**SELECTED, "environmentVariables": {"C": "3"}}, "2026-01-01T01:00:00Z"),
        proxy_config("workload-b", "test-ns", {**SELECTED, "environmentVariables": {"B": "2"}}, "2026-01-01T01:00:00Z"),
        proxy_config("workload-a", "test-ns", {**SELECTED, "environmentVariables": {"A": "1"}}, "2026-01-01T00:00:00Z"),
    ]
    assert effective(docs, "test-ns", {"test": "selector"}) == expected(proxy_metadata={"A": "1"})


def test_of_several_namespace_resources_the_oldest_applies_and_levels_merge_metadata() -> None:
    docs = [
        proxy_config("b", "test-ns", {"environmentVariables": {"B": "2"}}, "2026-01-01T01:00:00Z"),
        proxy_config("a", "test-ns", {"environmentVariables": {"A": "1"}}, "2026-01-01T00:00:00Z"),
        proxy_config("mesh", ROOT, {"environmentVariables": {"A": "0", "M": "1"}}),
    ]
    assert effective(docs, "test-ns") == expected(proxy_metadata={"A": "1", "M": "1"})


def test_an_empty_selector_selects_no_workload_and_is_no_namespace_resource() -> None:
    docs = [proxy_config("empty", "test-ns", {"selector": {}, "concurrency": 4})]
    assert effective(docs, "test-ns", {"app": "x"}) == expected()


def test_no_resource_and_no_default_config_gives_istiods_defaults() -> None:
    assert effective([], "ns") == expected()


def test_a_negative_concurrency_is_refused_naming_the_field() -> None:
    result = load_documents(proxy_config("bad", "ns", {"concurrency": -1}), "bad.yaml")
    assert [r.error.field for r in result.rejected] == ["concurrency"]
    assert "bad.yaml" in str(result.rejected[0].error) and "ProxyConfig" in str(result.rejected[0].error)


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "labels": {"app": "web"}},
    "spec": {"containers": [{"name": "web", "image": "example.com/web:1"}]},
}


def injected_proxy(source: Any, pod: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    request = {"uid": "u-1", "operation": "CREATE", "namespace": namespace, "object": pod}
    decision = inject_decision(request, source(), "/inject")
    assert decision["allowed"] and "patch" in decision, decision
    patched = apply_patch(pod, json.loads(base64.b64decode(decision["patch"])))
    return next(c for c in patched["spec"]["containers"] if c["name"] == "istio-proxy")


@pytest.mark.parametrize("label", ["web", "other"])
def test_the_webhook_injects_what_the_resources_in_force_say(label: str) -> None:
    """The proxy container of a pod the API server sends: concurrency (in PROXY_CONFIG, which
    pilot-agent reads), environment and image
    from the resources the store holds at that review; a resource added later counts from the
    next review on."""
    held: list[ConfigObject] = []
    source = injection_source(Settings(config_dir=None), default_mesh_config, lambda: tuple(held))
    pod = {**POD, "metadata": {**POD["metadata"], "labels": {"app": label}}}
    before = injected_proxy(source, pod, "shop")
    before_env = {e["name"]: e.get("value") for e in before["env"]}
    assert "concurrency" not in json.loads(before_env["PROXY_CONFIG"]) and not before["image"].endswith("-debug")
    web = {"selector": {"matchLabels": {"app": "web"}}, "concurrency": 3, "image": {"imageType": "debug"}}
    held.extend(objects(proxy_config("mesh", ROOT, {"environmentVariables": {"MESH_WIDE": "1"}}),
                        proxy_config("web", "shop", web)))
    proxy = injected_proxy(source, pod, "shop")
    env = {e["name"]: e.get("value") for e in proxy["env"]}
    assert env["MESH_WIDE"] == "1"
    selected = label == "web"
    assert proxy["image"].endswith("-debug") is selected
    assert json.loads(env["PROXY_CONFIG"]).get("concurrency") == (3 if selected else None)


async def test_a_proxy_config_file_is_read_and_pushes_no_proxy_anything(tmp_path: Path) -> None:
    """In every type's skip list in istiod: the runtime keeps it for the injector, its push
    sends nothing, and the next change is pushed as before."""
    async with (
        running_bookinfo(tmp_path, debounce_after=0.01, file_debounce_ms=10) as runtime,
        grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}") as channel,
    ):
        client = Client(channel)
        await client.subscribe()
        config = runtime.settings.config_dir
        assert config is not None
        fires, sent = runtime.debouncer.fires, sum(runtime.metrics.pushes.values.values())
        (config / "proxyconfig.yaml").write_text(proxy_config("bookinfo", "bookinfo", {"concurrency": 2}))
        await until("the ProxyConfig's push", lambda: runtime.debouncer.fires > fires, within=20.0)
        assert [o.meta.name for o in runtime.env.store.list(Kind.PROXY_CONFIG)] == ["bookinfo"]
        assert runtime.debouncer.failures == 0
        await asyncio.sleep(0.2)  # the push's proxies, had any been queued, written by now
        assert sum(runtime.metrics.pushes.values.values()) == sent
        (config / "extra-dr.yaml").write_text(EXTRA_DR)
        await client.receive()
        assert max_connections(client.clusters[RATINGS]) == 7
        client.call.cancel()
