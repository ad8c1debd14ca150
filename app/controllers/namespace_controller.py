"""The ``istio-ca-root-cert`` ConfigMap in every namespace, as istiod's NamespaceController
(pilot/pkg/serviceregistry/kube/controller/namespacecontroller.go, security/pkg/k8s
InsertDataToConfigMap): key ``root-cert.pem`` holding the CA's root, label
``istio.io/config: "true"``, in each namespace the discoverySelectors take in; and beside it
``istio-ca-crl`` (PILOT_CRL_CONFIGMAP), key ``ca-crl.pem`` holding the CA's CRL, empty when it
has none (PILOT_ENABLE_CA_CRL, on by default as in istiod: pilot-agent mounts it and refuses
the certificates it lists).

* Reconciled per namespace: a namespace added (or selected), its ConfigMap deleted or edited, or
  the root changed (``set_root``: every namespace again). Missing: created; present with another
  ``root-cert.pem``: that key put back (other keys and the labels are left as they are, as
  istiod's updateDataInConfigMap merges only its key).
* Skipped as istiod skips them: kube-public, kube-node-lease, local-path-storage (istiod's
  injector's ignored namespaces, kube-system excepted), and terminating namespaces; a create into
  a namespace that is going (NotFound, NamespaceTerminating) or forbidden is let go, as istiod
  does. Any other failure (a 409 on update, the API server away) is retried with backoff.
* Namespaces outside the selectors are left alone: a ConfigMap written there before stays.

It reads ConfigMaps of those two names only (a field selector on metadata.name each, as
istiod's filtered informers) and runs only while this replica leads (app/controllers/leader.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from app.config.objects import Kind
from app.controllers.namespaces import NamespaceFilter
from app.controllers.queue import WorkQueue
from app.sources.kube.client import ApiCallError, KubeClient
from app.sources.kube.informer import Informer
from app.sources.kube.resources import KubeResource
from app.sources.kube.store import Delta

logger = logging.getLogger("pilotfish.controllers")

CA_ROOT_CONFIGMAP = "istio-ca-root-cert"  # istiod's CACertNamespaceConfigMap (PILOT_CA_CERT_CONFIGMAP)
CA_ROOT_KEY = "root-cert.pem"  # constants.CACertNamespaceConfigMapDataName
CA_CRL_CONFIGMAP = "istio-ca-crl"  # PILOT_CRL_CONFIGMAP's default
CA_CRL_KEY = "ca-crl.pem"  # constants.CACRLNamespaceConfigMapDataName
CONFIG_LABEL = {"istio.io/config": "true"}
# inject.IgnoredNamespaces without kube-system (istiod writes there for ztunnel)
IGNORED_NAMESPACES = frozenset({"kube-public", "kube-node-lease", "local-path-storage"})
CONFIGMAPS = KubeResource(Kind.CONFIG_MAP, "", ("v1",), "configmaps")


@dataclass(frozen=True, slots=True)
class _Written:
    """One ConfigMap every namespace gets: its name, its key, and the informer that reads it."""

    name: str
    key: str
    informer: Informer


class NamespaceController:
    def __init__(
        self,
        client: KubeClient,
        namespaces: NamespaceFilter,
        root: str | None = None,
        *,
        crl_configmap: str | None = CA_CRL_CONFIGMAP,
    ) -> None:
        """``crl_configmap``: the name of the CRL's ConfigMap (None: none written)."""
        self._client = client
        self._namespaces = namespaces
        self._root = root
        self._crl = ""
        self._crl_configmap = crl_configmap
        self._queue: WorkQueue[str] = WorkQueue("namespace controller", self._reconcile)
        self._written: tuple[_Written, ...] = ()  # set while running, once the informers synced
        self.writes = 0  # ConfigMaps created or updated

    @property
    def root(self) -> str | None:
        return self._root

    def set_root(self, pem: str) -> None:
        """The CA's root changed: every namespace's ConfigMap is brought up to it."""
        if pem == self._root:
            return
        self._root = pem
        self._enqueue(self._namespaces.names())

    def set_crl(self, pem: str) -> None:
        """The CA's CRL changed ("" for none): every namespace's CRL ConfigMap follows."""
        if pem == self._crl:
            return
        self._crl = pem
        self._enqueue(self._namespaces.names())

    async def run(self) -> None:
        """Reconcile until cancelled (while leading)."""
        kept = [(CA_ROOT_CONFIGMAP, CA_ROOT_KEY)]
        if self._crl_configmap is not None:
            kept.append((self._crl_configmap, CA_CRL_KEY))
        written = tuple(
            _Written(name, key, Informer(
                self._client, CONFIGMAPS, "v1", self._on_configmaps, field_selector=f"metadata.name={name}"
            ))
            for name, key in kept
        )  # fmt: skip
        unsubscribe = self._namespaces.subscribe(self._enqueue)
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(w.informer.run(), name=f"informer {w.name}") for w in written]
                await self._namespaces.synced.wait()
                for w in written:
                    await w.informer.synced.wait()
                self._written = written
                if self._root is None:
                    logger.warning("namespace controller: no CA root yet; %s written once there is", CA_ROOT_CONFIGMAP)
                self._enqueue(self._namespaces.names())
                tasks.append(tg.create_task(self._queue.run(), name="namespace controller queue"))
        finally:
            unsubscribe()
            self._written = ()

    def _on_configmaps(self, _resource: KubeResource, deltas: list[Delta]) -> None:
        self._enqueue(str((d.obj.get("metadata") or {}).get("namespace", "")) for d in deltas)

    def _enqueue(self, names: Iterable[str]) -> None:
        for name in names:
            if name and name not in IGNORED_NAMESPACES:
                self._queue.add(name)

    async def _reconcile(self, namespace: str) -> None:
        root, written = self._root, self._written
        if root is None or not written:
            return
        ns = self._namespaces.namespace(namespace)
        if ns is None or (ns.get("status") or {}).get("phase") == "Terminating":
            return
        if not self._namespaces.selected(namespace):
            return
        values = {CA_ROOT_KEY: root, CA_CRL_KEY: self._crl}
        for w in written:  # as istiod's syncNamespace: the root's, then the CRL's
            await self._ensure(namespace, w, values[w.key])

    async def _ensure(self, namespace: str, w: _Written, value: str) -> None:
        current = w.informer.store.get(f"{namespace}/{w.name}")
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        if current is None:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": w.name, "namespace": namespace, "labels": dict(CONFIG_LABEL)},
                "data": {w.key: value},
            }
            try:
                await self._client.call("POST", path, body)
            except ApiCallError as e:
                if e.status in (404, 409) or "NamespaceTerminating" in e.causes:
                    return  # the namespace is going, or the informer is about to show the ConfigMap
                if e.status == 403:
                    logger.info("skip writing ConfigMap %s/%s as we do not have permissions to do so: %s",
                                namespace, w.name, e)  # fmt: skip
                    return
                raise
            self.writes += 1
            logger.info("created ConfigMap %s/%s", namespace, w.name)
            return
        data = dict(current.get("data") or {})
        if data.get(w.key) == value:
            return
        data[w.key] = value
        # replaced as read: its resourceVersion makes a concurrent change a 409, retried
        await self._client.call("PUT", f"{path}/{w.name}", {**current, "data": data})
        self.writes += 1
        logger.info("updated ConfigMap %s/%s", namespace, w.name)
