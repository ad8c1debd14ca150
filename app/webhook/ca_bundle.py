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

As istiod's validation controller, a validator installed failing open (``Ignore``, so Istio
config can be written before pilotfish serves) is switched to ``Fail`` once the API server is
seen refusing, through pilotfish, a dry run of an invalid Gateway labelled with the revision
(isDryRunOfInvalidConfigRejected): from then on a review pilotfish cannot give refuses the
object. Until then the caBundle is written and the switch retried.

As istiod, every replica patches (no leader election: they share one CA, so they write the same
bundle and a write that changes nothing is not made). A write that fails (a conflict with
another writer, RBAC refusing the name) is retried after a growing backoff, up to a minute.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable, Mapping
from typing import Any

from app.config.objects import EventType
from app.sources.kube.client import ApiCallError, KubeClient
from app.sources.kube.informer import Informer
from app.sources.kube.resources import REVISION_LABEL, KubeResource
from app.sources.kube.store import Delta, Raw
from app.supervise import Backoff

logger = logging.getLogger(__name__)

_TIMEOUT = 30.0  # seconds a write may take

ADMISSION = "admissionregistration.k8s.io"
MUTATING = KubeResource(
    "MutatingWebhookConfiguration", ADMISSION, ("v1",), "mutatingwebhookconfigurations", namespaced=False
)
VALIDATING = KubeResource(
    "ValidatingWebhookConfiguration", ADMISSION, ("v1",), "validatingwebhookconfigurations", namespaced=False
)
INJECTOR_WEBHOOK = "sidecar-injector.istio.io"  # istiod's webhookName, matched as a suffix


def revision_label(revision: str) -> str:
    """The ``istio.io/rev`` value of a revision's objects (istiod's REVISION, ``default`` for none)."""
    return revision or "default"


def ours(config: Raw, revision: str) -> bool:
    labels = (config.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(REVISION_LABEL) == revision_label(revision))


def fails_open(config: Raw) -> bool:
    """Whether a validator has a webhook that admits what it cannot review (the API server's
    default policy, when none is set, is Fail)."""
    return any(hook.get("failurePolicy", "Fail") != "Fail" for hook in config.get("webhooks") or ())


def patched_webhooks(
    kind: str, config: Raw, ca_bundle: bytes, revision: str, *, fail_closed: bool = False
) -> list[dict[str, Any]] | None:
    """``config``'s webhooks with ``ca_bundle`` (PEM) as the caBundle of those pilotfish serves
    (and, for a validator with ``fail_closed``, failurePolicy Fail), or None when nothing is to
    be written: not its revision, none of its webhooks, or all of them as they should be."""
    if not ours(config, revision):
        return None
    encoded = base64.b64encode(ca_bundle).decode()
    webhooks = [dict(hook) for hook in config.get("webhooks") or ()]
    validator = kind == VALIDATING.kind  # a validator's webhooks are all pilotfish's; an injector's by name
    served = [hook for hook in webhooks if validator or str(hook.get("name", "")).endswith(INJECTOR_WEBHOOK)]
    close = fail_closed and validator
    changed = False
    for hook in served:
        if (hook.get("clientConfig") or {}).get("caBundle") != encoded:
            hook["clientConfig"] = {**(hook.get("clientConfig") or {}), "caBundle": encoded}
            changed = True
        if close and hook.get("failurePolicy", "Fail") != "Fail":
            hook["failurePolicy"] = "Fail"
            changed = True
    return webhooks if changed else None


# istiod's dry run: a Gateway its validation refuses (no servers), labelled with the revision so
# that this revision's validator reviews it; nothing is stored
def invalid_gateway(namespace: str, revision: str) -> dict[str, Any]:
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "Gateway",
        "metadata": {
            "name": "invalid-gateway",
            "namespace": namespace,
            "labels": {REVISION_LABEL: revision_label(revision)},
            "annotations": {"istio.io/alwaysReject": "true"},
        },
        "spec": {},
    }


def dry_run_verdict(status: int, message: str) -> tuple[bool, str]:
    """(whether the validator may fail closed, why not) from the API server's answer to the dry
    run, as istiod reads it: refused by a webhook, or no Gateway kind (nothing to check against),
    or a webhook that cannot take dry runs (no point in asking again) all mean ready."""
    if "denied the request" in message:
        return True, ""
    if "the server could not find the requested resource" in message:
        return True, "no Gateway kind to check validation with; assuming it is ready"
    if "does not support dry run" in message:
        return True, "a validating webhook does not support dry runs; assuming validation is ready"
    if 200 <= status < 300:
        return False, "the invalid Gateway was not refused"
    return False, f"the invalid Gateway was refused for another reason: HTTP {status} {message[:200]}"


class CaBundlePatcher:
    """Keeps ``ca_bundle()`` in the caBundle of the revision's webhook configurations."""

    def __init__(
        self,
        client: KubeClient,
        revision: str,
        ca_bundle: Callable[[], str],
        *,
        namespace: str = "istio-system",
        backoff: Callable[[], Backoff] = lambda: Backoff(initial=0.1, cap=60.0),
    ) -> None:
        """``namespace``: the system namespace, where the dry run's Gateway would be."""
        self._client = client
        self._revision = revision
        self._namespace = namespace
        self._fail_closed = False  # once a dry run of invalid config was refused
        self._ca_bundle = ca_bundle
        self._backoff = backoff
        self.informers = {
            resource: Informer(client, resource, "v1", self._changed) for resource in (MUTATING, VALIDATING)
        }
        self._pending: set[tuple[KubeResource, str]] = set()
        self._retrying: set[tuple[KubeResource, str]] = set()  # each has a task retrying it
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
                    if not await self._patch(*item) and item not in self._retrying:
                        self._retrying.add(item)
                        tg.create_task(self._retry(item))

    async def _retry(self, item: tuple[KubeResource, str]) -> None:
        backoff = self._backoff()
        while True:
            await asyncio.sleep(backoff.delay())
            if await self._patch(*item):
                break
        self._retrying.discard(item)

    async def _patch(self, resource: KubeResource, name: str) -> bool:
        """Write the bundle (and the fail-closed switch) into one configuration if it needs it;
        False when the write failed or a validator is not ready to fail closed yet (retried)."""
        config = self.informers[resource].store.get(name)
        if config is None:
            return True  # deleted since
        bundle = self._ca_bundle().encode()
        switch = resource is VALIDATING and ours(config, self._revision) and fails_open(config)
        # the switch is checked before writing (istiod's order): the first dry run fails while
        # the caBundle is not in place yet, so the bundle goes in and the switch is retried
        if switch and not self._fail_closed:
            self._fail_closed = await self._dry_run_refused()
        webhooks = patched_webhooks(resource.kind, config, bundle, self._revision, fail_closed=self._fail_closed)
        if webhooks is None:
            return not switch or self._fail_closed
        body: Mapping[str, Any] = {**config, "webhooks": webhooks}  # with its resourceVersion: no lost update
        try:
            await self._client.call("PUT", f"{resource.path('v1')}/{name}", body, timeout=_TIMEOUT)
        except ApiCallError as e:
            if e.status == 404:
                return True
            # 409: another writer was first; the watch brings its version and this is tried again
            logger.warning("%s %s: patching the caBundle failed: %s", resource.kind, name, e)
            return False
        self.patches += 1
        closed = " and failurePolicy Fail" if switch and self._fail_closed else ""
        logger.info("%s %s: caBundle patched with the CA root%s", resource.kind, name, closed)
        return not switch or self._fail_closed

    async def _dry_run_refused(self) -> bool:
        """istiod's readiness check before failing closed: the invalid Gateway, created as a
        dry run, must be refused by a webhook."""
        gateway = invalid_gateway(self._namespace, self._revision)
        status, message = 200, ""
        try:
            path = f"/apis/networking.istio.io/v1/namespaces/{self._namespace}/gateways"
            await self._client.call("POST", path, gateway, query={"dryRun": "All"}, timeout=_TIMEOUT)
        except ApiCallError as e:
            status, message = e.status, e.message
        ready, reason = dry_run_verdict(status, message)
        if not ready:
            logger.info("validation: not ready to fail closed: %s", reason)
        elif reason:
            logger.warning("validation: failing closed: %s", reason)
        else:
            logger.info("validation: invalid config refused through the webhook; failing closed")
        return ready
