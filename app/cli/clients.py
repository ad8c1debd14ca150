"""Clients of running control planes: ``proxy-status`` and ``proxy-config`` (istioctl-like,
over pilotfish's monitoring port) and ``compare-istiod`` (one proxy's xDS from istiod and from
pilotfish, over ADS, diffed)."""

from __future__ import annotations

import argparse
import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import yaml

from app.cli.node_args import add_node_arguments, node_metadata
from app.debug.proxy_config import SECTIONS, SHORT
from app.debug.status import status_table
from app.debug.xds_diff.diff import TYPES, judged_json, load_expected, report
from app.errors import PilotfishError

DEFAULT_SERVER = "http://127.0.0.1:15014"


def add_commands(sub: Any) -> None:
    status = sub.add_parser("proxy-status", help="each connected proxy's xDS sync state, like istioctl proxy-status")
    status.set_defaults(run=proxy_status)
    status.add_argument("--server", default=DEFAULT_SERVER, help="pilotfish's monitoring address")
    config = sub.add_parser("proxy-config", help="a connected proxy's config as served, like istioctl proxy-config")
    config.set_defaults(run=_print_proxy_config)
    config.add_argument("section", choices=(*SECTIONS, "all"))
    config.add_argument("proxy_id", metavar="PROXY_ID", help="POD.NAMESPACE (or the connection id from proxy-status)")
    config.add_argument("--server", default=DEFAULT_SERVER, help="pilotfish's monitoring address")
    config.add_argument("-o", "--output", choices=("short", "json", "yaml"), default="short")
    compare = sub.add_parser(
        "compare-istiod",
        help="one proxy's xDS from istiod and from pilotfish, diffed (exit 1 on a difference not known to be intended)",
    )
    compare.set_defaults(run=_compare_istiod)
    compare.add_argument("--istiod", required=True, metavar="HOST:PORT", help="istiod's plaintext xDS (port 15010)")
    compare.add_argument("--pilotfish", required=True, metavar="HOST:PORT", help="pilotfish's plaintext xDS")
    add_node_arguments(compare)
    compare.add_argument("--agent", action="store_true", help="fetch NDS too (default: when DNS_CAPTURE=true)")
    compare.add_argument("--types", help=f"comma-separated, of {','.join(TYPES)} (default: all sent)")
    compare.add_argument("--show-intended", action="store_true", help="list each intended difference too")
    compare.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each complete config")
    compare.add_argument("-o", "--output", choices=("text", "json"), default="text")


def proxy_status(args: argparse.Namespace) -> int:
    print(status_table(fetch_json(f"{args.server.rstrip('/')}/debug/syncz")))
    return 0


def _compare_istiod(args: argparse.Namespace) -> int:
    """Both control planes' config for the node, judged against the reviewed list of intended
    differences: 1 when a difference the list does not cover remains (as ``diff`` exits)."""
    from app.debug.xds_diff.compare import compare
    from app.xds.client import node as client_node
    from app.xds.fetch import Resources, fetch

    metadata = node_metadata(args)
    node = client_node(args.node_id, metadata)
    agent = args.agent or metadata.get("DNS_CAPTURE") == "true"

    async def both() -> tuple[Resources, Resources]:
        istiod = await fetch(args.istiod, node, agent, args.timeout)
        return istiod, await fetch(args.pilotfish, node, agent, args.timeout)

    istiod, pilotfish = asyncio.run(both())
    types = [t for t in TYPES if t in args.types.split(",")] if args.types else TYPES
    judged = compare(istiod, pilotfish, load_expected(), types=types)
    if args.output == "json":
        print(json.dumps([judged_json(j, args.show_intended) for j in judged], indent=2))
    else:
        print("\n".join(report(args.node_id, j, show_intended=args.show_intended) for j in judged))
    return 1 if any(j.unlisted for j in judged) else 0


def _print_proxy_config(args: argparse.Namespace) -> int:
    print(proxy_config(args))
    return 0


def proxy_config(args: argparse.Namespace) -> str:
    query = urllib.parse.urlencode({"proxyID": args.proxy_id})
    dump = fetch_json(f"{args.server.rstrip('/')}/debug/config_dump?{query}")
    sections = SECTIONS if args.section == "all" else (args.section,)
    if args.output == "short":
        return "\n\n".join(SHORT[s](dump) for s in sections)
    chosen = {s: dump.get(s, []) for s in sections}
    if args.output == "yaml":
        return yaml.safe_dump(chosen, sort_keys=False).rstrip()
    return json.dumps(chosen, indent=2)


def fetch_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:  # the server says why (e.g. no such connected proxy)
        raise PilotfishError(f"{url}: HTTP {e.code}: {e.read().decode(errors='replace').strip()[:300]}") from e
    except (OSError, ValueError) as e:
        raise PilotfishError(f"{url}: {e}") from e
