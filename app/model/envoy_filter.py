"""EnvoyFilters as istiod indexes and selects them (pilot/pkg/model/envoyfilter.go, push_context.go
``initEnvoyFilters`` and ``EnvoyFilters``): each object's patches with their values built into the
Envoy messages they patch, by namespace; a proxy's are the root namespace's and its own
namespace's that select it, ordered by priority, root namespace first, then age and name, and
of those the patches whose proxy match it meets."""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import re2
from google.protobuf.message import Message

from app.api.istio.networking.v1alpha3.envoy_filter_pb2 import EnvoyFilter
from app.config.envoy_filter_value import PatchValueError, patch_value
from app.config.labels import selector_matches
from app.config.objects import ConfigObject
from app.config.validation.envoy_filter import MAX_PROXY_VERSION
from app.model.proxy import Proxy

logger = logging.getLogger(__name__)

ApplyTo = EnvoyFilter.ApplyTo
Operation = EnvoyFilter.Patch.Operation
PatchContext = EnvoyFilter.PatchContext
_LIST_INSERTS = frozenset({Operation.INSERT_BEFORE, Operation.INSERT_AFTER, Operation.INSERT_FIRST})
_LIST_TYPES = frozenset({ApplyTo.HTTP_FILTER, ApplyTo.NETWORK_FILTER, ApplyTo.HTTP_ROUTE, ApplyTo.LISTENER_FILTER})
# proxyVersion patterns istiod reads as a prefix instead of compiling (wellKnownVersions)
_WELL_KNOWN_VERSIONS = {rf"^1\.{minor}.*": f"1.{minor}" for minor in range(16, 24)}
_ANY_CONTEXT = EnvoyFilter.EnvoyConfigObjectMatch(context=PatchContext.ANY)


@dataclass(frozen=True, slots=True, eq=False)
class ConfigPatch:
    """One configPatch of an EnvoyFilter (istiod EnvoyFilterConfigPatchWrapper)."""

    apply_to: int
    operation: int
    match: EnvoyFilter.EnvoyConfigObjectMatch
    value: Message | None  # the Envoy message ``apply_to`` names; None for REMOVE
    key: str  # "namespace/name" of its EnvoyFilter
    version_prefix: str = ""
    version_regex: object | None = None  # a compiled RE2 pattern
    version_never: bool = False
    metadata: tuple[tuple[str, str], ...] = ()

    def matches_proxy(self, proxy: Proxy) -> bool:
        """istiod proxyMatch: the proxy version (prefix, else regex) and node metadata."""
        if not self.match.HasField("proxy"):
            return True
        if self.version_never:
            return False
        version = proxy.istio_version
        if self.version_prefix and not version.startswith(self.version_prefix):
            return False
        if self.version_regex is not None and (not version or self.version_regex.search(version) is None):  # type: ignore[attr-defined]
            return False
        return all(proxy.raw_metadata.get(k) == v for k, v in self.metadata)


@dataclass(frozen=True, slots=True)
class EnvoyFilterWrapper:
    """One EnvoyFilter, its patches in order (istiod EnvoyFilterWrapper)."""

    name: str
    namespace: str
    selector: Mapping[str, str] | None  # workloadSelector.labels; None: the whole namespace
    targeted: bool  # it has targetRefs: never attached to a sidecar (istiod ShouldAttachPolicy)
    priority: int
    created: str
    digest: str  # of its spec: what a class's key names it by across snapshots
    patches: tuple[ConfigPatch, ...]

    def selects(self, proxy: Proxy) -> bool:
        if self.targeted:
            return False  # pilotfish serves no Gateway API gateways nor waypoints
        return self.selector is None or selector_matches(self.selector, proxy.labels)


@dataclass(frozen=True, slots=True, eq=False)
class MergedPatches:
    """The patches in force for one proxy, by what they apply to, in order (istiod
    MergedEnvoyFilterWrapper). ``key`` names them across snapshots: proxies with equal keys get
    equal patches. A string, whose hash Python keeps: it is part of every patched resource's memo
    key, looked up for each resource of a class at every snapshot."""

    key: str
    by_type: Mapping[int, tuple[ConfigPatch, ...]]

    def of(self, apply_to: int) -> tuple[ConfigPatch, ...]:
        return self.by_type.get(apply_to, ())


@dataclass(frozen=True, slots=True)
class EnvoyFilters:
    """Every EnvoyFilter by namespace, each namespace's sorted (istiod sortEnvoyFilters)."""

    root_namespace: str
    by_namespace: Mapping[str, tuple[EnvoyFilterWrapper, ...]]

    @classmethod
    def build(cls, objects: Iterable[ConfigObject], root_namespace: str) -> EnvoyFilters:
        by_ns: dict[str, list[EnvoyFilterWrapper]] = {}
        for obj in objects:
            by_ns.setdefault(obj.meta.namespace, []).append(_wrap(obj))
        return cls(
            root_namespace,
            {ns: tuple(sorted(found, key=lambda w: (w.priority, w.created, w.name))) for ns, found in by_ns.items()},
        )

    def reads(self, namespace: str) -> bool:
        """Whether any EnvoyFilter may apply to a proxy of ``namespace``."""
        return bool(self.by_namespace) and (namespace in self.by_namespace or self.root_namespace in self.by_namespace)

    def for_proxy(self, proxy: Proxy) -> MergedPatches | None:
        """istiod PushContext.EnvoyFilters: the root namespace's and the proxy's namespace's
        EnvoyFilters that select it, then of their patches those whose proxy match it meets."""
        if not self.reads(proxy.namespace):
            return None
        root = self.root_namespace
        found = [w for w in self.by_namespace.get(root, ()) if w.selects(proxy)] if root else []
        if proxy.namespace != root:
            found.extend(w for w in self.by_namespace.get(proxy.namespace, ()) if w.selects(proxy))
        if not found:
            return None
        found.sort(key=lambda w: (w.priority, w.namespace != root, w.created, f"{w.name}.{w.namespace}"))
        by_type: dict[int, list[ConfigPatch]] = {}
        key: list[str] = []
        for wrapper in found:
            for index, patch in enumerate(wrapper.patches):
                if patch.matches_proxy(proxy):
                    by_type.setdefault(patch.apply_to, []).append(patch)
                    key.append(f"{patch.key}@{wrapper.digest}#{index}")
        return MergedPatches(" ".join(key), {t: tuple(p) for t, p in by_type.items()})


def _wrap(obj: ConfigObject) -> EnvoyFilterWrapper:
    spec: EnvoyFilter = obj.spec
    key = obj.namespaced_name
    patches = []
    for cp in spec.config_patches:
        patch = _patch(cp, key)
        if patch is not None:
            patches.append(patch)
    selector = dict(spec.workload_selector.labels) if spec.HasField("workload_selector") else None
    return EnvoyFilterWrapper(
        name=obj.meta.name,
        namespace=obj.meta.namespace,
        selector=selector,
        targeted=bool(len(spec.targetRefs)),
        priority=spec.priority,
        created=obj.meta.creation_timestamp,
        digest=hashlib.blake2b(spec.SerializeToString(deterministic=True), digest_size=8).hexdigest(),
        patches=tuple(patches),
    )


def _patch(cp: EnvoyFilter.EnvoyConfigObjectPatch, key: str) -> ConfigPatch | None:
    """istiod convertToEnvoyFilterWrapper for one patch: None when it cannot be used (no patch,
    a value that does not build; validation refuses both)."""
    if not cp.HasField("patch"):
        return None
    try:
        value = patch_value(cp.apply_to, cp.patch.value if cp.patch.HasField("value") else None)
    except PatchValueError as e:
        logger.error("EnvoyFilter %s: a patch's value does not build: %s", key, e)
        return None
    operation = cp.patch.operation
    if operation in _LIST_INSERTS and cp.apply_to not in _LIST_TYPES:
        operation = Operation.ADD  # istiod: an insert into what is no list adds
    match = cp.match if cp.HasField("match") else _ANY_CONTEXT
    prefix, regex, never = "", None, False
    version = match.proxy.proxy_version if match.HasField("proxy") else ""
    if version:
        if version in _WELL_KNOWN_VERSIONS:
            prefix = _WELL_KNOWN_VERSIONS[version]
        elif len(version) > MAX_PROXY_VERSION:  # never matches
            never = True
        else:
            # as istiod: a pattern that does not compile leaves the version unchecked
            with contextlib.suppress(re2.error):
                regex = re2.compile(version)
    metadata = tuple(sorted(match.proxy.metadata.items())) if match.HasField("proxy") else ()
    return ConfigPatch(cp.apply_to, operation, match, value, key, prefix, regex, never, metadata)
