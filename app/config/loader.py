"""Turns YAML text into validated ConfigObjects, one document at a time.

A bad document is rejected with a ConfigError naming file, kind, namespace/name, field and
reason; the other documents of the file still load. A file that is not valid YAML at all
yields one file-level error and no objects (``LoadResult.parsed`` is False), so the source
can keep what the file held before.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.error import Mark, MarkedYAMLError
from yaml.events import MappingEndEvent, MappingStartEvent, SequenceEndEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError
from yaml.resolver import Resolver

from app.config.host import is_ip_address
from app.config.istio import parse_istio_spec
from app.config.istio_checks import quoted
from app.config.kube import parse_kube_spec, string_map
from app.config.mesh import parse_mesh_config
from app.config.model import INTERNAL_KINDS, ISTIO_KINDS, ConfigKey, ConfigObject, Kind, ObjectMeta
from app.config.schema import type_name
from app.errors import ConfigError, FieldError

logger = logging.getLogger(__name__)

# apiVersion accepted per kind; Istio serves networking v1, v1beta1 and v1alpha3 with one schema,
# security v1 and v1beta1
_ISTIO_VERSIONS = frozenset({"networking.istio.io/v1", "networking.istio.io/v1beta1", "networking.istio.io/v1alpha3"})
_SECURITY_VERSIONS = frozenset({"security.istio.io/v1", "security.istio.io/v1beta1"})
_API_VERSIONS: Mapping[Kind, frozenset[str]] = {
    **{k: _ISTIO_VERSIONS for k in ISTIO_KINDS},
    Kind.PEER_AUTHENTICATION: _SECURITY_VERSIONS,
    Kind.AUTHORIZATION_POLICY: _SECURITY_VERSIONS,
    Kind.REQUEST_AUTHENTICATION: _SECURITY_VERSIONS,
    Kind.SERVICE: frozenset({"v1"}),
    Kind.POD: frozenset({"v1"}),
    Kind.NAMESPACE: frozenset({"v1"}),
    Kind.CONFIG_MAP: frozenset({"v1"}),
    Kind.SECRET: frozenset({"v1"}),
    Kind.ENDPOINT_SLICE: frozenset({"discovery.k8s.io/v1"}),
}
_CLUSTER_SCOPED = frozenset({Kind.NAMESPACE})
_END = object()  # end of a document stream
MESH_CONFIGMAP_NAME = "istio"
MESH_CONFIGMAP_KEY = "mesh"
MESH_OBJECT_NAME = "mesh"
MESH_KEY = ConfigKey(Kind.MESH_CONFIG, "", MESH_OBJECT_NAME)
# object names as the API server has them: a namespace is a DNS label, a name a DNS subdomain
_DNS_LABEL_TEXT = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_LABEL = re.compile(_DNS_LABEL_TEXT)
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL_TEXT}(?:\.{_DNS_LABEL_TEXT})*")
_MAX_NAME, _MAX_NAMESPACE = 253, 63


# bounds on what a document may make the loader build (Kubernetes objects nest ~10 levels)
MAX_NESTING = 100
MAX_EXPANDED_NODES = 1_000_000  # collections and values, aliases counted once per reference

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = frozenset({"tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"})  # `<<` and `=` keys
# YAML 1.1 implicit typing as PyYAML's safe loader does it: first character -> (tag, pattern)
# rules, tried in order (PyYAML registers no rule without a first character)
_IMPLICIT: dict[str, tuple[tuple[str, re.Pattern[str]], ...]] = {
    first: tuple(rules) for first, rules in Resolver.yaml_implicit_resolvers.items() if first is not None
}
_SCALAR_CONSTRUCTORS = {
    tag: SafeConstructor.yaml_constructors[tag]
    for tag in ("tag:yaml.org,2002:null", "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
}


def _implicit_tag(value: str) -> str:
    for tag, pattern in _IMPLICIT[value[:1]]:
        if pattern.match(value):
            return tag
    return _STR


class KubeYamlLoader(yaml.CSafeLoader):
    """PyYAML's CSafeLoader, giving the same values with less Python per node.

    libyaml parses and composes in C; what is left in Python, tag resolution and construction,
    took most of the load time. Tags come from a first-character table of PyYAML's own YAML 1.1
    rules (so ``80`` is an int, ``"80"`` a string, ``true``/``on`` booleans, ``~`` null), and
    plain strings, numbers, booleans, nulls, mappings and sequences are built inline. Anything
    else (merge keys, explicit tags, timestamps, sets) goes through SafeConstructor unchanged."""

    def __init__(self, stream: str) -> None:
        _check_nesting(stream)
        super().__init__(stream)
        self._implicit_tags: dict[str, str] = {}  # plain scalar -> tag; values repeat a lot
        self._depth = 0  # collections being built, one inside the other
        self._aliases = 0  # alias references resolved in the document being built

    def resolve(self, kind: type[Node], value: str, implicit: tuple[bool, bool]) -> str:
        if kind is ScalarNode:
            if implicit[0] and value[:1] in _IMPLICIT:
                tag = self._implicit_tags.get(value)
                if tag is None:
                    tag = self._implicit_tags[value] = _implicit_tag(value)
                return tag
            return _STR
        return _SEQ if kind is SequenceNode else _MAP

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        cls = node.__class__
        tag = node.tag
        if cls is ScalarNode:
            if tag == _STR:
                return node.value
            scalar = _SCALAR_CONSTRUCTORS.get(tag)
            if scalar is not None:
                return scalar(self, node)
        elif node in self.constructed_objects:  # an alias of a node already built
            self._aliases += 1
            return self.constructed_objects[node]
        if self._depth >= MAX_NESTING:  # construction recurses: bound it before Python's stack does
            raise ConstructorError(None, None, f"nested deeper than {MAX_NESTING} levels", node.start_mark)
        self._depth += 1
        try:
            if cls is MappingNode and tag == _MAP:
                return self._mapping(node)
            if cls is SequenceNode and tag == _SEQ:
                return self._sequence(node)
            return super().construct_object(node, deep)
        finally:
            self._depth -= 1

    def construct_document(self, node: Node) -> Any:
        self._aliases = 0
        data = super().construct_document(node)
        if self._aliases:  # shared parts are read once per reference: a "billion laughs" bomb
            _check_expansion(data, node)
        return data

    def _mapping(self, node: Node) -> Any:
        data: dict[Any, Any] = {}
        self.constructed_objects[node] = data  # registered first, as SafeConstructor does
        for key_node, value_node in node.value:
            if key_node.__class__ is ScalarNode and key_node.tag == _STR:
                key = key_node.value
            elif key_node.tag in _MERGE:  # `<<: *base`: SafeConstructor flattens the merge
                del self.constructed_objects[node]
                return super().construct_object(node, deep=True)
            else:
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, Hashable):
                    raise ConstructorError(
                        "while constructing a mapping", node.start_mark, "found unhashable key", key_node.start_mark
                    )
            if value_node.__class__ is ScalarNode and value_node.tag == _STR:
                data[key] = value_node.value
            else:
                data[key] = self.construct_object(value_node, deep=True)
        return data

    def _sequence(self, node: Node) -> list[Any]:
        data: list[Any] = []
        self.constructed_objects[node] = data
        data.extend(
            [
                item.value if item.__class__ is ScalarNode and item.tag == _STR else self.construct_object(item, True)
                for item in node.value
            ]
        )
        return data


# libyaml's composer (in C) recurses once per level of nesting: tens of thousands of levels
# overflow the C stack and kill the process before construction can refuse them. A document is
# only scanned (events, no recursion) when a cheap bound on its depth passes this
_SCAN_DEPTH_ABOVE = 1000


def _check_nesting(text: str) -> None:
    """Raise a YAMLError when a document of ``text`` nests deeper than MAX_NESTING, before any
    composing. Each level of nesting takes a '[', '{', '-' or '?' or, in block style, a line
    indented further than the last (k such levels take k(k+1)/2 characters of indentation): so
    a document whose count of those characters plus sqrt(2 * length) stays under
    _SCAN_DEPTH_ABOVE cannot nest that deep, and is not scanned (nearly every document)."""
    for chunk in text.split("\n---"):  # documents, or more text than one: the bound still holds
        bound = sum(chunk.count(c) for c in "[{-?") + math.isqrt(2 * len(chunk))
        if bound > _SCAN_DEPTH_ABOVE:
            break
    else:
        return
    depth = 0
    for event in yaml.parse(text, Loader=yaml.CSafeLoader):
        cls = event.__class__
        if cls is MappingStartEvent or cls is SequenceStartEvent:
            depth += 1
            if depth > MAX_NESTING:
                mark = cast(Mark, event.start_mark)  # libyaml's Mark: line and column alike
                raise ConstructorError(None, None, f"nested deeper than {MAX_NESTING} levels", mark)
        elif cls is MappingEndEvent or cls is SequenceEndEvent:
            depth -= 1


def _check_expansion(data: Any, node: Node) -> None:
    """Raise when ``data`` read as a tree (every alias expanded) has too many nodes."""
    seen = 0
    stack = [data]
    while stack:
        item = stack.pop()
        seen += 1
        if seen > MAX_EXPANDED_NODES:
            raise ConstructorError(None, None, f"expands to more than {MAX_EXPANDED_NODES} values", node.start_mark)
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


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


def load_documents(text: str, source: str, *, system_namespace: str = "istio-system") -> LoadResult:
    """Parse a multi-document YAML file of Kubernetes-style objects."""
    result = LoadResult()
    # documents are validated as they are parsed, so the raw dicts of a big file are never all
    # alive at once; the first waits for the second, since its name says whether there is one
    docs = yaml.load_all(text, Loader=KubeYamlLoader)
    first: Any = None
    index = -1
    while True:
        try:
            doc = next(docs, _END)
        except yaml.YAMLError as e:
            error = ConfigError(source, "", "", "", yaml_error_text(e, text))
            return LoadResult(parsed=False, rejected=[Rejection(None, error)])
        if doc is _END:
            break
        index += 1
        if index == 0:
            first = doc
            continue
        if index == 1 and first is not None:
            _load_one(first, f"{source}#0", result, system_namespace)
        if doc is not None:
            _load_one(doc, f"{source}#{index}", result, system_namespace)
    if index == 0 and first is not None:
        _load_one(first, source, result, system_namespace)
    return result


def load_object(doc: Mapping[str, Any], source: str, *, system_namespace: str = "istio-system") -> LoadResult:
    """One object already decoded (as an API server sends it), through the same checks as a
    document of a file."""
    result = LoadResult()
    _load_one(doc, source, result, system_namespace)
    return result


def load_objects(
    docs: Sequence[tuple[Mapping[str, Any], str]], system_namespace: str = "istio-system"
) -> list[LoadResult]:
    """``load_object`` of each (object, source): what a worker process runs for a batch."""
    return [load_object(doc, source, system_namespace=system_namespace) for doc, source in docs]


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


def yaml_error_text(error: yaml.YAMLError, text: str) -> str:
    """PyYAML's error on one line, saying where (line and column, from 1) and what: its own
    text spans several, with a mark (and the document's name) on lines of their own."""
    if isinstance(error, MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        problem = _one_line(error.problem or error.context or "cannot be parsed")
        context = ""
        if error.problem and error.context:
            start = error.context_mark
            context = _one_line(error.context)
            if start is not None and mark is not None and (start.line, start.column) != (mark.line, mark.column):
                context += f" started at {_at(start)}"
            context = f" ({context})"
        return f"invalid YAML{' at ' + _at(mark) if mark is not None else ''}: {problem}{context}"
    if isinstance(error, ReaderError):
        position = error.position
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        character = error.character
        shown = f"#x{character:04x}" if isinstance(character, int) else repr(character)
        reason = _one_line(error.reason)
        return f"invalid YAML at line {line}, column {column}: unacceptable character {shown}: {reason}"
    return f"invalid YAML: {_one_line(str(error))}"


def _at(mark: Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _load_mesh(body: Any, source: str, result: LoadResult, namespace: str) -> None:
    try:
        spec = parse_mesh_config(body)
    except FieldError as e:
        error = ConfigError(source, "MeshConfig", MESH_OBJECT_NAME, e.field, e.reason)
        result.rejected.append(Rejection(MESH_KEY, error))
        return
    meta = ObjectMeta(name=MESH_OBJECT_NAME)
    result.objects.append(ConfigObject(Kind.MESH_CONFIG, meta, spec, source, "meshconfig"))


def _load_one(doc: Any, source: str, result: LoadResult, system_namespace: str) -> None:
    before = len(result.rejected)
    try:
        _load_document(doc, source, result, system_namespace)
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


def printable(text: str) -> str:
    """``text`` with what would break or hide part of a log line (line breaks, control and
    format characters) written as escapes: a map key or file name may hold anything."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() and ch not in _LINE_BREAKS else repr(ch)[1:-1] for ch in text)


def _load_document(doc: Any, source: str, result: LoadResult, system_namespace: str) -> None:
    if not isinstance(doc, Mapping):
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
    try:
        kind = Kind(kind_text)
    except ValueError:
        result.ignored += 1
        return
    if kind in INTERNAL_KINDS:
        result.ignored += 1
        return
    meta_raw = doc.get("metadata")
    if not isinstance(meta_raw, Mapping):
        meta_raw = {}
    name = meta_raw.get("name")
    namespace = meta_raw.get("namespace")
    if not isinstance(name, str) or not name:
        err = ConfigError(source, kind, "", "metadata.name", "is required")
        result.rejected.append(Rejection(None, err))
        return
    if len(name) > _MAX_NAME or not _DNS_SUBDOMAIN.fullmatch(name):  # as the API server has names
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
    if namespace and (len(namespace) > _MAX_NAMESPACE or not _DNS_LABEL.fullmatch(namespace)):
        reason = f"{quoted(namespace)} is not a valid namespace name (lower-case letters, digits and '-')"
        result.rejected.append(Rejection(None, ConfigError(source, kind, name, "metadata.namespace", reason)))
        return
    key = ConfigKey(kind, namespace, name)
    display = f"{namespace}/{name}" if namespace else name
    mesh_map = kind is Kind.CONFIG_MAP and name == MESH_CONFIGMAP_NAME and namespace == system_namespace
    if mesh_map:
        # the ConfigMap is read as the MeshConfig it holds: rejected, it keeps the last good
        # mesh config in force (istiod keeps the previous one), so it is keyed as that
        key = MESH_KEY
    try:
        if api_version not in _API_VERSIONS[kind]:
            allowed = ", ".join(sorted(_API_VERSIONS[kind]))
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
            spec: Any = parse_istio_spec(kind, doc.get("spec"), namespace)
            if kind is Kind.SERVICE_ENTRY:
                status = allocated_addresses(doc.get("status"))
        else:
            spec = parse_kube_spec(kind, doc, meta.labels)
    except FieldError as e:
        result.rejected.append(Rejection(key, ConfigError(source, kind, display, e.field, e.reason)))
        return
    result.objects.append(ConfigObject(kind, meta, spec, source, api_version, status))


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
