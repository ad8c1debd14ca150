"""``proxy-status`` and ``proxy-config``: istioctl-like clients of a running pilotfish, over its
monitoring port's debug endpoints."""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import yaml

from app.debug.proxy_config import SECTIONS, SHORT
from app.debug.status import status_table
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


def proxy_status(args: argparse.Namespace) -> int:
    print(status_table(fetch_json(f"{args.server.rstrip('/')}/debug/syncz")))
    return 0


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
