"""``pilotfish diff``: what a change would push to every proxy, before it is applied; offline
(``--config-dir``: the mesh the directory holds, its proxies read from its Pods) or against a
running server (``--server``: its ``POST /debug/diff``, for the proxies connected to it)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from app.errors import PilotfishError, SettingsError

_TIMEOUT = 600.0  # seconds a server may take over a preview (mesh-1k: see bench/preview_cost.py)


def add_commands(sub: Any) -> None:
    diff = sub.add_parser("diff", help="what a change would push to every proxy, without applying it")
    diff.set_defaults(run=diff_command)
    where = diff.add_mutually_exclusive_group(required=True)
    where.add_argument("--config-dir", type=Path, help="the mesh as this directory holds it (offline)")
    where.add_argument("--server", help="a running pilotfish's monitoring address, e.g. http://127.0.0.1:15014")
    diff.add_argument("-f", "--filename", type=Path, action="append", default=[], help="objects to add or update")
    diff.add_argument("--delete", action="append", default=[], metavar="KIND/NS/NAME", help="an object to delete")
    diff.add_argument("--proxy", action="append", default=[], metavar="ID",
                      help="only this proxy (POD.NAMESPACE), or a whole node id to add one; repeatable")  # fmt: skip
    diff.add_argument("--show-diff", action="store_true", help="a unified diff of each modified resource's JSON")
    diff.add_argument("-o", "--output", choices=("summary", "json"), default="summary")
    diff.add_argument("--fail-on-reach", type=int, metavar="N", help="exit 2 when more than N proxies are reached")


def offline_report(
    config_dir: Path, files: list[Path], deletes: list[str], proxies: list[str], show: bool
) -> dict[str, Any]:
    """The preview of a change to the mesh ``config_dir`` holds, for its proxies."""
    from app.environment import Environment
    from app.model.features import Features
    from app.preview.change import parse_delete
    from app.preview.proxies import Watching, envoy_watches, mesh_proxies, select_proxies
    from app.preview.push import preview
    from app.preview.render import report
    from app.preview.request import DiffRequest
    from app.sources.files import FileSource, load_config_file
    from app.xds.generators.reference import reference_source

    if not config_dir.is_dir():
        raise SettingsError(f"--config-dir {config_dir}: not a directory")
    source = FileSource(config_dir)
    env = Environment(features=Features.from_env(os.environ))
    env.apply(source.load())
    for error in source.rejections():
        logging.getLogger("pilotfish").warning("%s", error)
    objects = source.objects()
    served = reference_source(env.build_push_context(None))
    # with their pods' labels and locality, as the server gives a connected proxy
    chosen = [env.registry.with_workload_labels(p) for p in select_proxies(mesh_proxies(objects), proxies)]
    watching = [Watching(p, envoy_watches(p), synced=True) for p in chosen]
    loaded = []
    for path in files:
        result = load_config_file(path, mesh=False, strict=True)
        if result is None:
            raise SettingsError(f"-f {path}: no such file")
        loaded.append(result)
    request = DiffRequest((), tuple(parse_delete(d) for d in deletes), (), show)
    proposal = request.proposal({obj.key: obj for obj in objects}, loaded)
    return report(preview(env, served, watching, proposal, show_diff=show))


def server_report(server: str, files: list[Path], deletes: list[str], proxies: list[str], show: bool) -> dict[str, Any]:
    """The preview a running server makes (``POST /debug/diff``)."""
    from app.preview.request import request_body

    texts = []
    for path in files:
        try:
            texts.append((str(path), path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as e:
            raise SettingsError(f"-f {path}: cannot read: {e}") from None
    body = json.dumps(request_body(texts, deletes, proxies, show)).encode()
    req = urllib.request.Request(f"{server.rstrip('/')}/debug/diff", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=_TIMEOUT) as response:
            found: dict[str, Any] = json.load(response)
    except urllib.error.HTTPError as e:  # the server says why
        raise PilotfishError(f"{server}: {e.code}: {e.read().decode(errors='replace').strip()}") from None
    except (OSError, ValueError) as e:
        raise PilotfishError(f"{server}: {e}") from None
    return found


def diff_command(args: argparse.Namespace) -> int:
    from app.preview.render import summary

    if not args.filename and not args.delete:
        raise SettingsError("diff: give the change: -f FILE and/or --delete KIND/NS/NAME")
    if args.config_dir is not None:
        found = offline_report(args.config_dir, args.filename, args.delete, args.proxy, args.show_diff)
    else:
        found = server_report(args.server, args.filename, args.delete, args.proxy, args.show_diff)
    doc = found["preview"]
    if args.output == "json":
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        sys.stderr.write(found["diff"])
    else:
        sys.stdout.write(summary(doc, found["messages"]))
        sys.stdout.write(found["diff"])
    if args.fail_on_reach is not None and len(doc["proxies"]) > args.fail_on_reach:
        print(
            f"pilotfish: the change reaches {len(doc['proxies'])} proxies, more than {args.fail_on_reach}",
            file=sys.stderr,
        )
        return 2
    return 0
