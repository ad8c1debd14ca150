"""What the kubelet computes from a pod's spec before it starts a container, without I/O: the
container's environment (``value``, ``valueFrom`` fieldRef / resourceFieldRef / configMapKeyRef /
secretKeyRef, ``envFrom``, the Service links and ``KUBERNETES_SERVICE_*``), ``$(VAR)`` expansion
in env values, command and args, and the downward API's text for labels and annotations.

Matched to the kubelet (k8s.io/kubernetes pkg/kubelet/kubelet_pods.go ``makeEnvironmentVariables``,
third_party/forked/golang/expansion ``Expand``, pkg/fieldpath ``ExtractFieldPathAsString`` and
``FormatMap``, pkg/api/v1/resource ``ExtractContainerResourceValue``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

# a key in a ConfigMap or Secret read by name: (kind, namespace, name) -> its data (decoded), or None
ObjectData = Callable[[str, str, str], Mapping[str, str] | None]

_SUFFIXES = {
    "": Decimal(1), "m": Decimal("0.001"), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
    "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18), "Ki": Decimal(2**10),
    "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_SUBSCRIPT = re.compile(r"^(metadata\.(?:labels|annotations))\['(.+)'\]$")


class PodSpecError(ValueError):
    """The pod asks for something a kubelet would refuse (it would leave the pod not running)."""


def quantity(text: str | int | float) -> Decimal:
    """A resource quantity (``500m``, ``2Gi``, ``1e3``) as a number."""
    match = _QUANTITY.match(str(text).strip())
    if match is None:
        raise PodSpecError(f"quantity {text!r}: not a Kubernetes quantity")
    return Decimal(match[1]) * _SUFFIXES[match[2] or ""]


def expand(text: str, env: Mapping[str, str]) -> str:
    """``$(VAR)`` replaced by VAR's value where VAR is defined, ``$$`` an escaped ``$``, anything
    else left as written (the kubelet's ``expansion.Expand``)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "$" or i + 1 >= len(text):
            out.append(text[i])
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            end = text.find(")", i + 2)
            if end < 0:
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : end]
            out.append(env.get(name, f"$({name})"))
            i = end + 1
        else:
            out.append("$" + following)
            i += 2
    return "".join(out)


def format_map(values: Mapping[str, str]) -> str:
    """Labels or annotations as the downward API writes them: ``key="value"`` lines, sorted, the
    value quoted as Go's ``strconv.Quote`` does (JSON's quoting for what a label can hold)."""
    return "\n".join(f"{key}={json.dumps(values[key], ensure_ascii=False)}" for key in sorted(values))


def field_value(pod: Mapping[str, Any], path: str) -> str:
    """A fieldRef's value (``metadata.name``, ``metadata.labels['app']``, ``status.podIP`` ...)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    subscript = _SUBSCRIPT.match(path)
    if subscript is not None:
        kind = subscript[1].split(".")[1]
        return str((meta.get(kind) or {}).get(subscript[2], ""))
    simple: dict[str, Callable[[], str]] = {
        "metadata.name": lambda: meta.get("name", ""),
        "metadata.namespace": lambda: meta.get("namespace", ""),
        "metadata.uid": lambda: meta.get("uid", ""),
        "metadata.labels": lambda: format_map(meta.get("labels") or {}),
        "metadata.annotations": lambda: format_map(meta.get("annotations") or {}),
        "spec.nodeName": lambda: spec.get("nodeName", ""),
        "spec.serviceAccountName": lambda: spec.get("serviceAccountName", ""),
        "status.hostIP": lambda: status.get("hostIP", ""),
        "status.hostIPs": lambda: ",".join(a["ip"] for a in status.get("hostIPs") or []),
        "status.podIP": lambda: status.get("podIP", ""),
        "status.podIPs": lambda: ",".join(a["ip"] for a in status.get("podIPs") or []),
    }
    if path not in simple:
        raise PodSpecError(f"fieldRef {path!r}: not a field the downward API exposes")
    return str(simple[path]())


def resource_value(
    pod: Mapping[str, Any], container: str, ref: Mapping[str, Any], allocatable: Mapping[str, str]
) -> str:
    """A resourceFieldRef's value: the container's limit or request divided by ``divisor`` and
    rounded up; an unset limit is the node's allocatable (``ExtractContainerResourceValue``)."""
    name = ref.get("containerName") or container
    specs = [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]
    found = [c for c in specs if c["name"] == name]
    if not found:
        raise PodSpecError(f"resourceFieldRef: pod {pod['metadata']['name']} has no container {name!r}")
    kind, _, resource = str(ref["resource"]).partition(".")
    amounts = found[0].get("resources") or {}
    value = (amounts.get(kind) or {}).get(resource)
    if value is None and kind == "requests":
        value = (amounts.get("limits") or {}).get(resource)  # a request defaults to the limit
    if value is None:
        value = allocatable.get(resource, "0") if kind == "limits" else "0"
    # the API server stores an omitted divisor as "0", which the kubelet reads as 1
    divisor = quantity(ref.get("divisor") or "1") or Decimal(1)
    return str(math.ceil(quantity(value) / divisor))


def service_env(services: Sequence[Mapping[str, Any]], namespace: str, links: bool) -> dict[str, str]:
    """``KUBERNETES_SERVICE_HOST`` / ``_PORT`` (the master service, always) and, with
    ``enableServiceLinks``, ``NAME_SERVICE_HOST`` ... for the namespace's Services with a
    ClusterIP (kubelet ``getServiceEnvVarMap``, envvars.FromServices)."""
    env: dict[str, str] = {}
    for service in services:
        meta, spec = service["metadata"], service["spec"]
        cluster_ip = spec.get("clusterIP") or "None"
        master = meta["namespace"] == "default" and meta["name"] == "kubernetes"
        if cluster_ip == "None" or not (master or (links and meta["namespace"] == namespace)):
            continue
        prefix = meta["name"].upper().replace("-", "_")
        ports = spec.get("ports") or []
        env[f"{prefix}_SERVICE_HOST"] = cluster_ip
        if ports:
            env[f"{prefix}_SERVICE_PORT"] = str(ports[0]["port"])
            first = ports[0]
            env[f"{prefix}_PORT"] = f"{first.get('protocol', 'TCP').lower()}://{cluster_ip}:{first['port']}"
        for port in ports:
            if port.get("name"):
                env[f"{prefix}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(port["port"])
            protocol = port.get("protocol", "TCP")
            base = f"{prefix}_PORT_{port['port']}_{protocol}"
            env[base] = f"{protocol.lower()}://{cluster_ip}:{port['port']}"
            env[f"{base}_PROTO"], env[f"{base}_PORT"], env[f"{base}_ADDR"] = (
                protocol.lower(),
                str(port["port"]),
                cluster_ip,
            )
    return env


def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    services: Mapping[str, str],
    read: ObjectData,
    allocatable: Mapping[str, str],
) -> dict[str, str]:
    """The container's environment as the kubelet builds it: the Service variables first, then
    ``envFrom``, then ``env`` in order, each value expanded against what came before."""
    namespace = pod["metadata"]["namespace"]
    env = dict(services)
    for source in container.get("envFrom") or []:
        kind, ref = (
            ("ConfigMap", source["configMapRef"]) if "configMapRef" in source else ("Secret", source["secretRef"])
        )
        data = read(kind, namespace, ref["name"])
        if data is None:
            if ref.get("optional"):
                continue
            raise PodSpecError(f"envFrom: {kind} {namespace}/{ref['name']} not found")
        env.update({f"{source.get('prefix', '')}{k}": v for k, v in data.items()})
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(str(var.get("value", "")), env)
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            env[name] = field_value(pod, source["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in source:
            env[name] = resource_value(pod, container["name"], source["resourceFieldRef"], allocatable)
        else:
            config_map = "configMapKeyRef" in source
            kind, ref = ("ConfigMap", source["configMapKeyRef"]) if config_map else ("Secret", source["secretKeyRef"])
            data = read(kind, namespace, ref["name"])
            if data is None or ref["key"] not in data:
                if ref.get("optional"):
                    continue
                raise PodSpecError(f"env {name}: key {ref['key']!r} of {kind} {namespace}/{ref['name']} not found")
            env[name] = data[ref["key"]]
    return env
