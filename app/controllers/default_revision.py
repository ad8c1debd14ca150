"""Which control-plane revision is the mesh's default, as istiod's DefaultWatcher
(pkg/revisions/default_watcher.go) tells it: the ``istio.io/rev`` label of the
MutatingWebhookConfiguration ``istio-revision-tag-default`` (what ``istioctl tag set default``
writes); "" while there is none. Its prioritized leader elections let the default revision take a
lock over from another revision's holder (app/controllers/leader.py)."""

from __future__ import annotations

from app.sources.kube.client import KubeClient
from app.sources.kube.informer import Informer
from app.sources.kube.resources import REVISION_LABEL, KubeResource
from app.sources.kube.store import Delta

DEFAULT_TAG_WEBHOOK = "istio-revision-tag-default"  # istiod's defaultTagWebhookName
_DEFAULT_TAG = KubeResource(
    "MutatingWebhookConfiguration",
    "admissionregistration.k8s.io",
    ("v1",),
    "mutatingwebhookconfigurations",
    namespaced=False,
    field_selector=f"metadata.name={DEFAULT_TAG_WEBHOOK}",
)


class DefaultRevisionWatcher:
    def __init__(self, client: KubeClient) -> None:
        self._informer = Informer(client, _DEFAULT_TAG, "v1", self._on_deltas)
        self._default = ""

    async def run(self) -> None:
        """List and watch the default tag's webhook until cancelled."""
        await self._informer.run()

    def get(self) -> str:
        """The default revision ("": no default tag, or not listed yet)."""
        return self._default

    def _on_deltas(self, _resource: KubeResource, _deltas: list[Delta]) -> None:
        webhook = self._informer.store.get(DEFAULT_TAG_WEBHOOK)
        labels = ((webhook or {}).get("metadata") or {}).get("labels") or {}
        self._default = str(labels.get(REVISION_LABEL) or "")
