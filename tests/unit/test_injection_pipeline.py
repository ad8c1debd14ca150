"""The parts of istiod's injection with rules of their own: the injection policy
(injectRequired), the strategic merge of a Pod (strategicpatch's merge keys and order), the
probe rewrite (app_probe.go), the JSON patch, and the template functions' Go semantics."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.gotemplate.printing import format_float, sprint_value
from app.inject.config import InjectionConfig
from app.inject.funcs import exclude_inbound_port
from app.inject.injector import inject_envs
from app.inject.merge import strategic_merge_pod
from app.inject.patch import create_patch
from app.inject.pipeline import deploy_meta_from_pod
from app.inject.policy import inject_required
from app.inject.probes import dump_app_probers, rewrite_probes
from app.inject.quantity import canonical_quantity

ENABLED = InjectionConfig(policy="enabled")
DISABLED = InjectionConfig(policy="disabled")


def meta(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, ns: str = "shop") -> Any:
    return {"namespace": ns, "labels": labels or {}, "annotations": annotations or {}}


@pytest.mark.parametrize(
    ("config", "spec", "metadata", "want"),
    [
        (ENABLED, {}, meta(), True),
        (DISABLED, {}, meta(), False),
        (ENABLED, {"hostNetwork": True}, meta(), False),
        (ENABLED, {}, meta(ns="kube-system"), False),
        (DISABLED, {}, meta(annotations={"sidecar.istio.io/inject": "true"}), True),
        # the label wins over the annotation
        (ENABLED, {}, meta({"sidecar.istio.io/inject": "false"}, {"sidecar.istio.io/inject": "true"}), False),
        (ENABLED, {}, meta(annotations={"sidecar.istio.io/inject": "yes"}), True),  # not a bool: the policy
        (InjectionConfig(policy="disabled", always_inject_selector=({"matchLabels": {"app": "a"}},)),
         {}, meta({"app": "a"}), True),
        # never wins over always; an empty selector matches nothing
        (InjectionConfig(policy="enabled", never_inject_selector=({"matchExpressions": [{"key": "app",
         "operator": "In", "values": ["a"]}]},), always_inject_selector=({"matchLabels": {"app": "a"}},)),
         {}, meta({"app": "a"}), False),
        (InjectionConfig(policy="enabled", never_inject_selector=({},)), {}, meta({"app": "a"}), True),
        (InjectionConfig(policy="off"), {}, meta(), False),
    ],
)  # fmt: skip
def test_inject_required_as_istiod(config: InjectionConfig, spec: Any, metadata: Any, want: bool) -> None:
    assert inject_required(config, spec, metadata) is want


def test_containers_env_and_mounts_merge_by_their_keys() -> None:
    pod = {"spec": {"containers": [{"name": "app", "image": "a", "env": [{"name": "A", "value": "1"}]},
                                   {"name": "istio-proxy", "image": "user", "env": [{"name": "X", "value": "u"}],
                                    "args": ["mine"]}]}}  # fmt: skip
    overlay = {"spec": {"containers": [{"name": "istio-proxy", "image": "proxyv2",
                                        "env": [{"name": "Y", "value": "t"}, {"name": "X", "value": "t"}],
                                        "args": ["proxy", "sidecar"]}],
                        "volumes": [{"name": "v", "emptyDir": None}]}}  # fmt: skip
    merged = strategic_merge_pod(pod, overlay)
    app, proxy = merged["spec"]["containers"]
    assert app["name"] == "app"  # the original's items keep their places
    assert proxy["image"] == "proxyv2" and proxy["args"] == ["proxy", "sidecar"]  # a list without a key: replaced
    assert proxy["env"] == [{"name": "Y", "value": "t"}, {"name": "X", "value": "t"}]
    assert merged["spec"]["volumes"] == [{"name": "v"}]  # a null the original lacks is dropped
    assert pod["spec"]["containers"][1]["image"] == "user"  # the input is not changed


def test_a_null_deletes_and_maps_merge() -> None:
    pod = {"metadata": {"annotations": {"a": "1", "b": "2"}}, "spec": {"securityContext": {"runAsUser": 5}}}
    merged = strategic_merge_pod(pod, {"metadata": {"annotations": {"a": None, "c": "3"}}, "spec": {}})
    assert merged["metadata"]["annotations"] == {"b": "2", "c": "3"}
    assert merged["spec"]["securityContext"] == {"runAsUser": 5}


def test_probes_are_dumped_and_rewritten_to_the_status_port() -> None:
    spec = {"containers": [{
        "name": "app", "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/r", "port": "http", "scheme": "HTTPS"}, "timeoutSeconds": 2},
        "livenessProbe": {"grpc": {"port": 9000}},
        "startupProbe": {"exec": {"command": ["true"]}},
        "lifecycle": {"preStop": {"tcpSocket": {"port": 8080}}},
    }, {"name": "istio-proxy", "readinessProbe": {"httpGet": {"port": 15021}}}]}  # fmt: skip
    probers = dump_app_probers(spec, 15020)
    assert probers == (
        '{"/app-health/app/livez":{"grpc":{"port":9000,"service":null}},'
        '"/app-health/app/readyz":{"httpGet":{"path":"/r","port":8080,"scheme":"HTTPS"},"timeoutSeconds":2},'
        '"/app-lifecycle/app/prestopz":{"tcpSocket":{"port":8080}}}'
    )
    rewrite_probes(spec, {}, 15020)
    app = spec["containers"][0]
    assert app["readinessProbe"] == {"httpGet": {"path": "/app-health/app/readyz", "port": 15020, "scheme": "HTTP"},
                                     "timeoutSeconds": 2}  # fmt: skip
    assert app["livenessProbe"] == {"httpGet": {"path": "/app-health/app/livez", "port": 15020}}
    assert app["startupProbe"] == {"exec": {"command": ["true"]}}  # exec probes stay
    assert app["lifecycle"]["preStop"] == {"httpGet": {"path": "/app-lifecycle/app/prestopz", "port": 15020}}
    assert spec["containers"][1]["readinessProbe"] == {"httpGet": {"port": 15021}}  # the proxy's own: untouched
    assert dump_app_probers(spec, 15020) == ""  # already rewritten


def test_the_patch_turns_the_original_into_the_injected_pod() -> None:
    original = {"metadata": {"name": "p", "annotations": {"a/b": "1", "gone": "x"}}, "spec": {"containers": [{"n": 1}]}}
    injected = copy.deepcopy(original)
    injected["metadata"]["annotations"]["a/b"] = "2"
    del injected["metadata"]["annotations"]["gone"]
    injected["metadata"]["labels"] = {"l": "v"}
    injected["spec"]["containers"].append({"n": 2})
    assert create_patch(original, injected) == [
        {"op": "remove", "path": "/metadata/annotations/gone"},
        {"op": "replace", "path": "/metadata/annotations/a~1b", "value": "2"},
        {"op": "add", "path": "/metadata/labels", "value": {"l": "v"}},
        {"op": "replace", "path": "/spec/containers", "value": [{"n": 1}, {"n": 2}]},
    ]
    assert create_patch(original, original) == []


def test_the_owner_is_found_as_istiod_finds_it() -> None:
    rs = {
        "generateName": "web-abc-",
        "labels": {"pod-template-hash": "abc"},
        "namespace": "shop",
        "ownerReferences": [{"kind": "ReplicaSet", "apiVersion": "apps/v1", "name": "web-abc", "controller": True}],
    }
    assert deploy_meta_from_pod(rs) == (
        {"name": "web", "namespace": "shop"},
        {"kind": "Deployment", "apiVersion": "apps/v1"},
    )
    job = {
        "generateName": "nightly-29000000-",
        "ownerReferences": [{"kind": "Job", "apiVersion": "batch/v1", "name": "nightly-29000000", "controller": True}],
    }
    assert deploy_meta_from_pod(job)[0]["name"] == "nightly"
    assert deploy_meta_from_pod({"name": "solo"}) == (
        {"name": "solo", "namespace": ""},
        {"kind": "Pod", "apiVersion": "v1"},
    )


def test_go_formatting_and_quantities() -> None:
    assert [format_float(v) for v in (15020.0, 1e6, 0.5, 1234567.0, 1e-5, 100.25)] == [
        "15020", "1e+06", "0.5", "1.234567e+06", "1e-05", "100.25"]  # fmt: skip
    assert sprint_value(None) == "<nil>" and sprint_value(True) == "true"
    assert exclude_inbound_port(15020.0, "4,5") == "4,5,15020"
    assert exclude_inbound_port("15020", "15020") == "15020"
    assert [canonical_quantity(q) for q in ("2000m", "100m", "1024Mi", "0.5", "2000", "1e3")] == [
        "2", "100m", "1Gi", "500m", "2k", "1e3"]  # fmt: skip


def test_the_webhook_path_carries_proxy_env() -> None:
    assert inject_envs("/inject") == {}
    assert inject_envs("/inject/cluster/east/net/n1") == {"ISTIO_META_CLUSTER_ID": "east", "ISTIO_META_NETWORK": "n1"}
    assert inject_envs("/inject/:ENV:cluster=c1:ENV:foo=a") == {"ISTIO_META_CLUSTER_ID": "c1", "FOO": "a"}
    assert inject_envs("/inject/x/a--slash--b/odd") == {"X": "a/b"}
