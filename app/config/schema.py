"""Strict proto3-JSON parsing of Istio specs into protobuf messages.

``json_format.ParseDict`` does the proto3 JSON mapping (durations, enums by name, wrappers,
64-bit integers as strings). Before it runs, ``normalize`` walks the document against the
message descriptor so an unknown field is reported with its full path (``trafficPolicy.tls.foo``)
and only Istio's camelCase names are accepted, as the Kubernetes API server would.

Most real documents never reach ParseDict: ``build_message`` makes the same message through
the upb constructor when every value already has its plain proto3 JSON type, and hands
anything else (other JSON forms, every error) to the path above.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar, cast

from google.protobuf import duration_pb2, json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from app.errors import FieldError

M = TypeVar("M", bound=Message)

# well-known types have their own JSON forms; ParseDict checks them
_WKT_PREFIX = "google.protobuf."
_DURATION = "google.protobuf.Duration"
_PROTO_DURATION = re.compile(r"^-?\d+(\.\d{1,9})?s$")
_GO_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}
_AT_PATH = re.compile(r" at \"?([A-Za-z0-9_.\[\]]+?)\"?\.*$")
_FAILED_FIELD = re.compile(r"Failed to parse (\w+) field: ")


def normalize(doc: Any, descriptor: Descriptor, path: str, *, strict: bool = True) -> Any:
    """Check ``doc`` against ``descriptor`` and return it ready for ParseDict.

    With ``strict``, a key that is not a field (by its camelCase JSON name) is an error naming
    its path; otherwise it is dropped. Durations written Go-style (``5m``, ``1h30m``, ``250ms``),
    which Istio accepts, are rewritten to proto3 JSON seconds (``300s``).
    """
    if descriptor.full_name == _DURATION:
        return _duration(doc, path) if isinstance(doc, str) else doc
    if descriptor.full_name.startswith(_WKT_PREFIX):
        return doc
    if not isinstance(doc, Mapping):
        raise FieldError(path, f"expected an object, got {_type_name(doc)}")
    out: dict[str, Any] = {}
    for key, value in doc.items():
        here = f"{path}.{key}" if path else str(key)
        fd = _json_field(descriptor, key) if isinstance(key, str) else None
        if fd is None:
            if strict:
                raise FieldError(here, "unknown field")
            continue
        if value is not None and fd.message_type is not None:
            value = _normalize_field(value, fd, fd.message_type, here, strict)
        out[key] = value
    return out


def _json_field(descriptor: Descriptor, key: str) -> FieldDescriptor | None:
    """The field ``key`` names: only by its camelCase JSON name, as the Kubernetes API server
    accepts it (ParseDict would also take the proto name)."""
    fd = descriptor.fields_by_camelcase_name.get(key)
    return fd if fd is not None and fd.json_name == key else None


def _normalize_field(value: Any, fd: FieldDescriptor, mt: Descriptor, path: str, strict: bool) -> Any:
    if mt.GetOptions().map_entry:
        value_type = mt.fields_by_name["value"].message_type
        if not isinstance(value, Mapping) or value_type is None:
            return value
        return {k: v if v is None else normalize(v, value_type, f"{path}.{k}", strict=strict) for k, v in value.items()}
    if fd.is_repeated:
        if not isinstance(value, list):
            raise FieldError(path, f"expected a list, got {_type_name(value)}")
        return [normalize(item, mt, f"{path}[{i}]", strict=strict) for i, item in enumerate(value)]
    return normalize(value, mt, path, strict=strict)


def _duration(text: str, path: str) -> str:
    if _PROTO_DURATION.match(text):
        return text
    parts = _GO_DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise FieldError(path, f"invalid duration {text!r} (use e.g. 5s, 100ms, 1m30s)")
    seconds = sum((Decimal(n) * _UNIT_SECONDS[u] for n, u in parts), Decimal(0))
    return f"{seconds.normalize():f}s"


def parse_message(doc: Any, message_type: type[M]) -> M:
    """Parse ``doc`` into a new ``message_type``; unknown fields are errors.

    Most documents take the fast path (``build_message``); the rest, including every invalid
    one, go through ``normalize`` + ``json_format.ParseDict`` so edge cases and error messages
    come from protobuf itself."""
    fast = build_message(doc, message_type)
    if fast is not None:
        return fast
    msg = message_type()
    merge_message(doc, msg, strict=True)
    return msg


def build_message(doc: Any, message_type: type[M]) -> M | None:
    """The fast path of ``parse_message``: the message, or None when json_format must decide.

    ParseDict walks descriptors in Python for every object, which dominated loading 10,000
    objects. When every value already has the plain JSON type proto3 expects (a string for a
    string field, an int for an integer, an enum by name, a duration string...), the same
    message is built by the upb constructor from keyword dicts, following a per-type plan made
    once. Anything else (quoted numbers, nulls in lists, other well-known types, two members of
    one oneof, unknown fields, bad values) returns None and json_format takes the document."""
    try:
        kwargs = _kwargs(doc, _plan(cast(Descriptor, message_type.DESCRIPTOR)))
    except _NeedsJsonFormat:
        return None
    try:
        return message_type(**kwargs)
    except (TypeError, ValueError):  # out-of-range numbers, unknown enum labels, bad UTF-8
        return None


def merge_message(doc: Any, msg: Message, *, strict: bool) -> None:
    """Parse ``doc`` over an existing message (used to apply user values over defaults)."""
    descriptor = cast(Descriptor, msg.DESCRIPTOR)
    clean = normalize(doc, descriptor, "", strict=strict)
    try:
        json_format.ParseDict(clean, msg)
    except json_format.ParseError as e:
        error = _field_error(str(e), msg.DESCRIPTOR.name)
        raise FieldError(_locate(clean, descriptor, "") or error.field, error.reason) from e


def _fails(doc: Any, descriptor: Descriptor) -> bool:
    try:
        json_format.ParseDict(doc, message_factory.GetMessageClass(descriptor)())
    except json_format.ParseError:
        return True
    return False


def _locate(doc: Any, descriptor: Descriptor, path: str) -> str:
    """The exact path (with list indices and map keys) of the value ParseDict rejects.

    protobuf's own message names the fields but not which list element failed, so on the error
    path only, each field is parsed alone and the search descends into the one that fails."""
    if not isinstance(doc, Mapping) or descriptor.full_name.startswith(_WKT_PREFIX):
        return path
    for key, value in doc.items():
        here = f"{path}.{key}" if path else key
        if not _fails({key: value}, descriptor):
            continue
        fd = descriptor.fields_by_camelcase_name[key]
        mt = fd.message_type
        if mt is not None and mt.GetOptions().map_entry and isinstance(value, Mapping):
            value_type = mt.fields_by_name["value"].message_type
            for k, v in value.items():
                if _fails({key: {k: v}}, descriptor):
                    return _locate(v, value_type, f"{here}.{k}") if value_type is not None else f"{here}.{k}"
            return here
        if fd.is_repeated and isinstance(value, list):
            for i, item in enumerate(value):
                if _fails({key: [item]}, descriptor):
                    return _locate(item, mt, f"{here}[{i}]") if mt is not None else f"{here}[{i}]"
            return here
        return _locate(value, mt, here) if mt is not None else here
    return path


def _field_error(text: str, root: str) -> FieldError:
    """Turn a ParseError text into (field path, reason).

    protobuf nests ``Failed to parse <field> field: `` once per level and may end with
    `` at Root.path.to.field``; the reason is what is left.
    """
    rest = text.splitlines()[0].strip()
    names: list[str] = []
    while m := _FAILED_FIELD.match(rest):
        names.append(m.group(1))
        rest = rest[m.end() :]
    path = ".".join(names)
    if at := _AT_PATH.search(rest):
        if at.group(1).startswith(root + "."):
            path = at.group(1)[len(root) + 1 :]
        rest = rest[: at.start()]
    return FieldError(path, rest.rstrip(" ."))


def _type_name(value: Any) -> str:
    return "a list" if isinstance(value, list) else type(value).__name__


# --- the fast path's per-type plan --------------------------------------------------------

_K_STRING, _K_BOOL, _K_INT, _K_DOUBLE, _K_ENUM, _K_MESSAGE, _K_DURATION, _K_WRAPPER, _K_MAP, _K_OTHER = range(10)
_WRAPPERS = frozenset(
    f"google.protobuf.{n}Value" for n in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String")
)
_SCALAR_KINDS = {
    FieldDescriptor.TYPE_STRING: _K_STRING,
    FieldDescriptor.TYPE_BOOL: _K_BOOL,
    FieldDescriptor.TYPE_DOUBLE: _K_DOUBLE,
    **dict.fromkeys(
        (
            FieldDescriptor.TYPE_INT32,
            FieldDescriptor.TYPE_INT64,
            FieldDescriptor.TYPE_UINT32,
            FieldDescriptor.TYPE_UINT64,
            FieldDescriptor.TYPE_SINT32,
            FieldDescriptor.TYPE_SINT64,
            FieldDescriptor.TYPE_FIXED32,
            FieldDescriptor.TYPE_FIXED64,
            FieldDescriptor.TYPE_SFIXED32,
            FieldDescriptor.TYPE_SFIXED64,
        ),
        _K_INT,
    ),
}  # float and bytes have JSON forms of their own (range checks, base64): json_format's job


class _NeedsJsonFormat(Exception):
    """A value the fast path does not convert."""


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str  # the proto field name: the constructor's keyword
    kind: int
    repeated: bool = False
    oneof: str | None = None
    message: Mapping[str, _FieldPlan] | None = None  # _K_MESSAGE: the sub-message's plan
    enum_names: frozenset[str] = frozenset()
    value: _FieldPlan | None = None  # _K_MAP, _K_WRAPPER: how to convert the value


# plans by message full name; a plan is registered before it is filled so recursive message
# types terminate, and a half-filled plan seen from another thread only sends a document to
# the slow path
_PLANS: dict[str, dict[str, _FieldPlan]] = {}


def _plan(descriptor: Descriptor) -> dict[str, _FieldPlan]:
    plan = _PLANS.get(descriptor.full_name)
    if plan is None:
        plan = _PLANS[descriptor.full_name] = {}
        for fd in descriptor.fields:
            if _json_field(descriptor, fd.json_name) == fd:
                plan[fd.json_name] = _field_plan(fd)
    return plan


def _field_plan(fd: FieldDescriptor) -> _FieldPlan:
    oneof = fd.containing_oneof.name if fd.containing_oneof is not None else None
    mt = fd.message_type
    if mt is not None:
        if mt.GetOptions().map_entry:
            kind = _K_MAP if mt.fields_by_name["key"].type == FieldDescriptor.TYPE_STRING else _K_OTHER
            return _FieldPlan(fd.name, kind, value=_field_plan(mt.fields_by_name["value"]))
        if mt.full_name == _DURATION:
            return _FieldPlan(fd.name, _K_DURATION, fd.is_repeated, oneof)
        if mt.full_name in _WRAPPERS:
            return _FieldPlan(fd.name, _K_WRAPPER, fd.is_repeated, oneof, value=_field_plan(mt.fields_by_name["value"]))
        if mt.full_name.startswith(_WKT_PREFIX):
            return _FieldPlan(fd.name, _K_OTHER)
        return _FieldPlan(fd.name, _K_MESSAGE, fd.is_repeated, oneof, message=_plan(mt))
    if fd.enum_type is not None:
        if fd.enum_type.full_name.startswith(_WKT_PREFIX):  # NullValue: null has a meaning there
            return _FieldPlan(fd.name, _K_OTHER)
        names = frozenset(fd.enum_type.values_by_name)
        return _FieldPlan(fd.name, _K_ENUM, fd.is_repeated, oneof, enum_names=names)
    return _FieldPlan(fd.name, _SCALAR_KINDS.get(fd.type, _K_OTHER), fd.is_repeated, oneof)


def _kwargs(doc: Any, plan: Mapping[str, _FieldPlan]) -> dict[str, Any]:
    if type(doc) is not dict:
        raise _NeedsJsonFormat
    out: dict[str, Any] = {}
    oneofs: set[str] | None = None
    for key, value in doc.items():
        f = plan.get(key)
        if f is None:
            raise _NeedsJsonFormat
        if value is None:  # proto3 JSON: null leaves the field unset (but is a value for Value)
            if f.kind == _K_OTHER:
                raise _NeedsJsonFormat
            continue
        if f.oneof is not None:
            if oneofs is None:
                oneofs = set()
            elif f.oneof in oneofs:
                raise _NeedsJsonFormat
            oneofs.add(f.oneof)
        if f.repeated:
            if type(value) is not list:
                raise _NeedsJsonFormat
            out[f.name] = [_convert(f, item) for item in value]
        elif f.kind == _K_STRING and type(value) is str:  # the common case, inline
            out[f.name] = value
        else:
            out[f.name] = _convert(f, value)
    return out


def _convert(f: _FieldPlan, value: Any) -> Any:
    kind = f.kind
    t = type(value)
    if kind == _K_STRING:
        if t is str:
            return value
    elif kind == _K_MESSAGE:
        assert f.message is not None
        return _kwargs(value, f.message)
    elif kind == _K_INT:
        if t is int:
            return value
    elif kind == _K_ENUM:
        if t is str and value in f.enum_names:
            return value
    elif kind == _K_BOOL:
        if t is bool:
            return value
    elif kind == _K_DURATION:
        if t is str:
            return _duration_message(value)
    elif kind == _K_DOUBLE:
        if t is int or (t is float and math.isfinite(value)):
            return float(value)
    elif kind == _K_WRAPPER:
        assert f.value is not None
        return {"value": _convert(f.value, value)}
    elif kind == _K_MAP:
        assert f.value is not None
        if t is dict:
            vf = f.value
            out: dict[str, Any] = {}
            for k, v in value.items():
                if type(k) is not str or v is None:
                    raise _NeedsJsonFormat
                out[k] = _convert(vf, v)
            return out
    raise _NeedsJsonFormat


def _duration_message(text: str) -> duration_pb2.Duration:
    try:
        d = duration_pb2.Duration()
        d.FromJsonString(_duration(text, ""))
    except (FieldError, ValueError):
        raise _NeedsJsonFormat from None
    return d
