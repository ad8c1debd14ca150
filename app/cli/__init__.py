"""The ``pilotfish`` command. Each family of subcommands lives in a module of its own and adds
its parsers here: the control plane (``serve``), the node agent (``agent``), the offline tools
that read files (``validate``, ``config-dump``, ``kube-inject``) and the istioctl-like clients of
a running server (``proxy-status``, ``proxy-config``, ``compare-istiod``); ``explain`` and ``diff``
are both.

A module's parsers are built from light imports only; each command's handler imports the modules
it runs on when it runs, so the parser, ``--help`` and any one command do not import every other
command's (all of them took 0.75 s before ``serve`` could start)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app import __version__, logs
from app.cli import agent, clients, explain, offline, preview, server
from app.errors import PilotfishError


def _version(args: argparse.Namespace) -> int:
    print(f"pilotfish {__version__}")
    return 0


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(prog="pilotfish", description="An Istio-compatible control plane.")
    out.add_argument("--log-format", choices=("text", "json"), default="text", help="json: one object per line")
    sub = out.add_subparsers(dest="command", required=True)
    server.add_commands(sub)
    offline.add_commands(sub)
    clients.add_commands(sub)
    explain.add_commands(sub)
    preview.add_commands(sub)
    agent.add_commands(sub)
    sub.add_parser("version", help="print the version").set_defaults(run=_version)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand: its exit status, 2 with one line on stderr for a PilotfishError."""
    args = parser().parse_args(argv)
    logs.configure(args.log_format)
    try:
        status: int = args.run(args)
    except PilotfishError as e:
        print(f"pilotfish: {e}", file=sys.stderr)
        return 2
    return status
