"""An EnvoyFilter patch's value as the Envoy message it patches (istiod pkg/config/xds
BuildXDSObjectFromStruct): the Struct through JSON into the message its applyTo names, with
unknown fields ignored unless strict, every ``@type`` resolved from the installed xds-protos
(the message classes of a proto package are imported when a type of it is first named)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

from google.protobuf import descriptor_pool, json_format, message_factory, struct_pb2
from google.protobuf.message import Message

from app.api.istio.networking.v1alpha3.envoy_filter_pb2 import EnvoyFilter

_APPLY_TO = EnvoyFilter.ApplyTo
# the message each applyTo's value is (istiod BuildXDSObjectFromStruct)
VALUE_TYPES: Mapping[int, str] = {
    _APPLY_TO.CLUSTER: "envoy.config.cluster.v3.Cluster",
    _APPLY_TO.LISTENER: "envoy.config.listener.v3.Listener",
    _APPLY_TO.ROUTE_CONFIGURATION: "envoy.config.route.v3.RouteConfiguration",
    _APPLY_TO.FILTER_CHAIN: "envoy.config.listener.v3.FilterChain",
    _APPLY_TO.HTTP_FILTER: "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter",
    _APPLY_TO.NETWORK_FILTER: "envoy.config.listener.v3.Filter",
    _APPLY_TO.VIRTUAL_HOST: "envoy.config.route.v3.VirtualHost",
    _APPLY_TO.HTTP_ROUTE: "envoy.config.route.v3.Route",
    _APPLY_TO.EXTENSION_CONFIG: "envoy.config.core.v3.TypedExtensionConfig",
    _APPLY_TO.BOOTSTRAP: "envoy.config.bootstrap.v3.Bootstrap",
    _APPLY_TO.LISTENER_FILTER: "envoy.config.listener.v3.ListenerFilter",
}
_tried: set[str] = set()
_ISTIO_PROXY = "app.api.istio.envoy"


class PatchValueError(ValueError):
    """A patch value that does not build into its Envoy message (istiod's wording)."""


def _import_package(package: str) -> None:
    """Import every ``*_pb2`` module of a proto package (``envoy.extensions.filters.http.router.v3``),
    which registers its messages with the default descriptor pool."""
    if package in _tried:
        return
    _tried.add(package)
    try:
        module = importlib.import_module(package)
    except ImportError:
        return
    for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
        if info.name.endswith("_pb2"):
            importlib.import_module(f"{package}.{info.name}")


def _import_istio_proxy_types() -> None:
    """Register the Istio proxy's own filter configs (istio.io/api's envoy protos, which istiod
    links, generated under app.api.istio.envoy): their packages (``stats``,
    ``istio.envoy.config...``) are no Python package's names."""
    if _ISTIO_PROXY in _tried:
        return
    _tried.add(_ISTIO_PROXY)
    package = importlib.import_module(_ISTIO_PROXY)
    for info in pkgutil.walk_packages(package.__path__, f"{_ISTIO_PROXY}."):
        if info.name.endswith("_pb2"):
            importlib.import_module(info.name)


def message_class(full_name: str) -> type[Message] | None:
    """The generated class of a message type, or None when no installed proto defines it."""
    pool = descriptor_pool.Default()
    for load in (lambda: _import_package(full_name.rsplit(".", 1)[0]), _import_istio_proxy_types, None):
        try:
            return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))
        except KeyError:
            if load is None:
                return None
            load()
    return None


def patch_value(apply_to: int, value: struct_pb2.Struct | None, *, strict: bool = False) -> Message | None:
    """The patch's value as the message ``apply_to`` names (None for no value: a REMOVE's);
    raises PatchValueError."""
    if value is None:
        return None
    name = VALUE_TYPES.get(apply_to)
    cls = message_class(name) if name is not None else None
    if cls is None:
        raise PatchValueError(f"Envoy filter: unknown object type for applyTo {_APPLY_TO.Name(apply_to)}")
    data = json_format.MessageToDict(value)
    unknown = _resolve_types(data)
    if unknown is not None:
        hint = " (hint: try using the v3 XDS API)" if ".v2." in unknown else ""
        raise PatchValueError(f"referenced type unknown{hint}: could not resolve Any message type: {unknown}")
    out = cls()
    try:
        json_format.ParseDict(data, out, ignore_unknown_fields=not strict)
    except (json_format.ParseError, ValueError, TypeError) as e:
        raise PatchValueError(f"Envoy filter: {str(e).splitlines()[0]}") from None
    return out


def _resolve_types(data: Any) -> str | None:
    """Import the message of every ``@type`` in ``data``; the first that none describes."""
    if isinstance(data, dict):
        type_url = data.get("@type")
        if isinstance(type_url, str) and message_class(type_url.rsplit("/", 1)[-1]) is None:
            return type_url
        for v in data.values():
            found = _resolve_types(v)
            if found is not None:
                return found
    elif isinstance(data, list):
        for v in data:
            found = _resolve_types(v)
            if found is not None:
                return found
    return None
