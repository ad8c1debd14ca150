"""A user's own ``istio-proxy`` (or init) container customizes the injected one (istiod
webhook.go reapplyOverwrittenContainers): the user's fields are laid over the injected container
and remembered in the ``proxy.istio.io/overrides`` annotation, so a re-injection (which strips the
injected containers first) applies them again (reinsertOverrides)."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping
from typing import Any

from app.inject.gojson import go_json
from app.inject.merge import strategic_merge_pod
from app.inject.podjson import go_pod
from app.inject.probes import PROXY_CONTAINER
from app.inject.prometheus import find_container

logger = logging.getLogger(__name__)

OVERRIDES_ANNOTATION = "proxy.istio.io/overrides"
STATUS_ANNOTATION = "sidecar.istio.io/status"
INIT_CONTAINER = "istio-init"
VALIDATION_CONTAINER = "istio-validation"
AUTO_IMAGE = "auto"
# encoding/json's field order of corev1.Container and the structs in it
_ORDERS: dict[str, tuple[str, ...]] = {
    "Container": ("name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources",
                  "resizePolicy", "restartPolicy", "restartPolicyRules", "volumeMounts", "volumeDevices",
                  "livenessProbe", "readinessProbe", "startupProbe", "lifecycle", "terminationMessagePath",
                  "terminationMessagePolicy", "imagePullPolicy", "securityContext", "stdin", "stdinOnce", "tty"),
    "SecurityContext": ("capabilities", "privileged", "seLinuxOptions", "windowsOptions", "runAsUser", "runAsGroup",
                        "runAsNonRoot", "readOnlyRootFilesystem", "allowPrivilegeEscalation", "procMount",
                        "seccompProfile", "appArmorProfile"),
    "Probe": ("exec", "httpGet", "tcpSocket", "grpc", "initialDelaySeconds", "timeoutSeconds", "periodSeconds",
              "successThreshold", "failureThreshold", "terminationGracePeriodSeconds"),
    "ResourceRequirements": ("limits", "requests", "claims"),
    "EnvVar": ("name", "value", "valueFrom"),
    "ContainerPort": ("name", "hostPort", "containerPort", "protocol", "hostIP"),
    "VolumeMount": ("name", "readOnly", "recursiveReadOnly", "mountPath", "subPath", "mountPropagation",
                    "subPathExpr"),
    "Capabilities": ("add", "drop"),
    "HTTPGetAction": ("path", "port", "host", "scheme", "httpHeaders"),
}  # fmt: skip
_NESTED = {"securityContext": "SecurityContext", "livenessProbe": "Probe", "readinessProbe": "Probe",
           "startupProbe": "Probe", "resources": "ResourceRequirements", "capabilities": "Capabilities",
           "httpGet": "HTTPGetAction"}  # fmt: skip
_ITEMS = {"env": "EnvVar", "ports": "ContainerPort", "volumeMounts": "VolumeMount"}


def go_container(container: Mapping[str, Any]) -> dict[str, Any]:
    """A container as json.Marshal(corev1.Container) writes it: Go's field order, ``resources`` always."""
    return _ordered({"resources": {}, **container}, "Container")


def _ordered(value: Mapping[str, Any], go_type: str) -> dict[str, Any]:
    order = _ORDERS.get(go_type)
    keys = (
        sorted(value) if order is None else [*(k for k in order if k in value), *(k for k in value if k not in order)]
    )
    out: dict[str, Any] = {}
    for k in keys:
        v = value[k]
        if isinstance(v, Mapping):
            v = _ordered(v, _NESTED.get(k, ""))
        elif isinstance(v, list) and k in _ITEMS:
            v = [_ordered(i, _ITEMS[k]) if isinstance(i, Mapping) else i for i in v]
        out[k] = v
    return out


def parse_overrides(pod: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(OVERRIDES_ANNOTATION)
    if text is None:
        return {"containers": [], "initContainers": []}
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ValueError(f"annotation {OVERRIDES_ANNOTATION}: {e}") from e
    return {k: list((doc or {}).get(k) or []) for k in ("containers", "initContainers")}


def injected_names(pod: Mapping[str, Any]) -> dict[str, list[str]] | None:
    """The containers an earlier injection added (sidecar.istio.io/status), None if not injected
    or unreadable (injectionStatus)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(STATUS_ANNOTATION)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    return {k: [str(n) for n in doc.get(k) or []] for k in ("containers", "initContainers", "volumes")}


def reinsert_overrides(pod: dict[str, Any]) -> dict[str, Any]:
    """reinsertOverrides: the remembered user containers put back where injection removed them."""
    overrides = parse_overrides(pod)
    pod = copy.deepcopy(pod)
    spec = pod.setdefault("spec", {})
    for key in ("containers", "initContainers"):
        present = {c.get("name") for c in spec.get(key) or []}
        for c in overrides[key]:
            if c.get("name") not in present:
                spec[key] = [*(spec.get(key) or []), c]
    return pod


def reapply_overwritten_containers(
    final: dict[str, Any], original: dict[str, Any], template: Mapping[str, Any], interception_tproxy: bool
) -> dict[str, Any]:
    existing = parse_overrides(original)
    status = injected_names(original) if STATUS_ANNOTATION in (original["metadata"].get("annotations") or {}) else None
    already_injected = STATUS_ANNOTATION in (original["metadata"].get("annotations") or {})
    injected = status or {"containers": [], "initContainers": []}
    applied: dict[str, list[dict[str, Any]]] = {"containers": [], "initContainers": []}
    for key in ("containers", "initContainers"):
        for c in template.get("spec", {}).get(key) or []:
            name = c.get("name")
            if name in injected[key]:
                continue  # re-injection: the new template's container wins
            match = next((o for o in existing[key] if o.get("name") == name), None)
            if match is None:
                match = (next((o for o in original["spec"].get("containers") or [] if o.get("name") == name), None)
                         if key == "containers" else find_container(original["spec"], name))  # fmt: skip
            if match is None:
                continue
            overlay = go_container(go_pod(match))  # as json.Marshal(corev1.Container) writes it
            if overlay.get("image") == AUTO_IMAGE:
                del overlay["image"]  # "auto": the injected image stays
            applied[key].append(overlay)
            spec_patch: dict[str, Any] = {key: [overlay]} if key == "containers" else {"containers": [], key: [overlay]}
            final = go_pod(strategic_merge_pod(final, {"spec": spec_patch}))
    if not already_injected and (applied["containers"] or applied["initContainers"]):
        annotations = final["metadata"].setdefault("annotations", {})
        annotations[OVERRIDES_ANNOTATION] = go_json({k: v for k, v in applied.items() if v})
    _adjust_init_container_user(final, original, interception_tproxy)
    return final


def _adjust_init_container_user(final: dict[str, Any], original: Mapping[str, Any], tproxy_mode: bool) -> None:
    """adjustInitContainerUser: the init (or validation) container follows the uid/gid the user
    gave their istio-proxy container."""
    user = find_container(original.get("spec") or {}, PROXY_CONTAINER)
    context = (user or {}).get("securityContext") or {}
    run_as_user, run_as_group = context.get("runAsUser"), context.get("runAsGroup")
    if user is None or (run_as_user is None and run_as_group is None):
        return
    inits = final["spec"].get("initContainers") or []
    init = next((c for name in (INIT_CONTAINER, VALIDATION_CONTAINER) for c in inits if c.get("name") == name), None)
    if init is None:
        logger.warning("could not find either istio-init or istio-validation container")
        return
    annotations = final["metadata"].get("annotations") or {}
    tproxy = tproxy_mode or annotations.get("sidecar.istio.io/interceptionMode") == "TPROXY"
    if tproxy and run_as_user is not None:
        sidecar = find_container(final["spec"], PROXY_CONTAINER)
        if sidecar is None:
            logger.warning("could not find the istio-proxy container")
            return
        sidecar.setdefault("securityContext", {})["runAsUser"] = 0
    if not tproxy and init.get("name") == VALIDATION_CONTAINER:
        sc = init.setdefault("securityContext", {})
        if run_as_user is not None:
            sc["runAsUser"] = run_as_user
        if run_as_group is not None:
            sc["runAsGroup"] = run_as_group
    if not run_as_user:
        return
    args = init.get("args") or []
    for i, arg in enumerate(args[:-1]):
        if arg == "-u":
            args[i + 1] = str(run_as_user)
            return
