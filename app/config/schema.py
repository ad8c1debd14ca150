"""Strict proto3-JSON parsing of Istio specs into protobuf messages.

``json_format.ParseDict`` does the proto3 JSON mapping (durations, enums by name, wrappers,
64-bit integers as strings). Before it runs, ``normalize`` walks the document against the
message descriptor so an unknown field is reported with its full path (``trafficPolicy.tls.foo``)
and only the names Istio's CRDs list are accepted, as the Kubernetes API server would: a field's
JSON name (camelCase), and for the few fields Istio marks ``+kubebuilder:altName`` (``jwks_uri``,
``mirror_percent``) that name too.

Most real documents never reach ParseDict: ``build_message`` makes the same message through
the upb constructor when every value already has its plain proto3 JSON type, and hands
anything else (other JSON forms, every error) to the path above.

Both paths also hold a document to the bounds the CRDs' OpenAPI schemas set (required fields,
string lengths and patterns, number ranges, list and map sizes; app/api/istio/crd_constraints.py,
generated from Istio's CRDs), which the Kubernetes API server checks before istiod sees an object.

Not strict, a field the CRD does not define is dropped and its path reported (istiod's file
source and webhook ignore one, as jsonpb with AllowUnknownFields, and take a field's proto name,
``traffic_policy``, as its JSON name).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any, TypeVar, cast

from google.protobuf import descriptor_pool, duration_pb2, json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from app.api.istio.alt_names import ALT_NAMES
from app.api.istio.crd_constraints import BOUNDS, REQUIRED
from app.config.crd_bounds import check_bound, within
from app.config.go_time import go_duration_seconds
from app.errors import FieldError

M = TypeVar("M", bound=Message)

# well-known types have their own JSON forms; ParseDict checks them
_WKT_PREFIX = "google.protobuf."
_DURATION = "google.protobuf.Duration"
_STRUCT, _VALUE, _LIST_VALUE = "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"
_TIMESTAMP, _FIELD_MASK = "google.protobuf.Timestamp", "google.protobuf.FieldMask"
_ANY, _EMPTY, _NULL_VALUE = "google.protobuf.Any", "google.protobuf.Empty", "google.protobuf.NullValue"
_MAX_DOUBLE = 2**1023  # a JSON integer past this is no double (float() overflows)
_MAX_DURATION_SECONDS = 315_576_000_000  # google.protobuf.Duration's range: 10,000 years
_PROTO_DURATION = re.compile(r"^-?[0-9]+(\.[0-9]{1,9})?s$")
_AT_PATH = re.compile(r" at \"?([A-Za-z0-9_.\[\]]+?)\"?\.*$")
_FAILED_FIELD = re.compile(r"Failed to parse (\w+) field: ")


def normalize(
    doc: Any, descriptor: Descriptor, path: str, *, strict: bool = True, unknown: list[str] | None = None
) -> Any:
    """Check ``doc`` against ``descriptor`` and return it ready for ParseDict.

    With ``strict``, a key that is not a field (by a name its CRD lists) is an error naming
    its path; otherwise it is dropped (its path appended to ``unknown``), and a field's proto
    name is taken too. Every value is checked to have its field's JSON type (an object for a
    message or a map, a list for a repeated field, a string, a number...) and to be within the
    CRD's bounds, so a mismatch anywhere is a FieldError naming its path and what was wanted,
    never an error from inside protobuf. Durations written Go-style (``5m``, ``1h30m``,
    ``250ms``), which Istio accepts, are rewritten to proto3 JSON seconds (``300s``).
    """
    name = descriptor.full_name
    if name.startswith(_WKT_PREFIX):
        return _well_known(doc, descriptor, path)
    if not isinstance(doc, Mapping):
        raise FieldError(path, f"expected an object, got {type_name(doc)}")
    bounds = BOUNDS.get(name)
    out: dict[str, Any] = {}
    for key, value in doc.items():
        here = f"{path}.{key}" if path else str(key)
        fd = _json_field(descriptor, key) if isinstance(key, str) else None
        if fd is None:
            if strict:
                raise FieldError(here, "unknown field")
            fd = descriptor.fields_by_name.get(key) if isinstance(key, str) else None
            if fd is None:
                if unknown is not None:
                    unknown.append(printable_path(here))
                continue
        if value is None:
            out[key] = None
            continue
        out[key] = _normalize_field(value, fd, here, strict, unknown)
        if bounds is not None and (bound := bounds.get(key)) is not None:
            check_bound(bound, value, here)
    for field in REQUIRED.get(name, ()):
        if doc.get(field) is None:
            raise FieldError(f"{path}.{field}" if path else field, "is required")
    return out


def printable_path(path: str) -> str:
    """A path as a warning quotes it: cut, so a hostile key cannot make the line huge."""
    return path if len(path) <= 200 else f"{path[:200]}..."


def _json_field(descriptor: Descriptor, key: str) -> FieldDescriptor | None:
    """The field ``key`` names: by its JSON name or a CRD alt name, as the Kubernetes API server
    accepts it (ParseDict would take any proto name; Istio's CRDs list only these)."""
    names = _FIELD_NAMES.get(descriptor.full_name)
    if names is None:
        names = {fd.json_name: fd for fd in descriptor.fields}
        for alt, name in ALT_NAMES.get(descriptor.full_name, {}).items():
            names[alt] = descriptor.fields_by_name[name]
        _FIELD_NAMES[descriptor.full_name] = names
    return names.get(key)


# message full name -> {name a document may use: field}
_FIELD_NAMES: dict[str, dict[str, FieldDescriptor]] = {}


def _normalize_field(value: Any, fd: FieldDescriptor, path: str, strict: bool, unknown: list[str] | None) -> Any:
    mt = fd.message_type
    if mt is not None and mt.GetOptions().map_entry:
        if not isinstance(value, Mapping):
            raise FieldError(path, f"expected a map, got {type_name(value)}")
        key_fd, value_fd = mt.fields_by_name["key"], mt.fields_by_name["value"]
        out: dict[Any, Any] = {}
        for k, v in value.items():
            here = f"{path}.{k}"
            _check_map_key(k, key_fd, here)
            if v is None and not _takes_null(value_fd):
                raise FieldError(here, f"expected {_wanted(value_fd)}, got null")
            out[k] = v if v is None else _normalize_one(v, value_fd, here, strict, unknown)
        return out
    if fd.is_repeated:
        if not isinstance(value, list):
            raise FieldError(path, f"expected a list, got {type_name(value)}")
        items = []
        for i, item in enumerate(value):
            if item is None and not _takes_null(fd):
                raise FieldError(f"{path}[{i}]", f"expected {_wanted(fd)}, got null")
            items.append(item if item is None else _normalize_one(item, fd, f"{path}[{i}]", strict, unknown))
        return items
    return _normalize_one(value, fd, path, strict, unknown)


def _normalize_one(value: Any, fd: FieldDescriptor, path: str, strict: bool, unknown: list[str] | None) -> Any:
    """One value of the field's type (an element of a repeated field, a map's value)."""
    if fd.message_type is not None:
        return normalize(value, fd.message_type, path, strict=strict, unknown=unknown)
    _check_scalar(value, fd, path)
    return value


def _takes_null(fd: FieldDescriptor) -> bool:
    """proto3 JSON: ``null`` is a value of google.protobuf.Value (and NullValue) only."""
    mt = fd.message_type
    return (mt is not None and mt.full_name == _VALUE) or (
        fd.enum_type is not None and fd.enum_type.full_name == _NULL_VALUE
    )


_INTEGER_TYPES = frozenset(
    {
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
    }
)
_FLOAT_TYPES = frozenset({FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE})
_INTEGER_TEXT = re.compile(r"-?\d+")
_FLOAT_WORDS = frozenset({"NaN", "Infinity", "-Infinity"})
_MAX_ENUM_NAMES = 8  # an error lists the names of a small enum only


def _wanted(fd: FieldDescriptor) -> str:
    """What a value of ``fd``'s type is called in an error (``a string``, ``an object``...)."""
    mt = fd.message_type
    if mt is not None:
        if mt.full_name == _DURATION:
            return "a duration"
        if mt.full_name in _WRAPPERS:
            return _wanted(mt.fields_by_name["value"])
        return "an object"
    if fd.enum_type is not None:
        return "one of " + ", ".join(fd.enum_type.values_by_name)
    if fd.type in _INTEGER_TYPES:
        return "an integer"
    if fd.type in _FLOAT_TYPES:
        return "a number"
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return "true or false"
    return "a string"


def _check_scalar(value: Any, fd: FieldDescriptor, path: str) -> None:
    """A scalar of ``fd``'s proto3 JSON type; the range (and a number's form) is ParseDict's."""
    t = fd.type
    if fd.enum_type is not None:
        # a name, or a number as proto3 JSON has it too, but one the enum has: the code reading
        # the field knows those values only (Go keeps an unknown one; Python's Name() raises)
        ok = isinstance(value, str | int) and not isinstance(value, bool)
        if ok:
            names = fd.enum_type.values_by_name
            if value in (names if isinstance(value, str) else fd.enum_type.values_by_number):
                return
            listed = ", ".join(names) if len(names) <= _MAX_ENUM_NAMES else f"a {fd.enum_type.name} name"
            raise FieldError(path, f"unknown value {_shown(value)} (want {listed})")
    elif t in _INTEGER_TYPES:
        if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
            raise FieldError(path, f"expected an integer, got {value!r}")
        ok = (
            (isinstance(value, int) and not isinstance(value, bool))
            or (isinstance(value, float) and math.isfinite(value))
            or (isinstance(value, str) and _INTEGER_TEXT.fullmatch(value) is not None)
        )
    elif t in _FLOAT_TYPES:
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) > _MAX_DOUBLE:
                raise FieldError(path, "number out of range")
            return
        # proto3 JSON has NaN and Infinity; Kubernetes' JSON cannot carry them and no field
        # Istio reads means anything by them: refused here, not where Envoy config is built
        non_finite = isinstance(value, float) and not math.isfinite(value)
        if non_finite or (isinstance(value, str) and value in _FLOAT_WORDS):
            raise FieldError(path, f"expected a finite number, got {_shown(value)}")
        ok = isinstance(value, float) or (isinstance(value, str) and _float_text(value))
    elif t == FieldDescriptor.TYPE_BOOL:
        ok = isinstance(value, bool)
    else:  # string, bytes
        ok = isinstance(value, str)
    if not ok:
        raise FieldError(path, f"expected {_wanted(fd)}, got {_shown(value)}")


def _float_text(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _check_map_key(key: Any, key_fd: FieldDescriptor, path: str) -> None:
    """A map key: a string, or for an integer-keyed map a number (JSON writes it quoted)."""
    if key_fd.type in _INTEGER_TYPES:
        ok = (isinstance(key, int) and not isinstance(key, bool)) or (
            isinstance(key, str) and _INTEGER_TEXT.fullmatch(key) is not None
        )
        wanted = "an integer"
    else:
        ok, wanted = isinstance(key, str), "a string"
    if not ok:
        raise FieldError(path, f"expected {wanted} as the key, got {_shown(key)}")


def _well_known(doc: Any, descriptor: Descriptor, path: str) -> Any:
    """A well-known type's JSON form: checked here, converted by ParseDict."""
    name = descriptor.full_name
    if name == _DURATION:
        if not isinstance(doc, str):
            raise FieldError(path, f"expected a duration such as 5s or 100ms, got {_shown(doc)}")
        return _duration(doc, path)
    if name in _WRAPPERS:
        _check_scalar(doc, descriptor.fields_by_name["value"], path)
    elif name == _STRUCT:
        if not isinstance(doc, Mapping):
            raise FieldError(path, f"expected an object, got {type_name(doc)}")
        _check_json(doc, path)
    elif name == _LIST_VALUE:
        if not isinstance(doc, list):
            raise FieldError(path, f"expected a list, got {type_name(doc)}")
        _check_json(doc, path)
    elif name == _VALUE:
        _check_json(doc, path)
    elif name in (_TIMESTAMP, _FIELD_MASK) and not isinstance(doc, str):
        raise FieldError(path, f"expected a string, got {_shown(doc)}")
    elif name in (_ANY, _EMPTY) and not isinstance(doc, Mapping):
        raise FieldError(path, f"expected an object, got {type_name(doc)}")
    return doc


def _check_json(value: Any, path: str) -> None:
    """A JSON value (google.protobuf.Value): objects with string keys, lists, strings,
    finite numbers, booleans and null only."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise FieldError(f"{path}.{k}", f"expected a string as the key, got {_shown(k)}")
            _check_json(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, f"{path}[{i}]")
    elif isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > _MAX_DOUBLE:
            raise FieldError(path, "number out of range")
    elif isinstance(value, float) and not math.isfinite(value):  # JSON has no NaN or Infinity
        raise FieldError(path, f"expected a finite number, got {_shown(value)}")
    elif value is not None and not isinstance(value, str | bool | float):
        raise FieldError(path, f"expected a JSON value, got {type_name(value)}")


def _duration(text: str, path: str) -> str:
    if _PROTO_DURATION.match(text):
        seconds, out = Decimal(text[:-1]), text
    else:
        go_seconds = go_duration_seconds(text)
        if go_seconds is None:
            raise FieldError(path, f"invalid duration {_shown(text)} (use e.g. 5s, 100ms, 1m30s)")
        seconds, out = go_seconds, f"{go_seconds.normalize():f}s"
    if abs(seconds) > _MAX_DURATION_SECONDS:
        raise FieldError(path, f"duration {_shown(text)} out of range (at most 10,000 years)")
    return out


def parse_message(doc: Any, message_type: type[M], *, strict: bool = True, unknown: list[str] | None = None) -> M:
    """Parse ``doc`` into a new ``message_type``; unknown fields are errors, or with ``strict``
    false dropped and their paths appended to ``unknown``.

    Most documents take the fast path (``build_message``); the rest, including every invalid
    one, go through ``normalize`` + ``json_format.ParseDict`` so edge cases and error messages
    come from protobuf itself."""
    fast = build_message(doc, message_type)
    if fast is not None:
        return fast
    msg = message_type()
    merge_message(doc, msg, strict=strict, unknown=unknown)
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


def merge_message(doc: Any, msg: Message, *, strict: bool, unknown: list[str] | None = None) -> None:
    """Parse ``doc`` over an existing message (used to apply user values over defaults)."""
    descriptor = cast(Descriptor, msg.DESCRIPTOR)
    clean = normalize(doc, descriptor, "", strict=strict, unknown=unknown)
    try:
        json_format.ParseDict(clean, msg)
    except _PARSE_ERRORS as e:
        # normalize checked every type: what is left is a value protobuf refuses (out of
        # range, two members of a oneof...); anything but a ParseError is not its own text
        error = _field_error(str(e), msg.DESCRIPTOR.name)
        reason = error.reason if isinstance(e, json_format.ParseError) and error.reason else "invalid value"
        raise FieldError(_locate(clean, descriptor, "") or error.field, reason) from e


# ParseDict wraps most failures in ParseError, not all (an int too large for a double)
_PARSE_ERRORS = (json_format.ParseError, ValueError, TypeError, ArithmeticError, AttributeError, KeyError)


def _fails(doc: Any, descriptor: Descriptor) -> bool:
    try:
        json_format.ParseDict(doc, message_factory.GetMessageClass(descriptor)())
    except _PARSE_ERRORS:
        return True
    return False


def _locate(doc: Any, descriptor: Descriptor, path: str) -> str:
    """The exact path (with list indices and map keys) of the value ParseDict rejects.

    protobuf's own message names the fields but not which list element failed, so on the error
    path only, each field is parsed alone and the search descends into the one that fails."""
    if not isinstance(doc, Mapping) or descriptor.full_name.startswith(_WKT_PREFIX):
        return path
    for key, value in doc.items():
        here = f"{path}.{key}" if path else str(key)
        fd = _json_field(descriptor, key) or descriptor.fields_by_name.get(key) if isinstance(key, str) else None
        if fd is None:
            return here
        if not _fails({key: value}, descriptor):
            continue
        mt = fd.message_type
        if mt is not None and mt.GetOptions().map_entry:
            if not isinstance(value, Mapping):
                return here
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
    return FieldError(path, _reworded(rest.rstrip(" .")))


_OUT_OF_RANGE = re.compile(r"Value out of range: (\S+)")
_MANY_ONEOF = re.compile(r'Message type "([\w.]+)" should not have multiple "(\w+)" oneof fields')


def _reworded(reason: str) -> str:
    """protobuf's words for what it refuses, in the user's (JSON field names, no proto names)."""
    if m := _OUT_OF_RANGE.fullmatch(reason):
        return f"{m.group(1)} is out of range"
    if m := _MANY_ONEOF.fullmatch(reason):
        try:
            oneof = descriptor_pool.Default().FindMessageTypeByName(m.group(1)).oneofs_by_name[m.group(2)]
        except KeyError:
            return reason
        return "only one of " + ", ".join(fd.json_name for fd in oneof.fields) + " may be set"
    return reason


def type_name(value: Any) -> str:
    """What a YAML value is, in words: ``a list``, ``an object``, ``an integer``..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, date):  # an unquoted YAML timestamp
        return "a timestamp (quote it to make it a string)"
    if isinstance(value, bytes):
        return "binary data"
    if isinstance(value, set | frozenset):
        return "a set"
    return type(value).__name__


_SHOWN_MAX = 40


def _shown(value: Any) -> str:
    """A value as an error names it: short scalars as written, anything else by its type."""
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= _SHOWN_MAX else f"{text[: _SHOWN_MAX - 4]}...'"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float) and len(repr(value)) <= _SHOWN_MAX:
        return repr(value)
    return type_name(value)


# --- the fast path's per-type plan --------------------------------------------------------

_K_STRING, _K_BOOL, _K_INT, _K_DOUBLE, _K_ENUM, _K_MESSAGE, _K_DURATION, _K_WRAPPER, _K_MAP, _K_OTHER = range(10)
_WRAPPERS = frozenset(
    f"google.protobuf.{n}Value" for n in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String")
)
_SCALAR_KINDS = {
    FieldDescriptor.TYPE_STRING: _K_STRING,
    FieldDescriptor.TYPE_BOOL: _K_BOOL,
    FieldDescriptor.TYPE_DOUBLE: _K_DOUBLE,
    **dict.fromkeys(_INTEGER_TYPES, _K_INT),
}  # float and bytes have JSON forms of their own (range checks, base64): json_format's job


class _NeedsJsonFormat(Exception):
    """A value the fast path does not convert."""


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str  # the proto field name: the constructor's keyword
    kind: int
    repeated: bool = False
    oneof: str | None = None
    message: _MessagePlan | None = None  # _K_MESSAGE: the sub-message's plan
    enum_names: frozenset[str] = frozenset()
    value: _FieldPlan | None = None  # _K_MAP, _K_WRAPPER: how to convert the value


@dataclass(slots=True)
class _MessagePlan:
    fields: dict[str, _FieldPlan]  # by JSON name
    required: tuple[str, ...] = ()  # fields the CRD requires
    bounded: tuple[tuple[str, Callable[[Any], bool]], ...] = ()  # (JSON name, within its CRD bounds)


# plans by message full name; a plan is registered before it is filled so recursive message
# types terminate, and a half-filled plan seen from another thread only sends a document to
# the slow path
_PLANS: dict[str, _MessagePlan] = {}


def _plan(descriptor: Descriptor) -> _MessagePlan:
    plan = _PLANS.get(descriptor.full_name)
    if plan is None:
        plan = _PLANS[descriptor.full_name] = _MessagePlan({})
        for fd in descriptor.fields:  # by JSON name only: an alt name takes the slow path
            plan.fields[fd.json_name] = _field_plan(fd)
        plan.required = tuple(REQUIRED.get(descriptor.full_name, ()))
        bounds = BOUNDS.get(descriptor.full_name, {})
        plan.bounded = tuple((name, within(bound)) for name, bound in bounds.items() if name in plan.fields)
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
            value = _field_plan(mt.fields_by_name["value"])
            return _FieldPlan(fd.name, _K_WRAPPER, fd.is_repeated, oneof, value=value)
        if mt.full_name.startswith(_WKT_PREFIX):
            return _FieldPlan(fd.name, _K_OTHER)
        return _FieldPlan(fd.name, _K_MESSAGE, fd.is_repeated, oneof, message=_plan(mt))
    if fd.enum_type is not None:
        if fd.enum_type.full_name.startswith(_WKT_PREFIX):  # NullValue: null has a meaning there
            return _FieldPlan(fd.name, _K_OTHER)
        names = frozenset(fd.enum_type.values_by_name)
        return _FieldPlan(fd.name, _K_ENUM, fd.is_repeated, oneof, enum_names=names)
    return _FieldPlan(fd.name, _SCALAR_KINDS.get(fd.type, _K_OTHER), fd.is_repeated, oneof)


def _kwargs(doc: Any, plan: _MessagePlan) -> dict[str, Any]:
    if type(doc) is not dict:
        raise _NeedsJsonFormat
    out: dict[str, Any] = {}
    oneofs: set[str] | None = None
    fields = plan.fields
    for key, value in doc.items():
        f = fields.get(key)
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
    if plan.required:  # what the CRD requires and bounds (the slow path names what is wrong)
        for name in plan.required:
            if doc.get(name) is None:
                raise _NeedsJsonFormat
    if plan.bounded:
        for name, is_within in plan.bounded:
            value = doc.get(name)
            if value is not None and not is_within(value):
                raise _NeedsJsonFormat
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
        if (t is int and abs(value) <= _MAX_DOUBLE) or (t is float and math.isfinite(value)):
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
