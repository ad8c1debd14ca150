"""Istio's injection test settings, as inject_test.go's getInjectionSettings makes them: the
istio-discovery chart of the pinned istio module rendered (here with helm, there with the
operator) with the case's flags and IstioOperator file, its ``istio-sidecar-injector`` ConfigMap
giving the injection config and values and its ``istio`` ConfigMap the mesh config."""

from __future__ import annotations

import functools
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from app.api.mesh import MeshConfig
from app.config.mesh import parse_mesh_config
from app.inject.config import InjectionConfig, parse_injection_config
from app.inject.values import parse_values
from tests.support.cluster import helm
from tests.support.peers import istio_module_dir

CHART = Path("manifests/charts/istio-control/istio-discovery")
TESTDATA = Path("pkg/kube/inject/testdata/inject")


def injection_testdata() -> Path:
    return istio_module_dir() / TESTDATA


def _helm_flag(flag: str) -> str:
    """An operator --set flag as the istiod chart's value: ``values.X`` is X; enabling the CNI
    component sets the chart's ``cni.enabled`` (the operator's values.pilot.cni.enabled)."""
    key, _, value = flag.partition("=")
    if key == "components.cni.enabled":
        return f"cni.enabled={value}"
    return f"{key.removeprefix('values.')}={value}"


@functools.cache
def injection_settings(
    flags: tuple[str, ...] = (), iop: str = ""
) -> tuple[InjectionConfig, dict[str, Any], MeshConfig]:
    args = [str(helm()), "template", "istiod", str(istio_module_dir() / CHART), "--namespace", "istio-system",
            "--show-only", "templates/istiod-injector-configmap.yaml", "--show-only", "templates/configmap.yaml",
            "--set", "global.istioNamespace=istio-system", "--set", "global.configValidation=true"]  # fmt: skip
    for flag in flags:
        args += ["--set", _helm_flag(flag)]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values_file:
        if iop:
            spec = yaml.safe_load((injection_testdata() / iop).read_text())["spec"]
            yaml.safe_dump(spec.get("values") or {}, values_file)
            values_file.flush()
            args += ["--values", values_file.name]
        done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    maps = {d["metadata"]["name"]: d["data"] for d in yaml.safe_load_all(done.stdout) if d}
    injector = maps["istio-sidecar-injector"]
    mesh = parse_mesh_config(yaml.safe_load(maps["istio"]["mesh"]))
    return parse_injection_config(injector["config"]), parse_values(injector["values"]), mesh
