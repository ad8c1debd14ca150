"""The ``istio`` filter metadata istiod puts on clusters, routes, filter chains and endpoints,
and its ``config`` entry naming the Istio object that produced a resource (istiod
util.BuildConfigInfoMetadata / AddConfigInfoMetadata: ``/apis/GROUP/VERSION/namespaces/NS/KIND/NAME``
with the kebab-case kind, e.g. ``virtual-service``, ``destination-rule``). Pure.
"""

from __future__ import annotations

from envoy.config.core.v3 import base_pb2

ISTIO_METADATA_KEY = "istio"
_NETWORKING_CONFIG_PREFIX = "/apis/networking.istio.io/v1/namespaces/"


def add_config_metadata(md: base_pb2.Metadata, kind: str, namespace: str, name: str) -> None:
    """Set ``istio.config`` to the object's path (``kind`` as ``virtual-service``), keeping the
    other ``istio`` fields."""
    path = f"{_NETWORKING_CONFIG_PREFIX}{namespace}/{kind}/{name}"
    md.filter_metadata[ISTIO_METADATA_KEY].fields["config"].string_value = path


def config_metadata(kind: str, namespace: str, name: str) -> base_pb2.Metadata:
    """New metadata holding only ``istio.config``."""
    out = base_pb2.Metadata()
    add_config_metadata(out, kind, namespace, name)
    return out
