"""One injector: the injection config with its templates parsed, the values and the mesh
config, as istiod's Webhook holds them; ``inject`` decides and injects one pod (the webhook's
inject, minus the HTTP), ``patch`` is the JSON patch the webhook answers with."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from app.api.mesh import MeshConfig
from app.errors import SettingsError
from app.gotemplate import SPRIG_FUNCS, Template, TemplateError
from app.inject.config import InjectionConfig
from app.inject.funcs import INJECTION_FUNCS
from app.inject.pipeline import InjectionParameters, deploy_meta_from_pod, inject_pod
from app.inject.policy import inject_required
from app.inject.proxy_config import (
    NO_PROXY_CONFIGS,
    PROXY_CONFIG_ANNOTATION,
    ProxyConfigs,
    apply_proxy_config,
    injection_mesh,
)

logger = logging.getLogger(__name__)

# webhook.go URLParameterToEnv
_URL_PARAMETERS = {"cluster": "ISTIO_META_CLUSTER_ID", "net": "ISTIO_META_NETWORK"}


def parse_templates(templates: Mapping[str, str]) -> dict[str, Template]:
    """ParseTemplates: every template parsed with sprig's and istiod's functions."""
    funcs = {**SPRIG_FUNCS, **INJECTION_FUNCS}
    parsed = {}
    for name, text in templates.items():
        try:
            parsed[name] = Template.parse("inject", text, funcs)
        except TemplateError as e:
            raise SettingsError(f"injection template {name!r}: {e}") from e
    return parsed


@dataclass(frozen=True)
class Injector:
    config: InjectionConfig
    templates: Mapping[str, Template]
    values: Mapping[str, Any]
    mesh: MeshConfig  # defaultConfig complete
    revision: str = "default"
    native_sidecars: bool = False
    compliance_policy: str = ""  # istiod's COMPLIANCE_POLICY (fips-140-3)

    @classmethod
    def build(cls, config: InjectionConfig, values: Mapping[str, Any], mesh: MeshConfig, *, revision: str = "default",
              native_sidecars: bool = False, compliance_policy: str = "") -> Injector:  # fmt: skip
        templates = parse_templates(config.templates)
        return cls(config, templates, values, injection_mesh(mesh), revision, native_sidecars, compliance_policy)

    def inject(
        self,
        pod: Mapping[str, Any],
        namespace: str,
        path: str = "/inject",
        proxy_configs: ProxyConfigs = NO_PROXY_CONFIGS,
    ) -> dict[str, Any] | None:
        """The injected pod, or None when policy says the pod gets no sidecar (webhook.inject);
        its proxy's ProxyConfig as ``proxy_configs`` make it (GetProxyConfigOrDefault)."""
        meta = dict(pod.get("metadata") or {})
        meta.pop("managedFields", None)  # large, and no part of injection
        if not meta.get("namespace"):
            meta["namespace"] = namespace
        pod = {**pod, "metadata": meta}
        if not inject_required(self.config, pod.get("spec") or {}, meta):
            return None
        annotation = (meta.get("annotations") or {}).get(PROXY_CONFIG_ANNOTATION)
        labels = meta.get("labels") or {}
        proxy_config = proxy_configs.effective(self.mesh.default_config, namespace, labels, annotation)
        deploy, type_meta = deploy_meta_from_pod(meta)
        return inject_pod(InjectionParameters(
            pod=pod, deploy_meta=deploy, type_meta=type_meta, templates=self.templates, mesh=self.mesh,
            proxy_config=proxy_config, values=self.values, default_templates=self.config.default_templates,
            aliases=self.config.aliases, revision=self.revision, native_sidecar=self.native_sidecars,
            proxy_envs=inject_envs(path), injected_annotations=self.config.injected_annotations,
            compliance_policy=self.compliance_policy,
        ))  # fmt: skip


def inject_envs(path: str) -> dict[str, str]:
    """parseInjectEnvs: proxy env from the webhook path, /inject/K1/V1/K2/V2 (or the deprecated
    /inject/:ENV:K=V:ENV:...); ``cluster`` and ``net`` name the cluster id and network."""
    parts = path.rstrip("/").split("/", 2)
    if len(parts) < 3:
        return {}
    tail = parts[2]
    items: list[str] = []
    if tail.startswith(":ENV:"):
        for pair in tail.split(":ENV:")[1:]:
            key, sep, value = pair.partition("=")
            if key and sep:
                items += [key, value]
    else:
        items = tail.split("/")
        items = [v.replace("--slash--", "/") if i % 2 else v for i, v in enumerate(items)]
    envs: dict[str, str] = {}
    for i in range(0, len(items) - 1, 2):
        name = _URL_PARAMETERS.get(items[i], items[i].upper())
        if name:
            envs[name] = items[i + 1]
    if len(items) % 2:
        logger.warning("odd number of inject env entries, ignoring the last key %s", items[-1])
    return envs


def kube_inject_pod(
    injector: Injector,
    pod: Mapping[str, Any],
    deploy: Mapping[str, str],
    type_meta: Mapping[str, str],
    full_name: str,
    warn: Callable[[str], None],
) -> dict[str, Any] | None:
    """inject.IntoObject for one pod template, as istioctl kube-inject runs it: the default
    policy (enabled, no selectors), the sidecar template unless the pod names others, the pod's
    proxy.istio.io/config applied to the mesh config itself. None: not injected (``warn`` says why)."""
    kind = type_meta.get("kind", "")
    what = f'{kind} "{full_name}"' if kind else f'"{full_name}"'
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if spec.get("hostNetwork"):
        warn(f"===> Skipping injection because {what} has host networking enabled\n")
        return None
    mesh = injector.mesh
    annotation = (meta.get("annotations") or {}).get(PROXY_CONFIG_ANNOTATION)
    if annotation is not None:
        mesh = MeshConfig()
        mesh.CopyFrom(injector.mesh)
        mesh.default_config.CopyFrom(apply_proxy_config(annotation, injector.mesh.default_config))
    if not inject_required(InjectionConfig(), spec, meta):
        warn(f"===> Skipping injection because {what} has sidecar injection disabled\n")
        return None
    return inject_pod(InjectionParameters(
        pod=pod, deploy_meta=deploy, type_meta=type_meta, templates=injector.templates, mesh=mesh,
        proxy_config=mesh.default_config, values=injector.values, revision=injector.revision,
        native_sidecar=injector.native_sidecars, compliance_policy=injector.compliance_policy,
    ))  # fmt: skip
