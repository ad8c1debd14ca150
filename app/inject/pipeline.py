"""istiod's injectPod: the templates rendered over the pod and merged into it, user overrides
re-applied, then the post processing (cluster env, Prometheus merge, probe rewrite, the status
annotation, container order). The result is the injected pod; the webhook answers with the JSON
patch from the original to it, kube-inject prints it."""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from app.api.mesh import MeshConfig, ProxyConfig
from app.gotemplate import Template, TemplateError
from app.gotemplate.printing import sprint_value
from app.inject.gojson import go_json
from app.inject.merge import MergeError, strategic_merge_pod
from app.inject.overrides import (
    INIT_CONTAINER,
    STATUS_ANNOTATION,
    VALIDATION_CONTAINER,
    injected_names,
    reapply_overwritten_containers,
    reinsert_overrides,
)
from app.inject.podjson import go_pod
from app.inject.probes import (
    PROXY_CONTAINER,
    dump_app_probers,
    merge_or_append_probers,
    rewrite_probes,
    should_rewrite,
)
from app.inject.prometheus import (
    PrometheusError,
    apply_prometheus_merge,
    apply_secure_port_annotation,
    clear_annotations,
    find_container,
    prometheus_port,
)
from app.inject.proxy_config import PROXY_CONFIG_ANNOTATION, apply_proxy_config
from app.inject.validate import AnnotationError, validate_annotations
from app.inject.values import lookup
from app.inject.views import SidecarTemplateData

logger = logging.getLogger(__name__)

TEMPLATES_ANNOTATION = "inject.istio.io/templates"
NATIVE_SIDECAR_ANNOTATION = "sidecar.istio.io/nativeSidecar"
PROXY_IMAGE_TYPE_ANNOTATION = "sidecar.istio.io/proxyImageType"
NETWORK_LABEL = "topology.istio.io/network"
ENABLE_CORE_DUMP = "enable-core-dump"
_KNOWN_IMAGE_TYPES = ("distroless", "debug")
_CRON_JOB_NAME = re.compile(r"^(.+)-\d{8,10}$")


class InjectionError(ValueError):
    """The pod cannot be injected; the text is istiod's reason."""


@dataclass(frozen=True)
class InjectionParameters:
    pod: Mapping[str, Any]
    deploy_meta: Mapping[str, str]
    type_meta: Mapping[str, str]
    templates: Mapping[str, Template]
    mesh: MeshConfig  # defaultConfig complete (proxy_config.injection_mesh)
    proxy_config: ProxyConfig
    values: Mapping[str, Any]
    default_templates: tuple[str, ...] = ("sidecar",)
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    revision: str = ""
    native_sidecar: bool = False
    proxy_envs: Mapping[str, str] = field(default_factory=dict)
    injected_annotations: Mapping[str, str] = field(default_factory=dict)
    compliance_policy: str = ""


def inject_pod(params: InjectionParameters) -> dict[str, Any]:
    """The injected pod (the original one is not changed)."""
    original = go_pod(params.pod)
    try:
        merged, template_pod, envs = _run_templates(params, original)
        tproxy = params.proxy_config.interception_mode == ProxyConfig.InboundInterceptionMode.TPROXY
        merged = reapply_overwritten_containers(merged, original, template_pod, tproxy)
        _post_process(merged, template_pod, params, envs)
    except (AnnotationError, TemplateError, MergeError, PrometheusError, yaml.YAMLError) as e:
        raise InjectionError(str(e)) from e
    return go_pod(merged)


def _run_templates(
    params: InjectionParameters, original: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """RunTemplate: (the merged pod, the templates' own pod, the proxy env the cluster and network add)."""
    meta = original.setdefault("metadata", {})
    annotations: dict[str, str] = meta.get("annotations") or {}
    validate_annotations(annotations)
    envs = dict(params.proxy_envs)
    cluster, network = _cluster_and_network(params, meta.get("labels") or {})
    if cluster:
        envs["ISTIO_META_CLUSTER_ID"] = cluster
    if network:
        envs["ISTIO_META_NETWORK"] = network
    stripped = reinsert_overrides(_strip_pod(original, params.mesh.default_config.status_port))
    stripped_annotations = stripped["metadata"].get("annotations") or {}
    data = SidecarTemplateData(
        type_meta=params.type_meta,
        deployment_meta=params.deploy_meta,
        object_meta=stripped["metadata"],
        spec=stripped.get("spec") or {},
        proxy_config=params.proxy_config,
        mesh_config=params.mesh,
        values=params.values,
        revision=params.revision,
        native_sidecars=params.native_sidecar,
        proxy_image=proxy_image(params.values, params.proxy_config.image.image_type, stripped_annotations),
        proxy_init_image=proxy_image(params.values, "", stripped_annotations, init=True),
        inbound_traffic_policy_mode="localhost" if params.mesh.inbound_traffic_policy.mode == 1 else "passthrough",
        compliance_policy=params.compliance_policy,
    )
    merged: dict[str, Any] = original
    template_pod: dict[str, Any] = {}
    for name in select_templates(annotations, params.default_templates, params.aliases):
        template = params.templates.get(name)
        if template is None:
            raise InjectionError(f"requested template {name!r} not found; have {', '.join(params.templates)}")
        rendered = template.execute(data)
        overlay = yaml.load(rendered, Loader=yaml.CSafeLoader) or {}  # libyaml: the same values, faster
        if not isinstance(overlay, dict):
            raise InjectionError(f"failed applying injection overlay: template {name} did not render an object")
        template_pod = go_pod(strategic_merge_pod(template_pod, overlay))
        # with native sidecars the template puts the proxy among the init containers: a user's
        # customization of it, in containers, moves there too
        native = params.native_sidecar
        native_annotation = (merged["metadata"].get("annotations") or {}).get(NATIVE_SIDECAR_ANNOTATION)
        if native_annotation in ("true", "false"):
            native = native_annotation == "true"
        in_template_inits = any(
            c.get("name") == PROXY_CONTAINER for c in template_pod.get("spec", {}).get("initContainers") or []
        )
        if (
            native
            and in_template_inits
            and any(c.get("name") == PROXY_CONTAINER for c in merged.get("spec", {}).get("containers") or [])
        ):
            merged = copy.deepcopy(merged)
            spec = merged["spec"]
            proxy = next(c for c in spec["containers"] if c.get("name") == PROXY_CONTAINER)
            spec["containers"] = [c for c in spec["containers"] if c is not proxy]
            spec["initContainers"] = [*(spec.get("initContainers") or []), proxy]
        merged = go_pod(strategic_merge_pod(merged, overlay))
    return merged, template_pod, envs


def select_templates(annotations: Mapping[str, str], defaults: tuple[str, ...],
                     aliases: Mapping[str, tuple[str, ...]]) -> list[str]:  # fmt: skip
    """selectTemplates: the pod's inject.istio.io/templates, else the defaults, aliases expanded."""
    names = (
        [n.strip() for n in annotations[TEMPLATES_ANNOTATION].split(",")]
        if TEMPLATES_ANNOTATION in annotations
        else list(defaults)
    )
    return [expanded for n in names for expanded in aliases.get(n, (n,))]


def _cluster_and_network(params: InjectionParameters, labels: Mapping[str, str]) -> tuple[str, str]:
    """extractClusterAndNetwork: values, then the webhook URL's, then the pod's network label."""
    cluster = sprint_value(lookup(params.values, "global", "multiCluster", "clusterName") or "")
    network = sprint_value(lookup(params.values, "global", "network") or "")
    cluster = params.proxy_envs.get("ISTIO_META_CLUSTER_ID") or cluster
    network = params.proxy_envs.get("ISTIO_META_NETWORK") or network
    return cluster, labels.get(NETWORK_LABEL, network)


def _strip_pod(pod: dict[str, Any], status_port: int) -> dict[str, Any]:
    """stripPod: a re-injected pod without what the earlier injection added."""
    injected = injected_names(pod)
    if injected is None:
        return pod
    pod = copy.deepcopy(pod)
    spec = pod.setdefault("spec", {})
    for key in ("containers", "initContainers"):
        for name in injected[key]:
            spec[key] = [c for c in spec.get(key) or [] if c.get("name") != name]
    annotations = pod["metadata"].get("annotations") or {}
    if prometheus_port(annotations) == str(status_port):
        clear_annotations(annotations)
    annotations.pop(STATUS_ANNOTATION, None)
    return pod


def proxy_image(
    values: Mapping[str, Any], image_type: str, annotations: Mapping[str, str], *, init: bool = False
) -> str:
    """ProxyImage / ProxyInitImage: HUB/NAME:TAG, with the variant (distroless, debug) in the tag."""
    name = lookup(values, "global", "proxy_init" if init else "proxy", "image") or "proxyv2"
    tag_value = lookup(values, "global", "tag")
    tag = "" if tag_value is None else sprint_value(tag_value)
    variant = image_type or str(lookup(values, "global", "variant") or "")
    variant = annotations.get(PROXY_IMAGE_TYPE_ANNOTATION, variant)
    if variant:
        for known in _KNOWN_IMAGE_TYPES:
            if tag.endswith("-" + known):
                tag = tag[: -len(known) - 1]
                break
        if variant != "default":
            tag = f"{tag}-{variant}"
    return f"{lookup(values, 'global', 'hub') or ''}/{name}:{tag}"


def _post_process(pod: dict[str, Any], template_pod: Mapping[str, Any], params: InjectionParameters,
                  envs: Mapping[str, str]) -> None:  # fmt: skip
    """postProcessPod."""
    meta = pod.setdefault("metadata", {})
    annotations = meta.setdefault("annotations", {})
    labels = meta.setdefault("labels", {})
    spec = pod.setdefault("spec", {})
    sidecar = find_container(spec, PROXY_CONTAINER)
    if sidecar is not None and envs:  # overwriteClusterInfo: these last, sorted
        sidecar["env"] = [e for e in sidecar.get("env") or [] if e.get("name") not in envs]
        sidecar["env"] += [{"name": k, "value": envs[k]} for k in sorted(envs)]
    status_port = params.mesh.default_config.status_port
    merge_setting = (
        params.mesh.enable_prometheus_merge.value if params.mesh.HasField("enable_prometheus_merge") else None
    )
    apply_prometheus_merge(pod, status_port, merge_setting)
    apply_secure_port_annotation(pod)
    sidecar = find_container(spec, PROXY_CONTAINER)
    default_rewrite = lookup(params.values, "sidecarInjectorWebhook", "rewriteAppHTTPProbe") is True
    if sidecar is not None and should_rewrite(annotations, default_rewrite):
        probers = dump_app_probers(spec, status_port)
        if probers:
            sidecar["env"] = merge_or_append_probers(
                STATUS_ANNOTATION in annotations, list(sidecar.get("env") or []), probers
            )
        rewrite_probes(spec, annotations, status_port)
    if "ISTIO_META_NETWORK" in envs:
        labels[NETWORK_LABEL] = envs["ISTIO_META_NETWORK"]
    annotations[STATUS_ANNOTATION] = injection_status(template_pod.get("spec") or {}, params.revision)
    annotations.update(params.injected_annotations)
    _reorder(pod, params)


def injection_status(spec: Mapping[str, Any], revision: str) -> str:
    """getInjectionStatus: what this injection added, for a later re-injection to strip."""

    def names(key: str) -> list[str] | None:
        return [c.get("name", "") for c in spec.get(key) or []] or None

    return go_json({
        "initContainers": names("initContainers"), "containers": names("containers"), "volumes": names("volumes"),
        "imagePullSecrets": names("imagePullSecrets"), "revision": revision or "default",
    })  # fmt: skip


def _reorder(pod: dict[str, Any], params: InjectionParameters) -> None:
    """reorderPod: the proxy last among containers (first when the app waits for it); with
    native sidecars, init/validation, then the proxy, first among init containers; else
    validation first, init and enable-core-dump last."""
    config = params.mesh.default_config
    annotation = (params.pod.get("metadata", {}).get("annotations") or {}).get(PROXY_CONFIG_ANNOTATION)
    if annotation is not None:
        config = apply_proxy_config(annotation, config)
    hold = config.hold_application_until_proxy_starts.value or (
        lookup(params.values, "global", "proxy", "holdApplicationUntilProxyStarts") is True
    )
    spec = pod["spec"]
    spec["containers"] = _move(spec.get("containers") or [], PROXY_CONTAINER, first=hold)
    inits = spec.get("initContainers") or []
    if any(c.get("name") == PROXY_CONTAINER for c in inits):
        for name in (ENABLE_CORE_DUMP, PROXY_CONTAINER, VALIDATION_CONTAINER, INIT_CONTAINER):
            inits = _move(inits, name, first=True)
    else:
        inits = _move(inits, VALIDATION_CONTAINER, first=True)
        inits = _move(inits, INIT_CONTAINER, first=False)
        inits = _move(inits, ENABLE_CORE_DUMP, first=False)
    spec["initContainers"] = inits


def _move(containers: list[dict[str, Any]], name: str, *, first: bool) -> list[dict[str, Any]]:
    """modifyContainers: the (last) container named ``name`` moved first or last."""
    rest = [c for c in containers if c.get("name") != name]
    match = [c for c in containers if c.get("name") == name][-1:]
    return [*match, *rest] if first else [*rest, *match]


def deploy_meta_from_pod(meta: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """kube.GetDeployMetaFromPod: the workload that owns the pod, as its controller reference
    tells (a ReplicaSet with the pod's template hash is its Deployment's; a Job named
    NAME-TIMESTAMP its CronJob's)."""
    name, namespace = meta.get("name", ""), meta.get("namespace", "")
    type_meta = {"kind": "Pod", "apiVersion": "v1"}
    labels = meta.get("labels") or {}
    if meta.get("generateName"):
        ref = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
        if ref is not None:
            type_meta = {"kind": ref.get("kind", ""), "apiVersion": ref.get("apiVersion", "")}
            name = ref.get("name", "")
            kind = type_meta["kind"]
            if kind == "ReplicaSet" and labels.get("pod-template-hash") and name.endswith(labels["pod-template-hash"]):
                name = name.removesuffix("-" + labels["pod-template-hash"])
                type_meta["kind"] = "Deployment"
            elif (kind == "ReplicaSet" and labels.get("rollouts-pod-template-hash")
                  and name.endswith(labels["rollouts-pod-template-hash"])):  # fmt: skip
                name = name.removesuffix("-" + labels["rollouts-pod-template-hash"])
                type_meta = {"kind": "Rollout", "apiVersion": "v1alpha1"}
            elif kind == "ReplicationController" and labels.get("deploymentconfig"):
                name = labels["deploymentconfig"]
                type_meta["kind"] = "DeploymentConfig"
            elif kind == "Job" and (m := _CRON_JOB_NAME.match(name)):
                name = m.group(1)
                type_meta = {"kind": "CronJob", "apiVersion": "batch/v1"}
    return {"name": name or meta.get("name", ""), "namespace": namespace}, type_meta
