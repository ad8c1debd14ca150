"""Every tunable of the control plane in one frozen object (DESIGN §7 rule 9).

Defaults follow istiod's; the environment variables keep istiod's names where one exists
(``PILOT_DEBOUNCE_AFTER=100ms``), flags override the environment.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from app.config.go_strconv import go_int
from app.config.go_time import go_duration_seconds
from app.config.objects import is_object_name
from app.errors import SettingsError
from app.inject.native_sidecars import NativeSidecarMode, native_sidecar_mode
from app.model.features import Features

_PLAIN_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_MAX_GO_SECONDS = Decimal(2**63 - 1) / 10**9  # time.Duration counts int64 nanoseconds


@dataclass(frozen=True, slots=True)
class Settings:
    config_dir: Path | None  # a directory of YAML files (None: not read)
    # the Kubernetes API server: a kubeconfig file, or the in-cluster service account
    kubeconfig: Path | None = None
    in_cluster: bool = False
    mesh_config_file: Path | None = None  # overrides the mesh ConfigMap (istiod --meshConfig)
    xds_address: str = "0.0.0.0:15010"  # plaintext xDS, as istiod's 15010 ("" for none)
    # the workload CA and the secure port (TLS xDS + certificate service, istiod's 15012):
    # served when a CA directory is given (istiod's cacerts layout; generated when empty)
    ca_dir: Path | None = None
    # ENABLE_CA_SERVER: without a CA directory but with Kubernetes, the CA kept in the API
    # server as istiod keeps it (a plugged-in ``cacerts`` Secret, else ``istio-ca-secret``, made
    # by the first replica). On for ``pilotfish serve`` as in istiod (``from_env``); a Settings
    # made in code asks for it
    ca_server: bool = False
    # ISTIO_MULTIROOT_MESH: a reloaded ``cacerts`` may change the root bundle (adding or removing
    # roots), as istiod allows only then
    multi_root_mesh: bool = False
    # USE_CACERTS_FOR_SELF_SIGNED_CA: keep the self-signed root in ``cacerts`` (marked
    # ``istio-generated``) rather than ``istio-ca-secret``
    use_cacerts_for_self_signed_ca: bool = False
    # CITADEL_SELF_SIGNED_CA_CERT_TTL / CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE: a new self-signed root
    self_signed_ca_cert_ttl: float = 3650 * 24 * 3600.0
    self_signed_ca_rsa_key_size: int = 2048
    # CITADEL_SELF_SIGNED_ROOT_CERT_CHECK_INTERVAL (0: never), _GRACE_PERIOD_PERCENTILE and
    # CITADEL_ENABLE_JITTER_FOR_ROOT_CERT_ROTATOR: istiod's rotation of the istio-ca-secret root
    root_cert_check_interval: float = 3600.0
    root_cert_grace_percentile: int = 20
    root_cert_rotator_jitter: bool = True
    secure_xds_address: str = "0.0.0.0:15012"
    # without Kubernetes, the bearer tokens the CA and the secure port accept:
    # lines "TOKEN NAMESPACE SERVICEACCOUNT"
    trusted_token_file: Path | None = None
    http_address: str = "0.0.0.0:15014"  # monitoring and debug
    # the admission webhooks (HTTPS; "" for none), served with the certificate and key given, or
    # else, with the CA in a cluster (or with an explicit revision), with a certificate of the CA
    # whose root pilotfish patches into its revision's webhook configurations (app/webhook/ca_bundle.py)
    webhook_address: str = "0.0.0.0:15017"
    webhook_cert: Path | None = None
    webhook_key: Path | None = None
    # sidecar injection (``/inject`` on the webhook port): istio-sidecar-injector's `config` and
    # `values` (None: what istiod's chart installs by default)
    inject_config: Path | None = None
    inject_values: Path | None = None
    # ENABLE_NATIVE_SIDECARS: the proxy as a native sidecar (an init container that keeps
    # running): true, false, or auto, where the webhook asks the nodes' kubelets per pod as
    # istiod does (app/inject/native_sidecars.py); an unknown value is false, with a warning
    native_sidecars: NativeSidecarMode = NativeSidecarMode.AUTO
    system_namespace: str = "istio-system"
    # the control-plane revision (istiod's REVISION): its istio.io/rev label value ("": not given,
    # the label value is then "default")
    revision: str = ""
    # POD_NAME: this replica's name, as istiod reports it to istioctl (ControlPlane identifier)
    pod_name: str = "pilotfish"
    domain_suffix: str = "cluster.local"
    debounce_after: float = 0.1  # PILOT_DEBOUNCE_AFTER: quiet period before a push
    debounce_max: float = 10.0  # PILOT_DEBOUNCE_MAX: longest a change waits
    eds_debounce: bool = True  # PILOT_ENABLE_EDS_DEBOUNCE: endpoint changes are debounced too
    push_throttle: int = 100  # PILOT_PUSH_THROTTLE: concurrent proxy pushes
    # PILOT_XDS_SEND_TIMEOUT: a response the transport has not taken by then ends its stream.
    # istiod's default is 0 (wait forever); ours is not, so a client that stops reading can
    # never park a push worker for good (0 still disables it)
    xds_send_timeout: float = 30.0
    file_debounce_ms: int = 10  # batching of file-system events (the push debouncer merges bursts)
    shutdown_grace: float = 5.0  # seconds streams get to finish on SIGTERM
    cache_assert: bool = False  # PILOTFISH_CACHE_ASSERT: rebuild on every cache hit, fail on a difference
    gc_freeze: bool = True  # PILOTFISH_GC_FREEZE: freeze the settled heap (app/heap.py)
    gc_sweep_interval: float = 600.0  # PILOTFISH_GC_SWEEP_INTERVAL: full collection of frozen objects (0: never)
    # PILOTFISH_TRACE_TIMEOUT: how long a traced push may take to converge before its trace ends
    trace_timeout: float = 30.0
    # istiod feature flags that change generated config (PILOT_ENABLE_IP_AUTOALLOCATE, ...)
    features: Features = field(default_factory=Features)
    # with Kubernetes, what pilotfish writes as the elected leader (app/controllers): the
    # istio-ca-root-cert ConfigMaps and ServiceEntry address allocation (when
    # PILOT_ENABLE_IP_AUTOALLOCATE). PILOTFISH_KUBE_CONTROLLERS=false writes nothing. Under
    # istiod's ConfigMap locks, so beside istiod one of the two control planes writes
    kube_controllers: bool = True
    leader_election: bool = True  # ENABLE_LEADER_ELECTION: false leads without a lock (one replica)
    # PILOTFISH_LEADER_LEASE_DURATION: istiod's 30s ttl (whole seconds, at least 1s); renew
    # deadline half of it, retry period a quarter, as istiod
    leader_lease_duration: float = 30.0
    # this replica in the locks: POD_NAME, as istiod; else unknown-HOST-PID
    leader_identity: str = ""
    # PILOT_ENABLE_CA_CRL and PILOT_CRL_CONFIGMAP: the CA's CRL in every namespace's istio-ca-crl
    ca_crl: bool = True
    crl_configmap: str = "istio-ca-crl"
    ip_autoallocate_ipv4_prefix: str = "240.240.0.0/16"  # PILOT_IP_AUTOALLOCATE_IPV4_PREFIX
    ip_autoallocate_ipv6_prefix: str = "2001:2::/48"  # PILOT_IP_AUTOALLOCATE_IPV6_PREFIX

    @classmethod
    def from_env(cls, config_dir: Path | None, env: Mapping[str, str], **overrides: Any) -> Settings:
        values: dict[str, Any] = {}
        for name, key, parse in (
            ("debounce_after", "PILOT_DEBOUNCE_AFTER", parse_seconds),
            ("debounce_max", "PILOT_DEBOUNCE_MAX", parse_seconds),
            ("eds_debounce", "PILOT_ENABLE_EDS_DEBOUNCE", _boolean),
            ("push_throttle", "PILOT_PUSH_THROTTLE", _positive_int),
            ("xds_send_timeout", "PILOT_XDS_SEND_TIMEOUT", parse_seconds),
            ("cache_assert", "PILOTFISH_CACHE_ASSERT", _boolean),
            ("gc_freeze", "PILOTFISH_GC_FREEZE", _boolean),
            ("gc_sweep_interval", "PILOTFISH_GC_SWEEP_INTERVAL", parse_seconds),
            ("trace_timeout", "PILOTFISH_TRACE_TIMEOUT", _positive_seconds),
            ("kube_controllers", "PILOTFISH_KUBE_CONTROLLERS", _boolean),
            ("leader_election", "ENABLE_LEADER_ELECTION", _boolean),
            ("leader_lease_duration", "PILOTFISH_LEADER_LEASE_DURATION", _lease_seconds),
            ("ca_crl", "PILOT_ENABLE_CA_CRL", _boolean),
            ("crl_configmap", "PILOT_CRL_CONFIGMAP", _configmap_name),
            ("ip_autoallocate_ipv4_prefix", "PILOT_IP_AUTOALLOCATE_IPV4_PREFIX", _prefix),
            ("ip_autoallocate_ipv6_prefix", "PILOT_IP_AUTOALLOCATE_IPV6_PREFIX", _prefix),
            ("multi_root_mesh", "ISTIO_MULTIROOT_MESH", _boolean),
            ("use_cacerts_for_self_signed_ca", "USE_CACERTS_FOR_SELF_SIGNED_CA", _boolean),
            ("self_signed_ca_cert_ttl", "CITADEL_SELF_SIGNED_CA_CERT_TTL", parse_seconds),
            ("self_signed_ca_rsa_key_size", "CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE", _rsa_key_size),
            ("root_cert_check_interval", "CITADEL_SELF_SIGNED_ROOT_CERT_CHECK_INTERVAL", _interval),
            ("root_cert_grace_percentile", "CITADEL_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE", _percentile),
            ("root_cert_rotator_jitter", "CITADEL_ENABLE_JITTER_FOR_ROOT_CERT_ROTATOR", _boolean),
        ):
            if key in env:
                values[name] = parse(key, env[key])
        values["ca_server"] = _boolean("ENABLE_CA_SERVER", env.get("ENABLE_CA_SERVER", "true"))
        if env.get("POD_NAME"):
            values["pod_name"] = values["leader_identity"] = env["POD_NAME"]
        if env.get("REVISION"):
            values["revision"] = env["REVISION"]
        values["native_sidecars"] = native_sidecar_mode(env.get("ENABLE_NATIVE_SIDECARS", "auto"))
        values["features"] = Features.from_env(env)
        known = {f.name for f in fields(cls)}
        values.update({k: v for k, v in overrides.items() if k in known and v is not None})
        return replace(cls(config_dir=config_dir), **values)


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:80`` too; an empty host is every interface) as (host, port);
    raises ValueError naming the address."""
    host, sep, port = address.rpartition(":")
    number = go_int(port, signed=False)
    if not sep or number is None or number > 65535:
        raise ValueError(f"address {address!r}: want HOST:PORT")
    return host.strip("[]") or "0.0.0.0", number


def parse_seconds(key: str, text: str) -> float:
    """A duration as ``100ms``, ``1s``, ``2m``, ``24h``, Go's ``87600h0m0s``, or plain seconds."""
    text = text.strip()
    seconds = Decimal(text) if _PLAIN_SECONDS.fullmatch(text) else go_duration_seconds(text)
    if seconds is None:
        raise SettingsError(f"{key}={text[:64]!r}: want a duration such as 100ms, 1s, 2m or 24h")
    if seconds > _MAX_GO_SECONDS:
        raise SettingsError(f"{key}={text[:64]!r}: out of range (Go's durations end at 292 years)")
    return float(seconds)


def _positive_seconds(key: str, text: str) -> float:
    seconds = parse_seconds(key, text)
    if seconds <= 0:
        raise SettingsError(f"{key}={text!r}: want a duration above zero")
    return seconds


def _interval(key: str, text: str) -> float:
    """A duration, where zero or a negative one means never (istiod's check intervals)."""
    text = text.strip()
    if text.startswith("-") or text in ("0", "0s"):
        return 0.0
    return parse_seconds(key, text)


def _percentile(key: str, text: str) -> int:
    number = go_int(text.strip(), signed=False)
    if number is None or number > 100:
        raise SettingsError(f"{key}={text!r}: want a whole percentage, 0 to 100")
    return number


def _rsa_key_size(key: str, text: str) -> int:
    """istiod refuses a self-signed root key under MinimumRsaKeySize (2048)."""
    size = _positive_int(key, text)
    if size < 2048:
        raise SettingsError(f"{key}={text!r}: want at least 2048 bits")
    return size


def _boolean(key: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{key}={text!r}: want true or false")


def _positive_int(key: str, text: str) -> int:
    number = go_int(text.strip(), signed=False)
    if number is None or number < 1:
        raise SettingsError(f"{key}={text!r}: want a positive integer")
    return number


def _configmap_name(key: str, text: str) -> str:
    name = text.strip()
    if not is_object_name(name):
        raise SettingsError(f"{key}={text!r}: want a ConfigMap name (a DNS subdomain)")
    return name


def _lease_seconds(key: str, text: str) -> float:
    seconds = parse_seconds(key, text)
    if seconds < 1 or seconds != int(seconds):
        raise SettingsError(f"{key}={text!r}: a Lease counts whole seconds; want 1s or more")
    return seconds


def _prefix(key: str, text: str) -> str:
    """An IPv4 (key ..._IPV4_PREFIX) or IPv6 prefix, as istiod refuses to start without one."""
    try:
        network = ipaddress.ip_network(text.strip(), strict=False)
    except ValueError as e:
        raise SettingsError(f"{key}={text!r}: {e}") from None
    version = 6 if key.endswith("IPV6_PREFIX") else 4
    if network.version != version:
        raise SettingsError(f"{key}={text!r}: not an IPv{version} prefix")
    return text.strip()
