"""Patching pilotfish's CA root into the ``caBundle`` of its webhook configurations, as istiod's
webhook patcher (pkg/webhooks/webhookpatch.go) and validation controller
(pkg/webhooks/validation/controller) do, so the API server trusts the certificate pilotfish
serves its webhooks with (certificate.py) and no chart has to generate one.

Which configurations are pilotfish's: those labelled ``istio.io/rev`` = its revision
(``default`` without one). In a MutatingWebhookConfiguration the webhooks whose name ends in
``sidecar-injector.istio.io`` are patched, in a ValidatingWebhookConfiguration every webhook;
a configuration of another revision, or without the label, is left alone. The configurations
are watched, so one set back (a ``helm upgrade`` re-applying a chart without a caBundle, a
hand edit) is patched again; ``resync`` patches all again after the root changed.

As istiod, every replica patches (no leader election: they share one CA, so they write the same
bundle and a write that changes nothing is not made). A write that fails (a conflict with
another writer, RBAC refusing the name) is retried after a growing backoff, up to a minute.
Unlike istiod's validation controller, the failurePolicy is left as the chart set it.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from app.config.model import EventType
from app.sources.kube.informer import Informer
from app.sources.kube.resources import KubeResource
from app.sources.kube.store import Delta, Raw
from app.supervise import Backoff

logger = logging.getLogger(__name__)

ADMISSION = "admissionregistration.k8s.io"
MUTATING = KubeResource(
    "MutatingWebhookConfiguration", ADMISSION, ("v1",), "mutatingwebhookconfigurations", namespaced=False
)
VALIDATING = KubeResource(
    "ValidatingWebhookConfiguration", ADMISSION, ("v1",), "validatingwebhookconfigurations", namespaced=False
)
REVISION_LABEL = "istio.io/rev"
INJECTOR_WEBHOOK = "sidecar-injector.istio.io"  # istiod's webhookName, matched as a suffix


def revision_label(revision: str) -> str:
    """The ``istio.io/rev`` value of a revision's objects (istiod's REVISION, ``default`` for none)."""
    return revision or "default"


def patched_webhooks(kind: str, config: Raw, ca_bundle: bytes, revision: str) -> list[dict[str, Any]] | None:
    """``config``'s webhooks with ``ca_bundle`` (PEM) as the caBundle of those pilotfish serves,
    or None when nothing is to be written: not its revision, none of its webhooks, or all of
    them hold the bundle already."""
    labels = (config.get("metadata") or {}).get("labels") or {}
    if labels.get(REVISION_LABEL) != revision_label(revision):
        return None
    encoded = base64.b64encode(ca_bundle).decode()
    webhooks = [dict(hook) for hook in config.get("webhooks") or ()]
    every = kind == VALIDATING.kind  # a validator's webhooks are all pilotfish's; an injector's by name
    ours = [hook for hook in webhooks if every or str(hook.get("name", "")).endswith(INJECTOR_WEBHOOK)]
    if not ours or all((hook.get("clientConfig") or {}).get("caBundle") == encoded for hook in ours):
        return None
    for hook in ours:
        hook["clientConfig"] = {**(hook.get("clientConfig") or {}), "caBundle": encoded}
    return webhooks


class CaBundlePatcher:
    """Keeps ``ca_bundle()`` in the caBundle of the revision's webhook configurations."""

    def __init__(
        self,
        client: ApiClient,
        revision: str,
        ca_bundle: Callable[[], str],
        *,
        backoff: Callable[[], Backoff] = lambda: Backoff(initial=0.1, cap=60.0),
    ) -> None:
        self._client = client
        self._revision = revision
        self._ca_bundle = ca_bundle
        self._backoff = backoff
        self.informers = {
            resource: Informer(client, resource, "v1", self._changed) for resource in (MUTATING, VALIDATING)
        }
        self._pending: set[tuple[KubeResource, str]] = set()
        self._retrying: dict[tuple[KubeResource, str], Backoff] = {}
        self._wake = asyncio.Event()
        self.patches = 0  # configurations written

    def resync(self) -> None:
        """Check every configuration again (the bundle changed)."""
        for resource, informer in self.informers.items():
            self._pending.update((resource, str(obj["metadata"]["name"])) for obj in informer.store.objects())
        self._wake.set()

    def _changed(self, resource: KubeResource, deltas: list[Delta]) -> None:
        for delta in deltas:
            if delta.change is not EventType.DELETE:
                self._pending.add((resource, str(delta.obj["metadata"]["name"])))
        self._wake.set()

    async def run(self) -> None:
        """Watch the configurations and patch them until cancelled."""
        async with asyncio.TaskGroup() as tg:
            for informer in self.informers.values():
                tg.create_task(informer.run())
            while True:
                await self._wake.wait()
                self._wake.clear()
                pending, self._pending = self._pending, set()
                for item in sorted(pending, key=lambda i: (i[0].plural, i[1])):
                    if item in self._retrying:
                        continue  # its retry comes after its backoff
                    if not await self._patch(*item):
                        tg.create_task(self._retry(item))

    async def _retry(self, item: tuple[KubeResource, str]) -> None:
        backoff = self._retrying.setdefault(item, self._backoff())
        await asyncio.sleep(backoff.delay())
        while not await self._patch(*item):
            await asyncio.sleep(backoff.delay())
        del self._retrying[item]

    async def _patch(self, resource: KubeResource, name: str) -> bool:
        """Write the bundle into one configuration if it needs it; False when the write failed."""
        config = self.informers[resource].store.get(name)
        if config is None:
            return True  # deleted since
        bundle = self._ca_bundle().encode()
        webhooks = patched_webhooks(resource.kind, config, bundle, self._revision)
        if webhooks is None:
            return True
        body: Mapping[str, Any] = {**config, "webhooks": webhooks}  # with its resourceVersion: no lost update
        try:
            await self._client.call_api(
                f"{resource.path('v1')}/{name}",
                "PUT",
                body=body,
                header_params={"Content-Type": "application/json", "Accept": "application/json"},
                auth_settings=["BearerToken"],
                _request_timeout=30,
            )
        except ApiException as e:
            if e.status == 404:
                return True
            # 409: another writer was first; the watch brings its version and this is tried again
            logger.warning("%s %s: patching the caBundle failed: HTTP %s %s", resource.kind, name, e.status, e.reason)
            return False
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            logger.warning("%s %s: patching the caBundle failed: %s", resource.kind, name, e)
            return False
        self.patches += 1
        logger.info("%s %s: caBundle patched with the CA root", resource.kind, name)
        return True
