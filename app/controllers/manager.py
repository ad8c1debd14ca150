"""The controllers that write to the API server, each under its own leader election as in
istiod (pilot/pkg/bootstrap): the namespace controller (``istio-ca-root-cert``) under
``istio-namespace-controller-election``, IP auto-allocation under ``istio-ip-autoallocate``,
both ConfigMap locks in the system namespace as istiod's (so istiod's replicas and pilotfish's
exclude each other), keyed by this replica's revision and taken over by the default revision's
replicas (leader.py). One Namespace informer (the discoverySelectors' scope)
serves both and runs on every replica; a controller's own informers run only while it leads.
With leader election off (istiod's ENABLE_LEADER_ELECTION=false) this replica simply leads."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from google.protobuf import json_format

from app.config.mesh import MeshConfig
from app.controllers.default_revision import DefaultRevisionWatcher
from app.controllers.ip_allocate_controller import IPAllocateController
from app.controllers.leader import DEFAULT_KEY, IP_AUTOALLOCATE_CONTROLLER, NAMESPACE_CONTROLLER, LeaderElection
from app.controllers.namespace_controller import CA_CRL_CONFIGMAP, NamespaceController
from app.controllers.namespaces import NamespaceFilter
from app.sources.kube.client import KubeClient
from app.supervise import supervise

logger = logging.getLogger("pilotfish.controllers")


def mesh_selectors(mesh: MeshConfig) -> list[Mapping[str, Any]]:
    """MeshConfig discoverySelectors as LabelSelector JSON."""
    return [json_format.MessageToDict(s) for s in mesh.discovery_selectors]


class Controllers:
    def __init__(
        self,
        client: KubeClient,
        *,
        system_namespace: str,
        identity: str,
        revision: str = "",
        root: str | None,
        selectors: Sequence[Mapping[str, Any]] = (),
        leader_election: bool = True,
        lease_duration: float = 30.0,
        ip_autoallocate: bool = True,
        ipv4_prefix: str,
        ipv6_prefix: str,
        on_leading: Callable[[str, bool], None] | None = None,
        crl_configmap: str | None = CA_CRL_CONFIGMAP,
    ) -> None:
        """``identity``: this replica in the leases (istiod's POD_NAME); ``revision``: its
        control-plane revision ("" for none), the leases' holder key; ``on_leading(lock,
        leading)`` is told when this replica starts or stops leading a lock. Raises ValueError
        for an allocation prefix that is not one."""
        self.namespaces = NamespaceFilter(client, selectors)
        self.namespace_controller = NamespaceController(client, self.namespaces, root, crl_configmap=crl_configmap)
        runs: list[tuple[str, str, Callable[[], Any]]] = [
            (NAMESPACE_CONTROLLER, "namespace controller", self.namespace_controller.run)
        ]
        self.ip_allocate: IPAllocateController | None = None
        if ip_autoallocate:
            self.ip_allocate = IPAllocateController(
                client, self.namespaces, ipv4_prefix=ipv4_prefix, ipv6_prefix=ipv6_prefix
            )
            runs.append((IP_AUTOALLOCATE_CONTROLLER, "ip autoallocate controller", self.ip_allocate.run))
        self._leader_election = leader_election
        self._on_leading = on_leading
        self._runs = runs
        # as istiod, the default revision is watched only for elections that run
        self.default_revision = DefaultRevisionWatcher(client) if leader_election else None
        self.elections = [
            LeaderElection(
                client,
                system_namespace,
                lock,
                identity,
                lease_duration=lease_duration,
                key=revision or DEFAULT_KEY,
                default_revision=self.default_revision.get if self.default_revision is not None else None,
                on_change=on_leading,
            ).add_run_function(name, run)
            for lock, name, run in runs
        ]

    def set_root(self, pem: str) -> None:
        """The CA's root changed: every namespace's ``istio-ca-root-cert`` follows (when leading)."""
        self.namespace_controller.set_root(pem)

    def set_crl(self, pem: str) -> None:
        """The CA's CRL changed: every namespace's ``istio-ca-crl`` follows (when leading)."""
        self.namespace_controller.set_crl(pem)

    def set_selectors(self, selectors: Sequence[Mapping[str, Any]]) -> None:
        """The mesh config's discoverySelectors changed."""
        self.namespaces.set_selectors(selectors)

    def leading(self) -> dict[str, bool]:
        """By lock name: whether this replica leads it."""
        if not self._leader_election:
            return {lock: True for lock, _, _ in self._runs}
        return {election.name: election.leading for election in self.elections}

    async def run(self) -> None:
        """Until cancelled (a leader then gives its leases up)."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(supervise("namespace informer (controllers)", self.namespaces.run, forever=True))
            if self.default_revision is not None:
                tg.create_task(supervise("default revision watcher", self.default_revision.run, forever=True))
                for election in self.elections:
                    tg.create_task(supervise(f"leader election {election}", election.run, forever=True))
                return
            logger.info("bypassing leader election: %s", ", ".join(lock for lock, _, _ in self._runs))
            for lock, name, run in self._runs:
                if self._on_leading is not None:
                    self._on_leading(lock, True)
                tg.create_task(supervise(name, run, forever=True))
