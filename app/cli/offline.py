"""The offline tools, reading files only: ``validate``, ``config-dump`` and ``kube-inject``; each
imports the modules it runs on when it runs."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.node_args import add_node_arguments, node_metadata
from app.errors import PilotfishError

if TYPE_CHECKING:
    from app.model.proxy import Proxy
    from app.model.push_context import PushContext

# config-dump --type: the function of app.debug.dump that makes it (imported when the command runs)
_DUMPS = {
    "cds": "dump_clusters",
    "eds": "dump_endpoints",
    "lds": "dump_listeners",
    "rds": "dump_routes",
    "nds": "dump_name_table",
    "all": "dump_all",
    "scope": "dump_scope",
}


def add_commands(sub: Any) -> None:
    inject = sub.add_parser("kube-inject", help="inject sidecars into a manifest, like istioctl kube-inject")
    inject.set_defaults(run=kube_inject)
    inject.add_argument("-f", "--filename", type=Path, required=True, help="input manifest ('-' for stdin)")
    inject.add_argument("-o", "--output", type=Path, help="write the injected manifest here (default stdout)")
    inject.add_argument("--valuesFile", type=Path, help="injection values (istio-sidecar-injector's `values`)")
    inject.add_argument("--meshConfigFile", type=Path, help="mesh config YAML")
    inject.add_argument("--injectConfigFile", type=Path, help="injection config (istio-sidecar-injector's `config`)")
    inject.add_argument("-r", "--revision", default="default", help="the control plane revision")
    dump = sub.add_parser("config-dump", help="print what one proxy would receive, as JSON")
    dump.set_defaults(run=_print_config_dump)
    dump.add_argument("--config-dir", required=True, type=Path)
    add_node_arguments(dump)
    dump.add_argument("--type", choices=sorted(_DUMPS), default="cds")
    check = sub.add_parser("validate", help="validate config files offline, one line per problem")
    check.set_defaults(run=lambda args: validate(args.paths))
    check.add_argument("paths", nargs="+", type=Path, metavar="FILE_OR_DIR")


def kube_inject(args: argparse.Namespace) -> int:
    from app.inject.command import kube_inject_command

    kube_inject_command(args.filename, args.output, args.valuesFile, args.meshConfigFile,
                        args.injectConfigFile, args.revision, os.environ)  # fmt: skip
    return 0


def config_dump(args: argparse.Namespace) -> dict[str, Any]:
    from app.debug import dump
    from app.environment import Environment
    from app.model.features import Features
    from app.model.proxy import build_proxy
    from app.sources.files import FileSource

    dumper: Callable[[Proxy, PushContext], dict[str, Any]] = getattr(dump, _DUMPS[args.type])
    source = FileSource(args.config_dir)
    env = Environment(features=Features.from_env(os.environ))
    env.apply(source.load())
    for error in source.rejections():
        logging.getLogger("pilotfish").warning("%s", error)
    proxy = build_proxy(args.node_id, node_metadata(args))
    push = env.build_push_context(None)
    return dumper(proxy, push)


def _print_config_dump(args: argparse.Namespace) -> int:
    json.dump(config_dump(args), sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
    return 0


def validate(paths: Sequence[Path]) -> int:
    """``pilotfish validate``: every problem of the files (directories: their config files),
    one line each, as the file source would report it; 1 when there is any."""
    from app.config.validation.spec import object_warnings
    from app.sources.files import MESH_FILE, list_config_files, load_config_file

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
            for line in result.unsupported:  # valid for istiod, and not applied here: not a problem
                print(f"warning: {line}")
            for obj in result.objects:  # istioctl validate's warnings, and what is not applied here
                for warning in object_warnings(obj):
                    print(f"warning: {obj.source}: {obj.kind} {obj.namespaced_name}: {warning}")
            problems += len(result.rejected)
    return 1 if problems else 0
