"""``pilotfish explain``: the config objects, services and endpoint shards that went into one
resource a proxy is served, from a config directory (offline, as ``config-dump``) or from a
running server (``--server``, for a connected proxy, through ``/debug/explain``)."""

from __future__ import annotations

import argparse
import json
import os
import urllib.parse
from pathlib import Path
from typing import Any

from app.cli.clients import fetch_json
from app.cli.node_args import add_node_arguments, node_metadata
from app.errors import PilotfishError


def add_commands(sub: Any) -> None:
    explain = sub.add_parser("explain", help="which config objects, services and endpoints made one resource")
    explain.set_defaults(run=_print_explain)
    explain.add_argument("name", metavar="NAME", help="the resource's name (a cluster, listener, route, ...)")
    explain.add_argument("--type", required=True, help="cds, eds, lds, rds, nds or sds")
    where = explain.add_mutually_exclusive_group(required=True)
    where.add_argument("--config-dir", type=Path, help="explain offline, for the mesh this directory holds")
    where.add_argument("--server", help="explain for a proxy connected to this server (its monitoring address)")
    add_node_arguments(explain, ("--proxy", "--node-id"), required=False)
    explain.add_argument("-o", "--output", choices=("text", "json"), default="text")


def explain(args: argparse.Namespace) -> dict[str, Any]:
    """The explanation as ``/debug/explain`` answers it."""
    if not args.node_id:
        raise PilotfishError("explain: --proxy is required (the node id offline, POD.NAMESPACE online)")
    if args.server:
        query = urllib.parse.urlencode({"proxyID": args.node_id, "type": args.type, "name": args.name})
        found: dict[str, Any] = fetch_json(f"{args.server.rstrip('/')}/debug/explain?{query}")
        return found
    from app.environment import Environment
    from app.model.features import Features
    from app.model.proxy import build_proxy
    from app.sources.files import FileSource
    from app.xds.cache import ResourceCache
    from app.xds.explain import explain_resource, type_url_of
    from app.xds.generators.source import XdsGenerator

    type_url = type_url_of(args.type)
    source = FileSource(args.config_dir)
    env = Environment(features=Features.from_env(os.environ))
    env.apply(source.load())
    proxy = build_proxy(args.node_id, node_metadata(args))
    generator = XdsGenerator(ResourceCache(), env.build_push_context(None))
    return explain_resource(generator, proxy, type_url, args.name, env.config_object).json()


def text(found: dict[str, Any]) -> str:
    lines = [f"{found['type']} {found['name']} for {found['proxy']}:"]
    lines.append("  config:")
    for c in found["configs"]:
        origin = c.get("file") or (f"resourceVersion {c['resourceVersion']}" if c.get("resourceVersion") else "")
        where = f"{c['namespace']}/{c['name']}" if c["namespace"] else c["name"]
        lines.append(f"    {c['kind']} {where}" + (f"  ({origin})" if origin else ""))
    if not found["configs"]:
        lines.append("    (none: the mesh config only)")
    if found["services"]:
        lines.append("  services:")
        lines.extend(f"    {s['hostname']} ({s['registry']} {s['namespace']}/{s['name']})" for s in found["services"])
    if found["endpointShards"]:
        lines.append("  endpoint shards:")
        lines.extend(
            f"    {e['hostname']} ({e['namespace']}): {e['endpoints']} endpoints" for e in found["endpointShards"]
        )
    return "\n".join(lines)


def _print_explain(args: argparse.Namespace) -> int:
    found = explain(args)
    print(json.dumps(found, indent=2) if args.output == "json" else text(found))
    return 0
