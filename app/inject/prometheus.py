"""Prometheus metrics merging (istiod webhook.go applyPrometheusMerge): the pod's
``prometheus.io/*`` annotations move into the proxy's ``ISTIO_PROMETHEUS_ANNOTATIONS`` and the
annotations point Prometheus at pilot-agent, which merges the application's metrics with
Envoy's. Annotation names are compared as Prometheus sanitizes them (``prometheus.io/port``,
``prometheus-io/port`` and ``prometheus_io_port`` are one)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from app.inject.gojson import go_json
from app.inject.probes import PROXY_CONTAINER, parse_go_bool

MERGE_ANNOTATION = "prometheus.istio.io/merge-metrics"
SCRAPING_CONFIG_ENV = "ISTIO_PROMETHEUS_ANNOTATIONS"
_SCRAPE, _PORT, _PATH = "prometheus_io_scrape", "prometheus_io_port", "prometheus_io_path"
_TARGETS = "prometheus_istio_io_scrape_targets"
_SECURE_PORT = "prometheus_istio_io_secure_port"
_CLEARED = frozenset({_SCRAPE, _PORT, _PATH, _TARGETS})
_INVALID = re.compile(r"[^a-zA-Z0-9_]")
# status.istioReservedPorts
RESERVED_PORTS = {
    "15000": "Envoy admin", "15001": "outbound traffic capture", "15004": "pilot debug",
    "15006": "inbound traffic capture", "15008": "HBONE tunnel", "15020": "pilot-agent status / merged Prometheus",
    "15021": "Envoy health", "15053": "DNS proxy", "15090": "Envoy Prometheus (already merged)",
}  # fmt: skip


class PrometheusError(ValueError):
    pass


def sanitize(name: str) -> str:
    return _INVALID.sub("_", name)


def merge_enabled(mesh_setting: bool | None, annotations: Mapping[str, str]) -> bool:
    """enablePrometheusMerge: the annotation, else mesh config's enablePrometheusMerge, else on."""
    if MERGE_ANNOTATION in annotations and (value := parse_go_bool(annotations[MERGE_ANNOTATION])) is not None:
        return value
    return True if mesh_setting is None else mesh_setting


def scrape_enabled(annotations: Mapping[str, str]) -> bool:
    for key, value in annotations.items():
        if sanitize(key) == _SCRAPE and (parsed := parse_go_bool(value)) is not None:
            return parsed
    return True


def prometheus_port(annotations: Mapping[str, str]) -> str | None:
    return next((v for k, v in annotations.items() if sanitize(k) == _PORT), None)


def clear_annotations(annotations: dict[str, str]) -> None:
    for key in [k for k in annotations if sanitize(k) in _CLEARED]:
        del annotations[key]


def apply_prometheus_merge(pod: dict[str, Any], status_port: int, mesh_setting: bool | None) -> None:
    annotations: dict[str, str] = pod["metadata"]["annotations"]
    if not (scrape_enabled(annotations) and merge_enabled(mesh_setting, annotations)):
        return
    target = str(status_port)
    if prometheus_port(annotations) == target:
        return  # already pointing at the agent: set by the user or an earlier injection
    scrape = {"scrape": "", "path": "", "port": ""}
    targets: list[dict[str, str]] = []
    for key, value in annotations.items():
        name = sanitize(key)
        if name in (_SCRAPE, _PATH, _PORT):
            scrape[name.removeprefix("prometheus_io_")] = value
        elif name == _TARGETS:
            targets = _scrape_targets(value)
    if targets:
        scrape["port"], scrape["path"] = targets[0]["port"], targets[0]["path"]
        for t in targets:
            _check_port(t["port"], target, "invalid prometheus scrape targets", "target port")
    elif scrape["port"]:
        _check_port(scrape["port"], target, "invalid prometheus scrape configuration", "port")
    sidecar = find_container(pod["spec"], PROXY_CONTAINER)
    if sidecar is not None and (any(scrape.values()) or targets):
        config = {**scrape, **({"targets": targets} if targets else {})}
        sidecar["env"] = [*(sidecar.get("env") or []), {"name": SCRAPING_CONFIG_ENV, "value": go_json(config)}]
    clear_annotations(annotations)
    annotations["prometheus.io/port"] = target
    annotations["prometheus.io/path"] = "/stats/prometheus"
    annotations["prometheus.io/scrape"] = "true"


def apply_secure_port_annotation(pod: dict[str, Any]) -> None:
    """applySecurePrometheusAnnotation: the proxy's ENVOY_SECURE_MERGED_METRICS_PORT, advertised."""
    annotations: dict[str, str] = pod["metadata"]["annotations"]
    if any(sanitize(k) == _SECURE_PORT for k in annotations):
        return
    sidecar = find_container(pod["spec"], PROXY_CONTAINER)
    for var in (sidecar or {}).get("env") or []:
        if var.get("name") == "ENVOY_SECURE_MERGED_METRICS_PORT" and var.get("value") not in (None, "", "0"):
            annotations["prometheus.istio.io/secure-port"] = var["value"]
            return


def _scrape_targets(raw: str) -> list[dict[str, str]]:
    """status.ParseScrapeTargets; an unparsable value is ignored, as istiod logs and ignores it."""
    targets = []
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        port, _, path = (p.strip() for p in entry.partition(":"))
        if not port:
            return []
        targets.append({"port": port, "path": path or "/metrics"})
    return targets


def _check_port(port: str, agent_port: str, context: str, what: str) -> None:
    try:
        number = int(port)
    except ValueError:
        number = 0
    if not 1 <= number <= 65535:
        raise PrometheusError(f"{context}: invalid {what} {json.dumps(port)}")
    canonical = str(number)
    if canonical == agent_port:
        raise PrometheusError(f"{context}: {what} {port} conflicts with agent port")
    if canonical in RESERVED_PORTS:
        reason = RESERVED_PORTS[canonical]
        raise PrometheusError(f"{context}: {what} {port} is reserved for Istio ({reason}) and cannot be scraped")


def find_container(spec: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """FindContainerFromPod: containers first, then init containers."""
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if c.get("name") == name:
                found: dict[str, Any] = c
                return found
    return None
