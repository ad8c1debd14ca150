"""Envoy access logs as istiod writes them (pilot/pkg/networking/core/accesslog.go,
pilot/pkg/model/telemetry.go AccessLogging, telemetry_logging.go): on every HTTP connection
manager and tcp_proxy, and for the connections no filter chain takes (response flag NR) on the
virtual, inbound and gateway listeners (not a sidecar's outbound ones) unless
``disableEnvoyListenerLog``.

What logs is the ``LogSelection`` of the listener's class (app/model/telemetry.py: the
Telemetry resources that apply, else ``defaultProviders.accessLogging``), resolved against the
mesh config and the services (``resolve_logs``): each provider it names that the mesh config
defines (extensionProviders, names matched in any case) and that logs: a file
(envoyFileAccessLog), or an access log service whose service is found (envoyHttpAls,
envoyTcpAls, envoyOtelAls; istiod's LookupCluster). They log sorted by name, but the disabled
ones; a provider's filter expression becomes a CEL extension filter (after NR on a listener's
log). When none is found, ``accessLogFile`` with ``accessLogEncoding`` and ``accessLogFormat``
(FileAccessLogFromMeshConfig), as istiod falls back when AccessLogging gives no config."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.core.v3 import base_pb2, config_source_pb2, substitution_format_string_pb2
from envoy.extensions.access_loggers.file.v3 import file_pb2
from envoy.extensions.access_loggers.filters.cel.v3 import cel_pb2
from envoy.extensions.access_loggers.grpc.v3 import als_pb2
from envoy.extensions.access_loggers.open_telemetry.v3 import logs_service_pb2
from envoy.extensions.formatter.req_without_query.v3 import req_without_query_pb2
from google.protobuf import json_format
from google.protobuf.message import Message

from app.api.mesh import MeshConfig
from app.model.service import Service
from app.model.telemetry import LogProvider, LogSelection
from app.translate.listener.lookup import fetch_provider, lookup_cluster

FILE_ACCESS_LOG = "envoy.access_loggers.file"
HTTP_GRPC_ACCESS_LOG = "envoy.access_loggers.http_grpc"
TCP_GRPC_ACCESS_LOG = "envoy.tcp_grpc_access_log"  # istiod TCPEnvoyALSName
OTEL_ACCESS_LOG = "envoy.access_loggers.open_telemetry"
CEL_FILTER = "envoy.access_loggers.extension_filters.cel"
BUILTIN_PROVIDER = "envoy"  # istiod's default extension provider: a file log to /dev/stdout
_FILE = "envoy_file_access_log"
_SERVICES = ("envoy_http_als", "envoy_tcp_als", "envoy_otel_als")  # the access log services
# istiod envoyStateToLog, and envoyWasmStateToLog (the OpenTelemetry service's)
_STATE_TO_LOG = ("upstream_peer", "downstream_peer")
_WASM_STATE_TO_LOG = (
    *_STATE_TO_LOG, "wasm.upstream_peer", "wasm.upstream_peer_id", "wasm.downstream_peer", "wasm.downstream_peer_id",
)  # fmt: skip
# istiod EnvoyTextLogFormat: Istio's text format since 1.9
TEXT_FORMAT = (
    '[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% %RESPONSE_FLAGS% '
    '%RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% "%UPSTREAM_TRANSPORT_FAILURE_REASON%" '
    '%BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" '
    '"%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%" %UPSTREAM_CLUSTER_RAW% '
    "%UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% "
    "%ROUTE_NAME%\n"
)
# istiod EnvoyJSONLogFormatIstio
JSON_FORMAT = {
    "start_time": "%START_TIME%",
    "route_name": "%ROUTE_NAME%",
    "method": "%REQ(:METHOD)%",
    "path": "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",
    "protocol": "%PROTOCOL%",
    "response_code": "%RESPONSE_CODE%",
    "response_flags": "%RESPONSE_FLAGS%",
    "response_code_details": "%RESPONSE_CODE_DETAILS%",
    "connection_termination_details": "%CONNECTION_TERMINATION_DETAILS%",
    "bytes_received": "%BYTES_RECEIVED%",
    "bytes_sent": "%BYTES_SENT%",
    "duration": "%DURATION%",
    "upstream_service_time": "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%",
    "x_forwarded_for": "%REQ(X-FORWARDED-FOR)%",
    "user_agent": "%REQ(USER-AGENT)%",
    "request_id": "%REQ(X-REQUEST-ID)%",
    "authority": "%REQ(:AUTHORITY)%",
    "upstream_host": "%UPSTREAM_HOST%",
    "upstream_cluster": "%UPSTREAM_CLUSTER_RAW%",
    "upstream_local_address": "%UPSTREAM_LOCAL_ADDRESS%",
    "downstream_local_address": "%DOWNSTREAM_LOCAL_ADDRESS%",
    "downstream_remote_address": "%DOWNSTREAM_REMOTE_ADDRESS%",
    "requested_server_name": "%REQUESTED_SERVER_NAME%",
    "upstream_transport_failure_reason": "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
}
_REQ_WITHOUT_QUERY = "%REQ_WITHOUT_QUERY"
_JSON = MeshConfig.AccessLogEncoding.JSON
_Logs = tuple[accesslog_pb2.AccessLog, ...]
_Provider = MeshConfig.ExtensionProvider
_MAX_KEPT = 1024  # selections built for one mesh config and kept: a push reads a few of them


class LogChoice(NamedTuple):
    """A selected provider the listeners log to, with its service's hostname and cluster when it
    is an access log service."""

    provider: LogProvider
    hostname: str = ""
    cluster: str = ""


Logs = tuple[LogChoice, ...]  # what the listeners of a class log to (a value: part of their inputs)


def resolve_logs(mesh: MeshConfig, selection: LogSelection, by_hostname: Mapping[str, Mapping[str, Service]]) -> Logs:
    """The selected providers that log (istiod telemetryAccessLog: a file, or an access log
    service LookupCluster finds; a provider of another kind, one the mesh config lacks, or a
    service not found logs nothing)."""
    out = []
    for choice in selection:
        provider = fetch_provider(mesh, choice.name)
        kind = provider.WhichOneof("provider") if provider is not None else None
        if kind == _FILE:
            out.append(LogChoice(choice))
        elif kind in _SERVICES:
            service = getattr(provider, kind)
            hostname, cluster, error = lookup_cluster(service.service, service.port, by_hostname)
            if not error:
                out.append(LogChoice(choice, hostname, cluster))
    return tuple(out)


def access_logs(mesh: MeshConfig, logs: Logs) -> _Logs:
    """What every HTTP connection manager and tcp_proxy of a listener class logs (messages
    shared by every caller, which copies them into what it builds)."""
    return _FOR_MESH.get(mesh, logs, listener=False)


def listener_access_logs(mesh: MeshConfig, logs: Logs) -> _Logs:
    """A listener's own log: only connections no filter chain matched (NR)."""
    if mesh.disable_envoy_listener_log:
        return ()
    return _FOR_MESH.get(mesh, logs, listener=True)


class _ForMesh:
    """The logs built for the mesh config asked last (by identity: a snapshot's config is
    replaced, never edited), by selection, so the listeners of a push do not look the providers
    up again each. One (mesh, logs) pair is swapped whole, so a thread building for another mesh
    cannot mix them."""

    def __init__(self) -> None:
        self._entry: tuple[MeshConfig | None, dict[tuple[Logs, bool], _Logs]] = (None, {})

    def get(self, mesh: MeshConfig, logs: Logs, listener: bool) -> _Logs:
        entry = self._entry
        if entry[0] is not mesh:
            entry = self._entry = (mesh, {})
        built = entry[1]
        found = built.get((logs, listener))
        if found is None:
            if len(built) >= _MAX_KEPT:  # Telemetries edited over and over under one mesh config
                built.clear()
            found = built[logs, listener] = _build_logs(mesh, logs, listener=listener)
        return found


_FOR_MESH = _ForMesh()


def _build_logs(mesh: MeshConfig, logs: Logs, *, listener: bool) -> _Logs:
    # Telemetries.AccessLogging sorts by the providers' own names (stable: ties keep the order)
    found = []
    for choice in logs:
        provider = fetch_provider(mesh, choice.provider.name)
        assert provider is not None  # resolve_logs found it in this mesh config
        found.append((provider, choice))
    found.sort(key=lambda pair: pair[0].name)
    if not found:  # setHTTPAccessLog and the others: the mesh config's file log
        if not mesh.access_log_file:
            return ()
        log = _file_access_log(mesh.access_log_file, mesh.access_log_encoding, mesh.access_log_format)
        _set_filter(log, listener, None)
        return (log,)
    out = []
    for provider, choice in found:
        if choice.provider.disabled:
            continue
        log = _provider_log(mesh, provider, choice)
        _set_filter(log, listener, choice.provider.filter)
        out.append(log)
    return tuple(out)


def _provider_log(mesh: MeshConfig, provider: _Provider, choice: LogChoice) -> accesslog_pb2.AccessLog:
    """telemetryAccessLog."""
    kind = provider.WhichOneof("provider")
    if kind == "envoy_http_als":
        return _http_grpc_log(provider.envoy_http_als, choice)
    if kind == "envoy_tcp_als":
        return _tcp_grpc_log(provider.envoy_tcp_als, choice)
    if kind == "envoy_otel_als":
        return _otel_log(provider.envoy_otel_als, choice)
    file = provider.envoy_file_access_log
    if provider.name == BUILTIN_PROVIDER and not file.HasField("log_format") and not file.omit_empty_values:
        # the built-in provider formats as the mesh config says
        return _file_access_log(file.path, mesh.access_log_encoding, mesh.access_log_format)
    return _provider_access_log(file)


def _common(log_name: str, states: Sequence[str], choice: LogChoice) -> als_pb2.CommonGrpcAccessLogConfig:
    out = als_pb2.CommonGrpcAccessLogConfig(
        log_name=log_name, transport_api_version=config_source_pb2.V3, filter_state_objects_to_log=states
    )
    out.grpc_service.envoy_grpc.cluster_name = choice.cluster
    out.grpc_service.envoy_grpc.authority = choice.hostname
    return out


def _http_grpc_log(
    provider: MeshConfig.ExtensionProvider.EnvoyHttpGrpcV3LogProvider, choice: LogChoice
) -> accesslog_pb2.AccessLog:
    """httpGrpcAccessLogFromTelemetry."""
    states = provider.filter_state_objects_to_log or _STATE_TO_LOG
    config = als_pb2.HttpGrpcAccessLogConfig(
        common_config=_common(provider.log_name or "http_envoy_accesslog", states, choice),
        additional_request_headers_to_log=provider.additional_request_headers_to_log,
        additional_response_headers_to_log=provider.additional_response_headers_to_log,
        additional_response_trailers_to_log=provider.additional_response_trailers_to_log,
    )
    return _typed_log(HTTP_GRPC_ACCESS_LOG, config)


def _tcp_grpc_log(
    provider: MeshConfig.ExtensionProvider.EnvoyTcpGrpcV3LogProvider, choice: LogChoice
) -> accesslog_pb2.AccessLog:
    """tcpGrpcAccessLogFromTelemetry."""
    states = provider.filter_state_objects_to_log or _STATE_TO_LOG
    config = als_pb2.TcpGrpcAccessLogConfig(
        common_config=_common(provider.log_name or "tcp_envoy_accesslog", states, choice)
    )
    return _typed_log(TCP_GRPC_ACCESS_LOG, config)


def _otel_log(
    provider: MeshConfig.ExtensionProvider.EnvoyOpenTelemetryLogProvider, choice: LogChoice
) -> accesslog_pb2.AccessLog:
    """openTelemetryLog and buildOpenTelemetryAccessLogConfig: the text format as the body (Istio's
    when unset), the labels as string attributes sorted by key, builtin labels off."""
    text = provider.log_format.text or TEXT_FORMAT
    labels = json_format.MessageToDict(provider.log_format.labels) if provider.log_format.HasField("labels") else {}
    config = logs_service_pb2.OpenTelemetryAccessLogConfig(
        common_config=_common(provider.log_name or "otel_envoy_accesslog", _WASM_STATE_TO_LOG, choice),
        disable_builtin_labels=True,
    )
    config.body.string_value = text
    for key in sorted(labels):
        value = labels[key]
        config.attributes.values.add(key=key).value.string_value = value if isinstance(value, str) else ""
    # accessLogFormatters: the text's, then the labels' not already there, sorted by name
    if _REQ_WITHOUT_QUERY in text or any(_REQ_WITHOUT_QUERY in v for v in labels.values() if isinstance(v, str)):
        _add_req_without_query(config.formatters)
    return _typed_log(OTEL_ACCESS_LOG, config)


def _typed_log(name: str, config: Message) -> accesslog_pb2.AccessLog:
    out = accesslog_pb2.AccessLog(name=name)
    out.typed_config.Pack(config)
    return out


def _set_filter(log: accesslog_pb2.AccessLog, listener: bool, expression: str | None) -> None:
    """buildAccessLogFromTelemetry: NR on a listener's log, then the provider's CEL filter; two
    are ANDed."""
    filters = []
    if listener:
        filters.append(_no_route_filter())
    if expression is not None:
        cel = accesslog_pb2.AccessLogFilter()
        cel.extension_filter.name = CEL_FILTER
        cel.extension_filter.typed_config.Pack(cel_pb2.ExpressionFilter(expression=expression))
        filters.append(cel)
    if len(filters) == 1:
        log.filter.CopyFrom(filters[0])
    elif filters:
        log.filter.and_filter.filters.extend(filters)


def _no_route_filter() -> accesslog_pb2.AccessLogFilter:
    out = accesslog_pb2.AccessLogFilter()
    out.response_flag_filter.flags.append("NR")
    return out


def _provider_access_log(file: MeshConfig.ExtensionProvider.EnvoyFileAccessLogProvider) -> accesslog_pb2.AccessLog:
    """fileAccessLogFromTelemetry: an envoyFileAccessLog provider's path (/dev/stdout unset),
    text or labels (JSON) format, and omitEmptyValues."""
    log_format = substitution_format_string_pb2.SubstitutionFormatString(omit_empty_values=file.omit_empty_values)
    kind = file.log_format.WhichOneof("log_format") if file.HasField("log_format") else None
    if kind == "labels":
        labels = json_format.MessageToDict(file.log_format.labels)
        _json_format(log_format, labels or JSON_FORMAT)
    else:
        _text_format(log_format, file.log_format.text if kind == "text" else "")
    return _access_log(file.path or "/dev/stdout", log_format)


def _file_access_log(path: str, encoding: int, text: str) -> accesslog_pb2.AccessLog:
    """FileAccessLogFromMeshConfig."""
    log_format = substitution_format_string_pb2.SubstitutionFormatString()
    if encoding == _JSON:
        fields: dict[str, Any] = JSON_FORMAT
        if text:
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None  # istiod logs the error and keeps its default format
            if isinstance(parsed, dict):
                fields = parsed
        _json_format(log_format, fields)
    else:
        _text_format(log_format, text)
    return _access_log(path, log_format)


def _text_format(log_format: substitution_format_string_pb2.SubstitutionFormatString, text: str) -> None:
    # "Istio will insert a newline on all formats (if missing)"
    inline = (text if text.endswith("\n") else text + "\n") if text else TEXT_FORMAT
    log_format.text_format_source.CopyFrom(base_pb2.DataSource(inline_string=inline))
    if _REQ_WITHOUT_QUERY in inline:
        _add_req_without_query(log_format.formatters)


def _json_format(log_format: substitution_format_string_pb2.SubstitutionFormatString, fields: dict[str, Any]) -> None:
    json_format.ParseDict(fields, log_format.json_format)
    log_format.json_format_options.SetInParent()  # sort_properties false, as istiod sets it
    if any(_REQ_WITHOUT_QUERY in v for v in fields.values() if isinstance(v, str)):
        _add_req_without_query(log_format.formatters)


def _add_req_without_query(formatters: Any) -> None:
    """The formatter the %REQ_WITHOUT_QUERY% operator needs, on a format's (or a service's)
    repeated ``formatters``."""
    formatter = formatters.add(name="envoy.formatter.req_without_query")
    formatter.typed_config.Pack(req_without_query_pb2.ReqWithoutQuery())


def _access_log(
    path: str, log_format: substitution_format_string_pb2.SubstitutionFormatString
) -> accesslog_pb2.AccessLog:
    return _typed_log(FILE_ACCESS_LOG, file_pb2.FileAccessLog(path=path, log_format=log_format))
