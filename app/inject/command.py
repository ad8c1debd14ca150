"""``pilotfish kube-inject``, with istioctl kube-inject's flags (-f, -o, --valuesFile,
--meshConfigFile, --injectConfigFile, --revision): the manifest with sidecars injected, from the
files given, or, for what is not given, what istiod's chart installs by default. As istioctl
without a cluster, native sidecars only when ENABLE_NATIVE_SIDECARS=true (istioctl's auto has no
nodes to ask offline, and turns them off)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import yaml

from app.config.mesh import default_mesh_config, parse_mesh_config
from app.errors import FieldError, SettingsError
from app.inject.config import default_injection_config, default_values, parse_injection_config
from app.inject.injector import Injector
from app.inject.manifest import ManifestError, kube_inject
from app.inject.native_sidecars import detect_native_sidecar, native_sidecar_mode
from app.inject.pipeline import InjectionError
from app.inject.values import parse_values


def _read(path: Path, flag: str) -> str:
    try:
        return sys.stdin.read() if str(path) == "-" else path.read_text()
    except OSError as e:
        raise SettingsError(f"{flag} {path}: {e.strerror}") from e


def kube_inject_command(filename: Path, output: Path | None, values_file: Path | None, mesh_file: Path | None,
                        inject_file: Path | None, revision: str, env: Mapping[str, str]) -> None:  # fmt: skip
    config = default_injection_config()
    if inject_file is not None:
        config = parse_injection_config(_read(inject_file, "--injectConfigFile"), str(inject_file))
    values = dict(default_values())
    if values_file is not None:
        values = parse_values(_read(values_file, "--valuesFile"), str(values_file))
    mesh = default_mesh_config()
    if mesh_file is not None:
        try:
            mesh = parse_mesh_config(yaml.safe_load(_read(mesh_file, "--meshConfigFile")) or {})
        except (yaml.YAMLError, FieldError) as e:
            raise SettingsError(f"--meshConfigFile {mesh_file}: {e}") from e
    native = detect_native_sidecar(native_sidecar_mode(env.get("ENABLE_NATIVE_SIDECARS", "auto")), None)
    injector = Injector.build(
        config, values, mesh, revision="" if revision == "default" else revision,
        native_sidecars=native, compliance_policy=env.get("COMPLIANCE_POLICY", ""),
    )  # fmt: skip
    warnings: list[str] = []
    try:
        out = kube_inject(_read(filename, "-f"), injector, warnings.append)
    except (InjectionError, ManifestError) as e:
        raise SettingsError(f"{filename}: {e}") from e
    if output is None:
        sys.stdout.write(out)
    else:
        try:
            output.write_text(out)
        except OSError as e:
            raise SettingsError(f"-o {output}: {e.strerror}") from e
    if warnings:
        print(file=sys.stderr)
    for warning in warnings:
        print(warning, file=sys.stderr)
