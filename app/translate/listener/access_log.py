"""Envoy access logs from the mesh config, as istiod writes them when no Telemetry resource
configures logging (pilot/pkg/networking/core/accesslog.go, pilot/pkg/model/telemetry.go
mergeLogs, telemetry_logging.go): on every HTTP connection manager and tcp_proxy, and for the
connections no filter chain takes (response flag NR) on the virtual, inbound and gateway
listeners (not a sidecar's outbound ones) unless ``disableEnvoyListenerLog``.

With ``defaultProviders.accessLogging`` the providers it names log (its file providers; the
gRPC and OpenTelemetry access log services are not built yet), sorted by name; without it,
``accessLogFile`` with ``accessLogEncoding`` and ``accessLogFormat`` (FileAccessLogFromMeshConfig)."""

from __future__ import annotations

import functools
import json
from typing import Any

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.core.v3 import base_pb2, substitution_format_string_pb2
from envoy.extensions.access_loggers.file.v3 import file_pb2
from envoy.extensions.formatter.req_without_query.v3 import req_without_query_pb2
from google.protobuf import json_format

from app.api.mesh import MeshConfig

FILE_ACCESS_LOG = "envoy.access_loggers.file"
BUILTIN_PROVIDER = "envoy"  # istiod's default extension provider: a file log to /dev/stdout
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


def access_logs(mesh: MeshConfig) -> tuple[accesslog_pb2.AccessLog, ...]:
    """What every HTTP connection manager and tcp_proxy logs."""
    return _logs(mesh, listener=False)


def listener_access_logs(mesh: MeshConfig) -> tuple[accesslog_pb2.AccessLog, ...]:
    """A listener's own log: only connections no filter chain matched (NR)."""
    if mesh.disable_envoy_listener_log:
        return ()
    return _logs(mesh, listener=True)


def _logs(mesh: MeshConfig, *, listener: bool) -> tuple[accesslog_pb2.AccessLog, ...]:
    defaults = mesh.default_providers.access_logging
    if not defaults:
        if not mesh.access_log_file:
            return ()
        return (_file_access_log(mesh.access_log_file, mesh.access_log_encoding, mesh.access_log_format, listener),)
    # fetchProvider: the first provider of each name, matched in any case; mergeLogs keeps a set
    providers = mesh.extension_providers
    found = [next((p for p in providers if p.name.lower() == name.lower()), None) for name in set(defaults)]
    out = []
    for provider in sorted((p for p in found if p is not None), key=lambda p: p.name):
        if provider.WhichOneof("provider") != "envoy_file_access_log":
            continue  # the gRPC and OpenTelemetry access log services: not yet
        file = provider.envoy_file_access_log
        if provider.name == BUILTIN_PROVIDER and not file.HasField("log_format") and not file.omit_empty_values:
            # the built-in provider formats as the mesh config says (telemetryAccessLog)
            log = _file_access_log(file.path, mesh.access_log_encoding, mesh.access_log_format, listener)
        else:
            log = _provider_access_log(file.SerializeToString(deterministic=True), listener)
        out.append(log)
    return tuple(out)


@functools.lru_cache(maxsize=8)
def _provider_access_log(serialized: bytes, listener: bool) -> accesslog_pb2.AccessLog:
    """fileAccessLogFromTelemetry: an envoyFileAccessLog provider's path (/dev/stdout unset),
    text or labels (JSON) format, and omitEmptyValues."""
    file = MeshConfig.ExtensionProvider.EnvoyFileAccessLogProvider.FromString(serialized)
    log_format = substitution_format_string_pb2.SubstitutionFormatString(omit_empty_values=file.omit_empty_values)
    kind = file.log_format.WhichOneof("log_format") if file.HasField("log_format") else None
    if kind == "labels":
        labels = json_format.MessageToDict(file.log_format.labels)
        _json_format(log_format, labels or JSON_FORMAT)
    else:
        _text_format(log_format, file.log_format.text if kind == "text" else "")
    return _access_log(file.path or "/dev/stdout", log_format, listener)


@functools.lru_cache(maxsize=8)
def _file_access_log(path: str, encoding: int, text: str, listener: bool) -> accesslog_pb2.AccessLog:
    """FileAccessLogFromMeshConfig (shared: callers copy it into the message they build)."""
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
    return _access_log(path, log_format, listener)


def _text_format(log_format: substitution_format_string_pb2.SubstitutionFormatString, text: str) -> None:
    # "Istio will insert a newline on all formats (if missing)"
    inline = (text if text.endswith("\n") else text + "\n") if text else TEXT_FORMAT
    log_format.text_format_source.CopyFrom(base_pb2.DataSource(inline_string=inline))
    if _REQ_WITHOUT_QUERY in inline:
        _add_req_without_query(log_format)


def _json_format(log_format: substitution_format_string_pb2.SubstitutionFormatString, fields: dict[str, Any]) -> None:
    json_format.ParseDict(fields, log_format.json_format)
    log_format.json_format_options.SetInParent()  # sort_properties false, as istiod sets it
    if any(_REQ_WITHOUT_QUERY in v for v in fields.values() if isinstance(v, str)):
        _add_req_without_query(log_format)


def _add_req_without_query(log_format: substitution_format_string_pb2.SubstitutionFormatString) -> None:
    formatter = log_format.formatters.add(name="envoy.formatter.req_without_query")
    formatter.typed_config.Pack(req_without_query_pb2.ReqWithoutQuery())


def _access_log(
    path: str, log_format: substitution_format_string_pb2.SubstitutionFormatString, listener: bool
) -> accesslog_pb2.AccessLog:
    out = accesslog_pb2.AccessLog(name=FILE_ACCESS_LOG)
    out.typed_config.Pack(file_pb2.FileAccessLog(path=path, log_format=log_format))
    if listener:
        out.filter.response_flag_filter.flags.append("NR")
    return out

