"""The data istiod's injection templates read (SidecarTemplateData) as Go structs for the
template engine: Go field names over Kubernetes JSON (``.ObjectMeta.Annotations``,
``.Spec.Containers``) and over protobuf messages (``.ProxyConfig.ProxyMetadata``,
``.ProxyConfig.GetTracing.GetTlsSettings``), absent fields giving Go's zero values.

An unset message field reads as an empty map: falsy like Go's nil pointer, and a field or getter
on it gives nil, as a getter on a nil message does in Go."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from app.gotemplate.values import Int64, StringMap

# Kubernetes fields by Go type whose zero value is not "": (kind, element type for lists)
_KUBE_FIELDS: dict[str, dict[str, tuple[str, str]]] = {
    "ObjectMeta": {"Labels": ("map", ""), "Annotations": ("map", ""), "OwnerReferences": ("list", ""),
                   "Finalizers": ("list", ""), "ManagedFields": ("list", "")},
    "PodSpec": {"Containers": ("list", "Container"), "InitContainers": ("list", "Container"),
                "EphemeralContainers": ("list", "Container"), "Volumes": ("list", ""),
                "ImagePullSecrets": ("list", ""), "Tolerations": ("list", ""), "HostNetwork": ("bool", ""),
                "NodeSelector": ("map", "")},
    "Container": {"Ports": ("list", "ContainerPort"), "Env": ("list", ""), "Args": ("list", ""),
                  "Command": ("list", ""), "VolumeMounts": ("list", ""), "Stdin": ("bool", ""), "TTY": ("bool", "")},
    "ContainerPort": {"ContainerPort": ("int", ""), "HostPort": ("int", "")},
}  # fmt: skip
_ZERO: dict[str, Any] = {"list": None, "bool": False, "int": 0}
# encoding/json's order of a ContainerPort's fields (structToJSON of .Spec.Containers[].Ports)
CONTAINER_PORT_ORDER = ("name", "hostPort", "containerPort", "protocol", "hostIP")


def json_name(go_name: str) -> str:
    """A Kubernetes field's JSON name from its Go name: APIVersion -> apiVersion, HTTPGet -> httpGet."""
    upper = 0
    while upper < len(go_name) and go_name[upper].isupper():
        upper += 1
    if upper <= 1 or upper == len(go_name):
        return go_name[:upper].lower() + go_name[upper:]
    return go_name[: upper - 1].lower() + go_name[upper - 1 :]


@dataclass(frozen=True)
class KubeStruct:
    """A Kubernetes object (JSON as a dict) seen as its Go struct ``go_type``."""

    go_type: str
    value: Mapping[str, Any] = field(default_factory=dict)

    def go_field(self, name: str) -> Any:
        kind, element = _KUBE_FIELDS.get(self.go_type, {}).get(name, ("", ""))
        raw = self.value.get(json_name(name))
        if raw is None:
            return StringMap() if kind == "map" else _ZERO.get(kind, "")
        if kind == "map":
            return StringMap({str(k): str(v) for k, v in raw.items()})
        return kube_value(raw, element)

    def __str__(self) -> str:
        return str(dict(self.value))


def kube_value(raw: Any, go_type: str = "") -> Any:
    if isinstance(raw, Mapping):
        return KubeStruct(go_type, raw)
    if isinstance(raw, list):
        return [kube_value(v, go_type) for v in raw]
    return raw


@dataclass(frozen=True)
class Named:
    """A Go struct of plain string fields (metav1.TypeMeta, types.NamespacedName)."""

    fields: Mapping[str, str]

    def go_field(self, name: str) -> Any:
        return self.fields[name]


class EnumValue:
    """A protobuf enum value: prints its name, as Go's String() method does."""

    def __init__(self, name: str) -> None:
        self.name = name

    def go_field(self, name: str) -> Any:
        if name == "String":
            return lambda: self.name
        raise KeyError(name)

    def __str__(self) -> str:
        return self.name


class ProtoStruct:
    """A protobuf message as its Go struct: ``.FieldName`` and the ``GetFieldName`` getters."""

    def __init__(self, message: Message) -> None:
        self.message = message
        self._fields = _go_fields(message.DESCRIPTOR)

    def go_field(self, name: str) -> Any:
        if name.startswith("Get") and name[3:] in self._fields:
            value = self._value(self._fields[name[3:]])
            return lambda: value
        return self._value(self._fields[name])

    def _value(self, f: FieldDescriptor) -> Any:
        value = getattr(self.message, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            return StringMap({str(k): str(v) for k, v in value.items()})
        if f.is_repeated:
            return [_scalar(f, v) for v in value]
        if f.message_type is not None:
            return ProtoStruct(value) if self.message.HasField(f.name) else {}
        return _scalar(f, value)

    def __str__(self) -> str:
        return str(self.message)


@functools.cache
def _go_fields(descriptor: Descriptor) -> dict[str, FieldDescriptor]:
    """A message type's fields by their Go names (built once per type: a template reads
    thousands of fields per pod)."""
    return {_go_name(f.name): f for f in descriptor.fields}


def _scalar(f: FieldDescriptor, value: Any) -> Any:
    if f.enum_type is not None:
        return EnumValue(
            f.enum_type.values_by_number[value].name if value in f.enum_type.values_by_number else str(value)
        )
    if isinstance(value, Message):
        return ProtoStruct(value)
    if f.type in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
        return Int64(value)
    return value


def _go_name(proto_name: str) -> str:
    """protoc-gen-go's Go name of a field: proxy_metadata -> ProxyMetadata."""
    return "".join(part[:1].upper() + part[1:] for part in proto_name.split("_"))


@dataclass(frozen=True)
class SidecarTemplateData:
    """inject.SidecarTemplateData: what every injection template is executed with."""

    type_meta: Mapping[str, str]
    deployment_meta: Mapping[str, str]
    object_meta: Mapping[str, Any]
    spec: Mapping[str, Any]
    proxy_config: Message
    mesh_config: Message
    values: Mapping[str, Any]
    revision: str
    native_sidecars: bool
    proxy_image: str
    proxy_init_image: str
    proxy_uid: int = 1337
    proxy_gid: int = 1337
    inbound_traffic_policy_mode: str = "passthrough"
    compliance_policy: str = ""

    def go_field(self, name: str) -> Any:
        return _TEMPLATE_DATA_FIELDS[name](self)  # KeyError: no such field, as the engine expects


# SidecarTemplateData's fields, each made when a template reads it
_TEMPLATE_DATA_FIELDS: dict[str, Callable[[SidecarTemplateData], Any]] = {
    "TypeMeta": lambda d: Named({"Kind": d.type_meta.get("kind", ""), "APIVersion": d.type_meta.get("apiVersion", "")}),
    "DeploymentMeta": lambda d: Named({
        "Name": d.deployment_meta.get("name", ""), "Namespace": d.deployment_meta.get("namespace", ""),
    }),
    "ObjectMeta": lambda d: KubeStruct("ObjectMeta", d.object_meta),
    "Spec": lambda d: KubeStruct("PodSpec", d.spec),
    "ProxyConfig": lambda d: ProtoStruct(d.proxy_config),
    "MeshConfig": lambda d: ProtoStruct(d.mesh_config),
    "Values": lambda d: d.values,
    "Revision": lambda d: d.revision,
    "NativeSidecars": lambda d: d.native_sidecars,
    "ProxyImage": lambda d: d.proxy_image,
    "ProxyInitImage": lambda d: d.proxy_init_image,
    "ProxyUID": lambda d: Int64(d.proxy_uid),
    "ProxyGID": lambda d: Int64(d.proxy_gid),
    "InboundTrafficPolicyMode": lambda d: d.inbound_traffic_policy_mode,
    "CompliancePolicy": lambda d: d.compliance_policy,
}  # fmt: skip
