"""The injector's ConfigMap as istiod's (its ``istio-sidecar-injector``): every value Istio's
injection templates read (``.Values.X`` in the templates the pinned module ships) is in the
chart's ``values`` with istiod's default, so a pod injected by pilotfish gets what istiod would
have given it; ``config`` holds istiod's policy, selectors, annotations and default templates,
and no copy of Istio's templates (pilotfish uses the ones Istio ships)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from tests.helm.rendering import istio_chart, named, render, render_istiod

MISSING = object()


def template_value_paths() -> set[tuple[str, ...]]:
    """Every ``.Values.a.b.c`` that Istio's injection templates read."""
    files = istio_chart("istio-control/istio-discovery") / "files"
    paths: set[tuple[str, ...]] = set()
    for template in files.glob("*.yaml"):
        if template.name.startswith("profile-"):
            continue
        for match in re.finditer(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)", template.read_text()):
            paths.add(tuple(match.group(1).lstrip(".").split(".")))
    return paths


def lookup(values: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(values, dict) or key not in values:
            return MISSING
        values = values[key]
    return values


def injector(docs: list[dict[str, Any]], name: str = "istio-sidecar-injector") -> tuple[dict[str, Any], dict[str, Any]]:
    data = named(docs, "ConfigMap")[name]["data"]
    return json.loads(data["values"]), yaml.safe_load(data["config"])


@pytest.mark.parametrize("values", [(), ("--set", "revision=pilotfish")], ids=["default", "revision"])
def test_every_value_the_injection_templates_read_is_istiods(values: tuple[str, ...]) -> None:
    name = "istio-sidecar-injector" + ("-pilotfish" if values else "")
    ours, _ = injector(render(*values), name)
    theirs, _ = injector(render_istiod(*values), name)
    paths = template_value_paths()
    assert len(paths) > 40 and ("global", "proxy", "image") in paths
    differ = {
        ".".join(path): (lookup(ours, path), lookup(theirs, path))
        for path in sorted(paths)
        if lookup(ours, path) != lookup(theirs, path)
    }
    assert differ == {}


def test_the_config_is_istiods_without_a_copy_of_istios_templates() -> None:
    _, ours = injector(render())
    _, theirs = injector(render_istiod())
    assert "templates" not in ours
    shared = {k: v for k, v in theirs.items() if k not in ("templates", "template")}
    # istiod's chart renders an empty injectedAnnotations map as null
    assert ours == {**shared, "injectedAnnotations": shared["injectedAnnotations"] or {}}


def test_templates_and_selectors_given_as_values_are_passed_on() -> None:
    template = "metadata:\n  labels:\n    hello: world"
    docs = render(
        "--set-json", 'sidecarInjectorWebhook.neverInjectSelector=[{"matchLabels":{"batch":"true"}}]',
        "--set", "sidecarInjectorWebhook.templates.hello=" + template,
        "--set-json", 'sidecarInjectorWebhook.defaultTemplates=["sidecar","hello"]',
        "--set", "global.proxy.autoInject=disabled",
        "--set", "global.hub=docker.io/istio", "--set", "global.tag=1.30.0",
    )  # fmt: skip
    values, config = injector(docs)
    assert config["neverInjectSelector"] == [{"matchLabels": {"batch": "true"}}]
    assert config["templates"] == {"hello": template}
    assert config["defaultTemplates"] == ["sidecar", "hello"]
    assert config["policy"] == "disabled"
    assert (values["global"]["hub"], values["global"]["tag"]) == ("docker.io/istio", "1.30.0")
