"""xDS resources as plain, comparable data: every field a proto sets, by its proto name; enums by
name; every ``Any`` unpacked (the message classes of xds-protos are imported on demand, by the
proto package its type URL names), and one that no installed proto describes (Istio's own
filters: ``istio.*``, ``io.istio.*``) kept as its type URL and a digest of its bytes.

What is meant to differ between two control planes is taken out here, and only this:
``version_info`` and nonces never reach this module (the client keeps resources only), and no
resource field holds a generated id in what pilotfish and istiod send for the CI subset. Order is
kept: Envoy reads lists in order (filters, routes, virtual hosts), so an order difference is a
difference; the diff (``diff.py``) matches list items by name to report it readably.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

from google.protobuf import any_pb2, descriptor, json_format, message

import app.api.nds  # noqa: F401  registers Istio's NameTable (generated from the pinned module)
from app.config.envoy_filter_value import message_class

_WELL_KNOWN = {"google.protobuf." + n for n in ("Struct", "Value", "ListValue", "Duration", "Timestamp")}


def decode(packed: any_pb2.Any) -> message.Message:
    """An Any's message; raises KeyError for a type no installed proto defines."""
    cls = message_class(packed.type_url.rsplit("/", 1)[-1])
    if cls is None:
        raise KeyError(packed.type_url)
    return cls.FromString(packed.value)


def plain(msg: message.Message) -> Any:
    """``msg`` as dicts, lists and scalars (set fields only, proto field names, Any unpacked)."""
    full_name = msg.DESCRIPTOR.full_name
    if full_name == "google.protobuf.Any":
        assert isinstance(msg, any_pb2.Any)
        type_name = msg.type_url.rsplit("/", 1)[-1]
        cls = message_class(type_name)
        if cls is None:
            digest = hashlib.sha256(msg.value).hexdigest()[:16]
            return {"@type": type_name, "@opaque": f"{len(msg.value)} bytes, sha256 {digest}"}
        return {"@type": type_name, **plain(cls.FromString(msg.value))}
    if full_name in _WELL_KNOWN:
        return json_format.MessageToDict(msg, preserving_proto_field_name=True)
    out: dict[str, Any] = {}
    for field, value in msg.ListFields():
        out[field.name] = _field(field, value)
    return out


def _field(field: descriptor.FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        return {str(k): _scalar(value_field, v) for k, v in sorted(value.items())}
    if field.is_repeated:
        return [_scalar(field, v) for v in value]
    return _scalar(field, value)


def _scalar(field: descriptor.FieldDescriptor, value: Any) -> Any:
    if field.type == descriptor.FieldDescriptor.TYPE_MESSAGE:
        return plain(value)
    if field.type == descriptor.FieldDescriptor.TYPE_ENUM and field.enum_type is not None:
        enum_value = field.enum_type.values_by_number.get(value)
        return enum_value.name if enum_value is not None else value
    if field.type == descriptor.FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


def resource(packed: any_pb2.Any) -> Any:
    """One resource of a response, plain."""
    return plain(decode(packed))


def substitute(value: Any, replacements: dict[str, str]) -> Any:
    """``value`` with every whole occurrence of each key (a namespace's random name, an allocated
    ClusterIP) replaced by its stable placeholder: the reviewed list names them so, run after run."""
    if not replacements:
        return value
    pattern = re.compile(
        r"(?<![A-Za-z0-9-])("
        + "|".join(re.escape(k) for k in sorted(replacements, key=len, reverse=True))
        + r")(?![A-Za-z0-9-])"
    )
    return json.loads(pattern.sub(lambda m: replacements[m.group(1)], json.dumps(value)))
