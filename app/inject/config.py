"""The injector's configuration: the ``config`` key of istiod's ``istio-sidecar-injector``
ConfigMap (policy, alwaysInjectSelector, neverInjectSelector, injectedAnnotations,
defaultTemplates, templates, aliases; UnmarshalConfig), and the templates istiod's chart ships,
which a config without ``templates`` gets (read from the package data tools/gen_istio_api.py
copies from the pinned istio module)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from app.errors import SettingsError
from app.inject.values import configmap_values

SIDECAR_TEMPLATE = "sidecar"
_PACKAGE_DATA = "app.api.istio.inject"


@dataclass(frozen=True)
class InjectionConfig:
    policy: str = "enabled"
    default_templates: tuple[str, ...] = (SIDECAR_TEMPLATE,)
    templates: Mapping[str, str] = field(default_factory=dict)
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    never_inject_selector: tuple[Mapping[str, Any], ...] = ()
    always_inject_selector: tuple[Mapping[str, Any], ...] = ()
    injected_annotations: Mapping[str, str] = field(default_factory=dict)


def parse_injection_config(text: str, source: str = "config") -> InjectionConfig:
    """The ConfigMap's ``config`` YAML; no ``templates`` means the ones istiod's chart ships."""
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise SettingsError(f"{source}: failed to unmarshal injection template: {e}") from e
    if not isinstance(doc, Mapping):
        raise SettingsError(f"{source}: the injection config must be an object, got {type(doc).__name__}")

    def strings(key: str, value: Any) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SettingsError(f"{source}: {key} must be a list of strings")
        return tuple(value)

    def mapping(key: str) -> Mapping[str, Any]:
        value = doc.get(key) or {}
        if not isinstance(value, Mapping):
            raise SettingsError(f"{source}: {key} must be an object, got {type(value).__name__}")
        return value

    def selectors(key: str) -> tuple[Mapping[str, Any], ...]:
        value = doc.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
            raise SettingsError(f"{source}: {key} must be a list of label selectors")
        return tuple(value)

    templates = mapping("templates")
    for name, body in templates.items():
        if not isinstance(body, str):
            raise SettingsError(f"{source}: templates.{name} must be a string")
    annotations = mapping("injectedAnnotations")
    return InjectionConfig(
        policy=str(doc.get("policy") or ""),
        default_templates=strings("defaultTemplates", doc.get("defaultTemplates")) or (SIDECAR_TEMPLATE,),
        templates=dict(templates) or istio_templates(),
        aliases={str(k): strings(f"aliases.{k}", v) for k, v in mapping("aliases").items()},
        never_inject_selector=selectors("neverInjectSelector"),
        always_inject_selector=selectors("alwaysInjectSelector"),
        injected_annotations={str(k): str(v) for k, v in annotations.items()},
    )


def default_injection_config() -> InjectionConfig:
    """What istiod's chart renders with its default values: policy enabled, the sidecar template
    by default, the shipped templates."""
    return InjectionConfig(templates=istio_templates())


@functools.cache
def istio_templates() -> Mapping[str, str]:
    """The templates istiod's chart ships, by the name its ConfigMap gives them."""
    root = resources.files(_PACKAGE_DATA)
    try:
        return {
            entry.name.removesuffix(".yaml"): entry.read_text()
            for entry in root.iterdir()
            if entry.name.endswith(".yaml") and entry.name != "values.yaml"
        }
    except FileNotFoundError as e:
        raise SettingsError(f"{_PACKAGE_DATA} lacks istiod's injection templates: run `make api` ({e})") from e


@functools.cache
def default_values() -> Mapping[str, Any]:
    """The ConfigMap's values as istiod's chart renders them with its defaults."""
    chart = yaml.safe_load(resources.files(_PACKAGE_DATA).joinpath("values.yaml").read_text())
    return configmap_values(chart["_internal_defaults_do_not_set"])
