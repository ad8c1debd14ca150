"""Where the Kubernetes source finds its API server: a kubeconfig file, or the pod's own
service account when pilotfish runs in a cluster (kubernetes-asyncio's loaders)."""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import ConfigException, load_incluster_config, new_client_from_config

from app.errors import PilotfishError


class KubeConfigError(PilotfishError):
    """The kubeconfig (or the in-cluster service account) cannot be used."""


async def api_client(kubeconfig: Path | None) -> ApiClient:
    """An API client from ``kubeconfig``, or from the in-cluster service account when None."""
    try:
        if kubeconfig is None:
            configuration = Configuration()
            load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return ApiClient(configuration)
        if not kubeconfig.is_file():
            raise KubeConfigError(f"kubeconfig {kubeconfig}: no such file")
        return await new_client_from_config(config_file=str(kubeconfig))
    except (ConfigException, OSError, ValueError, KeyError, yaml.YAMLError) as e:
        where = f"kubeconfig {kubeconfig}" if kubeconfig is not None else "the in-cluster service account"
        raise KubeConfigError(f"{where}: {e}") from e
