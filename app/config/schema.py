"""Strict proto3-JSON parsing of Istio specs into protobuf messages.

``json_format.ParseDict`` does the proto3 JSON mapping (durations, enums by name, wrappers,
64-bit integers as strings). Before it runs, ``normalize`` walks the document against the
message descriptor so an unknown field is reported with its full path (``trafficPolicy.tls.foo``)
and only Istio's camelCase names are accepted, as the Kubernetes API server would.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, TypeVar, cast

from google.protobuf import json_format, message_factory
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
    by_json = descriptor.fields_by_camelcase_name
    out: dict[str, Any] = {}
    for key, value in doc.items():
        here = f"{path}.{key}" if path else str(key)
        fd = by_json.get(key) if isinstance(key, str) else None
        if fd is None or fd.json_name != key:
            if strict:
                raise FieldError(here, "unknown field")
            continue
        if value is not None and fd.message_type is not None:
            value = _normalize_field(value, fd, fd.message_type, here, strict)
        out[key] = value
    return out


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
    """Parse ``doc`` into a new ``message_type``; unknown fields are errors."""
    msg = message_type()
    merge_message(doc, msg, strict=True)
    return msg


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
