"""Telemetry resources as istiod applies their access logging and tracing to a sidecar or an
Istio gateway (pilot/pkg/model/telemetry.go: applicableTelemetries, mergeLogs, matchWorkloadMode,
Telemetries.Tracing).

Three levels apply, in order: the root namespace's namespace-wide Telemetry, the proxy's
namespace's (unless that is the root namespace), then every Telemetry of the proxy's namespace
whose selector matches the proxy's labels, oldest first. A namespace-wide Telemetry is the
oldest one without selector labels and without targetRefs, whatever it configures. Telemetries
with ``targetRef(s)`` bind Gateway API gateways and waypoints (which pilotfish does not serve):
they select no sidecar or Istio gateway (PolicyMatcher.ShouldAttachPolicy).

What a level configures for a listener class (CLIENT: outbound and gateway listeners; SERVER:
inbound) is merged into a ``LogSelection``: each provider name in scope, whether it is
disabled, and its filter expression; a value, so it keys the listeners built from it. Tracing
merges into a ``TracingSpec`` per mode, a value too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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


class CustomTag(NamedTuple):
    """A Telemetry tracing custom tag: ``kind`` is the field it sets (literal, environment,
    header, formatter); ``value`` its value, variable or header name (a formatter's format)."""

    tag: str
    kind: str
    value: str
    default: str = ""


class TracingSpec(NamedTuple):
    """istiod TracingSpec for one mode: the provider in force (its name as the mesh config
    spells it; None when none is named or the name is unknown: tracing is then disabled)."""

    provider: str | None
    disabled: bool = False
    sampling: float | None = None  # randomSamplingPercentage; None: the proxy config's
    custom_tags: tuple[CustomTag, ...] = ()  # empty: the proxy config's
    use_request_id: bool = True
    istio_tags: bool = True


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
    default_tracing: tuple[str, ...] = ()  # defaultProviders.tracing
    providers: tuple[str, ...] = ()  # the mesh config's extension provider names, in order
    # what a proxy's class reads of its namespace (``reads``), by namespace: every proxy of a
    # snapshot asks once
    _reads: dict[str, tuple[frozenset[str], bool]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(cls, objects: Iterable[ConfigObject], mesh: MeshConfig) -> Self:
        by_namespace: dict[str, list[tpb.Telemetry]] = {}
        for obj in sorted(objects, key=ConfigObject.creation_order):
            by_namespace.setdefault(obj.meta.namespace, []).append(obj.spec)
        found = {ns: tuple(specs) for ns, specs in by_namespace.items()}
        defaults = mesh.default_providers
        providers = tuple(p.name for p in mesh.extension_providers)
        return cls(mesh.root_namespace, tuple(defaults.access_logging), found, tuple(defaults.tracing), providers)

    def reads(self, namespace: str) -> tuple[frozenset[str], bool]:
        """What the access logging and tracing of a proxy in ``namespace`` read of it: the label
        keys its namespace's selecting Telemetries with either match on, and whether it may trace
        through an extension provider, whose config reads its node (the service cluster, the
        Istio version): a default tracing provider, or a Telemetry of the root namespace or
        ``namespace`` with tracing."""
        found = self._reads.get(namespace)
        if found is None:
            keys = frozenset(
                key
                for spec in self.by_namespace.get(namespace, ())
                if (spec.access_logging or spec.tracing) and not _has_targets(spec)
                for key in spec.selector.match_labels
            )
            specs = (spec for ns in (self.root_namespace, namespace) for spec in self.by_namespace.get(ns, ()))
            found = self._reads[namespace] = (keys, bool(self.default_tracing) or any(s.tracing for s in specs))
        return found

    def tracing(self, namespace: str, labels: Mapping[str, str], mode: int) -> TracingSpec | None:
        """istiod Telemetries.Tracing for a proxy's listeners of ``mode``: None when no
        Telemetry configures tracing and the mesh names no default provider (the mesh config's
        own tracing settings apply then)."""
        levels = [spec.tracing for spec in self._applicable(namespace, labels) if spec.tracing]
        if not levels and not self.default_tracing:
            return None
        spec = TracingSpec(self._fetch(self.default_tracing[0]) if self.default_tracing else None)
        for level in levels:
            for entry in level:
                if entry.HasField("match") and entry.match.mode not in (tpb.CLIENT_AND_SERVER, mode):
                    continue
                spec = _merge_tracing(spec, entry, self._fetch)
        return spec if spec.provider is not None else spec._replace(disabled=True)

    def _fetch(self, name: str) -> str | None:
        """fetchProvider: the first provider of the name, matched in any case."""
        return next((p for p in self.providers if p.lower() == name.lower()), None)

    def access_logging(self, namespace: str, labels: Mapping[str, str], mode: int) -> LogSelection:
        """The providers a proxy's listeners of ``mode`` log to (istiod Telemetries.AccessLogging
        before the providers are looked up): with no Telemetry configuring access logging, the
        mesh's default providers."""
        merged = _merge_logs(self._levels(namespace, labels), self.default_logging, mode)
        return tuple(sorted(merged.values()))

    def _levels(self, namespace: str, labels: Mapping[str, str]) -> list[Sequence[tpb.AccessLogging]]:
        """applicableTelemetries: the accessLogging of each level that has some."""
        return [spec.access_logging for spec in self._applicable(namespace, labels) if spec.access_logging]

    def _applicable(self, namespace: str, labels: Mapping[str, str]) -> Iterable[tpb.Telemetry]:
        """applicableTelemetries: the root namespace's namespace-wide Telemetry, the proxy's
        namespace's, then those of its namespace whose selector matches, oldest first."""
        wide = [self._namespace_wide(self.root_namespace)]
        if namespace != self.root_namespace:
            wide.append(self._namespace_wide(namespace))
        yield from (spec for spec in wide if spec is not None)
        for spec in self.by_namespace.get(namespace, ()):
            selector = spec.selector.match_labels
            if selector and not _has_targets(spec) and selector_matches(selector, labels):
                yield spec

    def _namespace_wide(self, namespace: str) -> tpb.Telemetry | None:
        return next((spec for spec in self.by_namespace.get(namespace, ()) if _namespace_wide(spec)), None)


def _merge_tracing(spec: TracingSpec, entry: tpb.Tracing, fetch: Callable[[str], str | None]) -> TracingSpec:
    """One tracing entry over what the levels before it set: the first provider it names
    replaces the one in force (an unknown name leaves none), each field it sets replaces the
    field's value (a shallow merge, as istiod's)."""
    if entry.providers:
        spec = spec._replace(provider=fetch(entry.providers[0].name))
    if entry.HasField("disable_span_reporting"):
        spec = spec._replace(disabled=entry.disable_span_reporting.value)
    if entry.custom_tags:
        tags = entry.custom_tags
        spec = spec._replace(custom_tags=tuple(_custom_tag(name, tags[name]) for name in tags))
    if entry.HasField("random_sampling_percentage"):
        spec = spec._replace(sampling=entry.random_sampling_percentage.value)
    if entry.HasField("use_request_id_for_trace_sampling"):
        spec = spec._replace(use_request_id=entry.use_request_id_for_trace_sampling.value)
    if entry.HasField("enable_istio_tags"):
        spec = spec._replace(istio_tags=entry.enable_istio_tags.value)
    return spec


def _custom_tag(name: str, tag: tpb.Tracing.CustomTag) -> CustomTag:
    kind = tag.WhichOneof("type") or ""
    if kind == "literal":
        return CustomTag(name, kind, tag.literal.value)
    if kind == "environment":
        return CustomTag(name, kind, tag.environment.name, tag.environment.default_value)
    if kind == "header":
        return CustomTag(name, kind, tag.header.name, tag.header.default_value)
    if kind == "formatter":
        return CustomTag(name, kind, tag.formatter.value)
    return CustomTag(name, kind, "")


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
