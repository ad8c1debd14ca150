"""The pod annotations istiod checks before injecting (validate.go AnnotationValidation): a bad
value fails the injection with istiod's message."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping

import yaml

from app.config.go_strconv import go_int
from app.config.schema import merge_message
from app.errors import FieldError
from app.inject.proxy_config import default_proxy_config
from app.inject.quantity import QuantityError, canonical_quantity

_INTERFACE = re.compile(r"^[a-zA-Z0-9._-]+$")


class AnnotationError(ValueError):
    pass


def _port(text: str) -> int:
    try:
        port = int(text.strip(), 10)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535 or not text.strip().isdigit():
        raise AnnotationError(f"failed parsing port '{text}'")
    return port


def _ports(name: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value.strip():
            for p in value.strip().split(","):
                try:
                    _port(p)
                except AnnotationError as e:
                    raise AnnotationError(f"{name} invalid: failed parsing port '{p}': {e}") from None

    return check


def _cidrs(value: str) -> None:
    if value:
        for cidr in value.split(","):
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as e:
                raise AnnotationError(f"failed parsing cidr '{cidr}': {e}") from None
            if "/" not in cidr:
                raise AnnotationError(f"failed parsing cidr '{cidr}': no '/'")


def _include_ip_ranges(value: str) -> None:
    if value != "*":
        try:
            _cidrs(value)
        except AnnotationError as e:
            raise AnnotationError(f"includeIPRanges invalid: {e}") from None


def _exclude_ip_ranges(value: str) -> None:
    try:
        _cidrs(value)
    except AnnotationError as e:
        raise AnnotationError(f"excludeIPRanges invalid: {e}") from None


def _include_inbound_ports(value: str) -> None:
    if value != "*":
        _ports("includeInboundPorts")(value)


def _interception_mode(value: str) -> None:
    if value not in ("REDIRECT", "TPROXY", "NONE"):
        raise AnnotationError(f"interceptionMode invalid, use REDIRECT,TPROXY,NONE: {value}")


def _status_port(value: str) -> None:
    try:
        _port(value)
    except AnnotationError as e:
        raise AnnotationError(f"excludeInboundPorts invalid: {e}") from None


def _uint32(value: str) -> None:
    number = go_int(value, signed=False)  # isdigit takes '²', which int refuses
    if number is None or number >= 2**32:
        raise AnnotationError(f'strconv.ParseUint: parsing "{value}": invalid syntax')


def _bool(value: str) -> None:
    if value not in ("1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"):
        raise AnnotationError(f'strconv.ParseBool: parsing "{value}": invalid syntax')


def _interfaces(value: str) -> None:
    if value:
        for name in (n.strip() for n in value.split(",")):
            if not name:
                raise AnnotationError("empty interface name")
            if len(name) > 15:
                raise AnnotationError(f'interface name "{name}" too long (max 15 chars)')
            if not _INTERFACE.match(name):
                raise AnnotationError(f'interface name "{name}" contains invalid characters')


def _quantity(value: str) -> None:
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise AnnotationError("value contains control characters")
    try:
        canonical_quantity(value)
    except QuantityError as e:
        raise AnnotationError(str(e)) from None


def _proxy_config(value: str) -> None:
    try:
        doc = yaml.safe_load(value)
        if doc is not None:
            if not isinstance(doc, dict):
                raise AnnotationError("failed to convert to apply proxy config: not an object")
            merge_message(doc, default_proxy_config(), strict=False)
    except (yaml.YAMLError, FieldError) as e:
        raise AnnotationError(f"failed to convert to apply proxy config: {e}") from None


ANNOTATION_VALIDATION: dict[str, Callable[[str], None]] = {
    "sidecar.istio.io/interceptionMode": _interception_mode,
    "status.sidecar.istio.io/port": _status_port,
    "readiness.status.sidecar.istio.io/initialDelaySeconds": _uint32,
    "readiness.status.sidecar.istio.io/periodSeconds": _uint32,
    "readiness.status.sidecar.istio.io/failureThreshold": _uint32,
    "traffic.sidecar.istio.io/includeOutboundIPRanges": _include_ip_ranges,
    "traffic.sidecar.istio.io/excludeOutboundIPRanges": _exclude_ip_ranges,
    "traffic.sidecar.istio.io/includeInboundPorts": _include_inbound_ports,
    "traffic.sidecar.istio.io/excludeInboundPorts": _ports("excludeInboundPorts"),
    "traffic.sidecar.istio.io/excludeOutboundPorts": _ports("excludeOutboundPorts"),
    "traffic.sidecar.istio.io/excludeInterfaces": _interfaces,
    "traffic.sidecar.istio.io/kubevirtInterfaces": _interfaces,
    "istio.io/reroute-virtual-interfaces": _interfaces,
    "prometheus.istio.io/merge-metrics": _bool,
    "proxy.istio.io/config": _proxy_config,
    "sidecar.istio.io/proxyCPU": _quantity,
    "sidecar.istio.io/proxyMemory": _quantity,
    "sidecar.istio.io/proxyCPULimit": _quantity,
    "sidecar.istio.io/proxyMemoryLimit": _quantity,
}


def validate_annotations(annotations: Mapping[str, str]) -> None:
    """validateAnnotations: every bad value named, in one error (multierror's format)."""
    errors = []
    for name, value in annotations.items():
        check = ANNOTATION_VALIDATION.get(name)
        if check is not None:
            try:
                check(value)
            except AnnotationError as e:
                errors.append(f"invalid value '{value}' for annotation '{name}': {e}")
    if errors:
        listed = "".join(f"\t* {e}\n" for e in errors)
        raise AnnotationError(f"{len(errors)} error{'s' if len(errors) > 1 else ''} occurred:\n{listed}\n")
