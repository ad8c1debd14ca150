"""``pilotfish kube-inject``: istioctl kube-inject's IntoResourceFile over a YAML stream. Every
kind it injects (Pod, Deployment, DaemonSet, ReplicaSet, StatefulSet, Job, CronJob,
ReplicationController, OpenShift's DeploymentConfig, and a List of them) is written back injected,
keys sorted, as sigs.k8s.io/yaml writes it; any other document passes through as it was. Each
document is followed by ``---``."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from app.inject.injector import Injector, kube_inject_pod
from app.inject.pipeline import deploy_meta_from_pod

# the kinds inject.injectScheme knows; it registers them as unversioned, so the kind alone
# decides, whatever the apiVersion
_INJECTABLE = frozenset({
    "Pod", "ReplicationController", "Deployment", "DaemonSet", "ReplicaSet", "StatefulSet", "Job", "CronJob",
    "DeploymentConfig", "List",
})  # fmt: skip
_SEPARATOR = re.compile(r"^---\s*$", re.MULTILINE)


class ManifestError(ValueError):
    pass


def kube_inject(text: str, injector: Injector, warn: Callable[[str], None]) -> str:
    out = []
    for raw in _documents(text):
        try:
            doc = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise ManifestError(f"error converting YAML to JSON: {e}") from e
        if isinstance(doc, dict) and _injectable(doc):
            out.append(yaml.safe_dump(inject_object(doc, injector, warn), sort_keys=True, default_flow_style=False))
        else:
            out.append(raw)
        out.append("---\n")
    return "".join(out)


def _documents(text: str) -> list[str]:
    """yaml.NewYAMLReader's documents: the text between ``---`` lines (blank ones dropped)."""
    parts = _SEPARATOR.split(text)
    return [p.lstrip("\n") if p.startswith("\n") else p for p in parts if p.strip()]


def _injectable(doc: Mapping[str, Any]) -> bool:
    return doc.get("kind") in _INJECTABLE


def inject_object(doc: Mapping[str, Any], injector: Injector, warn: Callable[[str], None]) -> dict[str, Any]:
    """inject.IntoObject: the object with its pod template (or itself, a Pod) injected."""
    out = copy.deepcopy(dict(doc))
    kind = out.get("kind", "")
    if kind == "List":
        out["items"] = [inject_object(i, injector, warn) if isinstance(i, dict) and _injectable(i) else i
                        for i in out.get("items") or []]  # fmt: skip
        return out
    meta = out.get("metadata") or {}
    owner = {"name": meta.get("name", ""), "namespace": meta.get("namespace", "")}
    type_meta = {"kind": kind, "apiVersion": out.get("apiVersion", "")}
    spec = out.setdefault("spec", {}) if kind != "Pod" else None
    if kind == "Pod":
        holder, deploy = out, None
    elif kind == "CronJob":  # as istiod: the job template's metadata with the pod template's spec
        job = spec.setdefault("jobTemplate", {})  # type: ignore[union-attr]
        holder = {
            "metadata": job.get("metadata") or {},
            "spec": ((job.get("spec") or {}).get("template") or {}).get("spec") or {},
        }
        deploy = owner
    else:
        if spec.get("template") is None:  # type: ignore[union-attr]
            raise ManifestError(f"{kind} {owner['name']}: spec.template is required value")
        holder, deploy = spec["template"], owner  # type: ignore[index]
    pod_meta = holder.get("metadata") or {}
    pod = {"metadata": pod_meta, "spec": holder.get("spec") or {}}
    if deploy is None:
        deploy, type_meta = deploy_meta_from_pod(pod_meta)
    name = pod_meta.get("name") or deploy["name"]
    full_name = f"{deploy['namespace']}/{name}" if deploy["namespace"] else name
    injected = kube_inject_pod(injector, pod, deploy, type_meta, full_name, warn)
    if injected is None:
        return out
    if kind == "CronJob":
        job = out["spec"]["jobTemplate"]
        job["metadata"] = injected["metadata"]
        job.setdefault("spec", {}).setdefault("template", {})["spec"] = injected["spec"]
    else:
        holder["metadata"], holder["spec"] = injected["metadata"], injected["spec"]
    return out
