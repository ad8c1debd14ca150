"""DestinationRule index and lookup, as istiod's PushContext keeps them.

Rules are consolidated per host within a namespace: rules with the same host and the same
exportTo set merge (subsets appended in order, a duplicate subset name dropped, the first
top-level traffic policy wins); rules whose exportTo differ stay separate entries. Rules with a
workloadSelector sort first and are private to their namespace (pilot/pkg/model
destination_rule.go mergeDestinationRule, push_context.go setDestinationRules / destinationRule).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from app.api import networking as net
from app.config.host import is_wildcard, most_specific_match, resolve_short_name
from app.config.labels import selector_matches
from app.config.objects import ConfigKey, ConfigObject

PRIVATE = "."
PUBLIC = "*"


@dataclass(frozen=True, slots=True)
class ConsolidatedDestinationRule:
    """One rule as applied: possibly several DestinationRules merged (``sources`` in merge order)."""

    rule: net.DestinationRule  # merged spec; host is FQDN. Never mutated once built.
    name: str
    namespace: str
    sources: tuple[str, ...]  # "ns/name" of every rule merged in
    export_to: frozenset[str]
    # the DestinationRule objects merged in, in merge order: objects are replaced, never
    # edited, so their identities are this rule's version (what cache keys name)
    objects: tuple[ConfigObject, ...] = field(default=(), compare=False, repr=False)
    # subset name -> its first subset, made on first use: an assignment looks its subset up, for
    # each subset of the rule (4,000 subsets took 3 s for one proxy's EDS, scanning them each time)
    _subsets: dict[str, net.Subset] | None = field(default=None, init=False, repr=False, compare=False)
    _keys: frozenset[ConfigKey] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def object_keys(self) -> frozenset[ConfigKey]:
        """The keys of the objects merged in (what a cache entry built from the rule depends on),
        made once (and hashed once): every cluster and assignment of the host records them."""
        keys = self._keys
        if keys is None:
            keys = frozenset(obj.key for obj in self.objects)
            object.__setattr__(self, "_keys", keys)
        return keys

    def subset(self, name: str) -> net.Subset | None:
        """The subset of that name (the first, as istiod's lookup), None for none."""
        index = self._subsets
        if index is None:
            index = {}
            for subset in self.rule.subsets:
                index.setdefault(subset.name, subset)
            object.__setattr__(self, "_subsets", index)
        return index.get(name)

    @property
    def selector(self) -> Mapping[str, str] | None:
        if self.rule.HasField("workload_selector"):
            return self.rule.workload_selector.match_labels
        return None


@dataclass(slots=True)
class _Entry:
    """Mutable while the index is built, frozen into ConsolidatedDestinationRule at the end."""

    rule: net.DestinationRule
    name: str
    namespace: str
    objects: list[ConfigObject]
    export_to: frozenset[str]

    def freeze(self, reuse: Mapping[_ReuseKey, ConsolidatedDestinationRule]) -> ConsolidatedDestinationRule:
        """The frozen rule; the previous index's object when made of the very same DestinationRule
        objects, so an unchanged rule keeps its identity (and its cache entries) across builds."""
        found = reuse.get(_reuse_key(self.objects, self.export_to))
        if found is not None and all(a is b for a, b in zip(found.objects, self.objects, strict=True)):
            return found
        sources = tuple(o.namespaced_name for o in self.objects)
        return ConsolidatedDestinationRule(
            self.rule, self.name, self.namespace, sources, self.export_to, tuple(self.objects)
        )


_ReuseKey = tuple[tuple[int, ...], frozenset[str]]


def _reuse_key(objects: Iterable[ConfigObject], export_to: frozenset[str]) -> _ReuseKey:
    # ids are only compared while the previous index (which holds the objects) is alive
    return tuple(id(o) for o in objects), export_to


@dataclass(slots=True)
class _HostRules:
    specific: dict[str, list[_Entry]] = field(default_factory=dict)
    wildcard: dict[str, list[_Entry]] = field(default_factory=dict)

    def merge(self, obj: ConfigObject, spec: net.DestinationRule, export_to: frozenset[str]) -> None:
        rules = self.wildcard if is_wildcard(spec.host) else self.specific
        existing = rules.get(spec.host)
        new_entry = _Entry(spec, obj.meta.name, obj.meta.namespace, [obj], export_to)
        if existing is None:
            rules[spec.host] = [new_entry]
            return
        append_separately = True
        new_sel = _selector(spec)
        for entry in existing:
            old_sel = _selector(entry.rule)
            if export_to != entry.export_to and not (entry.export_to and export_to > entry.export_to):
                append_separately = True  # exportTo neither the same nor a superset: no merge
                continue
            if new_sel is not None and old_sel is not None and new_sel != old_sel:
                append_separately = True  # different selectors never merge
                continue
            # the same selector or none: merged in; a selector on one side only: merged in and
            # also kept as its own entry
            append_separately = (new_sel is None) != (old_sel is None)
            _merge_into(entry, spec, obj)
        if append_separately:
            existing.append(new_entry)

    def freeze(self, reuse: Mapping[_ReuseKey, ConsolidatedDestinationRule]) -> ConsolidatedRules:
        return ConsolidatedRules(
            {h: tuple(e.freeze(reuse) for e in es) for h, es in self.specific.items()},
            {h: tuple(e.freeze(reuse) for e in es) for h, es in self.wildcard.items()},
        )


def _merge_into(entry: _Entry, spec: net.DestinationRule, source: ConfigObject) -> None:
    merged = net.DestinationRule()
    merged.CopyFrom(entry.rule)  # copy: the first rule's spec may be shared with other entries
    names = {s.name for s in merged.subsets}
    for subset in spec.subsets:
        if subset.name not in names:  # a duplicate subset name keeps the earlier one
            merged.subsets.append(subset)
            names.add(subset.name)
    if not merged.HasField("traffic_policy") and spec.HasField("traffic_policy"):
        merged.traffic_policy.CopyFrom(spec.traffic_policy)
    entry.rule = merged
    entry.objects.append(source)


def _selector(spec: net.DestinationRule) -> Mapping[str, str] | None:
    return dict(spec.workload_selector.match_labels) if spec.HasField("workload_selector") else None


@dataclass(frozen=True, slots=True)
class ConsolidatedRules:
    specific: Mapping[str, tuple[ConsolidatedDestinationRule, ...]]
    wildcard: Mapping[str, tuple[ConsolidatedDestinationRule, ...]]

    def all(self) -> Iterable[ConsolidatedDestinationRule]:
        for rules in (self.specific, self.wildcard):
            for found in rules.values():
                yield from found

    def lookup(self, hostname: str) -> tuple[ConsolidatedDestinationRule, ...] | None:
        found = most_specific_match(hostname, self.specific, self.wildcard)
        return None if found is None else found[1]


@dataclass(frozen=True, slots=True)
class DestinationRuleIndex:
    namespace_local: Mapping[str, ConsolidatedRules]
    exported_by_namespace: Mapping[str, ConsolidatedRules]
    root_namespace_local: ConsolidatedRules
    root_namespace: str

    @classmethod
    def build(
        cls,
        rules: Iterable[ConfigObject],
        root_namespace: str,
        default_export_to: frozenset[str],
        domain_suffix: str = "cluster.local",
        previous: DestinationRuleIndex | None = None,
    ) -> DestinationRuleIndex:
        """The index of ``rules``; rules unchanged since ``previous`` keep their objects."""
        reuse = {} if previous is None else {_reuse_key(r.objects, r.export_to): r for r in previous.all_rules()}
        local: dict[str, _HostRules] = {}
        exported: dict[str, _HostRules] = {}
        root_local = _HostRules()
        ordered = sorted(rules, key=_rule_order)
        for obj in ordered:
            ns = obj.meta.namespace
            spec = net.DestinationRule()
            spec.CopyFrom(obj.spec)
            spec.host = resolve_short_name(spec.host, ns, domain_suffix)
            # selector rules never leave their namespace
            export_to = frozenset({PRIVATE}) if spec.HasField("workload_selector") else frozenset(spec.export_to)
            if not export_to or export_to & {PUBLIC, PRIVATE, ns}:
                local.setdefault(ns, _HostRules()).merge(obj, spec, export_to)
            private_only = (not export_to and PRIVATE in default_export_to) or (
                len(export_to) == 1 and bool(export_to & {PRIVATE, ns})
            )
            if not private_only:
                exported.setdefault(ns, _HostRules()).merge(obj, spec, export_to)
            elif ns == root_namespace:
                root_local.merge(obj, spec, export_to)
        return cls(
            {ns: r.freeze(reuse) for ns, r in local.items()},
            {ns: r.freeze(reuse) for ns, r in exported.items()},
            root_local.freeze(reuse),
            root_namespace,
        )

    def all_rules(self) -> Iterable[ConsolidatedDestinationRule]:
        for rules in (*self.namespace_local.values(), *self.exported_by_namespace.values(), self.root_namespace_local):
            yield from rules.all()

    def rules_for(
        self, proxy_namespace: str, hostname: str, service_namespace: str
    ) -> Sequence[ConsolidatedDestinationRule]:
        """The candidate rules for a service seen from a proxy namespace, in istiod's order:
        the proxy namespace's rules (only the private ones in the root namespace), then rules
        the service's namespace exports to the proxy, then rules the root namespace exports."""
        if proxy_namespace != self.root_namespace:
            own = self.namespace_local.get(proxy_namespace)
            local = own.lookup(hostname) if own else None
        else:
            local = self.root_namespace_local.lookup(hostname)
        if local and any(r.selector is None for r in local):
            return local
        exported: Sequence[ConsolidatedDestinationRule] = ()
        if service_namespace:
            exported = self._exported(service_namespace, hostname, proxy_namespace)
        if not exported:
            exported = self._exported(self.root_namespace, hostname, proxy_namespace)
        if local:
            # only selector rules, which apply to some workloads: the others still need a
            # catch-all (istio/istio#57719)
            return (*local, *(r for r in exported if r.selector is None))
        return exported

    def _exported(self, owner: str, hostname: str, client: str) -> Sequence[ConsolidatedDestinationRule]:
        rules = self.exported_by_namespace.get(owner)
        found = rules.lookup(hostname) if rules else None
        if not found:
            return ()
        # only the most specific host is considered; if none of its rules reach the client,
        # the search moves on to the next namespace, not to a less specific host
        return tuple(r for r in found if not r.export_to or PUBLIC in r.export_to or client in r.export_to)


def _rule_order(obj: ConfigObject) -> tuple[bool, str, str, str]:
    # rules with a workloadSelector first, then oldest (istiod's sortConfigBySelectorAndCreationTime)
    return (not obj.spec.HasField("workload_selector"), obj.meta.creation_timestamp, obj.meta.name, obj.meta.namespace)


def select_for_proxy(
    candidates: Sequence[ConsolidatedDestinationRule], scope_namespace: str, proxy_labels: Mapping[str, str]
) -> ConsolidatedDestinationRule | None:
    """Outbound choice among the candidates (SidecarScope.DestinationRule): a rule in the scope's
    namespace whose workloadSelector matches the proxy wins; else the last rule without a selector."""
    catch_all: ConsolidatedDestinationRule | None = None
    for cdr in candidates:
        selector = cdr.selector
        if selector is None:
            catch_all = cdr
        elif cdr.namespace == scope_namespace and selector_matches(selector, proxy_labels):
            return cdr
    return catch_all
