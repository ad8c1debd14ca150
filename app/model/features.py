"""istiod feature flags that change generated config, read by their istiod names.

istiod keeps these as process globals (pilot/pkg/features); here they are one immutable value
the Environment hands every PushContext, so a generator reads them like any other input and
config-dump and serve read them from the environment the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.config.go_strconv import go_bool
from app.errors import SettingsError
from app.model.jwks import fetch_mode


def parse_bool(key: str, text: str) -> bool:
    """A boolean as Go's strconv.ParseBool reads it (istiod's env flags and StringBool metadata)."""
    value = go_bool(text.strip())
    if value is not None:
        return value
    raise SettingsError(f"{key}={text!r}: want true or false")


@dataclass(frozen=True, slots=True)
class Features:
    # PILOT_ENABLE_IP_AUTOALLOCATE: ServiceEntries without addresses use the addresses istiod's
    # allocation controller records in their status (status.addresses)
    enable_ip_autoallocate: bool = True
    # ENABLE_MULTICLUSTER_HEADLESS: a headless service's name resolves to same-network endpoints
    # of every cluster, not only the proxy's own
    multicluster_headless: bool = True
    # ENABLE_TLS_ON_SIDECAR_INGRESS: a Sidecar ingress entry's own tls terminates on its port
    tls_on_sidecar_ingress: bool = False
    # PILOT_ALLOW_SIDECAR_SERVICE_INBOUND_LISTENER_MERGE: a Sidecar with ingress entries keeps
    # the service ports they do not name
    sidecar_service_inbound_listener_merge: bool = False
    # PILOT_JWT_ENABLE_REMOTE_JWKS: who fetches a RequestAuthentication's jwksUri keys
    # (app/model/jwks.py: "istiod" the control plane, "envoy" the proxy, "hybrid" either)
    jwks_fetch_mode: str = "istiod"
    # PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS: a workload's CUSTOM policies may name more
    # than one provider (else every one of them denies what it matches)
    multiple_custom_authz_providers: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Features:
        """The flags set in ``env`` (istiod's names), istiod's defaults for the rest."""
        values: dict[str, bool] = {}
        for name, key in (
            ("enable_ip_autoallocate", "PILOT_ENABLE_IP_AUTOALLOCATE"),
            ("multicluster_headless", "ENABLE_MULTICLUSTER_HEADLESS"),
            ("tls_on_sidecar_ingress", "ENABLE_TLS_ON_SIDECAR_INGRESS"),
            ("sidecar_service_inbound_listener_merge", "PILOT_ALLOW_SIDECAR_SERVICE_INBOUND_LISTENER_MERGE"),
            ("multiple_custom_authz_providers", "PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS"),
        ):
            if key in env:
                values[name] = parse_bool(key, env[key])
        mode = fetch_mode(env.get("PILOT_JWT_ENABLE_REMOTE_JWKS", "istiod").strip())
        return cls(**values, jwks_fetch_mode=mode)
