"""YAML text read as Kubernetes reads it, within bounds: the documents of a text, each a value
as PyYAML's safe loader builds it (YAML 1.1 types), with less Python per node.

A text is cut into documents as Kubernetes' YAML reader cuts it (k8s.io/apimachinery
util/yaml, which kubectl and istiod's file source use): at a line of ``---`` with nothing but
white space or a comment after it. What is bounded is what costs: a document longer than
``MAX_DOCUMENT_BYTES`` (the API server's request limit) is not parsed, and no more than it is
held, whatever the length of a line; nesting past ``MAX_NESTING`` and aliases expanding past
``MAX_EXPANDED_NODES`` are refused before they cost. A mapping naming a key twice is refused,
as Kubernetes' strict decoding refuses it. A plain scalar in a flow collection reads as Go's
YAML reads it (``[001:db8::]``: one string), where libyaml refuses it.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.error import Mark, MarkedYAMLError
from yaml.events import MappingEndEvent, MappingStartEvent, SequenceEndEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError
from yaml.resolver import Resolver
from yaml.scanner import ScannerError
from yaml.tokens import ScalarToken

from app.config.schema import printable_path

# bounds on what a document may make the loader build (Kubernetes objects nest ~10 levels)
MAX_NESTING = 100
MAX_EXPANDED_NODES = 1_000_000  # collections and values, aliases counted once per reference
# the largest document read: the API server's request limit (3 MiB), so nothing a cluster takes
MAX_DOCUMENT_BYTES = 3 * 2**20
# the most documents one file may hold (100,000 objects take about 10 s to read): past it the
# file is refused whole, and not read further
MAX_DOCUMENTS = 100_000

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


# plain scalar -> tag, shared by every loader of the process: values repeat a lot, across
# documents too; cleared when it grows past this (hostile input may hold millions of values)
_IMPLICIT_TAGS: dict[str, str] = {}
_IMPLICIT_TAGS_MAX = 1 << 16


def _implicit_tag(value: str) -> str:
    for tag, pattern in _IMPLICIT[value[:1]]:
        if pattern.match(value):
            return tag
    return _STR


class _KubeConstruction:
    """What KubeYamlLoader adds to a PyYAML safe loader: tags from a first-character table of
    PyYAML's own YAML 1.1 rules (so ``80`` is an int, ``"80"`` a string, ``true``/``on``
    booleans, ``~`` null), plain strings, numbers, booleans, nulls, mappings and sequences
    built inline (anything else, merge keys, explicit tags, timestamps, sets, goes through
    SafeConstructor unchanged), the nesting and alias-expansion bounds, and a duplicate key
    refused (sigs.k8s.io/yaml YAMLToJSONStrict: 'key "x" already set in map')."""

    constructed_objects: dict[Node, Any]

    def __init__(self, stream: str) -> None:
        _check_nesting(stream, self._events_loader)
        super().__init__(stream)  # type: ignore[call-arg]
        self._depth = 0  # collections being built, one inside the other
        self._aliases = 0  # alias references resolved in the document being built

    _events_loader: type[Any] = yaml.CSafeLoader  # what _check_nesting scans a deep text with

    def resolve(self, kind: type[Node], value: str, implicit: tuple[bool, bool]) -> str:
        if kind is ScalarNode:
            if implicit[0] and value[:1] in _IMPLICIT:
                tag = _IMPLICIT_TAGS.get(value)
                if tag is None:
                    if len(_IMPLICIT_TAGS) >= _IMPLICIT_TAGS_MAX:
                        _IMPLICIT_TAGS.clear()
                    tag = _IMPLICIT_TAGS[value] = _implicit_tag(value)
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
            return super().construct_object(node, deep)  # type: ignore[misc]
        finally:
            self._depth -= 1

    def construct_document(self, node: Node) -> Any:
        self._aliases = 0
        data = super().construct_document(node)  # type: ignore[misc]
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
                return super().construct_object(node, deep=True)  # type: ignore[misc]
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
        if len(data) != len(node.value):  # a key given twice (or keys Python takes as equal)
            self._check_duplicates(node)
        return data

    def _check_duplicates(self, node: Node) -> None:
        seen: dict[tuple[type, Any], Node] = {}
        for key_node, _ in node.value:
            key = key_node.value if key_node.tag == _STR else self.construct_object(key_node, deep=True)
            first = seen.setdefault((type(key), key), key_node)  # 1, 1.0 and true: equal in Python, not YAML
            if first is not key_node:
                shown = printable_path(repr(key))
                raise ConstructorError(
                    "while constructing a mapping", node.start_mark, f"duplicate key {shown}", key_node.start_mark
                )

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


class KubeYamlLoader(_KubeConstruction, yaml.CSafeLoader):
    """PyYAML's CSafeLoader, giving the same values with less Python per node.

    libyaml parses and composes in C; what is left in Python, tag resolution and construction,
    took most of the load time (see _KubeConstruction)."""


_BLANKZ = "\0 \t\r\n\x85\u2028\u2029"


class GoFlowYamlLoader(_KubeConstruction, yaml.SafeLoader):
    """The pure-Python loader, reading a plain scalar as Go's YAML (goyaml.v2, under
    sigs.k8s.io/yaml) does: in a flow collection a ``:`` ends it only before white space, so
    ``[001:db8::]`` is the string ``001:db8::`` (libyaml refuses it: "found unexpected ':'").
    Used only for a document libyaml refuses so (Istio's own serviceentry-valid.yaml has one)."""

    _events_loader = yaml.SafeLoader

    def scan_plain(self) -> ScalarToken:  # PyYAML's Scanner.scan_plain, the ':' rule as Go's
        chunks: list[str] = []
        start_mark = self.get_mark()
        end_mark = start_mark
        indent = self.indent + 1
        spaces: list[str] = []
        while True:
            length = 0
            if self.peek() == "#":
                break
            while True:
                ch = self.peek(length)
                if (
                    ch in _BLANKZ
                    or (ch == ":" and self.peek(length + 1) in _BLANKZ)
                    or (self.flow_level and ch in ",?[]{}")
                ):
                    break
                length += 1
            if length == 0:
                break
            self.allow_simple_key = False
            chunks.extend(spaces)
            chunks.append(self.prefix(length))
            self.forward(length)
            end_mark = self.get_mark()
            spaces = self.scan_plain_spaces(indent, start_mark) or []
            if not spaces or self.peek() == "#" or (not self.flow_level and self.column < indent):
                break
        return ScalarToken("".join(chunks), True, start_mark, end_mark)


# libyaml's composer (in C) recurses once per level of nesting: tens of thousands of levels
# overflow the C stack and kill the process before construction can refuse them. A document is
# only scanned (events, no recursion) when a cheap bound on its depth passes this
_SCAN_DEPTH_ABOVE = 1000


def _check_nesting(text: str, loader: type[Any] = yaml.CSafeLoader) -> None:
    """Raise a YAMLError when a document of ``text`` nests deeper than MAX_NESTING, before any
    composing. Each level of nesting takes a '[', '{', '-' or '?' or, in block style, a line
    indented further than the last (k such levels take k(k+1)/2 characters of indentation): so
    a document whose count of those characters plus sqrt(2 * length) stays under
    _SCAN_DEPTH_ABOVE cannot nest that deep, and is not scanned (nearly every document)."""
    if len(text) + math.isqrt(2 * len(text)) <= _SCAN_DEPTH_ABOVE:  # too short to nest that deep
        return
    for chunk in text.split("\n---"):  # documents, or more text than one: the bound still holds
        bound = sum(chunk.count(c) for c in "[{-?") + math.isqrt(2 * len(chunk))
        if bound > _SCAN_DEPTH_ABOVE:
            break
    else:
        return
    depth = 0
    for event in yaml.parse(text, Loader=loader):
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


class YamlTextError(yaml.YAMLError):
    """A YAML error of one document, in words that place it in the whole text (``args[0]``)."""


@dataclass(frozen=True, slots=True)
class TooLarge:
    """A document not read: more than MAX_DOCUMENT_BYTES."""

    line: int  # where it starts (from 1)
    size: int  # at least this many bytes (its characters, each one byte or more)


# Kubernetes' YAMLReader (k8s.io/apimachinery/pkg/util/yaml): a document ends at a line that
# starts with "---" and holds nothing else but white space or a comment; matched with the line
# break before it (a literal to search for is much quicker than a line start)
_SEPARATOR = re.compile(r"\n---[ \t\r\f\v]*(?:#[^\n]*)?(?=\n|\Z)")


class _Chunk(NamedTuple):
    text: str | None  # None: more than MAX_DOCUMENT_BYTES, not kept
    line: int  # the line it starts on, from 0
    size: int  # its length in characters (in bytes, when it was refused for them)


def _chunks(blocks: Iterable[str]) -> Iterator[_Chunk]:
    """The documents of a text given a block at a time, cut where Kubernetes' reader cuts: a
    document longer than MAX_DOCUMENT_BYTES is not kept, only where it starts. Text before the
    first separator that is only white space is no document."""
    parts: list[str] = []  # the document so far
    size = 0  # its length
    kept = True  # False: past the bound, its text dropped
    start = line = 0  # the line the document starts on; the line breaks read so far
    leading = True
    tail = ""  # an incomplete last line
    midline = False  # the line tail begins was begun in the document already (past the bound)

    def add(piece: str) -> None:
        nonlocal size, line, kept, parts
        size += len(piece)
        line += piece.count("\n")
        if kept:
            if size <= MAX_DOCUMENT_BYTES:
                parts.append(piece)
            else:
                kept, parts = False, []

    def document() -> _Chunk | None:
        nonlocal parts, size, kept, leading
        found: str | None = "".join(parts) if kept else None
        if found is not None and size * 4 > MAX_DOCUMENT_BYTES:  # UTF-8 takes up to 4 bytes a character
            encoded = len(found.encode())
            if encoded > MAX_DOCUMENT_BYTES:
                found, size = None, encoded
        chunk = None if leading and found is not None and not found.strip() else _Chunk(found, start, size)
        parts, size, kept, leading = [], 0, True, False
        return chunk

    for block in itertools.chain(blocks, (None,)):
        if block is None:
            complete, tail = tail, ""
        else:
            joined = tail + block if tail else block
            cut = joined.rfind("\n") + 1
            complete, tail = joined[:cut], joined[cut:]
        if midline and complete:  # the rest of a line past the bound: the document's, unread
            end = complete.find("\n") + 1 or len(complete)
            add(complete[:end])
            complete, midline = complete[end:], False
        # from a line start: a separator on the first line is found after this line break
        buffer = "\n" + complete
        pos = 1
        for m in _SEPARATOR.finditer(buffer):
            end = m.start() + 1  # the line break before the separator is the document's
            if not parts and kept and not leading and end - pos <= MAX_DOCUMENT_BYTES // 4:
                # nearly every document: in one block, too short to be past the bound
                line += buffer.count("\n", pos, end)
                yield _Chunk(buffer[pos:end], start, end - pos)
            else:
                if end > pos:
                    add(buffer[pos:end])
                if (chunk := document()) is not None:
                    yield chunk
            pos = m.end()
            if buffer.startswith("\n", pos):  # the separator line's own line break
                pos += 1
                line += 1
            start = line
        if pos < len(buffer):
            add(buffer[pos:])
        if len(tail) > MAX_DOCUMENT_BYTES:  # a line past the bound: no separator, the document's
            add(tail)  # (it holds no line break)
            tail, midline = "", True
    if (chunk := document()) is not None:
        yield chunk


def _documents(chunk: _Chunk) -> list[Any]:
    """The YAML documents of one chunk (one, but for ``...`` or a ``--- value`` line in it;
    None for one that holds none), or one TooLarge."""
    if chunk.text is None:
        return [TooLarge(chunk.line + 1, chunk.size)]
    try:
        try:
            docs = _load(chunk.text, KubeYamlLoader)
        except ScannerError as e:
            if e.problem != "found unexpected ':'":
                raise
            docs = _load(chunk.text, GoFlowYamlLoader)
    except yaml.YAMLError as e:
        raise YamlTextError(yaml_error_text(e, chunk.text, chunk.line)) from e
    return docs


def _load(text: str, loader: type[_KubeConstruction]) -> list[Any]:
    """The documents of ``text``, at least one (None when it holds none)."""
    reader = loader(text)  # one document, as nearly always: read as one, which is quicker
    try:
        return [reader.get_single_data()]  # type: ignore[attr-defined]
    except ComposerError as e:  # more (after a "..." line, or a "--- value" one)
        if e.context != "expected a single document in the stream":
            raise
    finally:
        reader.dispose()  # type: ignore[attr-defined]
    return list(yaml.load_all(text, Loader=cast(Any, loader))) or [None]


def yaml_error_text(error: yaml.YAMLError, text: str, first_line: int = 0) -> str:
    """PyYAML's error on one line, saying where (line and column, from 1) and what: its own
    text spans several, with a mark (and the document's name) on lines of their own.
    ``first_line``: the line ``text`` starts on in the file (from 0)."""
    if isinstance(error, MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        problem = _one_line(error.problem or error.context or "cannot be parsed")
        context = ""
        if error.problem and error.context:
            start = error.context_mark
            context = _one_line(error.context)
            if start is not None and mark is not None and (start.line, start.column) != (mark.line, mark.column):
                context += f" started at {_at(start, first_line)}"
            context = f" ({context})"
        return f"invalid YAML{' at ' + _at(mark, first_line) if mark is not None else ''}: {problem}{context}"
    if isinstance(error, ReaderError):
        position = error.position
        line = text.count("\n", 0, position) + 1 + first_line
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        character = error.character
        shown = f"#x{character:04x}" if isinstance(character, int) else repr(character)
        reason = _one_line(error.reason)
        return f"invalid YAML at line {line}, column {column}: unacceptable character {shown}: {reason}"
    return f"invalid YAML: {_one_line(str(error))}"


def _at(mark: Mark, first_line: int = 0) -> str:
    return f"line {mark.line + 1 + first_line}, column {mark.column + 1}"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def yaml_documents(blocks: Iterable[str]) -> Iterator[Any]:
    """The documents of a text given a block at a time (a file as it is read): each one's value
    (None for one that holds nothing), or a TooLarge for one not read. A YAML error raises
    YamlTextError, placing it by the line of the whole text."""
    for chunk in _chunks(blocks):
        yield from _documents(chunk)
