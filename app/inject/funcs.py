"""The functions istiod gives its injection templates besides sprig's (template.go
InjectionFuncmap), with Go's semantics: fmt.Sprint's formatting, encoding/json's output,
sigs.k8s.io/yaml's."""

from __future__ import annotations

import json
import logging
import os
import posixpath
from collections.abc import Callable, Mapping
from typing import Any

import yaml
from google.protobuf import json_format
from google.protobuf.message import Message

from app.gotemplate.printing import sprint_value
from app.gotemplate.signature import ANY, STRING, STRING_MAP, go_signature
from app.gotemplate.values import StringMap
from app.inject.gojson import go_json, sorted_map
from app.inject.proxy_config import clean_proxy_config
from app.inject.views import CONTAINER_PORT_ORDER, KubeStruct, ProtoStruct

logger = logging.getLogger(__name__)


def format_duration(duration: Any) -> str:
    """formatDuration: a protobuf Duration as Go's time.Duration prints it (23s, 1m30s, 1.5s)."""
    seconds = nanos = 0
    if isinstance(duration, ProtoStruct):
        seconds, nanos = duration.message.seconds, duration.message.nanos  # type: ignore[attr-defined]
    total = seconds * 10**9 + nanos
    return go_duration(total)


def go_duration(nanoseconds: int) -> str:
    """time.Duration.String()."""
    if nanoseconds == 0:
        return "0s"
    sign = "-" if nanoseconds < 0 else ""
    n = abs(nanoseconds)
    if n < 10**9:
        for unit, scale in (("ns", 1), ("µs", 10**3), ("ms", 10**6)):
            if n < scale * 1000:
                return sign + _decimal(n, scale) + unit
    hours, n = divmod(n, 3600 * 10**9)
    minutes, n = divmod(n, 60 * 10**9)
    text = _decimal(n, 10**9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _decimal(n: int, scale: int) -> str:
    whole, frac = divmod(n, scale)
    digits = str(frac).rjust(len(str(scale)) - 1, "0").rstrip("0") if frac else ""
    return f"{whole}.{digits}" if digits else str(whole)


@go_signature(STRING_MAP, STRING)
def isset(m: Mapping[str, str] | None, key: str) -> bool:
    return key in (m or {})


def exclude_inbound_port(port: Any, excluded: str) -> str:
    """excludeInboundPort: the status port added to the excluded inbound ports."""
    port_text = sprint_value(port).strip()
    if not port_text or port_text == "0":
        return excluded
    kept = []
    for p in excluded.split(","):
        if p == port_text:
            return excluded
        if p.strip():
            kept.append(p.strip())
    return ",".join([*kept, port_text])


def _container_ports(containers: Any, include: Callable[[Any], bool]) -> str:
    parts: list[str] = []
    for c in containers or []:
        if isinstance(c, KubeStruct) and include(c):
            for p in c.value.get("ports") or []:
                if p.get("protocol") not in ("UDP", "SCTP"):
                    parts.append(str(p.get("containerPort", 0)))
    return ",".join(parts)


def include_inbound_ports(containers: Any) -> str:
    return _container_ports(containers, lambda c: True)


def application_ports(containers: Any) -> str:
    return _container_ports(containers, lambda c: c.value.get("name") != "istio-proxy")


@go_signature(STRING)
def identity(s: str) -> str:
    """kubevirtInterfaces, excludeInterfaces: kept for old templates, they return their argument."""
    return s


@go_signature(ANY, STRING, ANY)
def annotation(meta: Any, name: str, default: Any) -> str:
    """getAnnotation: the pod's annotation, else fmt.Sprint(default)."""
    annotations = meta.value.get("annotations") or {} if isinstance(meta, KubeStruct) else {}
    return str(annotations[name]) if name in annotations else sprint_value(default)


def value_or_default(value: Any, default: Any) -> Any:
    return default if value is None or value == "" else value


@go_signature(STRING_MAP)
def to_json(m: Mapping[str, str] | None) -> str:
    return "{}" if m is None else go_json(sorted_map(dict(m)))


@go_signature(STRING)
def from_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        logger.warning("Unable to unmarshal %s", text)
        return "{}"


def struct_to_json(value: Any) -> str:
    """structToJSON: encoding/json of a Go value (a ContainerPort in its field order)."""
    if value is None:
        return "{}"
    return go_json(_go_json_value(value))


def _go_json_value(value: Any) -> Any:
    if isinstance(value, KubeStruct):
        if value.go_type == "ContainerPort":
            port = dict(value.value)
            port.setdefault("containerPort", 0)
            return {k: port[k] for k in CONTAINER_PORT_ORDER if k in port and (port[k] or k == "containerPort")}
        return {k: _go_json_value(v) for k, v in value.value.items()}
    if isinstance(value, dict):
        return {k: _go_json_value(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_go_json_value(v) for v in value]
    return value


def proto_to_json(value: Any) -> str:
    """protoToJSON: a ProxyConfig without the fields equal to istiod's defaults, as protojson writes it."""
    if not isinstance(value, ProtoStruct):
        return "{}"
    message = value.message
    if message.DESCRIPTOR.full_name == "istio.mesh.v1alpha1.ProxyConfig":
        message = clean_proxy_config(message)
    return go_json(_sorted_maps(json_format.MessageToDict(message), message))


def _sorted_maps(doc: Any, message: Message) -> Any:
    """protojson writes fields in field-number order (as MessageToDict) and map entries by key."""
    if not isinstance(doc, dict):
        return doc
    out: dict[str, Any] = {}
    for f in message.DESCRIPTOR.fields:
        if f.json_name not in doc:
            continue
        value = doc[f.json_name]
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            value = dict(sorted(value.items()))
        elif f.message_type is not None and f.is_repeated:
            value = [_sorted_maps(v, item) for v, item in zip(value, getattr(message, f.name), strict=False)]
        elif f.message_type is not None and not f.message_type.full_name.startswith("google.protobuf."):
            value = _sorted_maps(value, getattr(message, f.name))
        out[f.json_name] = value
    return out


def to_yaml(value: Any) -> str:
    """sigs.k8s.io/yaml.Marshal: keys sorted, whole numbers without a fraction."""
    if isinstance(value, KubeStruct):
        value = dict(value.value)
    return yaml.safe_dump(_plain(value), default_flow_style=False, sort_keys=True, allow_unicode=True)


def _plain(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def indent(spaces: int, source: str) -> str:
    lines = source.split("\n")
    return "\n".join([lines[0], *(" " * spaces + line for line in lines[1:])])


@go_signature(STRING)
def directory(path: str) -> str:
    return posixpath.split(path)[0] + ("/" if "/" in path else "")


@go_signature(STRING, STRING)
def flipped_contains(needle: str, haystack: str) -> bool:
    return needle in haystack


@go_signature(STRING)
def to_lower(s: str) -> str:
    return s.lower()


@go_signature(STRING, STRING)
def append_multus_network(existing: str, network: str) -> str:
    if not existing:
        return network
    at = existing.rfind("]")
    if at != -1:
        try:
            networks = json.loads(existing)
        except ValueError as e:
            logger.warning("Unable to unmarshal Multus Network annotation JSON value: %s", e)
            return existing
        namespace, _, name = network.rpartition("/")
        for net in networks if isinstance(networks, list) else []:
            if isinstance(net, dict) and net.get("name") == name and (net.get("namespace") or "") == namespace:
                return existing
        entry = f', {{"name": "{name}", "namespace": "{namespace}"}}' if namespace else f', {{"name": "{name}"}}'
        return existing[:at] + entry + existing[at:]
    if any(n.strip() == network for n in existing.split(",")):
        return existing
    return existing + ", " + network


@go_signature(STRING, STRING)
def env(key: str, default: str) -> str:
    return os.environ.get(key) or default


@go_signature(STRING_MAP, variadic=STRING)
def omit(m: Mapping[str, str] | None, *keys: str) -> StringMap:
    return StringMap({k: v for k, v in (m or {}).items() if k not in keys})


@go_signature(variadic=STRING)
def strdict(*items: str) -> StringMap:
    out = StringMap()
    for i in range(0, len(items), 2):
        out[items[i]] = items[i + 1] if i + 1 < len(items) else ""
    return out


@go_signature(variadic=STRING_MAP)
def merge_maps(*maps: Mapping[str, str] | None) -> StringMap | None:
    if not maps:
        return None
    out = StringMap()
    for m in maps:
        out.update(m or {})
    return out


@go_signature(variadic=STRING_MAP)
def to_json_map(*maps: Mapping[str, str] | None) -> str:
    merged = merge_maps(*maps)
    return "null" if merged is None else go_json(sorted_map(dict(merged)))


def omit_nil(value: Any) -> Any:
    if isinstance(value, dict):
        out = {k: omit_nil(v) for k, v in value.items() if v is not None}
        out = {k: v for k, v in out.items() if v is not None}
        return out if out or not value else (None if any(v is None for v in value.values()) else out)
    if isinstance(value, list):
        items = [omit_nil(v) for v in value if v is not None]
        items = [v for v in items if v is not None]
        return items if items or not value else None
    return value


def otel_resource_attributes(mesh: Any, annotations: Any, labels: Any, namespace: Any, containers: Any) -> str:
    """otelResourceAttributes: OTEL_RESOURCE_ATTRIBUTES when a tracing provider asks for
    OpenTelemetry's semantic conventions, else ""."""
    message = mesh.message if isinstance(mesh, ProtoStruct) else None
    if message is None or not any(
        p.HasField("opentelemetry") and p.opentelemetry.service_attribute_enrichment == 1
        for p in message.extension_providers  # type: ignore[attr-defined]
    ):
        return ""
    annotations, labels = annotations or {}, labels or {}
    containers = [c.value for c in containers or [] if isinstance(c, KubeStruct)]
    attrs = []
    if annotations.get("resource.opentelemetry.io/service.namespace"):
        attrs.append("service.namespace=" + annotations["resource.opentelemetry.io/service.namespace"])
    elif namespace:
        attrs.append(f"service.namespace={namespace}")
    if annotations.get("resource.opentelemetry.io/service.version"):
        attrs.append("service.version=" + annotations["resource.opentelemetry.io/service.version"])
    elif labels.get("app.kubernetes.io/version"):
        attrs.append("service.version=" + labels["app.kubernetes.io/version"])
    elif len(containers) == 1:
        image, _, digest = str(containers[0].get("image", "")).partition("@")
        slash, colon = image.rfind("/"), image.rfind(":")
        tag = image[colon + 1 :] if colon > slash else ""
        version = f"{tag}@{digest}" if tag and digest else digest or tag
        if version:
            attrs.append(f"service.version={version}")
    if annotations.get("resource.opentelemetry.io/service.instance.id"):
        attrs.append("service.instance.id=" + annotations["resource.opentelemetry.io/service.instance.id"])
    elif containers:
        attrs.append(f"service.instance.id={namespace}.$(POD_NAME).{containers[0].get('name', '')}")
    return ",".join(attrs)


INJECTION_FUNCS: dict[str, Callable[..., Any]] = {
    "formatDuration": format_duration,
    "isset": isset,
    "excludeInboundPort": exclude_inbound_port,
    "includeInboundPorts": include_inbound_ports,
    "kubevirtInterfaces": identity,
    "excludeInterfaces": identity,
    "applicationPorts": application_ports,
    "annotation": annotation,
    "valueOrDefault": value_or_default,
    "toJSON": to_json,
    "fromJSON": from_json,
    "structToJSON": struct_to_json,
    "protoToJSON": proto_to_json,
    "toYaml": to_yaml,
    "indent": indent,
    "directory": directory,
    "contains": flipped_contains,
    "toLower": to_lower,
    "appendMultusNetwork": append_multus_network,
    "env": env,
    "omit": omit,
    "strdict": strdict,
    "toJsonMap": to_json_map,
    "mergeMaps": merge_maps,
    "omitNil": omit_nil,
    "otelResourceAttributes": otel_resource_attributes,
}
