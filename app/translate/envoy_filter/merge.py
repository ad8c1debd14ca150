"""istiod's proto merge for EnvoyFilter MERGE patches (pkg/proto/merge, networking/util
MergeAnyWithAny): Go's proto.Merge (set scalars replace, messages merge, lists append, map
entries replace) except that a Duration is replaced whole; MERGE_AND_REPLACE_LIST replaces a
list the patch sets instead of appending to it."""

from __future__ import annotations

from google.protobuf import any_pb2
from google.protobuf.message import Message

from app.config.envoy_filter_value import message_class

_DURATION = "google.protobuf.Duration"


def merge(dst: Message, src: Message, replace_list: bool = False) -> None:
    """Merge ``src`` into ``dst`` (the same message type) in place."""
    for fd, value in src.ListFields():
        if fd.is_repeated:
            target = getattr(dst, fd.name)
            if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
                for k, v in value.items():
                    if isinstance(v, Message):
                        target[k].CopyFrom(v)  # Go's mergeMap: a new entry from the patch's
                    else:
                        target[k] = v
                continue
            if replace_list:
                del target[:]
            if fd.message_type is not None:
                for v in value:
                    target.add().CopyFrom(v)
            else:
                target.extend(value)
        elif fd.message_type is not None:
            if fd.message_type.full_name == _DURATION:
                getattr(dst, fd.name).CopyFrom(value)
            else:
                merge(getattr(dst, fd.name), value, replace_list)
        else:
            setattr(dst, fd.name, value)


def merge_any(dst: any_pb2.Any, src: any_pb2.Any) -> any_pb2.Any | None:
    """MergeAnyWithAny: both unpacked, ``src`` merged into ``dst``'s message, packed again; None
    when either names a type no installed proto describes, or the two types differ (istiod's
    merge panics there, and the patch does not take effect)."""
    dst_cls = message_class(dst.type_url.rsplit("/", 1)[-1])
    src_cls = message_class(src.type_url.rsplit("/", 1)[-1])
    if dst_cls is None or src_cls is None or dst_cls is not src_cls:
        return None
    merged = dst_cls.FromString(dst.value)
    merge(merged, src_cls.FromString(src.value))
    out = any_pb2.Any()
    out.Pack(merged, deterministic=True)
    return out
