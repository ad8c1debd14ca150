"""``/debug/configz`` as istiod serves it: the Istio config in force, each object in Kubernetes
form, in one JSON array (pilot/pkg/xds/debug.go ``configz``: every config store object through
crd.ConvertConfig, an IstioKind: ``kind``, ``apiVersion``, ``metadata`` with name, namespace,
resourceVersion, generation, creationTimestamp (``null`` when unknown), labels and annotations
as the object has them, ``spec`` in proto3 JSON (camelCase, defaults left out, enums by name,
as jsonpb), and ``status`` when there is one). Like istiod, the Istio kinds only: the
Kubernetes objects pilotfish reads (Services, Pods, EndpointSlices, Namespaces, Secrets) are
the registry's, not config.

An object read from a file has no resourceVersion of its own; it is given a content hash
(``content_version``: 16 hex digits of the object's apiVersion, kind, metadata and spec), so
the same content always shows the same version, across restarts too, and any change shows a new
one. One the file or the API server set is shown as set.

What pilotfish adds never changes that form:
* where an object came from and what of it pilotfish does not apply are annotations under
  ``pilotfish.io/`` (``pilotfish.io/source``: the file, or ``kube``; ``pilotfish.io/warnings``: a
  JSON list of lines), as tools annotate objects; the content hash leaves them out;
* every rejection is a Kubernetes ``Event`` after the objects, as a controller reports an object
  it refused: ``type: Warning``, ``reason: Rejected``, ``involvedObject`` naming the object (as
  far as the input says), ``message`` the field and the reason, ``source.component: pilotfish``,
  and the file in its ``pilotfish.io/source`` annotation. A reader that wants istiod's list
  keeps the items whose kind is not ``Event``.

Rendering an object costs a proto3 JSON pass; ``Configz`` keeps each object's rendering while the
object is in force (objects are replaced, never edited), so a call costs what changed since the
last one, not the whole config on the event loop every time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from app.config.objects import ISTIO_KINDS, ConfigObject, Kind
from app.config.validation.spec import istio_warnings
from app.errors import ConfigError

ANNOTATION_PREFIX = "pilotfish.io/"
SOURCE_ANNOTATION = ANNOTATION_PREFIX + "source"
WARNINGS_ANNOTATION = ANNOTATION_PREFIX + "warnings"

_SECURITY_KINDS = frozenset({Kind.PEER_AUTHENTICATION, Kind.AUTHORIZATION_POLICY, Kind.REQUEST_AUTHENTICATION})


def api_version(obj: ConfigObject) -> str:
    """The apiVersion the object was written with; else its group's v1."""
    if obj.api_version:
        return obj.api_version
    if obj.kind is Kind.TELEMETRY:
        return "telemetry.istio.io/v1"
    if obj.kind is Kind.ENVOY_FILTER:
        return "networking.istio.io/v1alpha3"  # the only version istiod serves it in
    return "security.istio.io/v1" if obj.kind in _SECURITY_KINDS else "networking.istio.io/v1"


def spec_json(spec: object) -> Any:
    if isinstance(spec, Message):
        return json_format.MessageToDict(spec)
    return {}


def status_json(obj: ConfigObject) -> dict[str, Any] | None:
    """The part of ``status`` pilotfish keeps (a ServiceEntry's allocated addresses), in
    Istio's form; None when there is none (istiod leaves an empty status out)."""
    if obj.kind is Kind.SERVICE_ENTRY and obj.status:
        return {"addresses": [{"value": address, "host": host} for host, address in obj.status]}
    return None


def content_version(kind: str, api: str, metadata: dict[str, Any], spec: Any) -> str:
    """A stable version for an object that has none: a hash of what it says."""
    text = json.dumps([api, kind, metadata, spec], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def kube_object(obj: ConfigObject) -> dict[str, Any]:
    """``obj`` as istiod's crd.ConvertConfig writes it, with pilotfish's annotations."""
    meta = obj.meta
    api = api_version(obj)
    spec = spec_json(obj.spec)
    # ObjectMeta's JSON order: name, namespace, resourceVersion, generation, creationTimestamp,
    # labels, annotations (the empty ones left out, as omitempty; a zero time is null)
    own: dict[str, Any] = {"name": meta.name, "namespace": meta.namespace or "default"}
    if meta.generation:
        own["generation"] = meta.generation
    own["creationTimestamp"] = meta.creation_timestamp or None
    if meta.labels:
        own["labels"] = dict(meta.labels)
    if meta.annotations:
        own["annotations"] = dict(meta.annotations)
    version = meta.resource_version or content_version(str(obj.kind), api, own, spec)
    metadata: dict[str, Any] = {"name": own["name"], "namespace": own["namespace"], "resourceVersion": version}
    metadata.update((k, v) for k, v in own.items() if k not in metadata)
    annotations = dict(meta.annotations)
    annotations[SOURCE_ANNOTATION] = obj.source
    # what reading it ignored (ConfigObject.warnings, where the loader records them) and what
    # pilotfish cannot honour yet, as app.config.validation.spec's object_warnings puts them together
    warnings = [*getattr(obj, "warnings", ()), *istio_warnings(obj.spec)]
    if warnings:
        annotations[WARNINGS_ANNOTATION] = json.dumps(warnings, ensure_ascii=False)
    metadata["annotations"] = annotations
    out: dict[str, Any] = {"kind": str(obj.kind), "apiVersion": api, "metadata": metadata, "spec": spec}
    status = status_json(obj)
    if status is not None:
        out["status"] = status
    return out


def rejection_event(error: ConfigError) -> dict[str, Any]:
    """A rejection as the Kubernetes Event a controller records for an object it refused."""
    namespace, _, name = error.name.rpartition("/")
    involved: dict[str, Any] = {"kind": error.kind, "name": name}
    if namespace:
        involved["namespace"] = namespace
    message = f"{error.field}: {error.reason}" if error.field else error.reason
    digest = hashlib.blake2b(
        "\0".join((error.source, error.kind, error.name, error.field, error.reason)).encode(), digest_size=8
    ).hexdigest()
    metadata: dict[str, Any] = {"name": f"{name or 'config'}.{digest}"}
    if namespace:
        metadata["namespace"] = namespace
    metadata["annotations"] = {SOURCE_ANNOTATION: error.source}
    return {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": metadata,
        "involvedObject": involved,
        "reason": "Rejected",
        "message": message,
        "source": {"component": "pilotfish"},
        "type": "Warning",
    }


def is_rejection(item: dict[str, Any]) -> bool:
    return item.get("kind") == "Event" and item.get("apiVersion") == "v1"


class Configz:
    """The renderings of the objects in force, kept while each object is (keyed by identity)."""

    def __init__(self) -> None:
        self._rendered: dict[int, tuple[ConfigObject, dict[str, Any]]] = {}

    def __call__(self, objects: Iterable[ConfigObject], rejections: Iterable[ConfigError]) -> list[dict[str, Any]]:
        """istiod's configz array: the Istio config in force (by kind, namespace, name), then
        the rejections as Events."""
        rendered: dict[int, tuple[ConfigObject, dict[str, Any]]] = {}
        for obj in objects:
            if obj.kind not in ISTIO_KINDS:
                continue
            found = self._rendered.get(id(obj))
            if found is None or found[0] is not obj:
                found = (obj, kube_object(obj))
            rendered[id(obj)] = found
        self._rendered = rendered
        items = sorted((item for _, item in rendered.values()), key=_order)
        items.extend(rejection_event(error) for error in rejections)
        return items


def _order(item: dict[str, Any]) -> tuple[str, str, str]:
    return (item["kind"], item["metadata"]["namespace"], item["metadata"]["name"])
