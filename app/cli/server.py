"""``pilotfish serve``: the control plane.

The control plane's modules (``app.runtime`` and all it serves with) are imported by ``run``, not
here: building the parser, ``--help`` and the other commands do not pay for them, and ``serve``
imports them with the collector paused (``app.heap.pause_collection``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app import heap
from app.errors import PilotfishError
from app.sources.kube.pool import validation_pool

if TYPE_CHECKING:
    from app.settings import Settings
    from app.telemetry.tracing import Tracing
    from app.workers import WorkerPool

MAX_COLLECTION_PAUSE = 10.0  # seconds start-up may run without the cyclic collector (app/heap.py)


def add_commands(sub: Any) -> None:
    serve = sub.add_parser("serve", help="serve xDS for the mesh config of a directory and/or a Kubernetes cluster")
    serve.set_defaults(run=run)
    serve.add_argument("--config-dir", type=Path, help="a directory of YAML config files")
    serve.add_argument(
        "--kubeconfig",
        type=Path,
        help="read config from this cluster (default: $KUBECONFIG; in a pod without either flag, the pod's own)",
    )
    serve.add_argument("--mesh-config", type=Path, help="MeshConfig YAML file; overrides the istio ConfigMap")
    serve.add_argument("--xds-address", default=None, help="plaintext xDS gRPC (default 0.0.0.0:15010; '' for none)")
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


def run(args: argparse.Namespace) -> int:
    if args.config_dir is not None and not args.config_dir.is_dir():
        raise PilotfishError(f"--config-dir {args.config_dir}: not a directory")
    kubeconfig, in_cluster = kube_target(args.kubeconfig, args.config_dir, os.environ)
    if args.config_dir is None and kubeconfig is None and not in_cluster:
        raise PilotfishError("serve: give --config-dir, --kubeconfig (or KUBECONFIG), or run in a Kubernetes pod")
    # the Kubernetes source's validation worker starts before the runtime is imported: its own
    # start-up runs beside those imports, not after them
    kube_pool = validation_pool() if kubeconfig is not None or in_cluster else None
    if kube_pool is not None:
        kube_pool.start()
    # start-up allocates only what lives as long as the process: no cyclic collection walks it
    # before the runtime is ready (HeapKeeper.started resumes it)
    heap.pause_collection()
    try:
        _serve_with(args, kubeconfig, in_cluster, kube_pool)
    finally:
        heap.resume_collection()  # in-process callers: start-up failed before the runtime resumed it
        if kube_pool is not None:
            kube_pool.close()
    return 0


def _serve_with(
    args: argparse.Namespace, kubeconfig: Path | None, in_cluster: bool, kube_pool: WorkerPool | None
) -> None:
    import uvloop

    from app.settings import Settings
    from app.telemetry.tracing import tracing_from_env

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
    uvloop.run(_serve(settings, tracing_from_env(os.environ, settings.trace_timeout), kube_pool))


async def _serve(settings: Settings, tracing: Tracing | None, kube_pool: WorkerPool | None) -> None:
    from app.runtime import Runtime

    loop = asyncio.get_running_loop()
    # a start-up still going after this long is waiting (for an API server that does not answer,
    # for the permission to list), not building the heap: the collector runs while it waits
    loop.call_later(MAX_COLLECTION_PAUSE, heap.resume_collection)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await Runtime(settings, tracing, kube_pool=kube_pool).run(stop)


def kube_target(flag: Path | None, config_dir: Path | None, env: Mapping[str, str]) -> tuple[Path | None, bool]:
    """(kubeconfig, in-cluster): the flag, else $KUBECONFIG (its first file, as kubectl), else the
    pod's service account when running in one and no config dir was given."""
    if flag is not None:
        return flag, False
    if env.get("KUBECONFIG"):
        return Path(env["KUBECONFIG"].split(os.pathsep)[0]), False
    return None, config_dir is None and bool(env.get("KUBERNETES_SERVICE_HOST"))
