"""Rewriting the application's HTTP, TCP and gRPC probes (and lifecycle hooks) to go through
pilot-agent's status port, as istiod's injector does (app_probe.go): the original probes go to
the proxy in ``ISTIO_KUBE_APP_PROBERS``, keyed by the URL the rewritten probe asks for."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from app.inject.gojson import go_json, sorted_map

logger = logging.getLogger(__name__)

PROXY_CONTAINER = "istio-proxy"
KUBE_APP_PROBERS = "ISTIO_KUBE_APP_PROBERS"
REWRITE_ANNOTATION = "sidecar.istio.io/rewriteAppHTTPProbers"
STATUS_PORT_ANNOTATION = "status.sidecar.istio.io/port"
_PROBES = ("readinessProbe", "livenessProbe", "startupProbe")
_HOOKS = ("preStop", "postStart")


def should_rewrite(annotations: Mapping[str, str], default: bool) -> bool:
    """ShouldRewriteAppHTTPProbers: the annotation, when it is a Go bool, else the values' setting."""
    value = annotations.get(REWRITE_ANNOTATION)
    parsed = parse_go_bool(value) if value is not None else None
    return default if parsed is None else parsed


def parse_go_bool(text: str) -> bool | None:
    """strconv.ParseBool, None where it fails."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return None


def prober_urls(container: str) -> dict[str, str]:
    """status.FormatProberURL, by the probe or hook it stands for."""
    return {
        "readinessProbe": f"/app-health/{container}/readyz",
        "livenessProbe": f"/app-health/{container}/livez",
        "startupProbe": f"/app-health/{container}/startupz",
        "preStop": f"/app-lifecycle/{container}/prestopz",
        "postStart": f"/app-lifecycle/{container}/poststartz",
    }


def dump_app_probers(spec: Mapping[str, Any], status_port: int) -> str:
    """DumpAppProbers: the JSON of the probers to hand to the proxy ("" when none), named ports
    resolved to numbers, probes already pointing at ``status_port`` left out."""
    out: dict[str, Any] = {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if c.get("name") == PROXY_CONTAINER:
            continue
        urls = prober_urls(c.get("name", ""))
        ports = {p["name"]: p.get("containerPort", 0) for p in c.get("ports") or [] if p.get("name")}
        for probe in _PROBES:
            prober = _resolve(_prober(c.get(probe), with_timeout=True), ports, status_port)
            if prober is not None:
                out[urls[probe]] = prober
        for hook in _HOOKS:
            prober = _resolve(_prober((c.get("lifecycle") or {}).get(hook), with_timeout=False), ports, status_port)
            if prober is not None:
                out[urls[hook]] = prober
    return go_json(sorted_map(out)) if out else ""


def _prober(probe: Mapping[str, Any] | None, *, with_timeout: bool) -> dict[str, Any] | None:
    """kubeProbeToInternalProber / kubeLifecycleHandlerToInternalProber: a Prober's JSON, in its field order."""
    if not probe:
        return None
    timeout = probe.get("timeoutSeconds") if with_timeout else None
    for key, shape in (("httpGet", _http_get), ("tcpSocket", _tcp_socket), ("grpc", _grpc)):
        if probe.get(key) is not None and (key != "grpc" or with_timeout):
            return {key: shape(probe[key]), **({"timeoutSeconds": timeout} if timeout else {})}
    return None


def _resolve(prober: dict[str, Any] | None, ports: Mapping[str, int], status_port: int) -> dict[str, Any] | None:
    if prober is None or "grpc" in prober:
        return prober
    action = prober.get("httpGet") or prober["tcpSocket"]
    port = action.get("port")
    if isinstance(port, str):
        if port not in ports:
            return None
        action["port"] = ports[port]
    elif port == status_port:
        return None  # already rewritten
    return prober


def _http_get(action: Mapping[str, Any]) -> dict[str, Any]:
    order = ("path", "port", "host", "scheme", "httpHeaders")
    out = {k: action[k] for k in order if action.get(k) not in (None, "", [])}
    out.setdefault("port", 0)
    out = {k: out[k] for k in order if k in out}
    if "httpHeaders" in out:
        out["httpHeaders"] = [{"name": h.get("name", ""), "value": h.get("value", "")} for h in out["httpHeaders"]]
    return out


def _tcp_socket(action: Mapping[str, Any]) -> dict[str, Any]:
    return {"port": action.get("port", 0), **({"host": action["host"]} if action.get("host") else {})}


def _grpc(action: Mapping[str, Any]) -> dict[str, Any]:
    return {"port": action.get("port", 0), "service": action.get("service")}


def merge_or_append_probers(previously_injected: bool, env: list[dict[str, Any]], probers: str) -> list[dict[str, Any]]:
    """mergeOrAppendProbers: a re-injected proxy keeps the probers it had (they were already
    rewritten), merged with the new ones."""
    if previously_injected:
        for i, var in enumerate(env):
            if var.get("name") == KUBE_APP_PROBERS:
                try:
                    existing = json.loads(var.get("value", ""))
                    new = json.loads(probers)
                except ValueError as e:
                    logger.error("failed to unmarshal existing kubeAppProbers %s", e)
                    return env
                new.update(existing)
                env[i] = {"name": KUBE_APP_PROBERS, "value": go_json(sorted_map(new))}
                return env
    return [*env, {"name": KUBE_APP_PROBERS, "value": probers}]


def rewrite_probes(spec: dict[str, Any], annotations: Mapping[str, str], status_port: int) -> None:
    """patchRewriteProbe: every probe and hook of the application's containers points at the
    status port (the annotation's, when set), at the URL the proxy serves it on."""
    port = status_port
    if STATUS_PORT_ANNOTATION in annotations:
        try:
            port = int(annotations[STATUS_PORT_ANNOTATION])
        except ValueError:
            logger.error("invalid annotation %s=%s", STATUS_PORT_ANNOTATION, annotations[STATUS_PORT_ANNOTATION])
            port = 0
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if c.get("name") != PROXY_CONTAINER:
                _convert(c, port)


def _convert(c: dict[str, Any], port: int) -> None:
    urls = prober_urls(c.get("name", ""))
    for probe in _PROBES:
        converted = _converted(c.get(probe), urls[probe], port, grpc=True)
        if converted is not None:
            c[probe] = converted
    lifecycle = c.get("lifecycle")
    if lifecycle:
        for hook in _HOOKS:
            converted = _converted(lifecycle.get(hook), urls[hook], port, grpc=False)
            if converted is not None:
                lifecycle[hook] = converted


def _converted(probe: Mapping[str, Any] | None, url: str, port: int, *, grpc: bool) -> dict[str, Any] | None:
    """convertAppProber / convertAppLifecycleHandler."""
    if not probe:
        return None
    out = dict(probe)
    if out.get("httpGet") is not None:
        out["httpGet"] = _rewritten(out["httpGet"], url, port)
    elif out.get("tcpSocket") is not None:
        out.pop("tcpSocket")
        out["httpGet"] = _rewritten({}, url, port)
    elif grpc and out.get("grpc") is not None:
        out.pop("grpc")
        out["httpGet"] = _rewritten({}, url, port)
    else:
        return None
    return out


def _rewritten(action: Mapping[str, Any], url: str, port: int) -> dict[str, Any]:
    """rewriteHTTPGetAction: the agent's port and URL; HTTPS becomes HTTP (the agent speaks
    HTTPS to the application)."""
    out = {**action, "port": port, "path": url}
    if out.get("scheme") == "HTTPS":
        out["scheme"] = "HTTP"
    return out
