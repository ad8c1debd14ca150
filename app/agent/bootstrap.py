"""The agent's identity and the Envoy bootstrap it writes, as pilot-agent builds them; pure, no I/O.

``agent_config`` reads the pod's environment the way pilot-agent does (``POD_NAME``,
``POD_NAMESPACE``, ``INSTANCE_IP``, ``ISTIO_META_*``, ``ISTIO_METAJSON_*``; istio
pkg/bootstrap/config.go ``GetNodeMetaData``, pilot/cmd/pilot-agent/app/cmd.go ``initProxy``).
``build_bootstrap`` turns it into an Envoy v3 bootstrap shaped like istio's template
(tools/packaging/common/envoy_bootstrap.json): the node, the admin listener, ADS over the
``xds-grpc`` cluster on the agent's Unix socket, CDS and LDS over ADS, istio's runtime flags
and connection limit. Stats, tracing, the Prometheus and status listeners and bootstrap
extensions are left out; the ``sds-grpc`` cluster is there only when asked for.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from app.config.go_strconv import go_bool
from app.settings import split_address

ApiType = Literal["GRPC", "DELTA_GRPC"]

META_PREFIX = "ISTIO_META_"
META_JSON_PREFIX = "ISTIO_METAJSON_"
XDS_CLUSTER = "xds-grpc"
SDS_CLUSTER = "sds-grpc"
DEFAULT_XDS_SOCKET = "./etc/istio/proxy/XDS"
DEFAULT_ADMIN_ADDRESS = "127.0.0.1:15000"

# istio pkg/bootstrap/config.go extractRuntimeFlags: the static runtime layer every istio proxy gets
ISTIO_RUNTIME_FLAGS: Mapping[str, Any] = {
    "re2.max_program_size.error_level": "32768",
    "envoy.deprecated_features:envoy.config.listener.v3.Listener.hidden_envoy_deprecated_use_original_dst": True,
    "envoy.reloadable_features.http_reject_path_with_fragment": False,
    "envoy.reloadable_features.fixed_heap_use_allocated": True,
    "envoy.reloadable_features.coalesce_lb_rebuilds_on_batch_update": False,
}

# pkg/model/proxy.go BootstrapNodeMetadata fields of type StringBool: a round trip through the typed
# struct turns "1"/"t"/... into "true", drops false (omitempty) and rejects what ParseBool rejects
_STRING_BOOLS = frozenset(
    {
        "ENABLE_SELF_DISCOVERY", "DNS_CAPTURE", "DNS_AUTO_ALLOCATE", "ENABLE_HBONE", "DISABLE_HBONE_SEND",
        "EXIT_ON_ZERO_ACTIVE_CONNECTIONS", "INBOUND_LISTENER_EXACT_BALANCE", "OUTBOUND_LISTENER_EXACT_BALANCE",
        "ENVOY_SKIP_DEPRECATED_LOGS",
    }
)  # fmt: skip
_APP_LABELS = ("app", "app.kubernetes.io/name", "service.istio.io/canonical-name")  # pkg/kube/labels GetApp
_LOCALITY_LABELS = ("topology.istio.io/locality", "istio-locality")  # pkg/model/proxy.go GetLocalityLabel


class AgentConfigError(ValueError):
    """The environment cannot describe a proxy (a bad proxy type, an unparsable StringBool)."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Who the proxy is, as the bootstrap's node tells the control plane."""

    proxy_type: Literal["sidecar", "router"]
    ip_addresses: tuple[str, ...]
    pod_name: str
    namespace: str
    dns_domain: str
    cluster: str  # node.cluster: the service cluster, e.g. ``app.ns``
    metadata: Mapping[str, Any] = field(default_factory=dict)  # JSON/Struct-compatible
    locality: str = ""  # region/zone/subzone
    api_type: ApiType = "DELTA_GRPC"

    @property
    def node_id(self) -> str:
        """``TYPE~IP~POD.NAMESPACE~DOMAIN`` (istio pkg/istio-agent/agent.go ServiceNode)."""
        ip = self.ip_addresses[0] if self.ip_addresses else ""
        return "~".join((self.proxy_type, ip, f"{self.pod_name}.{self.namespace}", self.dns_domain))


def agent_config(
    env: Mapping[str, str],
    *,
    proxy_type: str = "sidecar",
    host_ips: Sequence[str] = (),
    pod_labels: Mapping[str, str] | None = None,
    service_cluster: str = "",
    dns_domain: str = "",
    istio_version: str = "",
) -> AgentConfig:
    """The proxy's identity from ``env`` (as ``os.environ``) and what pilot-agent discovers itself:
    ``host_ips`` the host's private addresses (network.GetPrivateIPs; when empty, istio adds
    127.0.0.1 and ::1), ``pod_labels`` the downward-API labels file (``parse_downward_api``),
    ``service_cluster`` the ``--serviceCluster`` flag, ``dns_domain`` the ``--domain`` flag,
    ``istio_version`` ISTIO_VERSION unless ``ISTIO_META_ISTIO_VERSION`` names one.
    Raises AgentConfigError."""
    if proxy_type not in ("sidecar", "router"):
        raise AgentConfigError(f"invalid proxy type {proxy_type!r} (want sidecar or router)")
    pod_name, namespace = env.get("POD_NAME", ""), env.get("POD_NAMESPACE", "")
    ips = _instance_ips(env.get("INSTANCE_IP", ""), host_ips)
    meta = _untyped_metadata(env)
    if istio_version and not meta.get("ISTIO_VERSION"):
        meta["ISTIO_VERSION"] = istio_version
    meta["INSTANCE_IPS"] = ",".join(ips)  # StringList: comma-joined
    # extractAttributesMetadata: the pod's own variables win over ISTIO_META_ ones
    for var, key in (("POD_NAME", "NAME"), ("POD_NAMESPACE", "NAMESPACE"), ("SERVICE_ACCOUNT", "SERVICE_ACCOUNT")):
        if env.get(var):
            meta[key] = env[var]
    labels = _labels(env.get(META_JSON_PREFIX + "LABELS"), pod_labels)
    locality = ""
    found = next((labels[k] for k in _LOCALITY_LABELS if k in labels), "")
    if found:
        # config.go GetNodeMetaData: "." separated (a label value cannot hold "/") becomes "/"
        locality = found if "/" in found else found.replace(".", "/")
        labels["istio-locality"] = locality
    if labels:
        meta["LABELS"] = labels
    for key in _STRING_BOOLS & meta.keys():
        meta[key] = _string_bool(key, meta[key])
        if meta[key] == "false":
            del meta[key]
    ns = str(meta.get("NAMESPACE", ""))
    return AgentConfig(
        proxy_type="router" if proxy_type == "router" else "sidecar",
        ip_addresses=ips,
        pod_name=pod_name,
        namespace=namespace,
        dns_domain=dns_domain or f"{namespace}.svc.cluster.local",  # cmd.go getDNSDomain
        cluster=_service_cluster(service_cluster, labels, str(meta.get("WORKLOAD_NAME", "")), ns),
        metadata=meta,
        locality=locality,
        # pilot/pkg/features/experimental.go: ISTIO_DELTA_XDS defaults to true
        api_type="GRPC" if go_bool(env.get("ISTIO_DELTA_XDS", "true")) is False else "DELTA_GRPC",
    )


def parse_downward_api(text: str) -> dict[str, str]:
    """``key="value"`` lines of a downward-API file (/etc/istio/pod/labels) as a dict
    (config.go ParseDownwardAPI; values are Go-quoted strings, read here as JSON strings).
    Raises ValueError on a value that is not a quoted string, where istio ignores the whole file."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        if sep:
            value = json.loads(raw)
            if not isinstance(value, str):
                raise ValueError(f"downward API line {line!r}: want key=\"value\"")
            out[key] = value
    return out


def build_bootstrap(
    config: AgentConfig,
    *,
    xds_socket_path: str = DEFAULT_XDS_SOCKET,
    admin_address: str = DEFAULT_ADMIN_ADDRESS,
    sds_socket_path: str | None = None,
    runtime_flags: Mapping[str, Any] = ISTIO_RUNTIME_FLAGS,
) -> dict[str, Any]:
    """An Envoy v3 bootstrap (proto3-JSON dict) for ``config``: ADS (``config.api_type``) to the
    agent at ``xds_socket_path``, admin on ``admin_address`` (``HOST:PORT``, ``[V6]:PORT``),
    and an ``sds-grpc`` cluster to ``sds_socket_path`` if given (clusters with istio TLS name it)."""
    node: dict[str, Any] = {"id": config.node_id, "cluster": config.cluster, "metadata": dict(config.metadata)}
    locality = dict(zip(("region", "zone", "sub_zone"), config.locality.split("/", 2), strict=False))
    if any(locality.values()):
        node["locality"] = {k: v for k, v in locality.items() if v}
    host, port = split_address(admin_address)
    clusters = [_grpc_cluster(XDS_CLUSTER, xds_socket_path)]
    if sds_socket_path is not None:
        clusters.insert(0, _grpc_cluster(SDS_CLUSTER, sds_socket_path))
    # initial_fetch_timeout 0s: Envoy waits for the control plane for ever rather than starting empty
    ads_source = {"ads": {}, "initial_fetch_timeout": "0s", "resource_api_version": "V3"}
    return {
        "node": node,
        "layered_runtime": {
            "layers": [
                {"name": "global config", "static_layer": dict(runtime_flags)},
                {"name": "admin", "admin_layer": {}},
            ]
        },
        "admin": {"address": {"socket_address": {"address": host, "port_value": port}}},
        "dynamic_resources": {
            "lds_config": dict(ads_source),
            "cds_config": dict(ads_source),
            "ads_config": {
                "api_type": config.api_type,
                # the agent's xds proxy keeps the node and sends it upstream on every new stream
                "set_node_on_first_message_only": True,
                "transport_api_version": "V3",
                "grpc_services": [{"envoy_grpc": {"cluster_name": XDS_CLUSTER}}],
            },
        },
        "static_resources": {"clusters": clusters},
        # the template's default limit (math.MaxInt32): without one Envoy warns at every start
        "overload_manager": {
            "resource_monitors": [
                {
                    "name": "envoy.resource_monitors.global_downstream_max_connections",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3"
                        ".DownstreamConnectionsConfig",
                        "max_active_downstream_connections": 2147483647,
                    },
                }
            ]
        },
    }


def bootstrap_json(
    config: AgentConfig,
    *,
    xds_socket_path: str = DEFAULT_XDS_SOCKET,
    admin_address: str = DEFAULT_ADMIN_ADDRESS,
    sds_socket_path: str | None = None,
    runtime_flags: Mapping[str, Any] = ISTIO_RUNTIME_FLAGS,
) -> str:
    """``build_bootstrap`` as JSON text, for ``envoy -c``."""
    bootstrap = build_bootstrap(
        config,
        xds_socket_path=xds_socket_path,
        admin_address=admin_address,
        sds_socket_path=sds_socket_path,
        runtime_flags=runtime_flags,
    )
    return json.dumps(bootstrap, indent=2)


def _grpc_cluster(name: str, pipe_path: str) -> dict[str, Any]:
    """A STATIC HTTP/2 cluster to a Unix socket, as the template's xds-grpc and sds-grpc."""
    return {
        "name": name,
        "alt_stat_name": f"{name};",
        "type": "STATIC",
        "connect_timeout": "1s",
        "lb_policy": "ROUND_ROBIN",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"pipe": {"path": pipe_path}}}}]}],
        },
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
    }


def _instance_ips(instance_ip: str, host_ips: Sequence[str]) -> tuple[str, ...]:
    """cmd.go initProxy: a valid INSTANCE_IP first (istiod takes the first as the pod IP), then the
    host's private IPs, or 127.0.0.1 and ::1 when there are none; no duplicates."""
    ips: list[str] = []
    with contextlib.suppress(ValueError):  # unset or not an IP: istio ignores it too
        ips.append(str(ipaddress.ip_address(instance_ip)))
    for ip in host_ips or ("127.0.0.1", "::1"):
        if ip not in ips:
            ips.append(ip)
    return tuple(ips)


def _untyped_metadata(env: Mapping[str, str]) -> dict[str, Any]:
    """ISTIO_META_X=v becomes X: "v"; ISTIO_METAJSON_X holds a JSON object whose keys are merged
    in at the top level (config.go extractMetadata; invalid JSON is skipped, as istio warns)."""
    meta: dict[str, Any] = {}
    for name, value in env.items():
        if name.startswith(META_PREFIX) and len(name) > len(META_PREFIX):
            meta[name.removeprefix(META_PREFIX)] = value
    for name, value in env.items():
        if name.startswith(META_JSON_PREFIX):
            decoded = _json_object(value)
            if decoded is not None:
                meta.update(decoded)
    return meta


def _labels(json_labels: str | None, pod_labels: Mapping[str, str] | None) -> dict[str, str]:
    """ISTIO_METAJSON_LABELS, overlaid with the downward-API pod labels (minus
    pod-template-hash, which changes on every rollout); config.go GetNodeMetaData."""
    labels: dict[str, str] = {}
    decoded = _json_object(json_labels) if json_labels else None
    if decoded:
        labels.update({str(k): str(v) for k, v in decoded.items()})
    for k, v in (pod_labels or {}).items():
        if k != "pod-template-hash":
            labels[k] = v
    return labels


def _json_object(text: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(text or "")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _string_bool(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    parsed = go_bool(value) if isinstance(value, str) else None
    if parsed is not None:
        return "true" if parsed else "false"
    raise AgentConfigError(f"{META_PREFIX}{key}={value!r}: want a boolean (true/false/1/0)")


def _service_cluster(name: str, labels: Mapping[str, str], workload: str, namespace: str) -> str:
    """config.go serviceClusterOrDefault (the default tracingServiceName APP_LABEL_AND_NAMESPACE)."""
    if name and name != "istio-proxy":
        return name
    app = next((labels[k] for k in _APP_LABELS if k in labels), None)
    if app is not None:
        return f"{app}.{namespace}"
    if workload:
        return f"{workload}.{namespace}"
    return f"istio-proxy.{namespace}" if namespace else "istio-proxy"
