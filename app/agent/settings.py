"""The node agent's addresses, paths and certificate choices, with pilot-agent's defaults: a
module of its own, so the command line lists them without importing the agent."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """pilot-agent's defaults; paths relative to the working directory, as pilot-agent's."""

    discovery_address: str = "istiod.istio-system.svc:15012"  # as pilot-agent: the Service the chart names
    xds_socket: Path = Path("./etc/istio/proxy/XDS")
    sds_socket: Path = Path("./var/run/secrets/workload-spiffe-uds/socket")
    # security: with a root certificate the agent talks TLS to the control plane, gets a
    # workload certificate from its CA and serves it to Envoy over SDS
    ca_address: str = ""  # "": the discovery address
    token_file: Path = Path("./var/run/secrets/tokens/istio-token")
    root_cert: Path = Path("./var/run/secrets/istio/root-cert.pem")
    cert_ttl: datetime.timedelta = datetime.timedelta(hours=24)
    key_type: str = "ec"  # ec (ECDSA P-256) or rsa (RSA 2048)
    trust_domain: str = "cluster.local"
    bootstrap_path: Path = Path("./etc/istio/proxy/envoy-rev.json")
    dns_address: str = "127.0.0.1:15053"
    status_address: str = "0.0.0.0:15021"
    envoy_admin_address: str = "127.0.0.1:15000"
    envoy_binary: str = "envoy"
    resolv_conf: Path = Path("/etc/resolv.conf")
    dns_upstreams: tuple[str, ...] = ()  # HOST:PORT; empty: the resolv.conf nameservers
    envoy_log_level: str | None = None
