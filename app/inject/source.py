"""What the webhook injects pods with, in a running pilotfish: the --inject-config and
--inject-values files (read and checked once, at start: a bad one stops pilotfish with the
file's name and the reason) and the mesh config in force when each review arrives."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.api.mesh import MeshConfig
from app.errors import SettingsError
from app.inject.config import parse_injection_config
from app.inject.inputs import InjectionInputs, injector_for
from app.inject.values import parse_values
from app.settings import Settings


def _read(path: Path | None, flag: str) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text()
    except OSError as e:
        raise SettingsError(f"{flag} {path}: {e.strerror}") from e


def injection_source(settings: Settings, mesh: Callable[[], MeshConfig]) -> Callable[[], InjectionInputs]:
    config = _read(settings.inject_config, "--inject-config")
    values = _read(settings.inject_values, "--inject-values")
    if config is not None:
        parse_injection_config(config, f"--inject-config {settings.inject_config}")
    if values is not None:
        parse_values(values, f"--inject-values {settings.inject_values}")
    address = f"pilotfish.{settings.system_namespace}.svc:15012"

    def inputs() -> InjectionInputs:
        return InjectionInputs(config, values, mesh().SerializeToString(), settings.revision,
                               settings.native_sidecars, address)  # fmt: skip

    injector_for(inputs())  # its templates parse, or pilotfish stops here saying why
    return inputs
