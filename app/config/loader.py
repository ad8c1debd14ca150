"""Turns YAML text into validated ConfigObjects, one document at a time.

A bad document is rejected with a ConfigError naming file, kind, namespace/name, field and
reason; the other documents of the file still load. A file that is not valid YAML at all
yields one file-level error and no objects (``LoadResult.parsed`` is False), so the source
can keep what the file held before; so does a file of more than ``MAX_DOCUMENTS`` documents,
read no further. A document too large to read (app/config/yaml_documents.py) is refused alone.

Kinds are matched by API group and kind (``networking.istio.io`` Gateway, not a Gateway API
``gateway.networking.k8s.io`` one): a kind pilotfish does not read is skipped, whatever its
name.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from app.config.host import is_ip_address
from app.config.kube import parse_kube_spec, string_map
from app.config.mesh import parse_mesh_config
from app.config.objects import DNS_LABEL_TEXT, ISTIO_KINDS, ConfigKey, ConfigObject, Kind, ObjectMeta, is_object_name
from app.config.schema import printable_path, type_name
from app.config.validation.fields import quoted
from app.config.validation.spec import parse_istio_spec
from app.config.yaml_documents import (
    MAX_DOCUMENT_BYTES,
    MAX_DOCUMENTS,
    KubeYamlLoader,
    TooLarge,
    YamlTextError,
    yaml_documents,
    yaml_error_text,
)
from app.errors import ConfigError, FieldError, shown

logger = logging.getLogger(__name__)

# the API group of each kind pilotfish reads, and the versions of it served; Istio serves
# networking v1, v1beta1 and v1alpha3 with one schema (ProxyConfig v1beta1 only), security v1
# and v1beta1, telemetry v1 and v1alpha1
_NETWORKING, _SECURITY, _TELEMETRY = "networking.istio.io", "security.istio.io", "telemetry.istio.io"
_SECURITY_KINDS = frozenset({Kind.PEER_AUTHENTICATION, Kind.AUTHORIZATION_POLICY, Kind.REQUEST_AUTHENTICATION})
_GROUPS: Mapping[Kind, tuple[str, frozenset[str]]] = {
    **{
        k: (_NETWORKING, frozenset({"v1", "v1beta1", "v1alpha3"}))
        for k in ISTIO_KINDS - _SECURITY_KINDS - {Kind.PROXY_CONFIG, Kind.TELEMETRY, Kind.ENVOY_FILTER}
    },
    Kind.PROXY_CONFIG: (_NETWORKING, frozenset({"v1beta1"})),
    Kind.ENVOY_FILTER: (_NETWORKING, frozenset({"v1alpha3"})),
    Kind.TELEMETRY: (_TELEMETRY, frozenset({"v1", "v1alpha1"})),
    **{k: (_SECURITY, frozenset({"v1", "v1beta1"})) for k in _SECURITY_KINDS},
    **{k: ("", frozenset({"v1"})) for k in (Kind.SERVICE, Kind.POD, Kind.NAMESPACE, Kind.NODE, Kind.CONFIG_MAP)},
    Kind.SECRET: ("", frozenset({"v1"})),
    Kind.ENDPOINT_SLICE: ("discovery.k8s.io", frozenset({"v1"})),
}
# (API group, kind) -> the Kind pilotfish reads
_KINDS: Mapping[tuple[str, str], Kind] = {(group, str(kind)): kind for kind, (group, _) in _GROUPS.items()}
# Istio kinds istiod applies and pilotfish does not: a document of one is not read, and says so
# (silently skipped, a mesh that relies on it would get config without it)
UNSUPPORTED_KINDS: Mapping[tuple[str, str], str] = {
    ("extensions.istio.io", "WasmPlugin"): "istiod adds its Wasm filter; pilotfish applies no WasmPlugin",
}
# what istiod's webhook and istioctl validate allow at the top of an Istio object (validFields)
TOP_LEVEL_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_CLUSTER_SCOPED = frozenset({Kind.NAMESPACE, Kind.NODE})
_END = object()  # no document yet
MESH_CONFIGMAP_NAME = "istio"  # the default revision's
MESH_CONFIGMAP_KEY = "mesh"
MESH_OBJECT_NAME = "mesh"
MESH_KEY = ConfigKey(Kind.MESH_CONFIG, "", MESH_OBJECT_NAME)
_DNS_LABEL = re.compile(DNS_LABEL_TEXT)  # a namespace's name
_MAX_NAMESPACE = 63
# namespaces already found valid: a few, named by many objects (bounded: names are input)
_NAMESPACES_SEEN: set[str] = set()
_NAMESPACES_SEEN_MAX = 4096


@dataclass(frozen=True, slots=True)
class Rejection:
    """An object that failed to load; ``key`` is None when even its identity was unreadable."""

    key: ConfigKey | None
    error: ConfigError


@dataclass(slots=True)
class LoadResult:
    objects: list[ConfigObject] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    # False when the text was not YAML: nothing in it can be trusted, not even deletions
    parsed: bool = True
    # documents of kinds pilotfish does not read (Deployments, ...): skipped silently
    ignored: int = 0
    # of those, the Istio kinds istiod would apply (UNSUPPORTED_KINDS): one line each, to warn
    unsupported: list[str] = field(default_factory=list)


def load_documents(
    text: str, source: str, *, system_namespace: str = "istio-system", strict: bool = True
) -> LoadResult:
    """Parse a multi-document YAML file of Kubernetes-style objects.

    ``strict`` (``pilotfish validate``, as ``istioctl validate``): a field Istio's CRDs do not
    define is refused, and so is a top-level key of an Istio object other than apiVersion,
    kind, metadata, spec and status. Not strict (the file source, as istiod's): the field is
    ignored with a warning on the object (``ConfigObject.warnings``), the key ignored."""
    return read_documents((text,), source, system_namespace=system_namespace, strict=strict)


def read_documents(
    blocks: Iterable[str], source: str, *, system_namespace: str = "istio-system", strict: bool = True
) -> LoadResult:
    """``load_documents`` of a text given a block at a time (a file as it is read): at most one
    document of it is held at once, and a file past MAX_DOCUMENTS is read no further."""
    result = LoadResult()
    # documents are validated as they are parsed, so the raw dicts of a big file are never all
    # alive at once; the first waits for the second, since its name says whether there is one
    first: Any = _END
    index = -1
    try:
        for doc in yaml_documents(blocks):
            index += 1
            if index == MAX_DOCUMENTS:
                reason = (
                    f"holds more than {MAX_DOCUMENTS:,} documents, the most a file may hold: not read "
                    "further; what it held before stays in force"
                )
                return LoadResult(parsed=False, rejected=[Rejection(None, ConfigError(source, "", "", "", reason))])
            if index == 0:
                first = doc
                continue
            if index == 1:
                _load_item(first, f"{source}#0", result, system_namespace, strict)
            if doc.__class__ is dict:  # nearly always (a call less)
                _load_one(doc, f"{source}#{index}", result, system_namespace, strict=strict, top_level=strict)
            else:
                _load_item(doc, f"{source}#{index}", result, system_namespace, strict)
    except yaml.YAMLError as e:
        reason = str(e.args[0]) if isinstance(e, YamlTextError) else yaml_error_text(e, "")
        return LoadResult(parsed=False, rejected=[Rejection(None, ConfigError(source, "", "", "", reason))])
    if index == 0:
        _load_item(first, source, result, system_namespace, strict)
    return result


def _load_item(item: Any, source: str, result: LoadResult, system_namespace: str, strict: bool) -> None:
    if item.__class__ is TooLarge:
        reason = (
            f"a document of at least {item.size:,} bytes (from line {item.line}): more than the "
            f"{MAX_DOCUMENT_BYTES // 2**20} MiB an object may hold, not read"
        )
        result.rejected.append(Rejection(None, ConfigError(source, "", "", "", reason)))
    elif item is not None:
        _load_one(item, source, result, system_namespace, strict=strict, top_level=strict)


def load_object(
    doc: Mapping[str, Any],
    source: str,
    *,
    system_namespace: str = "istio-system",
    strict: bool = True,
    mesh_configmap: str = MESH_CONFIGMAP_NAME,
) -> LoadResult:
    """One object already decoded (as an API server sends it), through the same checks as a
    document of a file (its top-level keys are the caller's: the webhook checks them as
    istiod's does, and the API server sends no others). ``mesh_configmap``: the ConfigMap of
    the system namespace read as the MeshConfig (``mesh_configmap_name`` of the revision)."""
    result = LoadResult()
    _load_one(doc, source, result, system_namespace, strict=strict, top_level=False, mesh_configmap=mesh_configmap)
    return result


def load_objects(
    docs: Sequence[tuple[Mapping[str, Any], str]],
    system_namespace: str = "istio-system",
    strict: bool = True,
    mesh_configmap: str = MESH_CONFIGMAP_NAME,
) -> list[LoadResult]:
    """``load_object`` of each (object, source): what a worker process runs for a batch."""
    return [
        load_object(doc, source, system_namespace=system_namespace, strict=strict, mesh_configmap=mesh_configmap)
        for doc, source in docs
    ]


def mesh_configmap_name(revision: str) -> str:
    """The mesh ConfigMap a revision reads: ``istio``, or ``istio-REV`` for a revision other
    than ``default`` (istiod's getMeshConfigMapName)."""
    return MESH_CONFIGMAP_NAME if revision in ("", "default") else f"{MESH_CONFIGMAP_NAME}-{revision}"


def load_mesh_file(text: str, source: str) -> LoadResult:
    """A ``mesh.yaml``: one MeshConfig document in Istio's MeshConfig YAML."""
    result = LoadResult()
    try:
        body = yaml.load(text, Loader=KubeYamlLoader)
    except yaml.YAMLError as e:
        result.parsed = False
        result.rejected.append(Rejection(None, ConfigError(source, "MeshConfig", "", "", yaml_error_text(e, text))))
        return result
    _load_mesh(body if body is not None else {}, source, result, "")
    _one_line_errors(result, 0)
    return result


def _load_mesh(body: Any, source: str, result: LoadResult, namespace: str) -> None:
    try:
        spec = parse_mesh_config(body)
    except FieldError as e:
        error = ConfigError(source, "MeshConfig", MESH_OBJECT_NAME, e.field, e.reason)
        result.rejected.append(Rejection(MESH_KEY, error))
        return
    meta = ObjectMeta(name=MESH_OBJECT_NAME)
    result.objects.append(ConfigObject(Kind.MESH_CONFIG, meta, spec, source, "meshconfig"))


def _load_one(
    doc: Any,
    source: str,
    result: LoadResult,
    system_namespace: str,
    *,
    strict: bool,
    top_level: bool,
    mesh_configmap: str = MESH_CONFIGMAP_NAME,
) -> None:
    before = len(result.rejected)
    try:
        _load_document(doc, source, result, system_namespace, strict, top_level, mesh_configmap)
    except Exception as e:  # a bug, not bad input: the document is refused, the rest still loads
        logger.exception("loading a document of %s failed", source)
        reason = f"internal error reading this document ({type(e).__name__}); please report it"
        result.rejected.append(Rejection(None, ConfigError(source, "", "", "", reason)))
    _one_line_errors(result, before)


def _one_line_errors(result: LoadResult, start: int) -> None:
    """Each rejection from ``start`` on one line, whatever the input held."""
    for i in range(start, len(result.rejected)):
        rejection = result.rejected[i]
        e = rejection.error
        parts = (e.source, e.kind, e.name, e.field, e.reason)
        clean = tuple(printable(part) for part in parts)
        if clean != parts:
            result.rejected[i] = Rejection(rejection.key, ConfigError(*clean))


_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _named(doc: Mapping[str, Any]) -> str:
    """A document's ``namespace/name`` as a message quotes it, whatever its metadata holds."""
    meta = doc.get("metadata")
    parts = (meta.get(k) for k in ("namespace", "name")) if isinstance(meta, Mapping) else ()
    return shown("/".join(str(p) for p in parts if p), 120)


def printable(text: str) -> str:
    """``text`` with what would break or hide part of a log line (line breaks, control and
    format characters) written as escapes: a map key or file name may hold anything."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() and ch not in _LINE_BREAKS else repr(ch)[1:-1] for ch in text)


def _load_document(
    doc: Any, source: str, result: LoadResult, system_namespace: str, strict: bool, top_level: bool, mesh_configmap: str
) -> None:
    if type(doc) is not dict and not isinstance(doc, Mapping):
        err = ConfigError(source, "", "", "", f"a document must be an object, got {type_name(doc)}")
        result.rejected.append(Rejection(None, err))
        return
    kind_text = doc.get("kind")
    api_version = doc.get("apiVersion")
    if not isinstance(kind_text, str) or not isinstance(api_version, str):
        kind_shown = kind_text if isinstance(kind_text, str) else ""
        err = ConfigError(source, kind_shown, "", "apiVersion/kind", "both are required strings")
        result.rejected.append(Rejection(None, err))
        return
    group, _, version = api_version.rpartition("/")
    kind = _KINDS.get((group, kind_text))
    if kind is None:  # not a kind pilotfish reads (a Gateway API Gateway, a Deployment...)
        result.ignored += 1
        reason = UNSUPPORTED_KINDS.get((group, kind_text))
        if reason is not None:
            result.unsupported.append(f"{source}: {kind_text} {_named(doc)}: not applied ({reason})")
        return
    meta_raw = doc.get("metadata")
    if type(meta_raw) is not dict and not isinstance(meta_raw, Mapping):
        meta_raw = {}
    name = meta_raw.get("name")
    namespace = meta_raw.get("namespace")
    if not isinstance(name, str) or not name:
        err = ConfigError(source, kind, "", "metadata.name", "is required")
        result.rejected.append(Rejection(None, err))
        return
    if not is_object_name(name):
        reason = f"{quoted(name)} is not a valid name (lower-case letters, digits, '-' and '.')"
        result.rejected.append(Rejection(None, ConfigError(source, kind, "", "metadata.name", reason)))
        return
    if kind in _CLUSTER_SCOPED:
        namespace = ""
    elif namespace is None:
        namespace = "default"  # as kubectl applies a namespaced object without one
    if not isinstance(namespace, str):
        err = ConfigError(source, kind, name, "metadata.namespace", "must be a string")
        result.rejected.append(Rejection(None, err))
        return
    if namespace and namespace not in _NAMESPACES_SEEN:
        if len(namespace) > _MAX_NAMESPACE or not _DNS_LABEL.fullmatch(namespace):
            reason = f"{quoted(namespace)} is not a valid namespace name (lower-case letters, digits and '-')"
            result.rejected.append(Rejection(None, ConfigError(source, kind, name, "metadata.namespace", reason)))
            return
        if len(_NAMESPACES_SEEN) >= _NAMESPACES_SEEN_MAX:
            _NAMESPACES_SEEN.clear()
        _NAMESPACES_SEEN.add(namespace)
    key = ConfigKey(kind, namespace, name)
    display = f"{namespace}/{name}" if namespace else name
    mesh_map = kind is Kind.CONFIG_MAP and name == mesh_configmap and namespace == system_namespace
    if mesh_map:
        # the ConfigMap is read as the MeshConfig it holds: rejected, it keeps the last good
        # mesh config in force (istiod keeps the previous one), so it is keyed as that
        key = MESH_KEY
    warnings: tuple[str, ...] = ()
    try:
        group, versions = _GROUPS[kind]
        if version not in versions:
            allowed = ", ".join(sorted(f"{group}/{v}" if group else v for v in versions))
            raise FieldError("apiVersion", f"{api_version!r} is not served for {kind} (want one of {allowed})")
        meta = _parse_meta(meta_raw, name, namespace)
        if kind is Kind.CONFIG_MAP:
            if mesh_map:
                data = string_map(doc.get("data"), "data")
                mesh_text = data.get(MESH_CONFIGMAP_KEY, "")
                try:
                    body = yaml.load(mesh_text, Loader=KubeYamlLoader) if mesh_text else None
                except yaml.YAMLError as e:
                    raise FieldError(f"data.{MESH_CONFIGMAP_KEY}", yaml_error_text(e, mesh_text)) from e
                _load_mesh(body if body is not None else {}, f"{source} (ConfigMap {display})", result, namespace)
            else:
                result.ignored += 1
            return
        status = None
        if kind in ISTIO_KINDS:
            unknown: list[str] | None = None if strict else []
            spec: Any = parse_istio_spec(kind, doc.get("spec"), namespace, strict=strict, unknown=unknown)
            if top_level and not TOP_LEVEL_FIELDS.issuperset(doc):  # istioctl validate's checkFields
                extra = sorted(str(k) for k in doc if k not in TOP_LEVEL_FIELDS)
                raise FieldError(printable_path(extra[0]), "unknown field")
            if unknown:
                warnings = tuple(f"{path}: {UNKNOWN_FIELD_WARNING}" for path in unknown)
            if kind is Kind.SERVICE_ENTRY:
                status = allocated_addresses(doc.get("status"))
        else:
            spec = parse_kube_spec(kind, doc, meta.labels)
    except FieldError as e:
        result.rejected.append(Rejection(key, ConfigError(source, kind, display, e.field, e.reason)))
        return
    result.objects.append(ConfigObject(kind, meta, spec, source, api_version, status, warnings))


# what a field Istio's CRDs do not define is, outside ``strict`` (istiod ignores it in a file;
# the API server refuses it, or drops it with a warning under fieldValidation=Warn)
UNKNOWN_FIELD_WARNING = "unknown field, ignored (Istio defines no such field; `pilotfish validate` refuses it)"


def allocated_addresses(status: Any) -> tuple[tuple[str, str], ...]:
    """A ServiceEntry's ``status.addresses`` as (host, address) pairs: what istiod's IP
    allocation controller wrote. Status is the controller's, not the user's, so an entry that
    does not parse is skipped as istiod skips it (ip_autoallocation.go), never an error."""
    entries = status.get("addresses") if isinstance(status, Mapping) else None
    if not isinstance(entries, list):
        return ()
    out = []
    for entry in entries:
        if isinstance(entry, Mapping):
            host, value = entry.get("host"), entry.get("value")
            if isinstance(host, str) and isinstance(value, str) and is_ip_address(value):
                out.append((host, value))
    return tuple(out)


def _parse_meta(raw: Mapping[str, Any], name: str, namespace: str) -> ObjectMeta:
    created = raw.get("creationTimestamp")
    generation = raw.get("generation", 0)
    if isinstance(generation, bool) or not isinstance(generation, int):
        raise FieldError("metadata.generation", "must be an integer")
    return ObjectMeta(
        name=name,
        namespace=namespace,
        labels=string_map(raw.get("labels"), "metadata.labels"),
        annotations=string_map(raw.get("annotations"), "metadata.annotations"),
        # YAML turns an unquoted timestamp into a datetime; keep its RFC 3339 text
        creation_timestamp="" if created is None else _timestamp_text(created),
        resource_version=str(raw.get("resourceVersion") or ""),
        generation=generation,
    )


def _timestamp_text(value: Any) -> str:
    if hasattr(value, "isoformat"):
        text: str = value.isoformat()
        return text.replace("+00:00", "Z")
    return str(value)
