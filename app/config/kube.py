"""Kubernetes core objects pilotfish reads, parsed into frozen dataclasses.

Only the fields the registry uses are kept. Kubernetes objects carry many fields pilotfish
has no use for (status, managedFields, container specs), so unknown fields are ignored here,
unlike Istio kinds; the fields that are read are type-checked and a bad one is rejected with
its path.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from app.config.objects import EMPTY_LABELS, Kind
from app.config.schema import type_name
from app.errors import FieldError


@dataclass(frozen=True, slots=True)
class KubeServicePort:
    name: str
    port: int
    protocol: str  # TCP / UDP / SCTP
    target_port: int | str  # number, or a container port name
    app_protocol: str = ""


@dataclass(frozen=True, slots=True)
class KubeServiceSpec:
    type: str  # ClusterIP, NodePort, LoadBalancer, ExternalName
    cluster_ips: tuple[str, ...]  # ("None",) for headless
    ports: tuple[KubeServicePort, ...]
    selector: Mapping[str, str] | None
    external_name: str = ""
    publish_not_ready: bool = False  # spec.publishNotReadyAddresses
    traffic_distribution: str = ""  # spec.trafficDistribution

    @property
    def headless(self) -> bool:
        return self.cluster_ips == ("None",)


@dataclass(frozen=True, slots=True)
class ContainerPort:
    name: str
    container_port: int
    protocol: str


@dataclass(frozen=True, slots=True)
class PodSpec:
    service_account: str
    node_name: str
    container_ports: tuple[ContainerPort, ...]
    pod_ips: tuple[str, ...]  # status.podIPs, or status.podIP
    phase: str
    ready: bool  # status.conditions[type=Ready]
    hostname: str = ""  # spec.hostname
    subdomain: str = ""  # spec.subdomain


@dataclass(frozen=True, slots=True)
class NamespaceSpec:
    pass


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """Nothing of a Node's spec is read: its labels (metadata) give its pods' locality."""


@dataclass(frozen=True, slots=True)
class EndpointSlicePort:
    name: str
    port: int
    protocol: str
    app_protocol: str = ""


@dataclass(frozen=True, slots=True)
class SliceEndpoint:
    addresses: tuple[str, ...]
    ready: bool  # an unset condition reads as ready, as in istiod's endpointHealthStatus
    serving: bool | None  # None: the condition is not set
    terminating: bool | None
    target_kind: str = ""
    target_name: str = ""
    target_namespace: str = ""
    zone: str = ""
    node_name: str = ""
    hostname: str = ""


@dataclass(frozen=True, slots=True)
class EndpointSliceSpec:
    service_name: str  # label kubernetes.io/service-name
    address_type: str  # IPv4 / IPv6 / FQDN
    endpoints: tuple[SliceEndpoint, ...]
    ports: tuple[EndpointSlicePort, ...]


@dataclass(frozen=True, slots=True)
class ConfigMapSpec:
    data: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class SecretSpec:
    """A Secret's type and its data, decoded; never shown (a key must not reach a log)."""

    type: str
    data: Mapping[str, bytes] = field(repr=False)


KubeSpec = KubeServiceSpec | PodSpec | NamespaceSpec | NodeSpec | EndpointSliceSpec | ConfigMapSpec | SecretSpec


# --- small typed readers: each names the field path it rejects -------------------------


def _map(obj: Any, path: str) -> Mapping[str, Any]:
    if obj is None:
        return EMPTY_LABELS
    if not isinstance(obj, Mapping):
        raise FieldError(path, f"expected an object, got {type_name(obj)}")
    return obj


def _list(obj: Any, path: str) -> list[Any]:
    if obj is None:
        return []
    if not isinstance(obj, list):
        raise FieldError(path, f"expected a list, got {type_name(obj)}")
    return obj


def _str(obj: Any, path: str, default: str = "") -> str:
    if obj is None:
        return default
    if not isinstance(obj, str):
        raise FieldError(path, f"expected a string, got {type_name(obj)}")
    return obj


def _bool(obj: Any, path: str, default: bool) -> bool:
    if obj is None:
        return default
    if not isinstance(obj, bool):
        raise FieldError(path, f"expected true or false, got {type_name(obj)}")
    return obj


def _optional_bool(obj: Any, path: str) -> bool | None:
    return None if obj is None else _bool(obj, path, False)


def _port(obj: Any, path: str, *, required: bool = True) -> int:
    if obj is None and not required:
        return 0
    if isinstance(obj, bool) or not isinstance(obj, int):
        raise FieldError(path, f"expected a port number, got {obj!r}")
    if not 1 <= obj <= 65535:
        raise FieldError(path, f"port {obj} out of range 1-65535")
    return obj


def string_map(obj: Any, path: str) -> Mapping[str, str]:
    """A map of string to string (labels, annotations, selectors)."""
    m = _map(obj, path)
    for k, v in m.items():
        if not isinstance(k, str):
            raise FieldError(f"{path}.{k}", f"expected a string as the key, got {type_name(k)}")
        if not isinstance(v, str):
            raise FieldError(f"{path}.{k}", f"expected a string value, got {type_name(v)}")
    return MappingProxyType(dict(m)) if m else EMPTY_LABELS


def _parse_service(body: Mapping[str, Any]) -> KubeServiceSpec:
    spec = _map(body.get("spec"), "spec")
    stype = _str(spec.get("type"), "spec.type", "ClusterIP")
    if stype not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
        raise FieldError("spec.type", f"unknown service type {stype!r}")
    ips = _cluster_ips(spec)
    ports: list[KubeServicePort] = []
    seen_names: set[str] = set()
    raw_ports = _list(spec.get("ports"), "spec.ports")
    for i, raw in enumerate(raw_ports):
        p = f"spec.ports[{i}]"
        m = _map(raw, p)
        name = _str(m.get("name"), f"{p}.name")
        if len(raw_ports) > 1 and not name:
            raise FieldError(f"{p}.name", "required when a service has more than one port")
        if name in seen_names:
            raise FieldError(f"{p}.name", f"duplicate port name {name!r}")
        seen_names.add(name)
        number = _port(m.get("port"), f"{p}.port")
        target = m.get("targetPort", number)
        if isinstance(target, str):
            if target.isdigit():
                target = int(target)
        elif isinstance(target, bool) or not isinstance(target, int):
            raise FieldError(f"{p}.targetPort", f"expected a port number or name, got {target!r}")
        ports.append(
            KubeServicePort(
                name=name,
                port=number,
                protocol=_str(m.get("protocol"), f"{p}.protocol", "TCP"),
                target_port=target,
                app_protocol=_str(m.get("appProtocol"), f"{p}.appProtocol"),
            )
        )
    selector = string_map(spec.get("selector"), "spec.selector") if spec.get("selector") is not None else None
    external = _str(spec.get("externalName"), "spec.externalName")
    if stype == "ExternalName" and not external:
        raise FieldError("spec.externalName", "required for type ExternalName")
    publish = spec.get("publishNotReadyAddresses", False)
    if not isinstance(publish, bool):
        raise FieldError("spec.publishNotReadyAddresses", f"expected true or false, got {publish!r}")
    distribution = _str(spec.get("trafficDistribution"), "spec.trafficDistribution")
    return KubeServiceSpec(stype, tuple(ips), tuple(ports), selector, external, publish, distribution)


def _cluster_ips(spec: Mapping[str, Any]) -> list[str]:
    """spec.clusterIPs, else spec.clusterIP, as the API server validates them: each an IP,
    or "None" alone (headless); "" (or none) when no IP was allocated."""
    ips = [_str(ip, f"spec.clusterIPs[{i}]") for i, ip in enumerate(_list(spec.get("clusterIPs"), "spec.clusterIPs"))]
    single = spec.get("clusterIP")
    if single is not None:
        single = _str(single, "spec.clusterIP")
        if single not in ("", "None"):
            _check_ip("spec.clusterIP", single)
        if not ips:
            ips = [single]
    for i, ip in enumerate(ips):
        if ip == "None" and i == 0:
            if len(ips) > 1:
                raise FieldError("spec.clusterIPs", "'None' must be the only value")
        elif ip or len(ips) > 1:
            _check_ip(f"spec.clusterIPs[{i}]", ip)
    return ips


def _check_ip(path: str, text: str, version: int | None = None) -> None:
    """An IP address (of ``version``, when given), as the API server's IsValidIP(v4/v6)."""
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        raise FieldError(path, f"{text!r} is not a valid IP address") from None
    if version is not None and ip.version != version:
        raise FieldError(path, f"{text!r} is not a valid IPv{version} address")


# a DNS subdomain as Kubernetes has it (RFC 1123: lower case), of at least two labels
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_FQDN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})+")


def _check_fqdn(path: str, text: str) -> None:
    """validation.IsFullyQualifiedDomainName: a lower-case DNS subdomain of two or more labels
    (a trailing dot allowed), at most 253 characters."""
    name = text.removesuffix(".")
    if not name or len(name) > 253 or _FQDN.fullmatch(name) is None:
        raise FieldError(path, f"{text!r} is not a fully qualified domain name (lower case, e.g. db.example.com)")


def _parse_pod(body: Mapping[str, Any]) -> PodSpec:
    spec = _map(body.get("spec"), "spec")
    status = _map(body.get("status"), "status")
    cports: list[ContainerPort] = []
    for ci, c in enumerate(_list(spec.get("containers"), "spec.containers")):
        cm = _map(c, f"spec.containers[{ci}]")
        for pi, cp in enumerate(_list(cm.get("ports"), f"spec.containers[{ci}].ports")):
            path = f"spec.containers[{ci}].ports[{pi}]"
            pm = _map(cp, path)
            cports.append(
                ContainerPort(
                    name=_str(pm.get("name"), f"{path}.name"),
                    container_port=_port(pm.get("containerPort"), f"{path}.containerPort"),
                    protocol=_str(pm.get("protocol"), f"{path}.protocol", "TCP"),
                )
            )
    ips = [
        _str(_map(e, f"status.podIPs[{i}]").get("ip"), f"status.podIPs[{i}].ip")
        for i, e in enumerate(_list(status.get("podIPs"), "status.podIPs"))
    ]
    for i, ip in enumerate(ips):
        _check_ip(f"status.podIPs[{i}].ip", ip)
    pod_ip = _str(status.get("podIP"), "status.podIP")
    if pod_ip:
        _check_ip("status.podIP", pod_ip)
        if not ips:
            ips = [pod_ip]
    phase = _str(status.get("phase"), "status.phase", "Running")
    ready = phase == "Running"
    for i, cond in enumerate(_list(status.get("conditions"), "status.conditions")):
        cm = _map(cond, f"status.conditions[{i}]")
        if cm.get("type") == "Ready":
            ready = _str(cm.get("status"), f"status.conditions[{i}].status") == "True"
    return PodSpec(
        service_account=_str(spec.get("serviceAccountName"), "spec.serviceAccountName", "default"),
        node_name=_str(spec.get("nodeName"), "spec.nodeName"),
        container_ports=tuple(cports),
        pod_ips=tuple(ips),
        phase=phase,
        ready=ready,
        hostname=_str(spec.get("hostname"), "spec.hostname"),
        subdomain=_str(spec.get("subdomain"), "spec.subdomain"),
    )


def _parse_endpoint_slice(body: Mapping[str, Any], labels: Mapping[str, str]) -> EndpointSliceSpec:
    service = labels.get("kubernetes.io/service-name", "")
    if not service:
        raise FieldError("metadata.labels", "kubernetes.io/service-name is required")
    address_type = _str(body.get("addressType"), "addressType", "IPv4")
    if address_type not in ("IPv4", "IPv6", "FQDN"):
        raise FieldError("addressType", f"unknown address type {address_type!r}")
    endpoints: list[SliceEndpoint] = []
    for i, raw in enumerate(_list(body.get("endpoints"), "endpoints")):
        p = f"endpoints[{i}]"
        m = _map(raw, p)
        addrs = tuple(_str(a, f"{p}.addresses[{j}]") for j, a in enumerate(_list(m.get("addresses"), f"{p}.addresses")))
        if not addrs:
            raise FieldError(f"{p}.addresses", "at least one address is required")
        for j, address in enumerate(addrs):  # as the API server validates them, per addressType
            if address_type == "FQDN":
                _check_fqdn(f"{p}.addresses[{j}]", address)
            else:
                _check_ip(f"{p}.addresses[{j}]", address, 4 if address_type == "IPv4" else 6)
        cond = _map(m.get("conditions"), f"{p}.conditions")
        ready = _bool(cond.get("ready"), f"{p}.conditions.ready", True)
        target = _map(m.get("targetRef"), f"{p}.targetRef")
        endpoints.append(
            SliceEndpoint(
                addresses=addrs,
                ready=ready,
                serving=_optional_bool(cond.get("serving"), f"{p}.conditions.serving"),
                terminating=_optional_bool(cond.get("terminating"), f"{p}.conditions.terminating"),
                target_kind=_str(target.get("kind"), f"{p}.targetRef.kind"),
                target_name=_str(target.get("name"), f"{p}.targetRef.name"),
                target_namespace=_str(target.get("namespace"), f"{p}.targetRef.namespace"),
                zone=_str(m.get("zone"), f"{p}.zone"),
                node_name=_str(m.get("nodeName"), f"{p}.nodeName"),
                hostname=_str(m.get("hostname"), f"{p}.hostname"),
            )
        )
    ports: list[EndpointSlicePort] = []
    for i, raw in enumerate(_list(body.get("ports"), "ports")):
        p = f"ports[{i}]"
        m = _map(raw, p)
        ports.append(
            EndpointSlicePort(
                name=_str(m.get("name"), f"{p}.name"),
                port=_port(m.get("port"), f"{p}.port"),
                protocol=_str(m.get("protocol"), f"{p}.protocol", "TCP"),
                app_protocol=_str(m.get("appProtocol"), f"{p}.appProtocol"),
            )
        )
    return EndpointSliceSpec(service, address_type, tuple(endpoints), tuple(ports))


def _parse_config_map(body: Mapping[str, Any]) -> ConfigMapSpec:
    return ConfigMapSpec(string_map(body.get("data"), "data"))


def _parse_secret(body: Mapping[str, Any]) -> SecretSpec:
    """``data`` is base64 as the API server stores it; ``stringData`` (write-only there, but
    written in files) is plain text and wins, as the API server merges it."""
    data: dict[str, bytes] = {}
    for key, value in string_map(body.get("data"), "data").items():
        try:
            data[key] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise FieldError(f"data.{key}", "is not valid base64") from None
    for key, value in string_map(body.get("stringData"), "stringData").items():
        data[key] = value.encode()
    return SecretSpec(_str(body.get("type"), "type", "Opaque"), MappingProxyType(data))


def parse_kube_spec(kind: Kind, body: Mapping[str, Any], labels: Mapping[str, str]) -> KubeSpec:
    """The typed spec of a Kubernetes object; raises FieldError naming the bad field."""
    if kind is Kind.SERVICE:
        return _parse_service(body)
    if kind is Kind.POD:
        return _parse_pod(body)
    if kind is Kind.NAMESPACE:
        return NamespaceSpec()
    if kind is Kind.NODE:
        return NodeSpec()
    if kind is Kind.ENDPOINT_SLICE:
        return _parse_endpoint_slice(body, labels)
    if kind is Kind.CONFIG_MAP:
        return _parse_config_map(body)
    if kind is Kind.SECRET:
        return _parse_secret(body)
    raise FieldError("kind", f"{kind} is not a Kubernetes core kind")
