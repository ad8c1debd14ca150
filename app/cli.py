"""The ``pilotfish`` command: serve, agent, validate, proxy-status, proxy-config, config-dump and version."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import os
import shutil
import signal
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import uvloop
import yaml

from app import __version__, logs
from app.agent.bootstrap import agent_config
from app.agent.dns import parse_resolv_conf
from app.agent.iptables import dns_capture_rules
from app.agent.run import Agent, AgentSettings, host_ips
from app.debug.dump import (
    dump_all,
    dump_clusters,
    dump_endpoints,
    dump_listeners,
    dump_name_table,
    dump_routes,
    dump_scope,
)
from app.debug.proxy_config import SECTIONS, SHORT
from app.debug.status import status_table
from app.environment import Environment
from app.errors import PilotfishError, SettingsError
from app.inject.command import kube_inject_command
from app.model.features import Features
from app.model.proxy import Proxy, build_proxy
from app.model.push_context import PushContext
from app.runtime import Runtime
from app.settings import Settings, parse_seconds, split_address
from app.sources.files import MESH_FILE, FileSource, list_config_files, load_config_file
from app.telemetry.tracing import Tracing, tracing_from_env

_DUMPS: dict[str, Callable[[Proxy, PushContext], dict[str, Any]]] = {
    "cds": dump_clusters,
    "eds": dump_endpoints,
    "lds": dump_listeners,
    "rds": dump_routes,
    "nds": dump_name_table,
    "all": dump_all,
    "scope": dump_scope,
}


def _parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"label {part!r}: want key=value")
        labels[key] = value
    return labels


def _parse_metadata(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"metadata {text!r}: want KEY=VALUE")
    return key, value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pilotfish", description="An Istio-compatible control plane.")
    parser.add_argument("--log-format", choices=("text", "json"), default="text", help="json: one object per line")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve xDS for the mesh config of a directory and/or a Kubernetes cluster")
    serve.add_argument("--config-dir", type=Path, help="a directory of YAML config files")
    serve.add_argument(
        "--kubeconfig",
        type=Path,
        help="read config from this cluster (default: $KUBECONFIG; in a pod without either flag, the pod's own)",
    )
    serve.add_argument("--mesh-config", type=Path, help="MeshConfig YAML file; overrides the istio ConfigMap")
    serve.add_argument(
        "--xds-address", default=None, help="plaintext xDS gRPC (default 0.0.0.0:15010; '' for none)"
    )
    serve.add_argument(
        "--ca-dir", type=Path, help="run the workload CA and the secure port with the CA files here (made if empty)"
    )
    serve.add_argument(
        "--secure-xds-address", default=None, help="TLS xDS and certificate service (default 0.0.0.0:15012)"
    )
    serve.add_argument(
        "--trusted-token-file", type=Path, help="bearer tokens the secure port accepts: TOKEN NAMESPACE SA per line"
    )
    serve.add_argument("--http-address", default=None, help="monitoring and debug HTTP (default 0.0.0.0:15014)")
    serve.add_argument("--system-namespace", default=None, help="the root namespace (default istio-system)")
    serve.add_argument(
        "--webhook-address", default=None, help="admission webhooks HTTPS (default 0.0.0.0:15017; '' for none)"
    )
    serve.add_argument("--webhook-cert", type=Path, help="the webhook's TLS certificate (PEM); with --webhook-key")
    serve.add_argument("--webhook-key", type=Path, help="the webhook's TLS private key (PEM)")
    serve.add_argument("--inject-config", type=Path, help="injection config (istio-sidecar-injector's `config`)")
    serve.add_argument("--inject-values", type=Path, help="injection values (istio-sidecar-injector's `values`)")
    serve.add_argument(
        "--revision", default=None, help="the istio.io/rev this control plane serves (env REVISION; default: default)"
    )
    inject = sub.add_parser("kube-inject", help="inject sidecars into a manifest, like istioctl kube-inject")
    inject.add_argument("-f", "--filename", type=Path, required=True, help="input manifest ('-' for stdin)")
    inject.add_argument("-o", "--output", type=Path, help="write the injected manifest here (default stdout)")
    inject.add_argument("--valuesFile", type=Path, help="injection values (istio-sidecar-injector's `values`)")
    inject.add_argument("--meshConfigFile", type=Path, help="mesh config YAML")
    inject.add_argument("--injectConfigFile", type=Path, help="injection config (istio-sidecar-injector's `config`)")
    inject.add_argument("-r", "--revision", default="default", help="the control plane revision")
    dump = sub.add_parser("config-dump", help="print what one proxy would receive, as JSON")
    dump.add_argument("--config-dir", required=True, type=Path)
    dump.add_argument("--node-id", required=True, help="TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local")
    dump.add_argument("--namespace", help="the proxy's namespace (default: from the node id)")
    dump.add_argument("--labels", type=_parse_labels, default=None, help="k=v,k=v workload labels")
    dump.add_argument("--ip", help="the proxy's IPs, a,b (default: the node id's)")
    dump.add_argument(
        "--metadata",
        type=_parse_metadata,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="node metadata as the proxy sends it (repeatable): DNS_CAPTURE=true, NETWORK=n1, CLUSTER_ID=c1, ...",
    )
    dump.add_argument("--type", choices=sorted(_DUMPS), default="cds")
    status = sub.add_parser("proxy-status", help="each connected proxy's xDS sync state, like istioctl proxy-status")
    status.add_argument("--server", default="http://127.0.0.1:15014", help="pilotfish's monitoring address")
    config = sub.add_parser("proxy-config", help="a connected proxy's config as served, like istioctl proxy-config")
    config.add_argument("section", choices=(*SECTIONS, "all"))
    config.add_argument("proxy_id", metavar="PROXY_ID", help="POD.NAMESPACE (or the connection id from proxy-status)")
    config.add_argument("--server", default="http://127.0.0.1:15014", help="pilotfish's monitoring address")
    config.add_argument("-o", "--output", choices=("short", "json", "yaml"), default="short")
    _agent_parser(sub.add_parser("agent", help="the node agent beside one Envoy (as istio's pilot-agent)"))
    check = sub.add_parser("validate", help="validate config files offline, one line per problem")
    check.add_argument("paths", nargs="+", type=Path, metavar="FILE_OR_DIR")
    sub.add_parser("version", help="print the version")
    return parser


def _agent_parser(agent: argparse.ArgumentParser) -> None:
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


def _envoy_binary(flag: str | None) -> str:
    if flag:
        return flag
    beside = Path(sys.executable).parent / "envoy"
    return shutil.which("envoy") or (str(beside) if beside.exists() else "envoy")


def agent(args: argparse.Namespace) -> int:
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
    return uvloop.run(_run_agent(runner))


async def _run_agent(runner: Agent) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return await runner.run(stop)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise PilotfishError(f"{path}: {e.strerror}") from None


def config_dump(args: argparse.Namespace) -> dict[str, Any]:
    source = FileSource(args.config_dir)
    env = Environment(features=Features.from_env(os.environ))
    env.apply(source.load())
    for error in source.rejections():
        logging.getLogger("pilotfish").warning("%s", error)
    metadata: dict[str, Any] = dict(args.metadata)
    if args.namespace:
        metadata["NAMESPACE"] = args.namespace
    if args.labels is not None:
        metadata["LABELS"] = args.labels
    if args.ip:
        metadata["INSTANCE_IPS"] = args.ip
    proxy = build_proxy(args.node_id, metadata)
    push = env.build_push_context(None)
    return _DUMPS[args.type](proxy, push)


async def _serve(settings: Settings, tracing: Tracing | None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await Runtime(settings, tracing).run(stop)


def serve(args: argparse.Namespace) -> None:
    if args.config_dir is not None and not args.config_dir.is_dir():
        raise PilotfishError(f"--config-dir {args.config_dir}: not a directory")
    kubeconfig, in_cluster = _kube_target(args.kubeconfig, args.config_dir, os.environ)
    if args.config_dir is None and kubeconfig is None and not in_cluster:
        raise PilotfishError("serve: give --config-dir, --kubeconfig (or KUBECONFIG), or run in a Kubernetes pod")
    settings = Settings.from_env(
        args.config_dir,
        os.environ,
        kubeconfig=kubeconfig,
        in_cluster=in_cluster,
        mesh_config_file=args.mesh_config,
        xds_address=args.xds_address,
        http_address=args.http_address,
        system_namespace=args.system_namespace,
        webhook_address=args.webhook_address,
        webhook_cert=args.webhook_cert,
        webhook_key=args.webhook_key,
        inject_config=args.inject_config,
        inject_values=args.inject_values,
        revision=args.revision,
        ca_dir=args.ca_dir,
        secure_xds_address=args.secure_xds_address,
        trusted_token_file=args.trusted_token_file,
    )
    if (settings.webhook_cert is None) != (settings.webhook_key is None):
        raise PilotfishError("serve: --webhook-cert and --webhook-key go together")
    uvloop.run(_serve(settings, tracing_from_env(os.environ, settings.trace_timeout)))


def validate(paths: Sequence[Path]) -> int:
    """``pilotfish validate``: every problem of the files (directories: their config files),
    one line each, as the file source would report it; 1 when there is any."""
    problems = 0
    for path in paths:
        if not path.exists():
            raise PilotfishError(f"validate: {path}: no such file or directory")
        for file in list_config_files(path) if path.is_dir() else [path]:
            result = load_config_file(file, mesh=file.name == MESH_FILE)
            if result is None:
                print(f"{file}: no such file")
                problems += 1
                continue
            for rejection in result.rejected:
                print(rejection.error)
            problems += len(result.rejected)
    return 1 if problems else 0


def proxy_config(args: argparse.Namespace) -> str:
    query = urllib.parse.urlencode({"proxyID": args.proxy_id})
    dump = _fetch_json(f"{args.server.rstrip('/')}/debug/config_dump?{query}")
    sections = SECTIONS if args.section == "all" else (args.section,)
    if args.output == "short":
        return "\n\n".join(SHORT[s](dump) for s in sections)
    chosen = {s: dump.get(s, []) for s in sections}
    if args.output == "yaml":
        return yaml.safe_dump(chosen, sort_keys=False).rstrip()
    return json.dumps(chosen, indent=2)


def _fetch_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:  # the server says why (e.g. no such connected proxy)
        raise PilotfishError(f"{url}: HTTP {e.code}: {e.read().decode(errors='replace').strip()[:300]}") from e
    except (OSError, ValueError) as e:
        raise PilotfishError(f"{url}: {e}") from e


def _kube_target(flag: Path | None, config_dir: Path | None, env: Mapping[str, str]) -> tuple[Path | None, bool]:
    """(kubeconfig, in-cluster): the flag, else $KUBECONFIG (its first file, as kubectl), else the
    pod's service account when running in one and no config dir was given."""
    if flag is not None:
        return flag, False
    if env.get("KUBECONFIG"):
        return Path(env["KUBECONFIG"].split(os.pathsep)[0]), False
    return None, config_dir is None and bool(env.get("KUBERNETES_SERVICE_HOST"))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logs.configure(args.log_format)
    try:
        if args.command == "version":
            print(f"pilotfish {__version__}")
        elif args.command == "serve":
            serve(args)
        elif args.command == "agent":
            return agent(args)
        elif args.command == "proxy-status":
            print(status_table(_fetch_json(f"{args.server.rstrip('/')}/debug/syncz")))
        elif args.command == "proxy-config":
            print(proxy_config(args))
        elif args.command == "validate":
            return validate(args.paths)
        elif args.command == "kube-inject":
            kube_inject_command(args.filename, args.output, args.valuesFile, args.meshConfigFile,
                                args.injectConfigFile, args.revision, os.environ)  # fmt: skip
        elif args.command == "config-dump":
            json.dump(config_dump(args), sys.stdout, indent=2, sort_keys=False)
            sys.stdout.write("\n")
    except PilotfishError as e:
        print(f"pilotfish: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
