"""AuthorizationPolicy and RequestAuthentication: which policies apply to a workload (by action), as istiod's
model.AuthorizationPolicies.ListAuthorizationPolicies selects them (pilot/pkg/model/authorization.go):
a namespace's selector-less policies apply to its workloads and a selector policy to those of its
workloads whose labels it matches; a root-namespace policy does the same for the workloads of
every namespace. Policies bound with ``targetRef(s)`` (Gateway API, waypoints) select no sidecar or
Istio gateway. CUSTOM policies are listed apart: each names a mesh config extension provider,
whose filters come before the others (app/translate/listener/ext_authz.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Self

from app.api import security as sec
from app.config.labels import selector_matches
from app.config.objects import ConfigObject

Action = sec.AuthorizationPolicy.Action


@dataclass(frozen=True, slots=True)
class WorkloadPolicies:
    """The policies for one workload, by action, in the order istiod lists them."""

    allow: tuple[ConfigObject, ...] = ()
    deny: tuple[ConfigObject, ...] = ()
    audit: tuple[ConfigObject, ...] = ()
    custom: tuple[ConfigObject, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.allow or self.deny or self.audit or self.custom)


NO_POLICIES = WorkloadPolicies()


@dataclass(frozen=True, slots=True)
class _SelectedByWorkload:
    """Policies by namespace, oldest first, selected for a workload as istiod selects both kinds:
    the root namespace's, then the workload's own namespace's, each applying when it has no
    selector or its selector matches the workload's labels."""

    root_namespace: str
    by_namespace: Mapping[str, tuple[ConfigObject, ...]]

    @classmethod
    def build(cls, objects: Iterable[ConfigObject], root_namespace: str) -> Self:
        by_namespace: dict[str, list[ConfigObject]] = {}
        for obj in sorted(objects, key=ConfigObject.creation_order):
            spec: sec.AuthorizationPolicy | sec.RequestAuthentication = obj.spec
            if spec.HasField("targetRef") or len(spec.targetRefs):
                continue
            by_namespace.setdefault(obj.meta.namespace, []).append(obj)
        return cls(root_namespace, {ns: tuple(found) for ns, found in by_namespace.items()})

    def selected(self, namespace: str, labels: Mapping[str, str]) -> Iterator[ConfigObject]:
        namespaces = [self.root_namespace] if namespace == self.root_namespace else [self.root_namespace, namespace]
        for ns in namespaces:
            for obj in self.by_namespace.get(ns, ()):
                spec: sec.AuthorizationPolicy | sec.RequestAuthentication = obj.spec
                if not spec.HasField("selector") or selector_matches(spec.selector.match_labels, labels):
                    yield obj


@dataclass(frozen=True, slots=True)
class AuthorizationPolicies(_SelectedByWorkload):
    def for_workload(self, namespace: str, labels: Mapping[str, str]) -> WorkloadPolicies:
        found: dict[int, list[ConfigObject]] = {}
        for obj in self.selected(namespace, labels):
            found.setdefault(obj.spec.action, []).append(obj)
        if not found:
            return NO_POLICIES
        return WorkloadPolicies(
            allow=tuple(found.get(Action.ALLOW, ())),
            deny=tuple(found.get(Action.DENY, ())),
            audit=tuple(found.get(Action.AUDIT, ())),
            custom=tuple(found.get(Action.CUSTOM, ())),
        )


@dataclass(frozen=True, slots=True)
class RequestAuthentications(_SelectedByWorkload):
    """RequestAuthentications selected for a workload as AuthorizationPolicies are (istiod
    AuthenticationPolicies.GetJwtPoliciesForWorkload), oldest first."""

    def for_workload(self, namespace: str, labels: Mapping[str, str]) -> tuple[ConfigObject, ...]:
        return tuple(sorted(self.selected(namespace, labels), key=ConfigObject.creation_order))
