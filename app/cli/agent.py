"""``pilotfish agent``: the node agent beside one Envoy (as istio's pilot-agent), and its
``iptables`` helper. The agent's modules are imported by ``run``, not with the parser."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.agent.settings import AgentSettings
from app.errors import PilotfishError, SettingsError

if TYPE_CHECKING:
    from app.agent.run import Agent


def add_commands(sub: Any) -> None:
    agent = sub.add_parser("agent", help="the node agent beside one Envoy (as istio's pilot-agent)")
    agent.set_defaults(run=run)
    d = AgentSettings()
    agent.add_argument("--discovery-address", default=d.discovery_address, help="the control plane's xDS HOST:PORT")
    agent.add_argument("--xds-socket", type=Path, default=d.xds_socket, help="Unix socket Envoy's ADS connects to")
    agent.add_argument("--sds-socket", type=Path, default=d.sds_socket, help="Unix socket of the SDS cluster")
    agent.add_argument("--bootstrap-path", type=Path, default=d.bootstrap_path, help="Envoy's bootstrap file")
    agent.add_argument("--dns-address", default=d.dns_address, help="the DNS proxy's HOST:PORT (UDP and TCP)")
    agent.add_argument("--status-address", default=d.status_address, help="/healthz/ready HOST:PORT")
    agent.add_argument("--envoy-admin-address", default=d.envoy_admin_address, help="Envoy's admin HOST:PORT")
    agent.add_argument("--envoy-binary", help="Envoy to run (default: envoy on PATH, else beside this Python)")
    agent.add_argument("--envoy-log-level", help="Envoy's -l (trace, debug, info, warning, error)")
    agent.add_argument("--proxy-type", choices=("sidecar", "router"), default="sidecar")
    agent.add_argument("--resolv-conf", type=Path, default=d.resolv_conf, help="upstream resolvers and search domains")
    agent.add_argument("--dns-upstream", help="HOST:PORT,... resolvers to forward to (default: resolv.conf's)")
    agent.add_argument("--bootstrap-only", action="store_true", help="print Envoy's bootstrap and exit")
    agent.add_argument("--ca-address", default="", help="the CA's HOST:PORT (default: the discovery address)")
    agent.add_argument("--token-file", type=Path, default=d.token_file, help="the pod's token for the CA and xDS")
    agent.add_argument(
        "--root-cert", type=Path, default=d.root_cert, help="the mesh root; if present: TLS upstream, SDS certificates"
    )
    agent.add_argument("--cert-ttl", default="24h", help="the workload certificate's requested lifetime")
    agent.add_argument("--key-type", choices=("ec", "rsa"), default=d.key_type, help="ECDSA P-256 or RSA 2048")
    agent.add_argument("--trust-domain", default=d.trust_domain, help="the mesh trust domain")
    tools = agent.add_subparsers(dest="agent_command")
    rules = tools.add_parser("iptables", help="print the iptables rules that capture DNS to the agent (not applied)")
    rules.add_argument("--resolv-conf", type=Path, default=d.resolv_conf, help="the resolvers to capture")
    rules.add_argument("--capture-all", action="store_true", help="capture all port-53 traffic, not only to them")
    rules.add_argument("--dns-port", type=int, default=15053, help="the agent's DNS port")


def run(args: argparse.Namespace) -> int:
    import uvloop

    from app.agent.bootstrap import agent_config
    from app.agent.dns import parse_resolv_conf
    from app.agent.iptables import dns_capture_rules
    from app.agent.run import Agent, host_ips
    from app.settings import parse_seconds, split_address

    if args.agent_command == "iptables":
        resolv = parse_resolv_conf(_read(args.resolv_conf))
        servers = [host for host, _ in resolv.nameservers]
        print(dns_capture_rules(servers, capture_all=args.capture_all, dns_port=args.dns_port))
        return 0
    try:
        config = agent_config(os.environ, proxy_type=args.proxy_type, host_ips=host_ips())
        upstreams = tuple(a.strip() for a in (args.dns_upstream or "").split(",") if a.strip())
        for address in (args.discovery_address, args.dns_address, args.status_address, *upstreams):
            split_address(address)
        if args.ca_address:
            split_address(args.ca_address)
        cert_ttl = datetime.timedelta(seconds=parse_seconds("--cert-ttl", args.cert_ttl))
    except (ValueError, SettingsError) as e:
        raise PilotfishError(f"agent: {e}") from None
    settings = AgentSettings(
        discovery_address=args.discovery_address,
        xds_socket=args.xds_socket,
        sds_socket=args.sds_socket,
        bootstrap_path=args.bootstrap_path,
        dns_address=args.dns_address,
        status_address=args.status_address,
        envoy_admin_address=args.envoy_admin_address,
        envoy_binary=_envoy_binary(args.envoy_binary),
        resolv_conf=args.resolv_conf,
        dns_upstreams=upstreams,
        envoy_log_level=args.envoy_log_level,
        ca_address=args.ca_address,
        token_file=args.token_file,
        root_cert=args.root_cert,
        cert_ttl=cert_ttl,
        key_type=args.key_type,
        trust_domain=args.trust_domain,
    )
    runner = Agent(settings, config)
    if args.bootstrap_only:
        print(runner.bootstrap())
        return 0
    return uvloop.run(_run(runner))


async def _run(runner: Agent) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return await runner.run(stop)


def _envoy_binary(flag: str | None) -> str:
    if flag:
        return flag
    beside = Path(sys.executable).parent / "envoy"
    return shutil.which("envoy") or (str(beside) if beside.exists() else "envoy")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise PilotfishError(f"{path}: {e.strerror}") from None
