from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NameTable(_message.Message):
    __slots__ = ("table",)
    class NameInfo(_message.Message):
        __slots__ = ("ips", "registry", "shortname", "namespace", "alt_hosts")
        IPS_FIELD_NUMBER: _ClassVar[int]
        REGISTRY_FIELD_NUMBER: _ClassVar[int]
        SHORTNAME_FIELD_NUMBER: _ClassVar[int]
        NAMESPACE_FIELD_NUMBER: _ClassVar[int]
        ALT_HOSTS_FIELD_NUMBER: _ClassVar[int]
        ips: _containers.RepeatedScalarFieldContainer[str]
        registry: str
        shortname: str
        namespace: str
        alt_hosts: _containers.RepeatedScalarFieldContainer[str]
        def __init__(self, ips: _Optional[_Iterable[str]] = ..., registry: _Optional[str] = ..., shortname: _Optional[str] = ..., namespace: _Optional[str] = ..., alt_hosts: _Optional[_Iterable[str]] = ...) -> None: ...
    class TableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: NameTable.NameInfo
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[NameTable.NameInfo, _Mapping]] = ...) -> None: ...
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: _containers.MessageMap[str, NameTable.NameInfo]
    def __init__(self, table: _Optional[_Mapping[str, NameTable.NameInfo]] = ...) -> None: ...
