import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import wrappers_pb2 as _wrappers_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CaptureMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEFAULT: _ClassVar[CaptureMode]
    IPTABLES: _ClassVar[CaptureMode]
    NONE: _ClassVar[CaptureMode]
DEFAULT: CaptureMode
IPTABLES: CaptureMode
NONE: CaptureMode

class WorkloadSelector(_message.Message):
    __slots__ = ("labels",)
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    def __init__(self, labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class TypeWorkloadSelector(_message.Message):
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

class DestinationRule(_message.Message):
    __slots__ = ("host", "traffic_policy", "subsets", "export_to", "workload_selector")
    HOST_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_POLICY_FIELD_NUMBER: _ClassVar[int]
    SUBSETS_FIELD_NUMBER: _ClassVar[int]
    EXPORT_TO_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    host: str
    traffic_policy: TrafficPolicy
    subsets: _containers.RepeatedCompositeFieldContainer[Subset]
    export_to: _containers.RepeatedScalarFieldContainer[str]
    workload_selector: TypeWorkloadSelector
    def __init__(self, host: _Optional[str] = ..., traffic_policy: _Optional[_Union[TrafficPolicy, _Mapping]] = ..., subsets: _Optional[_Iterable[_Union[Subset, _Mapping]]] = ..., export_to: _Optional[_Iterable[str]] = ..., workload_selector: _Optional[_Union[TypeWorkloadSelector, _Mapping]] = ...) -> None: ...

class TrafficPolicy(_message.Message):
    __slots__ = ("load_balancer", "connection_pool", "outlier_detection", "tls", "port_level_settings", "tunnel", "proxy_protocol", "retry_budget")
    class PortTrafficPolicy(_message.Message):
        __slots__ = ("port", "load_balancer", "connection_pool", "outlier_detection", "tls")
        PORT_FIELD_NUMBER: _ClassVar[int]
        LOAD_BALANCER_FIELD_NUMBER: _ClassVar[int]
        CONNECTION_POOL_FIELD_NUMBER: _ClassVar[int]
        OUTLIER_DETECTION_FIELD_NUMBER: _ClassVar[int]
        TLS_FIELD_NUMBER: _ClassVar[int]
        port: PortSelector
        load_balancer: LoadBalancerSettings
        connection_pool: ConnectionPoolSettings
        outlier_detection: OutlierDetection
        tls: ClientTLSSettings
        def __init__(self, port: _Optional[_Union[PortSelector, _Mapping]] = ..., load_balancer: _Optional[_Union[LoadBalancerSettings, _Mapping]] = ..., connection_pool: _Optional[_Union[ConnectionPoolSettings, _Mapping]] = ..., outlier_detection: _Optional[_Union[OutlierDetection, _Mapping]] = ..., tls: _Optional[_Union[ClientTLSSettings, _Mapping]] = ...) -> None: ...
    class TunnelSettings(_message.Message):
        __slots__ = ("protocol", "target_host", "target_port")
        PROTOCOL_FIELD_NUMBER: _ClassVar[int]
        TARGET_HOST_FIELD_NUMBER: _ClassVar[int]
        TARGET_PORT_FIELD_NUMBER: _ClassVar[int]
        protocol: str
        target_host: str
        target_port: int
        def __init__(self, protocol: _Optional[str] = ..., target_host: _Optional[str] = ..., target_port: _Optional[int] = ...) -> None: ...
    class ProxyProtocol(_message.Message):
        __slots__ = ("version",)
        class VERSION(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            V1: _ClassVar[TrafficPolicy.ProxyProtocol.VERSION]
            V2: _ClassVar[TrafficPolicy.ProxyProtocol.VERSION]
        V1: TrafficPolicy.ProxyProtocol.VERSION
        V2: TrafficPolicy.ProxyProtocol.VERSION
        VERSION_FIELD_NUMBER: _ClassVar[int]
        version: TrafficPolicy.ProxyProtocol.VERSION
        def __init__(self, version: _Optional[_Union[TrafficPolicy.ProxyProtocol.VERSION, str]] = ...) -> None: ...
    class RetryBudget(_message.Message):
        __slots__ = ("percent", "min_retry_concurrency")
        PERCENT_FIELD_NUMBER: _ClassVar[int]
        MIN_RETRY_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
        percent: _wrappers_pb2.DoubleValue
        min_retry_concurrency: int
        def __init__(self, percent: _Optional[_Union[_wrappers_pb2.DoubleValue, _Mapping]] = ..., min_retry_concurrency: _Optional[int] = ...) -> None: ...
    LOAD_BALANCER_FIELD_NUMBER: _ClassVar[int]
    CONNECTION_POOL_FIELD_NUMBER: _ClassVar[int]
    OUTLIER_DETECTION_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    PORT_LEVEL_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    TUNNEL_FIELD_NUMBER: _ClassVar[int]
    PROXY_PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    RETRY_BUDGET_FIELD_NUMBER: _ClassVar[int]
    load_balancer: LoadBalancerSettings
    connection_pool: ConnectionPoolSettings
    outlier_detection: OutlierDetection
    tls: ClientTLSSettings
    port_level_settings: _containers.RepeatedCompositeFieldContainer[TrafficPolicy.PortTrafficPolicy]
    tunnel: TrafficPolicy.TunnelSettings
    proxy_protocol: TrafficPolicy.ProxyProtocol
    retry_budget: TrafficPolicy.RetryBudget
    def __init__(self, load_balancer: _Optional[_Union[LoadBalancerSettings, _Mapping]] = ..., connection_pool: _Optional[_Union[ConnectionPoolSettings, _Mapping]] = ..., outlier_detection: _Optional[_Union[OutlierDetection, _Mapping]] = ..., tls: _Optional[_Union[ClientTLSSettings, _Mapping]] = ..., port_level_settings: _Optional[_Iterable[_Union[TrafficPolicy.PortTrafficPolicy, _Mapping]]] = ..., tunnel: _Optional[_Union[TrafficPolicy.TunnelSettings, _Mapping]] = ..., proxy_protocol: _Optional[_Union[TrafficPolicy.ProxyProtocol, _Mapping]] = ..., retry_budget: _Optional[_Union[TrafficPolicy.RetryBudget, _Mapping]] = ...) -> None: ...

class Subset(_message.Message):
    __slots__ = ("name", "labels", "traffic_policy")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_POLICY_FIELD_NUMBER: _ClassVar[int]
    name: str
    labels: _containers.ScalarMap[str, str]
    traffic_policy: TrafficPolicy
    def __init__(self, name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., traffic_policy: _Optional[_Union[TrafficPolicy, _Mapping]] = ...) -> None: ...

class LoadBalancerSettings(_message.Message):
    __slots__ = ("simple", "consistent_hash", "locality_lb_setting", "warmup_duration_secs", "warmup")
    class SimpleLB(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNSPECIFIED: _ClassVar[LoadBalancerSettings.SimpleLB]
        LEAST_CONN: _ClassVar[LoadBalancerSettings.SimpleLB]
        RANDOM: _ClassVar[LoadBalancerSettings.SimpleLB]
        PASSTHROUGH: _ClassVar[LoadBalancerSettings.SimpleLB]
        ROUND_ROBIN: _ClassVar[LoadBalancerSettings.SimpleLB]
        LEAST_REQUEST: _ClassVar[LoadBalancerSettings.SimpleLB]
    UNSPECIFIED: LoadBalancerSettings.SimpleLB
    LEAST_CONN: LoadBalancerSettings.SimpleLB
    RANDOM: LoadBalancerSettings.SimpleLB
    PASSTHROUGH: LoadBalancerSettings.SimpleLB
    ROUND_ROBIN: LoadBalancerSettings.SimpleLB
    LEAST_REQUEST: LoadBalancerSettings.SimpleLB
    class ConsistentHashLB(_message.Message):
        __slots__ = ("http_header_name", "http_cookie", "use_source_ip", "http_query_parameter_name", "ring_hash", "maglev", "minimum_ring_size")
        class RingHash(_message.Message):
            __slots__ = ("minimum_ring_size",)
            MINIMUM_RING_SIZE_FIELD_NUMBER: _ClassVar[int]
            minimum_ring_size: int
            def __init__(self, minimum_ring_size: _Optional[int] = ...) -> None: ...
        class MagLev(_message.Message):
            __slots__ = ("table_size",)
            TABLE_SIZE_FIELD_NUMBER: _ClassVar[int]
            table_size: int
            def __init__(self, table_size: _Optional[int] = ...) -> None: ...
        class HTTPCookie(_message.Message):
            __slots__ = ("name", "path", "ttl", "attributes")
            class Attribute(_message.Message):
                __slots__ = ("name", "value")
                NAME_FIELD_NUMBER: _ClassVar[int]
                VALUE_FIELD_NUMBER: _ClassVar[int]
                name: str
                value: str
                def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
            NAME_FIELD_NUMBER: _ClassVar[int]
            PATH_FIELD_NUMBER: _ClassVar[int]
            TTL_FIELD_NUMBER: _ClassVar[int]
            ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
            name: str
            path: str
            ttl: _duration_pb2.Duration
            attributes: _containers.RepeatedCompositeFieldContainer[LoadBalancerSettings.ConsistentHashLB.HTTPCookie.Attribute]
            def __init__(self, name: _Optional[str] = ..., path: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., attributes: _Optional[_Iterable[_Union[LoadBalancerSettings.ConsistentHashLB.HTTPCookie.Attribute, _Mapping]]] = ...) -> None: ...
        HTTP_HEADER_NAME_FIELD_NUMBER: _ClassVar[int]
        HTTP_COOKIE_FIELD_NUMBER: _ClassVar[int]
        USE_SOURCE_IP_FIELD_NUMBER: _ClassVar[int]
        HTTP_QUERY_PARAMETER_NAME_FIELD_NUMBER: _ClassVar[int]
        RING_HASH_FIELD_NUMBER: _ClassVar[int]
        MAGLEV_FIELD_NUMBER: _ClassVar[int]
        MINIMUM_RING_SIZE_FIELD_NUMBER: _ClassVar[int]
        http_header_name: str
        http_cookie: LoadBalancerSettings.ConsistentHashLB.HTTPCookie
        use_source_ip: bool
        http_query_parameter_name: str
        ring_hash: LoadBalancerSettings.ConsistentHashLB.RingHash
        maglev: LoadBalancerSettings.ConsistentHashLB.MagLev
        minimum_ring_size: int
        def __init__(self, http_header_name: _Optional[str] = ..., http_cookie: _Optional[_Union[LoadBalancerSettings.ConsistentHashLB.HTTPCookie, _Mapping]] = ..., use_source_ip: _Optional[bool] = ..., http_query_parameter_name: _Optional[str] = ..., ring_hash: _Optional[_Union[LoadBalancerSettings.ConsistentHashLB.RingHash, _Mapping]] = ..., maglev: _Optional[_Union[LoadBalancerSettings.ConsistentHashLB.MagLev, _Mapping]] = ..., minimum_ring_size: _Optional[int] = ...) -> None: ...
    SIMPLE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    LOCALITY_LB_SETTING_FIELD_NUMBER: _ClassVar[int]
    WARMUP_DURATION_SECS_FIELD_NUMBER: _ClassVar[int]
    WARMUP_FIELD_NUMBER: _ClassVar[int]
    simple: LoadBalancerSettings.SimpleLB
    consistent_hash: LoadBalancerSettings.ConsistentHashLB
    locality_lb_setting: LocalityLoadBalancerSetting
    warmup_duration_secs: _duration_pb2.Duration
    warmup: WarmupConfiguration
    def __init__(self, simple: _Optional[_Union[LoadBalancerSettings.SimpleLB, str]] = ..., consistent_hash: _Optional[_Union[LoadBalancerSettings.ConsistentHashLB, _Mapping]] = ..., locality_lb_setting: _Optional[_Union[LocalityLoadBalancerSetting, _Mapping]] = ..., warmup_duration_secs: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., warmup: _Optional[_Union[WarmupConfiguration, _Mapping]] = ...) -> None: ...

class WarmupConfiguration(_message.Message):
    __slots__ = ("duration", "minimum_percent", "aggression")
    DURATION_FIELD_NUMBER: _ClassVar[int]
    MINIMUM_PERCENT_FIELD_NUMBER: _ClassVar[int]
    AGGRESSION_FIELD_NUMBER: _ClassVar[int]
    duration: _duration_pb2.Duration
    minimum_percent: _wrappers_pb2.DoubleValue
    aggression: _wrappers_pb2.DoubleValue
    def __init__(self, duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., minimum_percent: _Optional[_Union[_wrappers_pb2.DoubleValue, _Mapping]] = ..., aggression: _Optional[_Union[_wrappers_pb2.DoubleValue, _Mapping]] = ...) -> None: ...

class ConnectionPoolSettings(_message.Message):
    __slots__ = ("tcp", "http")
    class TCPSettings(_message.Message):
        __slots__ = ("max_connections", "connect_timeout", "tcp_keepalive", "max_connection_duration", "idle_timeout")
        class TcpKeepalive(_message.Message):
            __slots__ = ("probes", "time", "interval")
            PROBES_FIELD_NUMBER: _ClassVar[int]
            TIME_FIELD_NUMBER: _ClassVar[int]
            INTERVAL_FIELD_NUMBER: _ClassVar[int]
            probes: int
            time: _duration_pb2.Duration
            interval: _duration_pb2.Duration
            def __init__(self, probes: _Optional[int] = ..., time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...
        MAX_CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
        CONNECT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
        TCP_KEEPALIVE_FIELD_NUMBER: _ClassVar[int]
        MAX_CONNECTION_DURATION_FIELD_NUMBER: _ClassVar[int]
        IDLE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
        max_connections: int
        connect_timeout: _duration_pb2.Duration
        tcp_keepalive: ConnectionPoolSettings.TCPSettings.TcpKeepalive
        max_connection_duration: _duration_pb2.Duration
        idle_timeout: _duration_pb2.Duration
        def __init__(self, max_connections: _Optional[int] = ..., connect_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., tcp_keepalive: _Optional[_Union[ConnectionPoolSettings.TCPSettings.TcpKeepalive, _Mapping]] = ..., max_connection_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., idle_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...
    class HTTPSettings(_message.Message):
        __slots__ = ("http1_max_pending_requests", "http2_max_requests", "max_requests_per_connection", "max_retries", "idle_timeout", "h2_upgrade_policy", "use_client_protocol", "max_concurrent_streams")
        class H2UpgradePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            DEFAULT: _ClassVar[ConnectionPoolSettings.HTTPSettings.H2UpgradePolicy]
            DO_NOT_UPGRADE: _ClassVar[ConnectionPoolSettings.HTTPSettings.H2UpgradePolicy]
            UPGRADE: _ClassVar[ConnectionPoolSettings.HTTPSettings.H2UpgradePolicy]
        DEFAULT: ConnectionPoolSettings.HTTPSettings.H2UpgradePolicy
        DO_NOT_UPGRADE: ConnectionPoolSettings.HTTPSettings.H2UpgradePolicy
        UPGRADE: ConnectionPoolSettings.HTTPSettings.H2UpgradePolicy
        HTTP1_MAX_PENDING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
        HTTP2_MAX_REQUESTS_FIELD_NUMBER: _ClassVar[int]
        MAX_REQUESTS_PER_CONNECTION_FIELD_NUMBER: _ClassVar[int]
        MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
        IDLE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
        H2_UPGRADE_POLICY_FIELD_NUMBER: _ClassVar[int]
        USE_CLIENT_PROTOCOL_FIELD_NUMBER: _ClassVar[int]
        MAX_CONCURRENT_STREAMS_FIELD_NUMBER: _ClassVar[int]
        http1_max_pending_requests: int
        http2_max_requests: int
        max_requests_per_connection: int
        max_retries: int
        idle_timeout: _duration_pb2.Duration
        h2_upgrade_policy: ConnectionPoolSettings.HTTPSettings.H2UpgradePolicy
        use_client_protocol: bool
        max_concurrent_streams: int
        def __init__(self, http1_max_pending_requests: _Optional[int] = ..., http2_max_requests: _Optional[int] = ..., max_requests_per_connection: _Optional[int] = ..., max_retries: _Optional[int] = ..., idle_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., h2_upgrade_policy: _Optional[_Union[ConnectionPoolSettings.HTTPSettings.H2UpgradePolicy, str]] = ..., use_client_protocol: _Optional[bool] = ..., max_concurrent_streams: _Optional[int] = ...) -> None: ...
    TCP_FIELD_NUMBER: _ClassVar[int]
    HTTP_FIELD_NUMBER: _ClassVar[int]
    tcp: ConnectionPoolSettings.TCPSettings
    http: ConnectionPoolSettings.HTTPSettings
    def __init__(self, tcp: _Optional[_Union[ConnectionPoolSettings.TCPSettings, _Mapping]] = ..., http: _Optional[_Union[ConnectionPoolSettings.HTTPSettings, _Mapping]] = ...) -> None: ...

class OutlierDetection(_message.Message):
    __slots__ = ("consecutive_errors", "split_external_local_origin_errors", "consecutive_local_origin_failures", "consecutive_gateway_errors", "consecutive_5xx_errors", "interval", "base_ejection_time", "max_ejection_percent", "min_health_percent")
    CONSECUTIVE_ERRORS_FIELD_NUMBER: _ClassVar[int]
    SPLIT_EXTERNAL_LOCAL_ORIGIN_ERRORS_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_LOCAL_ORIGIN_FAILURES_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_GATEWAY_ERRORS_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_5XX_ERRORS_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    BASE_EJECTION_TIME_FIELD_NUMBER: _ClassVar[int]
    MAX_EJECTION_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MIN_HEALTH_PERCENT_FIELD_NUMBER: _ClassVar[int]
    consecutive_errors: int
    split_external_local_origin_errors: bool
    consecutive_local_origin_failures: _wrappers_pb2.UInt32Value
    consecutive_gateway_errors: _wrappers_pb2.UInt32Value
    consecutive_5xx_errors: _wrappers_pb2.UInt32Value
    interval: _duration_pb2.Duration
    base_ejection_time: _duration_pb2.Duration
    max_ejection_percent: int
    min_health_percent: int
    def __init__(self, consecutive_errors: _Optional[int] = ..., split_external_local_origin_errors: _Optional[bool] = ..., consecutive_local_origin_failures: _Optional[_Union[_wrappers_pb2.UInt32Value, _Mapping]] = ..., consecutive_gateway_errors: _Optional[_Union[_wrappers_pb2.UInt32Value, _Mapping]] = ..., consecutive_5xx_errors: _Optional[_Union[_wrappers_pb2.UInt32Value, _Mapping]] = ..., interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., base_ejection_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_ejection_percent: _Optional[int] = ..., min_health_percent: _Optional[int] = ...) -> None: ...

class ClientTLSSettings(_message.Message):
    __slots__ = ("mode", "client_certificate", "private_key", "ca_certificates", "credential_name", "subject_alt_names", "sni", "insecure_skip_verify", "ca_crl")
    class TLSmode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DISABLE: _ClassVar[ClientTLSSettings.TLSmode]
        SIMPLE: _ClassVar[ClientTLSSettings.TLSmode]
        MUTUAL: _ClassVar[ClientTLSSettings.TLSmode]
        ISTIO_MUTUAL: _ClassVar[ClientTLSSettings.TLSmode]
    DISABLE: ClientTLSSettings.TLSmode
    SIMPLE: ClientTLSSettings.TLSmode
    MUTUAL: ClientTLSSettings.TLSmode
    ISTIO_MUTUAL: ClientTLSSettings.TLSmode
    MODE_FIELD_NUMBER: _ClassVar[int]
    CLIENT_CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_KEY_FIELD_NUMBER: _ClassVar[int]
    CA_CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_NAME_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_ALT_NAMES_FIELD_NUMBER: _ClassVar[int]
    SNI_FIELD_NUMBER: _ClassVar[int]
    INSECURE_SKIP_VERIFY_FIELD_NUMBER: _ClassVar[int]
    CA_CRL_FIELD_NUMBER: _ClassVar[int]
    mode: ClientTLSSettings.TLSmode
    client_certificate: str
    private_key: str
    ca_certificates: str
    credential_name: str
    subject_alt_names: _containers.RepeatedScalarFieldContainer[str]
    sni: str
    insecure_skip_verify: _wrappers_pb2.BoolValue
    ca_crl: str
    def __init__(self, mode: _Optional[_Union[ClientTLSSettings.TLSmode, str]] = ..., client_certificate: _Optional[str] = ..., private_key: _Optional[str] = ..., ca_certificates: _Optional[str] = ..., credential_name: _Optional[str] = ..., subject_alt_names: _Optional[_Iterable[str]] = ..., sni: _Optional[str] = ..., insecure_skip_verify: _Optional[_Union[_wrappers_pb2.BoolValue, _Mapping]] = ..., ca_crl: _Optional[str] = ...) -> None: ...

class LocalityLoadBalancerSetting(_message.Message):
    __slots__ = ("distribute", "failover", "failover_priority", "enabled")
    class Distribute(_message.Message):
        __slots__ = ("to",)
        class ToEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: int
            def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
        FROM_FIELD_NUMBER: _ClassVar[int]
        TO_FIELD_NUMBER: _ClassVar[int]
        to: _containers.ScalarMap[str, int]
        def __init__(self, to: _Optional[_Mapping[str, int]] = ..., **kwargs) -> None: ...
    class Failover(_message.Message):
        __slots__ = ("to",)
        FROM_FIELD_NUMBER: _ClassVar[int]
        TO_FIELD_NUMBER: _ClassVar[int]
        to: str
        def __init__(self, to: _Optional[str] = ..., **kwargs) -> None: ...
    DISTRIBUTE_FIELD_NUMBER: _ClassVar[int]
    FAILOVER_FIELD_NUMBER: _ClassVar[int]
    FAILOVER_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    distribute: _containers.RepeatedCompositeFieldContainer[LocalityLoadBalancerSetting.Distribute]
    failover: _containers.RepeatedCompositeFieldContainer[LocalityLoadBalancerSetting.Failover]
    failover_priority: _containers.RepeatedScalarFieldContainer[str]
    enabled: _wrappers_pb2.BoolValue
    def __init__(self, distribute: _Optional[_Iterable[_Union[LocalityLoadBalancerSetting.Distribute, _Mapping]]] = ..., failover: _Optional[_Iterable[_Union[LocalityLoadBalancerSetting.Failover, _Mapping]]] = ..., failover_priority: _Optional[_Iterable[str]] = ..., enabled: _Optional[_Union[_wrappers_pb2.BoolValue, _Mapping]] = ...) -> None: ...

class VirtualService(_message.Message):
    __slots__ = ("hosts", "gateways", "http", "tls", "tcp", "export_to")
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    GATEWAYS_FIELD_NUMBER: _ClassVar[int]
    HTTP_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    TCP_FIELD_NUMBER: _ClassVar[int]
    EXPORT_TO_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedScalarFieldContainer[str]
    gateways: _containers.RepeatedScalarFieldContainer[str]
    http: _containers.RepeatedCompositeFieldContainer[HTTPRoute]
    tls: _containers.RepeatedCompositeFieldContainer[TLSRoute]
    tcp: _containers.RepeatedCompositeFieldContainer[TCPRoute]
    export_to: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, hosts: _Optional[_Iterable[str]] = ..., gateways: _Optional[_Iterable[str]] = ..., http: _Optional[_Iterable[_Union[HTTPRoute, _Mapping]]] = ..., tls: _Optional[_Iterable[_Union[TLSRoute, _Mapping]]] = ..., tcp: _Optional[_Iterable[_Union[TCPRoute, _Mapping]]] = ..., export_to: _Optional[_Iterable[str]] = ...) -> None: ...

class Destination(_message.Message):
    __slots__ = ("host", "subset", "port")
    HOST_FIELD_NUMBER: _ClassVar[int]
    SUBSET_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    host: str
    subset: str
    port: PortSelector
    def __init__(self, host: _Optional[str] = ..., subset: _Optional[str] = ..., port: _Optional[_Union[PortSelector, _Mapping]] = ...) -> None: ...

class HTTPRoute(_message.Message):
    __slots__ = ("name", "match", "route", "redirect", "direct_response", "delegate", "rewrite", "timeout", "retries", "fault", "mirror", "mirrors", "mirror_percent", "mirror_percentage", "cors_policy", "headers")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    REDIRECT_FIELD_NUMBER: _ClassVar[int]
    DIRECT_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    DELEGATE_FIELD_NUMBER: _ClassVar[int]
    REWRITE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    FAULT_FIELD_NUMBER: _ClassVar[int]
    MIRROR_FIELD_NUMBER: _ClassVar[int]
    MIRRORS_FIELD_NUMBER: _ClassVar[int]
    MIRROR_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MIRROR_PERCENTAGE_FIELD_NUMBER: _ClassVar[int]
    CORS_POLICY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    match: _containers.RepeatedCompositeFieldContainer[HTTPMatchRequest]
    route: _containers.RepeatedCompositeFieldContainer[HTTPRouteDestination]
    redirect: HTTPRedirect
    direct_response: HTTPDirectResponse
    delegate: Delegate
    rewrite: HTTPRewrite
    timeout: _duration_pb2.Duration
    retries: HTTPRetry
    fault: HTTPFaultInjection
    mirror: Destination
    mirrors: _containers.RepeatedCompositeFieldContainer[HTTPMirrorPolicy]
    mirror_percent: _wrappers_pb2.UInt32Value
    mirror_percentage: Percent
    cors_policy: CorsPolicy
    headers: Headers
    def __init__(self, name: _Optional[str] = ..., match: _Optional[_Iterable[_Union[HTTPMatchRequest, _Mapping]]] = ..., route: _Optional[_Iterable[_Union[HTTPRouteDestination, _Mapping]]] = ..., redirect: _Optional[_Union[HTTPRedirect, _Mapping]] = ..., direct_response: _Optional[_Union[HTTPDirectResponse, _Mapping]] = ..., delegate: _Optional[_Union[Delegate, _Mapping]] = ..., rewrite: _Optional[_Union[HTTPRewrite, _Mapping]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., retries: _Optional[_Union[HTTPRetry, _Mapping]] = ..., fault: _Optional[_Union[HTTPFaultInjection, _Mapping]] = ..., mirror: _Optional[_Union[Destination, _Mapping]] = ..., mirrors: _Optional[_Iterable[_Union[HTTPMirrorPolicy, _Mapping]]] = ..., mirror_percent: _Optional[_Union[_wrappers_pb2.UInt32Value, _Mapping]] = ..., mirror_percentage: _Optional[_Union[Percent, _Mapping]] = ..., cors_policy: _Optional[_Union[CorsPolicy, _Mapping]] = ..., headers: _Optional[_Union[Headers, _Mapping]] = ...) -> None: ...

class Delegate(_message.Message):
    __slots__ = ("name", "namespace")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    name: str
    namespace: str
    def __init__(self, name: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class Headers(_message.Message):
    __slots__ = ("request", "response")
    class HeaderOperations(_message.Message):
        __slots__ = ("set", "add", "remove")
        class SetEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: str
            def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
        class AddEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: str
            def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
        SET_FIELD_NUMBER: _ClassVar[int]
        ADD_FIELD_NUMBER: _ClassVar[int]
        REMOVE_FIELD_NUMBER: _ClassVar[int]
        set: _containers.ScalarMap[str, str]
        add: _containers.ScalarMap[str, str]
        remove: _containers.RepeatedScalarFieldContainer[str]
        def __init__(self, set: _Optional[_Mapping[str, str]] = ..., add: _Optional[_Mapping[str, str]] = ..., remove: _Optional[_Iterable[str]] = ...) -> None: ...
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    request: Headers.HeaderOperations
    response: Headers.HeaderOperations
    def __init__(self, request: _Optional[_Union[Headers.HeaderOperations, _Mapping]] = ..., response: _Optional[_Union[Headers.HeaderOperations, _Mapping]] = ...) -> None: ...

class TLSRoute(_message.Message):
    __slots__ = ("match", "route")
    MATCH_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    match: _containers.RepeatedCompositeFieldContainer[TLSMatchAttributes]
    route: _containers.RepeatedCompositeFieldContainer[RouteDestination]
    def __init__(self, match: _Optional[_Iterable[_Union[TLSMatchAttributes, _Mapping]]] = ..., route: _Optional[_Iterable[_Union[RouteDestination, _Mapping]]] = ...) -> None: ...

class TCPRoute(_message.Message):
    __slots__ = ("match", "route")
    MATCH_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    match: _containers.RepeatedCompositeFieldContainer[L4MatchAttributes]
    route: _containers.RepeatedCompositeFieldContainer[RouteDestination]
    def __init__(self, match: _Optional[_Iterable[_Union[L4MatchAttributes, _Mapping]]] = ..., route: _Optional[_Iterable[_Union[RouteDestination, _Mapping]]] = ...) -> None: ...

class HTTPMatchRequest(_message.Message):
    __slots__ = ("name", "uri", "scheme", "method", "authority", "headers", "port", "source_labels", "gateways", "query_params", "ignore_uri_case", "without_headers", "source_namespace", "stat_prefix")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: StringMatch
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[StringMatch, _Mapping]] = ...) -> None: ...
    class SourceLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class QueryParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: StringMatch
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[StringMatch, _Mapping]] = ...) -> None: ...
    class WithoutHeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: StringMatch
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[StringMatch, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    SCHEME_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    AUTHORITY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LABELS_FIELD_NUMBER: _ClassVar[int]
    GATEWAYS_FIELD_NUMBER: _ClassVar[int]
    QUERY_PARAMS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_URI_CASE_FIELD_NUMBER: _ClassVar[int]
    WITHOUT_HEADERS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    STAT_PREFIX_FIELD_NUMBER: _ClassVar[int]
    name: str
    uri: StringMatch
    scheme: StringMatch
    method: StringMatch
    authority: StringMatch
    headers: _containers.MessageMap[str, StringMatch]
    port: int
    source_labels: _containers.ScalarMap[str, str]
    gateways: _containers.RepeatedScalarFieldContainer[str]
    query_params: _containers.MessageMap[str, StringMatch]
    ignore_uri_case: bool
    without_headers: _containers.MessageMap[str, StringMatch]
    source_namespace: str
    stat_prefix: str
    def __init__(self, name: _Optional[str] = ..., uri: _Optional[_Union[StringMatch, _Mapping]] = ..., scheme: _Optional[_Union[StringMatch, _Mapping]] = ..., method: _Optional[_Union[StringMatch, _Mapping]] = ..., authority: _Optional[_Union[StringMatch, _Mapping]] = ..., headers: _Optional[_Mapping[str, StringMatch]] = ..., port: _Optional[int] = ..., source_labels: _Optional[_Mapping[str, str]] = ..., gateways: _Optional[_Iterable[str]] = ..., query_params: _Optional[_Mapping[str, StringMatch]] = ..., ignore_uri_case: _Optional[bool] = ..., without_headers: _Optional[_Mapping[str, StringMatch]] = ..., source_namespace: _Optional[str] = ..., stat_prefix: _Optional[str] = ...) -> None: ...

class HTTPRouteDestination(_message.Message):
    __slots__ = ("destination", "weight", "headers")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    destination: Destination
    weight: int
    headers: Headers
    def __init__(self, destination: _Optional[_Union[Destination, _Mapping]] = ..., weight: _Optional[int] = ..., headers: _Optional[_Union[Headers, _Mapping]] = ...) -> None: ...

class RouteDestination(_message.Message):
    __slots__ = ("destination", "weight")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    destination: Destination
    weight: int
    def __init__(self, destination: _Optional[_Union[Destination, _Mapping]] = ..., weight: _Optional[int] = ...) -> None: ...

class L4MatchAttributes(_message.Message):
    __slots__ = ("destination_subnets", "port", "source_subnet", "source_labels", "gateways", "source_namespace")
    class SourceLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DESTINATION_SUBNETS_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SUBNET_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LABELS_FIELD_NUMBER: _ClassVar[int]
    GATEWAYS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    destination_subnets: _containers.RepeatedScalarFieldContainer[str]
    port: int
    source_subnet: str
    source_labels: _containers.ScalarMap[str, str]
    gateways: _containers.RepeatedScalarFieldContainer[str]
    source_namespace: str
    def __init__(self, destination_subnets: _Optional[_Iterable[str]] = ..., port: _Optional[int] = ..., source_subnet: _Optional[str] = ..., source_labels: _Optional[_Mapping[str, str]] = ..., gateways: _Optional[_Iterable[str]] = ..., source_namespace: _Optional[str] = ...) -> None: ...

class TLSMatchAttributes(_message.Message):
    __slots__ = ("sni_hosts", "destination_subnets", "port", "source_labels", "gateways", "source_namespace")
    class SourceLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SNI_HOSTS_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_SUBNETS_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LABELS_FIELD_NUMBER: _ClassVar[int]
    GATEWAYS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    sni_hosts: _containers.RepeatedScalarFieldContainer[str]
    destination_subnets: _containers.RepeatedScalarFieldContainer[str]
    port: int
    source_labels: _containers.ScalarMap[str, str]
    gateways: _containers.RepeatedScalarFieldContainer[str]
    source_namespace: str
    def __init__(self, sni_hosts: _Optional[_Iterable[str]] = ..., destination_subnets: _Optional[_Iterable[str]] = ..., port: _Optional[int] = ..., source_labels: _Optional[_Mapping[str, str]] = ..., gateways: _Optional[_Iterable[str]] = ..., source_namespace: _Optional[str] = ...) -> None: ...

class HTTPRedirect(_message.Message):
    __slots__ = ("uri", "authority", "port", "derive_port", "scheme", "redirect_code")
    class RedirectPortSelection(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FROM_PROTOCOL_DEFAULT: _ClassVar[HTTPRedirect.RedirectPortSelection]
        FROM_REQUEST_PORT: _ClassVar[HTTPRedirect.RedirectPortSelection]
    FROM_PROTOCOL_DEFAULT: HTTPRedirect.RedirectPortSelection
    FROM_REQUEST_PORT: HTTPRedirect.RedirectPortSelection
    URI_FIELD_NUMBER: _ClassVar[int]
    AUTHORITY_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    DERIVE_PORT_FIELD_NUMBER: _ClassVar[int]
    SCHEME_FIELD_NUMBER: _ClassVar[int]
    REDIRECT_CODE_FIELD_NUMBER: _ClassVar[int]
    uri: str
    authority: str
    port: int
    derive_port: HTTPRedirect.RedirectPortSelection
    scheme: str
    redirect_code: int
    def __init__(self, uri: _Optional[str] = ..., authority: _Optional[str] = ..., port: _Optional[int] = ..., derive_port: _Optional[_Union[HTTPRedirect.RedirectPortSelection, str]] = ..., scheme: _Optional[str] = ..., redirect_code: _Optional[int] = ...) -> None: ...

class HTTPDirectResponse(_message.Message):
    __slots__ = ("status", "body")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    status: int
    body: HTTPBody
    def __init__(self, status: _Optional[int] = ..., body: _Optional[_Union[HTTPBody, _Mapping]] = ...) -> None: ...

class HTTPBody(_message.Message):
    __slots__ = ("string", "bytes")
    STRING_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    string: str
    bytes: bytes
    def __init__(self, string: _Optional[str] = ..., bytes: _Optional[bytes] = ...) -> None: ...

class HTTPRewrite(_message.Message):
    __slots__ = ("uri", "authority", "uri_regex_rewrite")
    URI_FIELD_NUMBER: _ClassVar[int]
    AUTHORITY_FIELD_NUMBER: _ClassVar[int]
    URI_REGEX_REWRITE_FIELD_NUMBER: _ClassVar[int]
    uri: str
    authority: str
    uri_regex_rewrite: RegexRewrite
    def __init__(self, uri: _Optional[str] = ..., authority: _Optional[str] = ..., uri_regex_rewrite: _Optional[_Union[RegexRewrite, _Mapping]] = ...) -> None: ...

class RegexRewrite(_message.Message):
    __slots__ = ("match", "rewrite")
    MATCH_FIELD_NUMBER: _ClassVar[int]
    REWRITE_FIELD_NUMBER: _ClassVar[int]
    match: str
    rewrite: str
    def __init__(self, match: _Optional[str] = ..., rewrite: _Optional[str] = ...) -> None: ...

class StringMatch(_message.Message):
    __slots__ = ("exact", "prefix", "regex")
    EXACT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    REGEX_FIELD_NUMBER: _ClassVar[int]
    exact: str
    prefix: str
    regex: str
    def __init__(self, exact: _Optional[str] = ..., prefix: _Optional[str] = ..., regex: _Optional[str] = ...) -> None: ...

class HTTPRetry(_message.Message):
    __slots__ = ("attempts", "per_try_timeout", "retry_on", "retry_remote_localities", "retry_ignore_previous_hosts", "backoff")
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    PER_TRY_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    RETRY_ON_FIELD_NUMBER: _ClassVar[int]
    RETRY_REMOTE_LOCALITIES_FIELD_NUMBER: _ClassVar[int]
    RETRY_IGNORE_PREVIOUS_HOSTS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    attempts: int
    per_try_timeout: _duration_pb2.Duration
    retry_on: str
    retry_remote_localities: _wrappers_pb2.BoolValue
    retry_ignore_previous_hosts: _wrappers_pb2.BoolValue
    backoff: _duration_pb2.Duration
    def __init__(self, attempts: _Optional[int] = ..., per_try_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., retry_on: _Optional[str] = ..., retry_remote_localities: _Optional[_Union[_wrappers_pb2.BoolValue, _Mapping]] = ..., retry_ignore_previous_hosts: _Optional[_Union[_wrappers_pb2.BoolValue, _Mapping]] = ..., backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CorsPolicy(_message.Message):
    __slots__ = ("allow_origin", "allow_origins", "allow_methods", "allow_headers", "expose_headers", "max_age", "allow_credentials", "unmatched_preflights")
    class UnmatchedPreflights(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNSPECIFIED: _ClassVar[CorsPolicy.UnmatchedPreflights]
        FORWARD: _ClassVar[CorsPolicy.UnmatchedPreflights]
        IGNORE: _ClassVar[CorsPolicy.UnmatchedPreflights]
    UNSPECIFIED: CorsPolicy.UnmatchedPreflights
    FORWARD: CorsPolicy.UnmatchedPreflights
    IGNORE: CorsPolicy.UnmatchedPreflights
    ALLOW_ORIGIN_FIELD_NUMBER: _ClassVar[int]
    ALLOW_ORIGINS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_METHODS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_HEADERS_FIELD_NUMBER: _ClassVar[int]
    EXPOSE_HEADERS_FIELD_NUMBER: _ClassVar[int]
    MAX_AGE_FIELD_NUMBER: _ClassVar[int]
    ALLOW_CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
    UNMATCHED_PREFLIGHTS_FIELD_NUMBER: _ClassVar[int]
    allow_origin: _containers.RepeatedScalarFieldContainer[str]
    allow_origins: _containers.RepeatedCompositeFieldContainer[StringMatch]
    allow_methods: _containers.RepeatedScalarFieldContainer[str]
    allow_headers: _containers.RepeatedScalarFieldContainer[str]
    expose_headers: _containers.RepeatedScalarFieldContainer[str]
    max_age: _duration_pb2.Duration
    allow_credentials: _wrappers_pb2.BoolValue
    unmatched_preflights: CorsPolicy.UnmatchedPreflights
    def __init__(self, allow_origin: _Optional[_Iterable[str]] = ..., allow_origins: _Optional[_Iterable[_Union[StringMatch, _Mapping]]] = ..., allow_methods: _Optional[_Iterable[str]] = ..., allow_headers: _Optional[_Iterable[str]] = ..., expose_headers: _Optional[_Iterable[str]] = ..., max_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., allow_credentials: _Optional[_Union[_wrappers_pb2.BoolValue, _Mapping]] = ..., unmatched_preflights: _Optional[_Union[CorsPolicy.UnmatchedPreflights, str]] = ...) -> None: ...

class HTTPFaultInjection(_message.Message):
    __slots__ = ("delay", "abort")
    class Delay(_message.Message):
        __slots__ = ("percent", "fixed_delay", "exponential_delay", "percentage")
        PERCENT_FIELD_NUMBER: _ClassVar[int]
        FIXED_DELAY_FIELD_NUMBER: _ClassVar[int]
        EXPONENTIAL_DELAY_FIELD_NUMBER: _ClassVar[int]
        PERCENTAGE_FIELD_NUMBER: _ClassVar[int]
        percent: int
        fixed_delay: _duration_pb2.Duration
        exponential_delay: _duration_pb2.Duration
        percentage: Percent
        def __init__(self, percent: _Optional[int] = ..., fixed_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., exponential_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., percentage: _Optional[_Union[Percent, _Mapping]] = ...) -> None: ...
    class Abort(_message.Message):
        __slots__ = ("http_status", "grpc_status", "http2_error", "percentage")
        HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
        GRPC_STATUS_FIELD_NUMBER: _ClassVar[int]
        HTTP2_ERROR_FIELD_NUMBER: _ClassVar[int]
        PERCENTAGE_FIELD_NUMBER: _ClassVar[int]
        http_status: int
        grpc_status: str
        http2_error: str
        percentage: Percent
        def __init__(self, http_status: _Optional[int] = ..., grpc_status: _Optional[str] = ..., http2_error: _Optional[str] = ..., percentage: _Optional[_Union[Percent, _Mapping]] = ...) -> None: ...
    DELAY_FIELD_NUMBER: _ClassVar[int]
    ABORT_FIELD_NUMBER: _ClassVar[int]
    delay: HTTPFaultInjection.Delay
    abort: HTTPFaultInjection.Abort
    def __init__(self, delay: _Optional[_Union[HTTPFaultInjection.Delay, _Mapping]] = ..., abort: _Optional[_Union[HTTPFaultInjection.Abort, _Mapping]] = ...) -> None: ...

class HTTPMirrorPolicy(_message.Message):
    __slots__ = ("destination", "percentage")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    PERCENTAGE_FIELD_NUMBER: _ClassVar[int]
    destination: Destination
    percentage: Percent
    def __init__(self, destination: _Optional[_Union[Destination, _Mapping]] = ..., percentage: _Optional[_Union[Percent, _Mapping]] = ...) -> None: ...

class PortSelector(_message.Message):
    __slots__ = ("number",)
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    number: int
    def __init__(self, number: _Optional[int] = ...) -> None: ...

class Percent(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: float
    def __init__(self, value: _Optional[float] = ...) -> None: ...

class Gateway(_message.Message):
    __slots__ = ("servers", "selector")
    class SelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    servers: _containers.RepeatedCompositeFieldContainer[Server]
    selector: _containers.ScalarMap[str, str]
    def __init__(self, servers: _Optional[_Iterable[_Union[Server, _Mapping]]] = ..., selector: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Server(_message.Message):
    __slots__ = ("port", "bind", "hosts", "tls", "default_endpoint", "name")
    PORT_FIELD_NUMBER: _ClassVar[int]
    BIND_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    port: Port
    bind: str
    hosts: _containers.RepeatedScalarFieldContainer[str]
    tls: ServerTLSSettings
    default_endpoint: str
    name: str
    def __init__(self, port: _Optional[_Union[Port, _Mapping]] = ..., bind: _Optional[str] = ..., hosts: _Optional[_Iterable[str]] = ..., tls: _Optional[_Union[ServerTLSSettings, _Mapping]] = ..., default_endpoint: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class Port(_message.Message):
    __slots__ = ("number", "protocol", "name", "target_port")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_PORT_FIELD_NUMBER: _ClassVar[int]
    number: int
    protocol: str
    name: str
    target_port: int
    def __init__(self, number: _Optional[int] = ..., protocol: _Optional[str] = ..., name: _Optional[str] = ..., target_port: _Optional[int] = ...) -> None: ...

class ServerTLSSettings(_message.Message):
    __slots__ = ("https_redirect", "mode", "server_certificate", "private_key", "ca_certificates", "ca_crl", "credential_name", "credential_names", "tls_certificates", "ca_cert_credential_name", "subject_alt_names", "verify_certificate_spki", "verify_certificate_hash", "min_protocol_version", "max_protocol_version", "cipher_suites")
    class TLSmode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PASSTHROUGH: _ClassVar[ServerTLSSettings.TLSmode]
        SIMPLE: _ClassVar[ServerTLSSettings.TLSmode]
        MUTUAL: _ClassVar[ServerTLSSettings.TLSmode]
        AUTO_PASSTHROUGH: _ClassVar[ServerTLSSettings.TLSmode]
        ISTIO_MUTUAL: _ClassVar[ServerTLSSettings.TLSmode]
        OPTIONAL_MUTUAL: _ClassVar[ServerTLSSettings.TLSmode]
    PASSTHROUGH: ServerTLSSettings.TLSmode
    SIMPLE: ServerTLSSettings.TLSmode
    MUTUAL: ServerTLSSettings.TLSmode
    AUTO_PASSTHROUGH: ServerTLSSettings.TLSmode
    ISTIO_MUTUAL: ServerTLSSettings.TLSmode
    OPTIONAL_MUTUAL: ServerTLSSettings.TLSmode
    class TLSProtocol(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TLS_AUTO: _ClassVar[ServerTLSSettings.TLSProtocol]
        TLSV1_0: _ClassVar[ServerTLSSettings.TLSProtocol]
        TLSV1_1: _ClassVar[ServerTLSSettings.TLSProtocol]
        TLSV1_2: _ClassVar[ServerTLSSettings.TLSProtocol]
        TLSV1_3: _ClassVar[ServerTLSSettings.TLSProtocol]
    TLS_AUTO: ServerTLSSettings.TLSProtocol
    TLSV1_0: ServerTLSSettings.TLSProtocol
    TLSV1_1: ServerTLSSettings.TLSProtocol
    TLSV1_2: ServerTLSSettings.TLSProtocol
    TLSV1_3: ServerTLSSettings.TLSProtocol
    class TLSCertificate(_message.Message):
        __slots__ = ("server_certificate", "private_key", "ca_certificates")
        SERVER_CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
        PRIVATE_KEY_FIELD_NUMBER: _ClassVar[int]
        CA_CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
        server_certificate: str
        private_key: str
        ca_certificates: str
        def __init__(self, server_certificate: _Optional[str] = ..., private_key: _Optional[str] = ..., ca_certificates: _Optional[str] = ...) -> None: ...
    HTTPS_REDIRECT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SERVER_CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_KEY_FIELD_NUMBER: _ClassVar[int]
    CA_CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
    CA_CRL_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_NAME_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_NAMES_FIELD_NUMBER: _ClassVar[int]
    TLS_CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
    CA_CERT_CREDENTIAL_NAME_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_ALT_NAMES_FIELD_NUMBER: _ClassVar[int]
    VERIFY_CERTIFICATE_SPKI_FIELD_NUMBER: _ClassVar[int]
    VERIFY_CERTIFICATE_HASH_FIELD_NUMBER: _ClassVar[int]
    MIN_PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CIPHER_SUITES_FIELD_NUMBER: _ClassVar[int]
    https_redirect: bool
    mode: ServerTLSSettings.TLSmode
    server_certificate: str
    private_key: str
    ca_certificates: str
    ca_crl: str
    credential_name: str
    credential_names: _containers.RepeatedScalarFieldContainer[str]
    tls_certificates: _containers.RepeatedCompositeFieldContainer[ServerTLSSettings.TLSCertificate]
    ca_cert_credential_name: str
    subject_alt_names: _containers.RepeatedScalarFieldContainer[str]
    verify_certificate_spki: _containers.RepeatedScalarFieldContainer[str]
    verify_certificate_hash: _containers.RepeatedScalarFieldContainer[str]
    min_protocol_version: ServerTLSSettings.TLSProtocol
    max_protocol_version: ServerTLSSettings.TLSProtocol
    cipher_suites: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, https_redirect: _Optional[bool] = ..., mode: _Optional[_Union[ServerTLSSettings.TLSmode, str]] = ..., server_certificate: _Optional[str] = ..., private_key: _Optional[str] = ..., ca_certificates: _Optional[str] = ..., ca_crl: _Optional[str] = ..., credential_name: _Optional[str] = ..., credential_names: _Optional[_Iterable[str]] = ..., tls_certificates: _Optional[_Iterable[_Union[ServerTLSSettings.TLSCertificate, _Mapping]]] = ..., ca_cert_credential_name: _Optional[str] = ..., subject_alt_names: _Optional[_Iterable[str]] = ..., verify_certificate_spki: _Optional[_Iterable[str]] = ..., verify_certificate_hash: _Optional[_Iterable[str]] = ..., min_protocol_version: _Optional[_Union[ServerTLSSettings.TLSProtocol, str]] = ..., max_protocol_version: _Optional[_Union[ServerTLSSettings.TLSProtocol, str]] = ..., cipher_suites: _Optional[_Iterable[str]] = ...) -> None: ...

class ServiceEntry(_message.Message):
    __slots__ = ("hosts", "addresses", "ports", "location", "resolution", "endpoints", "workload_selector", "export_to", "subject_alt_names")
    class Location(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MESH_EXTERNAL: _ClassVar[ServiceEntry.Location]
        MESH_INTERNAL: _ClassVar[ServiceEntry.Location]
    MESH_EXTERNAL: ServiceEntry.Location
    MESH_INTERNAL: ServiceEntry.Location
    class Resolution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        NONE: _ClassVar[ServiceEntry.Resolution]
        STATIC: _ClassVar[ServiceEntry.Resolution]
        DNS: _ClassVar[ServiceEntry.Resolution]
        DNS_ROUND_ROBIN: _ClassVar[ServiceEntry.Resolution]
        DYNAMIC_DNS: _ClassVar[ServiceEntry.Resolution]
    NONE: ServiceEntry.Resolution
    STATIC: ServiceEntry.Resolution
    DNS: ServiceEntry.Resolution
    DNS_ROUND_ROBIN: ServiceEntry.Resolution
    DYNAMIC_DNS: ServiceEntry.Resolution
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    EXPORT_TO_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_ALT_NAMES_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedScalarFieldContainer[str]
    addresses: _containers.RepeatedScalarFieldContainer[str]
    ports: _containers.RepeatedCompositeFieldContainer[ServicePort]
    location: ServiceEntry.Location
    resolution: ServiceEntry.Resolution
    endpoints: _containers.RepeatedCompositeFieldContainer[WorkloadEntry]
    workload_selector: WorkloadSelector
    export_to: _containers.RepeatedScalarFieldContainer[str]
    subject_alt_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, hosts: _Optional[_Iterable[str]] = ..., addresses: _Optional[_Iterable[str]] = ..., ports: _Optional[_Iterable[_Union[ServicePort, _Mapping]]] = ..., location: _Optional[_Union[ServiceEntry.Location, str]] = ..., resolution: _Optional[_Union[ServiceEntry.Resolution, str]] = ..., endpoints: _Optional[_Iterable[_Union[WorkloadEntry, _Mapping]]] = ..., workload_selector: _Optional[_Union[WorkloadSelector, _Mapping]] = ..., export_to: _Optional[_Iterable[str]] = ..., subject_alt_names: _Optional[_Iterable[str]] = ...) -> None: ...

class ServicePort(_message.Message):
    __slots__ = ("number", "protocol", "name", "target_port")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_PORT_FIELD_NUMBER: _ClassVar[int]
    number: int
    protocol: str
    name: str
    target_port: int
    def __init__(self, number: _Optional[int] = ..., protocol: _Optional[str] = ..., name: _Optional[str] = ..., target_port: _Optional[int] = ...) -> None: ...

class WorkloadEntry(_message.Message):
    __slots__ = ("address", "ports", "labels", "network", "locality", "weight", "service_account")
    class PortsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    LOCALITY_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    SERVICE_ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    address: str
    ports: _containers.ScalarMap[str, int]
    labels: _containers.ScalarMap[str, str]
    network: str
    locality: str
    weight: int
    service_account: str
    def __init__(self, address: _Optional[str] = ..., ports: _Optional[_Mapping[str, int]] = ..., labels: _Optional[_Mapping[str, str]] = ..., network: _Optional[str] = ..., locality: _Optional[str] = ..., weight: _Optional[int] = ..., service_account: _Optional[str] = ...) -> None: ...

class Sidecar(_message.Message):
    __slots__ = ("workload_selector", "ingress", "egress", "inbound_connection_pool", "outbound_traffic_policy")
    WORKLOAD_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    INGRESS_FIELD_NUMBER: _ClassVar[int]
    EGRESS_FIELD_NUMBER: _ClassVar[int]
    INBOUND_CONNECTION_POOL_FIELD_NUMBER: _ClassVar[int]
    OUTBOUND_TRAFFIC_POLICY_FIELD_NUMBER: _ClassVar[int]
    workload_selector: WorkloadSelector
    ingress: _containers.RepeatedCompositeFieldContainer[IstioIngressListener]
    egress: _containers.RepeatedCompositeFieldContainer[IstioEgressListener]
    inbound_connection_pool: ConnectionPoolSettings
    outbound_traffic_policy: OutboundTrafficPolicy
    def __init__(self, workload_selector: _Optional[_Union[WorkloadSelector, _Mapping]] = ..., ingress: _Optional[_Iterable[_Union[IstioIngressListener, _Mapping]]] = ..., egress: _Optional[_Iterable[_Union[IstioEgressListener, _Mapping]]] = ..., inbound_connection_pool: _Optional[_Union[ConnectionPoolSettings, _Mapping]] = ..., outbound_traffic_policy: _Optional[_Union[OutboundTrafficPolicy, _Mapping]] = ...) -> None: ...

class IstioIngressListener(_message.Message):
    __slots__ = ("port", "bind", "capture_mode", "default_endpoint", "tls", "connection_pool")
    PORT_FIELD_NUMBER: _ClassVar[int]
    BIND_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_MODE_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    CONNECTION_POOL_FIELD_NUMBER: _ClassVar[int]
    port: SidecarPort
    bind: str
    capture_mode: CaptureMode
    default_endpoint: str
    tls: ServerTLSSettings
    connection_pool: ConnectionPoolSettings
    def __init__(self, port: _Optional[_Union[SidecarPort, _Mapping]] = ..., bind: _Optional[str] = ..., capture_mode: _Optional[_Union[CaptureMode, str]] = ..., default_endpoint: _Optional[str] = ..., tls: _Optional[_Union[ServerTLSSettings, _Mapping]] = ..., connection_pool: _Optional[_Union[ConnectionPoolSettings, _Mapping]] = ...) -> None: ...

class IstioEgressListener(_message.Message):
    __slots__ = ("port", "bind", "capture_mode", "hosts")
    PORT_FIELD_NUMBER: _ClassVar[int]
    BIND_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_MODE_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    port: SidecarPort
    bind: str
    capture_mode: CaptureMode
    hosts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, port: _Optional[_Union[SidecarPort, _Mapping]] = ..., bind: _Optional[str] = ..., capture_mode: _Optional[_Union[CaptureMode, str]] = ..., hosts: _Optional[_Iterable[str]] = ...) -> None: ...

class SidecarPort(_message.Message):
    __slots__ = ("number", "protocol", "name", "target_port")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_PORT_FIELD_NUMBER: _ClassVar[int]
    number: int
    protocol: str
    name: str
    target_port: int
    def __init__(self, number: _Optional[int] = ..., protocol: _Optional[str] = ..., name: _Optional[str] = ..., target_port: _Optional[int] = ...) -> None: ...

class OutboundTrafficPolicy(_message.Message):
    __slots__ = ("mode", "egress_proxy")
    class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        REGISTRY_ONLY: _ClassVar[OutboundTrafficPolicy.Mode]
        ALLOW_ANY: _ClassVar[OutboundTrafficPolicy.Mode]
    REGISTRY_ONLY: OutboundTrafficPolicy.Mode
    ALLOW_ANY: OutboundTrafficPolicy.Mode
    MODE_FIELD_NUMBER: _ClassVar[int]
    EGRESS_PROXY_FIELD_NUMBER: _ClassVar[int]
    mode: OutboundTrafficPolicy.Mode
    egress_proxy: Destination
    def __init__(self, mode: _Optional[_Union[OutboundTrafficPolicy.Mode, str]] = ..., egress_proxy: _Optional[_Union[Destination, _Mapping]] = ...) -> None: ...
