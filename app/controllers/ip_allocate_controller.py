"""ServiceEntry ``status.addresses`` written by the leader, as istiod's IP auto-allocation
controller (pilot/pkg/controllers/ipallocate); the decisions are ip_allocate.py's.

While leading: list and watch ServiceEntries (networking.istio.io/v1, as istiod's client) in the
namespaces the discoverySelectors take in; once listed, warm the allocator with every address
already given (so a restart or a new leader keeps them), then reconcile each entry and each
conflict found, one at a time. A write is a JSON patch of the status subresource guarded by the
entry's resourceVersion; when it fails the addresses it would have given are freed and the entry
is tried again after a backoff (by then the informer holds the entry as it is now).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from app.config.objects import Kind
from app.controllers.ip_allocate import Address, Allocator, Conflict, Entry, should_allocate, status_patch, to_reassign
from app.controllers.namespaces import NamespaceFilter
from app.controllers.queue import WorkQueue
from app.sources.kube.client import JSON_PATCH, ApiCallError, KubeClient
from app.sources.kube.informer import Informer
from app.sources.kube.resources import ISTIO_RESOURCES, KubeResource
from app.sources.kube.store import Delta

logger = logging.getLogger("pilotfish.controllers")

SERVICE_ENTRIES = next(r for r in ISTIO_RESOURCES if r.kind == Kind.SERVICE_ENTRY)
_VERSION = "v1"


class IPAllocateController:
    def __init__(
        self,
        client: KubeClient,
        namespaces: NamespaceFilter,
        *,
        ipv4_prefix: str,
        ipv6_prefix: str,
    ) -> None:
        """Raises ValueError for a prefix that is not one (istiod refuses to start)."""
        Allocator(ipv4_prefix, ipv6_prefix)  # checked now, not first when leading
        self._client = client
        self._namespaces = namespaces
        self._prefixes = (ipv4_prefix, ipv6_prefix)
        self._informer: Informer | None = None
        self._allocator = Allocator(*self._prefixes)
        self._queue: WorkQueue[str | Conflict] = WorkQueue("ip autoallocate controller", self._reconcile)
        self.writes = 0  # status patches accepted

    async def run(self) -> None:
        """Allocate until cancelled (while leading); each term starts from what the statuses say."""
        informer = Informer(self._client, SERVICE_ENTRIES, _VERSION, self._on_deltas)
        unsubscribe = self._namespaces.subscribe(self._namespaces_changed)
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(informer.run(), name="informer serviceentries (ip autoallocate)")]
                await self._namespaces.synced.wait()
                await informer.synced.wait()
                self._informer = informer
                self._allocator = Allocator(*self._prefixes)
                entries = self._entries()
                for conflict in self._allocator.warm(entries):
                    self._queue.add(conflict)
                for entry in entries:
                    self._queue.add(entry.owner)
                tasks.append(tg.create_task(self._queue.run(), name="ip autoallocate queue"))
        finally:
            unsubscribe()
            self._informer = None

    def _entries(self, namespaces: Iterable[str] | None = None) -> list[Entry]:
        """The entries visible (in selected namespaces; of ``namespaces`` when given)."""
        if self._informer is None:
            return []
        wanted = set(namespaces) if namespaces is not None else None
        entries = (Entry.of(obj) for obj in self._informer.store.objects())
        return [
            e for e in entries
            if (wanted is None or e.namespace in wanted) and self._namespaces.selected(e.namespace)
        ]  # fmt: skip

    def _on_deltas(self, _resource: KubeResource, deltas: list[Delta]) -> None:
        if self._informer is None:
            return  # the first list: warmed and queued as a whole once it is complete
        for delta in deltas:
            meta = delta.obj.get("metadata") or {}
            self._queue.add(f"{meta.get('namespace', '')}/{meta.get('name', '')}")

    def _namespaces_changed(self, names: Iterable[str]) -> None:
        for entry in self._entries(names):
            self._queue.add(entry.owner)

    async def _reconcile(self, key: str | Conflict) -> None:
        if isinstance(key, Conflict):
            await self._resolve(key)
            return
        obj = self._informer.store.get(key) if self._informer is not None else None
        if obj is None:
            return  # deleted: its addresses stay taken, as istiod keeps them
        entry = Entry.of(obj)
        if not self._namespaces.selected(entry.namespace):
            return
        if not should_allocate(entry):
            for conflict in self._allocator.mark_used(entry.user_addresses(), entry.owner):
                self._queue.add(conflict)
            if entry.status_entries():
                await self._write(entry, [], ())
                self._allocator.free(entry.auto_addresses(), entry.owner)
                logger.info("ServiceEntry %s: auto-allocated addresses cleared (allocation no longer applies)",
                            entry.owner)  # fmt: skip
            return
        plan = self._allocator.plan(entry)
        for conflict in plan.conflicts:
            self._queue.add(conflict)
        if plan.addresses is not None:
            await self._write(entry, plan.addresses, plan.allocated)

    async def _resolve(self, conflict: Conflict) -> None:
        """resolveConflict: every entry that must give the addresses up gets new ones."""
        failed: list[ApiCallError] = []
        for entry in to_reassign(self._entries(), conflict):
            logger.warning("reassigned %s due to IP address conflict", entry.owner)
            plan = self._allocator.plan(entry, forced=True)
            try:
                await self._write(entry, plan.addresses or [], plan.allocated)
            except ApiCallError as e:
                failed.append(e)
        if failed:
            raise failed[0]

    async def _write(self, entry: Entry, addresses: list[dict[str, str]], allocated: tuple[Address, ...]) -> None:
        path = f"{SERVICE_ENTRIES.path(_VERSION, entry.namespace)}/{entry.name}/status"
        try:
            await self._client.call("PATCH", path, status_patch(entry, addresses), content_type=JSON_PATCH)
        except ApiCallError as e:
            self._allocator.free(allocated, entry.owner)
            if e.status == 404:
                return  # deleted meanwhile
            raise
        self.writes += 1
        logger.info("ServiceEntry %s: status.addresses %s", entry.owner, [a["value"] for a in addresses])
