"""What the webhook injects pods with, in a running pilotfish: the --inject-config and
--inject-values files and the mesh config in force when each review arrives.

The files are istiod's ConfigMap keys, usually mounted from it, so they change under a running
pilotfish: each review looks at their modification time and size (a stat, no read) and reads
them again when either moved, as istiod's watcher reloads the ConfigMap. At start a bad file stops
pilotfish with the file's name and the reason; later, a bad edit is logged and the last good
content stays in force."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from app.api.mesh import MeshConfig
from app.config.objects import ConfigObject
from app.errors import SettingsError
from app.file_stamp import Stamp, file_stamp
from app.inject.config import parse_injection_config
from app.inject.injector import parse_templates
from app.inject.inputs import InjectionInputs, injector_for
from app.inject.native_sidecars import NativeSidecarMode, detect_native_sidecar
from app.inject.proxy_config import NO_PROXY_CONFIGS, ProxyConfigs
from app.inject.values import parse_values
from app.settings import Settings

logger = logging.getLogger(__name__)


class _WatchedFile:
    def __init__(self, path: Path | None, flag: str, check: Callable[[str, str], object]) -> None:
        self.path, self.flag, self._check = path, flag, check
        # the version last read, good or bad (a bad one is checked and logged once, not at every
        # review: the check parses every template on the event loop), or why it cannot be stat'ed
        self._seen: Stamp | str | None = None
        self.text: str | None = None

    def refresh(self, *, strict: bool) -> None:
        """Read the file again if it changed; ``strict``: a bad one raises, else it is logged."""
        if self.path is None:
            return
        seen: Stamp | str | None = None
        try:
            seen = file_stamp(self.path)
            if seen == self._seen:
                return
            text = self.path.read_text()
            self._check(text, f"{self.flag} {self.path}")
        except (OSError, SettingsError) as e:
            reason = e.strerror if isinstance(e, OSError) else str(e)
            if strict:
                raise SettingsError(f"{self.flag} {self.path}: {reason}" if isinstance(e, OSError) else reason) from e
            seen = reason if seen is None else seen
            if seen != self._seen:
                logger.error("sidecar injection keeps its last good %s: %s", self.flag, reason)
            self._seen = seen
            return
        self._seen, self.text = seen, text


def _check_config(text: str, source: str) -> None:
    """UnmarshalConfig: the YAML, and every template in it parses."""
    parse_templates(parse_injection_config(text, source).templates)


def injection_source(
    settings: Settings,
    mesh: Callable[[], MeshConfig],
    proxy_configs: Callable[[], Sequence[ConfigObject]] = tuple,
) -> Callable[[], InjectionInputs]:
    """What each review injects from: the injector's files (read again when they change), the
    mesh config and the ProxyConfig resources in force (``proxy_configs``)."""
    files = (
        _WatchedFile(settings.inject_config, "--inject-config", _check_config),
        _WatchedFile(settings.inject_values, "--inject-values", parse_values),
    )
    # istiod's own default, which the chart's Service istiod[-REV] answers for pilotfish
    revision = "" if settings.revision in ("", "default") else f"-{settings.revision}"
    address = f"istiod{revision}.{settings.system_namespace}.svc:15012"
    # without nodes to ask: true or false as set; auto with Kubernetes is decided per pod by the
    # webhook from the Node informer (WebhookServer.nodes), auto without it is off, as istiod
    # with no node client
    native_sidecars = detect_native_sidecar(settings.native_sidecars, None)
    if settings.native_sidecars is NativeSidecarMode.AUTO and settings.kubeconfig is None and not settings.in_cluster:
        logger.warning("ENABLE_NATIVE_SIDECARS=auto without Kubernetes: no node to ask; native sidecars are off")

    # the resources last read and what they made (the store hands out the same tuple until the
    # kind changes)
    last: tuple[Sequence[ConfigObject], ProxyConfigs] = ((), NO_PROXY_CONFIGS)

    def resources(root_namespace: str) -> ProxyConfigs:
        nonlocal last
        objects = proxy_configs()
        if objects is not last[0] or last[1].root_namespace != root_namespace:
            last = (objects, ProxyConfigs.of(root_namespace, objects))
        return last[1]

    def inputs(*, strict: bool = False) -> InjectionInputs:
        for f in files:
            f.refresh(strict=strict)
        config, values = (f.text for f in files)
        in_force = mesh()
        return InjectionInputs(
            config,
            values,
            in_force.SerializeToString(),
            settings.revision or "default",
            native_sidecars,
            address,
            proxy_configs=resources(in_force.root_namespace or settings.system_namespace),
        )

    injector_for(inputs(strict=True))  # its templates parse, or pilotfish stops here saying why
    return inputs
