"""Which namespaces the controllers write into: MeshConfig ``discoverySelectors`` over the
cluster's namespaces, as istiod's discovery namespace filter (pkg/kube/namespace/filter.go)
scopes its writers' informers: no selectors, every namespace; else those whose labels match.
One Namespace informer, read by both controllers; a namespace that changes, or whose
membership a selector change moves, is told to the subscribers."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from app.sources.kube.client import KubeClient
from app.sources.kube.discovery import Selector, selects
from app.sources.kube.informer import Informer
from app.sources.kube.resources import NAMESPACES, KubeResource
from app.sources.kube.store import Delta, Raw

Subscriber = Callable[[Iterable[str]], None]


class NamespaceFilter:
    def __init__(self, client: KubeClient, selectors: Sequence[Selector] = ()) -> None:
        self._informer = Informer(client, NAMESPACES, "v1", self._on_deltas)
        self._selectors = list(selectors)
        self._subscribers: list[Subscriber] = []
        self.synced = self._informer.synced

    async def run(self) -> None:
        """List and watch the namespaces until cancelled."""
        await self._informer.run()

    def namespace(self, name: str) -> Raw | None:
        return self._informer.store.get(name)

    def names(self) -> list[str]:
        return [str((ns.get("metadata") or {}).get("name", "")) for ns in self._informer.store.objects()]

    def selected(self, name: str) -> bool:
        """Whether a namespace that exists is in scope."""
        ns = self.namespace(name)
        if ns is None:
            return False
        labels: Mapping[str, str] = (ns.get("metadata") or {}).get("labels") or {}
        return selects(self._selectors, labels)

    def set_selectors(self, selectors: Sequence[Selector]) -> None:
        """The mesh config's selectors changed: the namespaces that came in or went out are told."""
        before = {name for name in self.names() if self.selected(name)}
        self._selectors = list(selectors)
        after = {name for name in self.names() if self.selected(name)}
        self._notify(before ^ after)

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Tell ``subscriber`` the names of namespaces that changed; returns the unsubscribe."""
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber)

    def _on_deltas(self, _resource: KubeResource, deltas: list[Delta]) -> None:
        self._notify({str((d.obj.get("metadata") or {}).get("name", "")) for d in deltas})

    def _notify(self, names: set[str]) -> None:
        if names:
            for subscriber in list(self._subscribers):
                subscriber(sorted(names))
