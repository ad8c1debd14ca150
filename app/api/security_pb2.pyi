import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WorkloadSelector(_message.Message):
    __slots__ = ("match_labels",)
    class MatchLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MATCH_LABELS_FIELD_NUMBER: _ClassVar[int]
    match_labels: _containers.ScalarMap[str, str]
    def __init__(self, match_labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PeerAuthentication(_message.Message):
    __slots__ = ("selector", "mtls", "port_level_mtls")
    class MutualTLS(_message.Message):
        __slots__ = ("mode",)
        class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            UNSET: _ClassVar[PeerAuthentication.MutualTLS.Mode]
            DISABLE: _ClassVar[PeerAuthentication.MutualTLS.Mode]
            PERMISSIVE: _ClassVar[PeerAuthentication.MutualTLS.Mode]
            STRICT: _ClassVar[PeerAuthentication.MutualTLS.Mode]
        UNSET: PeerAuthentication.MutualTLS.Mode
        DISABLE: PeerAuthentication.MutualTLS.Mode
        PERMISSIVE: PeerAuthentication.MutualTLS.Mode
        STRICT: PeerAuthentication.MutualTLS.Mode
        MODE_FIELD_NUMBER: _ClassVar[int]
        mode: PeerAuthentication.MutualTLS.Mode
        def __init__(self, mode: _Optional[_Union[PeerAuthentication.MutualTLS.Mode, str]] = ...) -> None: ...
    class PortLevelMtlsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: PeerAuthentication.MutualTLS
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[PeerAuthentication.MutualTLS, _Mapping]] = ...) -> None: ...
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    MTLS_FIELD_NUMBER: _ClassVar[int]
    PORT_LEVEL_MTLS_FIELD_NUMBER: _ClassVar[int]
    selector: WorkloadSelector
    mtls: PeerAuthentication.MutualTLS
    port_level_mtls: _containers.MessageMap[int, PeerAuthentication.MutualTLS]
    def __init__(self, selector: _Optional[_Union[WorkloadSelector, _Mapping]] = ..., mtls: _Optional[_Union[PeerAuthentication.MutualTLS, _Mapping]] = ..., port_level_mtls: _Optional[_Mapping[int, PeerAuthentication.MutualTLS]] = ...) -> None: ...

class AuthorizationPolicy(_message.Message):
    __slots__ = ("selector", "rules", "action", "provider", "target_ref", "target_refs")
    class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ALLOW: _ClassVar[AuthorizationPolicy.Action]
        DENY: _ClassVar[AuthorizationPolicy.Action]
        AUDIT: _ClassVar[AuthorizationPolicy.Action]
        CUSTOM: _ClassVar[AuthorizationPolicy.Action]
    ALLOW: AuthorizationPolicy.Action
    DENY: AuthorizationPolicy.Action
    AUDIT: AuthorizationPolicy.Action
    CUSTOM: AuthorizationPolicy.Action
    class ExtensionProvider(_message.Message):
        __slots__ = ("name",)
        NAME_FIELD_NUMBER: _ClassVar[int]
        name: str
        def __init__(self, name: _Optional[str] = ...) -> None: ...
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    TARGET_REF_FIELD_NUMBER: _ClassVar[int]
    TARGET_REFS_FIELD_NUMBER: _ClassVar[int]
    selector: WorkloadSelector
    rules: _containers.RepeatedCompositeFieldContainer[Rule]
    action: AuthorizationPolicy.Action
    provider: AuthorizationPolicy.ExtensionProvider
    target_ref: PolicyTargetReference
    target_refs: _containers.RepeatedCompositeFieldContainer[PolicyTargetReference]
    def __init__(self, selector: _Optional[_Union[WorkloadSelector, _Mapping]] = ..., rules: _Optional[_Iterable[_Union[Rule, _Mapping]]] = ..., action: _Optional[_Union[AuthorizationPolicy.Action, str]] = ..., provider: _Optional[_Union[AuthorizationPolicy.ExtensionProvider, _Mapping]] = ..., target_ref: _Optional[_Union[PolicyTargetReference, _Mapping]] = ..., target_refs: _Optional[_Iterable[_Union[PolicyTargetReference, _Mapping]]] = ...) -> None: ...

class PolicyTargetReference(_message.Message):
    __slots__ = ("group", "kind", "name", "namespace")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    group: str
    kind: str
    name: str
    namespace: str
    def __init__(self, group: _Optional[str] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class Rule(_message.Message):
    __slots__ = ("to", "when")
    class From(_message.Message):
        __slots__ = ("source",)
        SOURCE_FIELD_NUMBER: _ClassVar[int]
        source: Source
        def __init__(self, source: _Optional[_Union[Source, _Mapping]] = ...) -> None: ...
    class To(_message.Message):
        __slots__ = ("operation",)
        OPERATION_FIELD_NUMBER: _ClassVar[int]
        operation: Operation
        def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...
    FROM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    WHEN_FIELD_NUMBER: _ClassVar[int]
    to: _containers.RepeatedCompositeFieldContainer[Rule.To]
    when: _containers.RepeatedCompositeFieldContainer[Condition]
    def __init__(self, to: _Optional[_Iterable[_Union[Rule.To, _Mapping]]] = ..., when: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ..., **kwargs) -> None: ...

class Source(_message.Message):
    __slots__ = ("principals", "request_principals", "namespaces", "ip_blocks", "not_principals", "not_request_principals", "not_namespaces", "not_ip_blocks", "remote_ip_blocks", "not_remote_ip_blocks", "service_accounts", "not_service_accounts", "trust_domains", "not_trust_domains")
    PRINCIPALS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_PRINCIPALS_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    IP_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    NOT_PRINCIPALS_FIELD_NUMBER: _ClassVar[int]
    NOT_REQUEST_PRINCIPALS_FIELD_NUMBER: _ClassVar[int]
    NOT_NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    NOT_IP_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    REMOTE_IP_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    NOT_REMOTE_IP_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SERVICE_ACCOUNTS_FIELD_NUMBER: _ClassVar[int]
    NOT_SERVICE_ACCOUNTS_FIELD_NUMBER: _ClassVar[int]
    TRUST_DOMAINS_FIELD_NUMBER: _ClassVar[int]
    NOT_TRUST_DOMAINS_FIELD_NUMBER: _ClassVar[int]
    principals: _containers.RepeatedScalarFieldContainer[str]
    request_principals: _containers.RepeatedScalarFieldContainer[str]
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    ip_blocks: _containers.RepeatedScalarFieldContainer[str]
    not_principals: _containers.RepeatedScalarFieldContainer[str]
    not_request_principals: _containers.RepeatedScalarFieldContainer[str]
    not_namespaces: _containers.RepeatedScalarFieldContainer[str]
    not_ip_blocks: _containers.RepeatedScalarFieldContainer[str]
    remote_ip_blocks: _containers.RepeatedScalarFieldContainer[str]
    not_remote_ip_blocks: _containers.RepeatedScalarFieldContainer[str]
    service_accounts: _containers.RepeatedScalarFieldContainer[str]
    not_service_accounts: _containers.RepeatedScalarFieldContainer[str]
    trust_domains: _containers.RepeatedScalarFieldContainer[str]
    not_trust_domains: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, principals: _Optional[_Iterable[str]] = ..., request_principals: _Optional[_Iterable[str]] = ..., namespaces: _Optional[_Iterable[str]] = ..., ip_blocks: _Optional[_Iterable[str]] = ..., not_principals: _Optional[_Iterable[str]] = ..., not_request_principals: _Optional[_Iterable[str]] = ..., not_namespaces: _Optional[_Iterable[str]] = ..., not_ip_blocks: _Optional[_Iterable[str]] = ..., remote_ip_blocks: _Optional[_Iterable[str]] = ..., not_remote_ip_blocks: _Optional[_Iterable[str]] = ..., service_accounts: _Optional[_Iterable[str]] = ..., not_service_accounts: _Optional[_Iterable[str]] = ..., trust_domains: _Optional[_Iterable[str]] = ..., not_trust_domains: _Optional[_Iterable[str]] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ("hosts", "ports", "methods", "paths", "not_hosts", "not_ports", "not_methods", "not_paths")
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    METHODS_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    NOT_HOSTS_FIELD_NUMBER: _ClassVar[int]
    NOT_PORTS_FIELD_NUMBER: _ClassVar[int]
    NOT_METHODS_FIELD_NUMBER: _ClassVar[int]
    NOT_PATHS_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedScalarFieldContainer[str]
    ports: _containers.RepeatedScalarFieldContainer[str]
    methods: _containers.RepeatedScalarFieldContainer[str]
    paths: _containers.RepeatedScalarFieldContainer[str]
    not_hosts: _containers.RepeatedScalarFieldContainer[str]
    not_ports: _containers.RepeatedScalarFieldContainer[str]
    not_methods: _containers.RepeatedScalarFieldContainer[str]
    not_paths: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, hosts: _Optional[_Iterable[str]] = ..., ports: _Optional[_Iterable[str]] = ..., methods: _Optional[_Iterable[str]] = ..., paths: _Optional[_Iterable[str]] = ..., not_hosts: _Optional[_Iterable[str]] = ..., not_ports: _Optional[_Iterable[str]] = ..., not_methods: _Optional[_Iterable[str]] = ..., not_paths: _Optional[_Iterable[str]] = ...) -> None: ...

class Condition(_message.Message):
    __slots__ = ("key", "values", "not_values")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    NOT_VALUES_FIELD_NUMBER: _ClassVar[int]
    key: str
    values: _containers.RepeatedScalarFieldContainer[str]
    not_values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, key: _Optional[str] = ..., values: _Optional[_Iterable[str]] = ..., not_values: _Optional[_Iterable[str]] = ...) -> None: ...

class RequestAuthentication(_message.Message):
    __slots__ = ("selector", "jwt_rules", "target_ref", "target_refs")
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    JWT_RULES_FIELD_NUMBER: _ClassVar[int]
    TARGET_REF_FIELD_NUMBER: _ClassVar[int]
    TARGET_REFS_FIELD_NUMBER: _ClassVar[int]
    selector: WorkloadSelector
    jwt_rules: _containers.RepeatedCompositeFieldContainer[JWTRule]
    target_ref: PolicyTargetReference
    target_refs: _containers.RepeatedCompositeFieldContainer[PolicyTargetReference]
    def __init__(self, selector: _Optional[_Union[WorkloadSelector, _Mapping]] = ..., jwt_rules: _Optional[_Iterable[_Union[JWTRule, _Mapping]]] = ..., target_ref: _Optional[_Union[PolicyTargetReference, _Mapping]] = ..., target_refs: _Optional[_Iterable[_Union[PolicyTargetReference, _Mapping]]] = ...) -> None: ...

class JWTRule(_message.Message):
    __slots__ = ("issuer", "audiences", "jwks_uri", "jwks", "from_headers", "from_params", "from_cookies", "output_payload_to_header", "forward_original_token", "output_claim_to_headers", "timeout")
    ISSUER_FIELD_NUMBER: _ClassVar[int]
    AUDIENCES_FIELD_NUMBER: _ClassVar[int]
    JWKS_URI_FIELD_NUMBER: _ClassVar[int]
    JWKS_FIELD_NUMBER: _ClassVar[int]
    FROM_HEADERS_FIELD_NUMBER: _ClassVar[int]
    FROM_PARAMS_FIELD_NUMBER: _ClassVar[int]
    FROM_COOKIES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_PAYLOAD_TO_HEADER_FIELD_NUMBER: _ClassVar[int]
    FORWARD_ORIGINAL_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_CLAIM_TO_HEADERS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    issuer: str
    audiences: _containers.RepeatedScalarFieldContainer[str]
    jwks_uri: str
    jwks: str
    from_headers: _containers.RepeatedCompositeFieldContainer[JWTHeader]
    from_params: _containers.RepeatedScalarFieldContainer[str]
    from_cookies: _containers.RepeatedScalarFieldContainer[str]
    output_payload_to_header: str
    forward_original_token: bool
    output_claim_to_headers: _containers.RepeatedCompositeFieldContainer[ClaimToHeader]
    timeout: _duration_pb2.Duration
    def __init__(self, issuer: _Optional[str] = ..., audiences: _Optional[_Iterable[str]] = ..., jwks_uri: _Optional[str] = ..., jwks: _Optional[str] = ..., from_headers: _Optional[_Iterable[_Union[JWTHeader, _Mapping]]] = ..., from_params: _Optional[_Iterable[str]] = ..., from_cookies: _Optional[_Iterable[str]] = ..., output_payload_to_header: _Optional[str] = ..., forward_original_token: _Optional[bool] = ..., output_claim_to_headers: _Optional[_Iterable[_Union[ClaimToHeader, _Mapping]]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class JWTHeader(_message.Message):
    __slots__ = ("name", "prefix")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    name: str
    prefix: str
    def __init__(self, name: _Optional[str] = ..., prefix: _Optional[str] = ...) -> None: ...

class ClaimToHeader(_message.Message):
    __slots__ = ("header", "claim")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    header: str
    claim: str
    def __init__(self, header: _Optional[str] = ..., claim: _Optional[str] = ...) -> None: ...
