"""What the webhook's injection reads, as one hashable value a worker process can be handed with
each review (it builds the Injector once per distinct inputs but their ProxyConfig resources,
which each injection reads, and keeps it)."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from app.api.mesh import MeshConfig
from app.inject.config import default_injection_config, default_values, parse_injection_config
from app.inject.injector import Injector
from app.inject.proxy_config import NO_PROXY_CONFIGS, ProxyConfigs
from app.inject.values import parse_values


@dataclass(frozen=True)
class InjectionInputs:
    config: str | None  # istio-sidecar-injector's `config` (None: what istiod's chart renders by default)
    values: str | None  # its `values` (None: the chart's defaults)
    mesh: bytes  # the MeshConfig in force, serialized
    revision: str = "default"
    native_sidecars: bool = True
    # where injected proxies reach pilotfish (xDS and CA) when neither the mesh config's
    # defaultConfig.discoveryAddress nor the values' global.caAddress says
    control_plane_address: str = "istiod.istio-system.svc:15012"
    compliance_policy: str = ""
    proxy_configs: ProxyConfigs = NO_PROXY_CONFIGS


def injector_for(inputs: InjectionInputs) -> Injector:
    """The Injector of ``inputs`` (the same one while all but their ProxyConfigs are the same:
    a new ProxyConfig resource does not parse the templates again)."""
    return _injector(dataclasses.replace(inputs, proxy_configs=NO_PROXY_CONFIGS))


@functools.lru_cache(maxsize=4)
def _injector(inputs: InjectionInputs) -> Injector:
    config = (
        default_injection_config()
        if inputs.config is None
        else parse_injection_config(inputs.config, "--inject-config")
    )
    values = dict(default_values()) if inputs.values is None else parse_values(inputs.values, "--inject-values")
    mesh = MeshConfig.FromString(inputs.mesh)
    if not mesh.default_config.discovery_address:
        mesh.default_config.discovery_address = inputs.control_plane_address
    global_values = dict(values.get("global") or {})
    if not global_values.get("caAddress"):
        global_values["caAddress"] = inputs.control_plane_address
        values["global"] = global_values
    return Injector.build(config, values, mesh, revision=inputs.revision, native_sidecars=inputs.native_sidecars,
                          compliance_policy=inputs.compliance_policy)  # fmt: skip
