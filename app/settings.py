"""Every tunable of the control plane in one frozen object (DESIGN §7 rule 9).

Defaults follow istiod's; the environment variables keep istiod's names where one exists
(``PILOT_DEBOUNCE_AFTER=100ms``), flags override the environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from app.errors import SettingsError
from app.model.features import Features

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


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
    secure_xds_address: str = "0.0.0.0:15012"
    # without Kubernetes, the bearer tokens the CA and the secure port accept:
    # lines "TOKEN NAMESPACE SERVICEACCOUNT"
    trusted_token_file: Path | None = None
    http_address: str = "0.0.0.0:15014"  # monitoring and debug
    # the validating admission webhook (HTTPS), served when a certificate and key are given
    webhook_address: str = "0.0.0.0:15017"
    webhook_cert: Path | None = None
    webhook_key: Path | None = None
    # sidecar injection (``/inject`` on the webhook port): istio-sidecar-injector's `config` and
    # `values` (None: what istiod's chart installs by default), the revision served (REVISION)
    inject_config: Path | None = None
    inject_values: Path | None = None
    revision: str = "default"
    # ENABLE_NATIVE_SIDECARS: the proxy as a native sidecar (an init container that keeps
    # running); istiod's "auto" asks every node's kubelet, pilotfish's takes them as >= 1.33
    native_sidecars: bool = True
    system_namespace: str = "istio-system"
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
    file_debounce_ms: int = 50  # batching of file-system events
    shutdown_grace: float = 5.0  # seconds streams get to finish on SIGTERM
    cache_assert: bool = False  # PILOTFISH_CACHE_ASSERT: rebuild on every cache hit, fail on a difference
    gc_freeze: bool = True  # PILOTFISH_GC_FREEZE: freeze the settled heap (app/heap.py)
    gc_sweep_interval: float = 600.0  # PILOTFISH_GC_SWEEP_INTERVAL: full collection of frozen objects (0: never)
    # PILOTFISH_TRACE_TIMEOUT: how long a traced push may take to converge before its trace ends
    trace_timeout: float = 30.0
    # istiod feature flags that change generated config (PILOT_ENABLE_IP_AUTOALLOCATE, ...)
    features: Features = field(default_factory=Features)

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
            ("trace_timeout", "PILOTFISH_TRACE_TIMEOUT", parse_seconds),
        ):
            if key in env:
                values[name] = parse(key, env[key])
        if env.get("POD_NAME"):
            values["pod_name"] = env["POD_NAME"]
        if env.get("REVISION"):
            values["revision"] = env["REVISION"]
        if env.get("ENABLE_NATIVE_SIDECARS", "auto") != "auto":
            values["native_sidecars"] = _boolean("ENABLE_NATIVE_SIDECARS", env["ENABLE_NATIVE_SIDECARS"])
        values["features"] = Features.from_env(env)
        known = {f.name for f in fields(cls)}
        values.update({k: v for k, v in overrides.items() if k in known and v is not None})
        return replace(cls(config_dir=config_dir), **values)


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:80`` too; an empty host is every interface) as (host, port);
    raises ValueError naming the address."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"address {address!r}: want HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def parse_seconds(key: str, text: str) -> float:
    """A duration as ``100ms``, ``1s``, ``2m``, ``24h`` or plain seconds."""
    m = _DURATION.match(text.strip())
    if not m:
        raise SettingsError(f"{key}={text!r}: want a duration such as 100ms, 1s, 2m or 24h")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _boolean(key: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{key}={text!r}: want true or false")


def _positive_int(key: str, text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise SettingsError(f"{key}={text!r}: want a positive integer")
    return int(text)
