"""PeerAuthentication: the mTLS mode a workload accepts, and what clients infer from it, as istiod's
authn model has it (pilot/pkg/model/authentication.go, pilot/pkg/security/authn
ComposePeerAuthentication).

A mesh policy (the root namespace's, without selector), a namespace policy (without selector) and
workload policies (a selector matching the workload's labels) compose: each level's mode replaces
the one above unless UNSET; a workload policy's port-level mode decides for that port. Several
policies at one level: the oldest wins (istiod sorts by creation time, then name). What nothing
sets is PERMISSIVE. Clients infer a service's mode from the namespace and mesh policies only
(a workload policy does not change client clusters).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from app.api import security as sec
from app.config.labels import selector_matches
from app.config.objects import ConfigObject

Mode = sec.PeerAuthentication.MutualTLS.Mode


class MtlsMode(enum.Enum):
    """istiod's model.MutualTLSMode."""

    UNKNOWN = "UNKNOWN"
    DISABLE = "DISABLE"
    PERMISSIVE = "PERMISSIVE"
    STRICT = "STRICT"


_MODES = {Mode.DISABLE: MtlsMode.DISABLE, Mode.PERMISSIVE: MtlsMode.PERMISSIVE, Mode.STRICT: MtlsMode.STRICT}


def _mode(tls: sec.PeerAuthentication.MutualTLS | None) -> MtlsMode:
    """A policy's own mode; UNKNOWN for UNSET (inherit)."""
    return MtlsMode.UNKNOWN if tls is None else _MODES.get(tls.mode, MtlsMode.UNKNOWN)


def _order(obj: ConfigObject) -> tuple[str, str, str]:
    return obj.creation_order()


@dataclass(frozen=True, slots=True)
class PeerAuthentications:
    """The PeerAuthentications in force, by scope."""

    root_namespace: str
    mesh: ConfigObject | None = None
    by_namespace: Mapping[str, ConfigObject] = field(default_factory=dict)  # selector-less, oldest
    workloads: Mapping[str, tuple[ConfigObject, ...]] = field(default_factory=dict)  # with selector, oldest first

    @classmethod
    def build(cls, objects: Iterable[ConfigObject], root_namespace: str) -> PeerAuthentications:
        namespace_wide: dict[str, ConfigObject] = {}
        workloads: dict[str, list[ConfigObject]] = {}
        for obj in sorted(objects, key=_order):
            spec: sec.PeerAuthentication = obj.spec
            ns = obj.meta.namespace
            if spec.selector.match_labels:
                # istiod getConfigsForWorkload: a selector in the root namespace selects nothing
                if ns != root_namespace:
                    workloads.setdefault(ns, []).append(obj)
            else:
                namespace_wide.setdefault(ns, obj)  # no selector, or an empty one: namespace-wide
        return cls(
            root_namespace=root_namespace,
            mesh=namespace_wide.get(root_namespace),
            by_namespace=namespace_wide,
            workloads={ns: tuple(found) for ns, found in workloads.items()},
        )

    def mesh_mode(self) -> MtlsMode:
        if self.mesh is None or not self.mesh.spec.HasField("mtls"):
            return MtlsMode.UNKNOWN
        return _mode(self.mesh.spec.mtls)

    def namespace_mode(self, namespace: str) -> MtlsMode:
        """istiod GetNamespaceMutualTLSMode: the namespace policy's mode, else the mesh's
        (UNKNOWN when neither sets one)."""
        obj = self.by_namespace.get(namespace)
        if obj is not None and namespace != self.root_namespace and obj.spec.HasField("mtls"):
            found = _mode(obj.spec.mtls)
            if found is not MtlsMode.UNKNOWN:
                return found
        return self.mesh_mode()

    def port_level_ports(self, namespace: str, labels: Mapping[str, str]) -> tuple[int, ...]:
        """The ports the workload's policy sets a port-level mode for (istiod's PerPort keys,
        an UNSET one included: it takes the workload's mode), sorted."""
        for obj in self.workloads.get(namespace, ()):
            spec: sec.PeerAuthentication = obj.spec
            if selector_matches(spec.selector.match_labels, labels):
                return tuple(sorted(spec.port_level_mtls))
        return ()

    def workload_mode(self, namespace: str, labels: Mapping[str, str], port: int) -> MtlsMode:
        """The mode a workload accepts on ``port`` (ComposePeerAuthentication): mesh, then its
        namespace, then the oldest workload policy selecting it, then that policy's port-level
        mode for the port; PERMISSIVE when none sets one."""
        mode = self.namespace_mode(namespace)
        for obj in self.workloads.get(namespace, ()):
            spec: sec.PeerAuthentication = obj.spec
            if not selector_matches(spec.selector.match_labels, labels):
                continue
            if spec.HasField("mtls") and _mode(spec.mtls) is not MtlsMode.UNKNOWN:
                mode = _mode(spec.mtls)
            if port in spec.port_level_mtls:
                level = _mode(spec.port_level_mtls[port])
                if level is not MtlsMode.UNKNOWN:
                    mode = level
            break  # the oldest matching workload policy only
        return MtlsMode.PERMISSIVE if mode is MtlsMode.UNKNOWN else mode
