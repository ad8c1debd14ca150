"""Telemetry resources as istiod applies their access logging to a sidecar or an Istio gateway
(pilot/pkg/model/telemetry.go: applicableTelemetries, mergeLogs, matchWorkloadMode).

Three levels apply, in order: the root namespace's namespace-wide Telemetry, the proxy's
namespace's (unless that is the root namespace), then every Telemetry of the proxy's namespace
whose selector matches the proxy's labels, oldest first. A namespace-wide Telemetry is the
oldest one without selector labels and without targetRefs, whatever it configures. Telemetries
with ``targetRef(s)`` bind Gateway API gateways and waypoints (which pilotfish does not serve):
they select no sidecar or Istio gateway (PolicyMatcher.ShouldAttachPolicy).

What a level configures for a listener class (CLIENT: outbound and gateway listeners; SERVER:
inbound) is merged into a ``LogSelection``: each provider name in scope, whether it is
disabled, and its filter expression; a value, so it keys the listeners built from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Self

from app.api.istio.telemetry.v1alpha1 import telemetry_pb2 as tpb
from app.config.labels import selector_matches
from app.config.mesh import MeshConfig
from app.config.objects import ConfigObject

CLIENT = tpb.CLIENT
SERVER = tpb.SERVER


class LogProvider(NamedTuple):
    """istiod loggingSpec, with the provider name it is kept under."""

    name: str  # as the Telemetry or defaultProviders spells it (fetchProvider ignores case)
    disabled: bool
    filter: str | None  # a CEL expression; None: no filter


LogSelection = tuple[LogProvider, ...]  # by name


def _has_targets(spec: tpb.Telemetry) -> bool:
    return spec.HasField("targetRef") or len(spec.targetRefs) > 0


def _namespace_wide(spec: tpb.Telemetry) -> bool:
    return not spec.selector.match_labels and not _has_targets(spec)


@dataclass(frozen=True, slots=True)
class Telemetries:
    """The mesh's Telemetries by namespace, oldest first (istiod getTelemetries), with what of the
    mesh config merging reads."""

    root_namespace: str
    default_logging: tuple[str, ...]  # defaultProviders.accessLogging
    by_namespace: Mapping[str, tuple[tpb.Telemetry, ...]]

    @classmethod
    def build(cls, objects: Iterable[ConfigObject], mesh: MeshConfig) -> Self:
        by_namespace: dict[str, list[tpb.Telemetry]] = {}
        for obj in sorted(objects, key=ConfigObject.creation_order):
            by_namespace.setdefault(obj.meta.namespace, []).append(obj.spec)
        found = {ns: tuple(specs) for ns, specs in by_namespace.items()}
        return cls(mesh.root_namespace, tuple(mesh.default_providers.access_logging), found)

    def selector_keys(self, namespace: str) -> frozenset[str]:
        """The label keys the access logging of a proxy in ``namespace`` reads: those its
        namespace's selecting Telemetries with access logging match on."""
        return frozenset(
            key
            for spec in self.by_namespace.get(namespace, ())
            if spec.access_logging and not _has_targets(spec)
            for key in spec.selector.match_labels
        )

    def access_logging(self, namespace: str, labels: Mapping[str, str], mode: int) -> LogSelection:
        """The providers a proxy's listeners of ``mode`` log to (istiod Telemetries.AccessLogging
        before the providers are looked up): with no Telemetry configuring access logging, the
        mesh's default providers."""
        merged = _merge_logs(self._levels(namespace, labels), self.default_logging, mode)
        return tuple(sorted(merged.values()))

    def _levels(self, namespace: str, labels: Mapping[str, str]) -> list[Sequence[tpb.AccessLogging]]:
        """applicableTelemetries: the accessLogging of each level that has some."""
        levels: list[Sequence[tpb.AccessLogging]] = []
        wide = [self._namespace_wide(self.root_namespace)]
        if namespace != self.root_namespace:
            wide.append(self._namespace_wide(namespace))
        levels.extend(spec.access_logging for spec in wide if spec is not None and spec.access_logging)
        for spec in self.by_namespace.get(namespace, ()):
            selector = spec.selector.match_labels
            if not selector or _has_targets(spec) or not selector_matches(selector, labels):
                continue
            if spec.access_logging:
                levels.append(spec.access_logging)
        return levels

    def _namespace_wide(self, namespace: str) -> tpb.Telemetry | None:
        return next((spec for spec in self.by_namespace.get(namespace, ()) if _namespace_wide(spec)), None)


def _matches_mode(entry: tpb.AccessLogging, mode: int) -> bool:
    """matchWorkloadMode: no match, or CLIENT_AND_SERVER (the default), or the listener's mode."""
    return not entry.HasField("match") or entry.match.mode in (tpb.CLIENT_AND_SERVER, mode)


def _merge_logs(
    levels: Sequence[Sequence[tpb.AccessLogging]], defaults: Sequence[str], mode: int
) -> dict[str, LogProvider]:
    """istiod mergeLogs. The providers in scope are those the last level naming any (for this
    mode) names, else the defaults; each entry then sets its providers (its own, else the
    previous entry's) disabled or enabled with the filter of the last entry naming them."""
    if not levels:
        return {name: LogProvider(name, False, None) for name in defaults}
    in_scope = set(defaults)
    filters: dict[str, str | None] = {}
    for level in levels:
        names: set[str] = set()
        for entry in level:
            if not _matches_mode(entry, mode):
                continue
            for provider in entry.providers:
                names.add(provider.name)
                filters[provider.name] = entry.filter.expression if entry.HasField("filter") else None
        if names:
            in_scope = names
    merged: dict[str, LogProvider] = {}
    parent: Sequence[str] = defaults
    for level in levels:
        for entry in level:
            names_of = [p.name for p in entry.providers] or parent
            parent = names_of
            if not _matches_mode(entry, mode):
                continue
            for name in names_of:
                if name not in in_scope:
                    continue
                if entry.disabled.value:
                    merged[name] = LogProvider(name, True, None)
                else:
                    merged[name] = LogProvider(name, False, filters.get(name))
    return merged
