"""One CA for every replica, kept in the API server as istiod keeps it (I/O edge; the rules are
app/security/ca_secret.py).

``load()`` decides once, as istiod's createIstioCA: a complete ``cacerts`` Secret in the system
namespace is a plugged-in CA; else the self-signed root of ``istio-ca-secret``, created by the
first replica that finds none (with USE_CACERTS_FOR_SELF_SIGNED_CA, of a ``cacerts`` marked
``istio-generated``). Replicas race on an empty namespace: the API server takes one
create, the others get 409 and read the winner's Secret (istiod NewSelfSignedIstioCAOptions
retries the get), so every replica, istiod's included, signs with the same root.

``watch()`` follows the chosen Secret (an informer with a ``metadata.name`` field selector) and
hands every usable change to ``on_change``: an edited or rotated ``cacerts`` (its root only as
``ISTIO_MULTIROOT_MESH`` allows, istiod handleEvent), an ``istio-ca-secret`` another replica
rotated (istiod's rotator reloads it). A change that cannot be used is logged and the CA in
force stays; a deleted Secret leaves the CA in force too. Which Secret is read is decided at
start: a ``cacerts`` made later takes a restart, as with istiod (its mount is read at start).

The API server refusing pilotfish's credentials (401) or a Secret that is not a CA stops
``load()`` with one clear error; an unreachable or failing server, or one that forbids the
Secrets (403: a Role bound after pilotfish started), is retried with backoff, for at most
``LOAD_DEADLINE`` (istiod gives up after 20 minutes too).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from app.config.objects import EventType
from app.errors import PilotfishError
from app.security.ca import CertificateAuthority
from app.security.ca_secret import (
    CACERTS,
    ISTIO_CA_SECRET,
    ISTIO_GENERATED,
    CaSecretError,
    istio_ca_secret,
    plugged_in,
    root_change_refusal,
    secret_data,
    self_signed,
)
from app.sources.kube.client import ApiCallError, KubeClient
from app.sources.kube.informer import Informer
from app.sources.kube.resources import SECRETS
from app.sources.kube.store import Delta
from app.supervise import Backoff

logger = logging.getLogger("pilotfish.security")

LOAD_DEADLINE = 20 * 60.0  # seconds, istiod's createSelfSignedCACertificateOptions timeout
# 403 too: RBAC bound after pilotfish starts (istiod retries every failure within its deadline)
_RETRIED_STATUS = frozenset({403, 429, 500, 502, 503, 504})


class CaStoreError(PilotfishError):
    """The CA cannot be read or made through the API server: the message says which Secret and why."""


class _Retry(Exception):
    """A failure worth another try (the API server unreachable or failing)."""


class KubeCaStore:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        new_root: Callable[[], CertificateAuthority],
        *,
        multi_root: bool = False,
        use_cacerts: bool = False,
        backoff: Backoff | None = None,
    ) -> None:
        """``new_root``: makes the self-signed root when there is none (istiod's options: the
        trust domain as organization, CITADEL_SELF_SIGNED_CA_*); ``multi_root``:
        ISTIO_MULTIROOT_MESH, whether a reloaded ``cacerts`` may change the root bundle;
        ``use_cacerts``: USE_CACERTS_FOR_SELF_SIGNED_CA, the self-signed root kept in a
        ``cacerts`` marked ``istio-generated`` instead of ``istio-ca-secret``."""
        self._client = client
        self.namespace = namespace
        self._new_root = new_root
        self._multi_root = multi_root
        self._use_cacerts = use_cacerts
        self._backoff = backoff or Backoff()
        self.secret_name = ""  # the Secret the CA comes from, once loaded
        self.self_signed = False  # a self-signed root (rotated by this side), not a plugged-in CA
        self.ca: CertificateAuthority | None = None
        # the Secret's data the CA in force was read from (or written as): the watch's first list
        # hands the same Secret over again, and verifying it again is tens of ms of key loading
        self._data: Mapping[str, bytes] = {}
        self.created = False  # whether this replica wrote the Secret

    # --- load -------------------------------------------------------------------------------

    async def load(self) -> CertificateAuthority:
        """The CA, from ``cacerts`` or ``istio-ca-secret`` (made if missing)."""
        deadline = time.monotonic() + LOAD_DEADLINE
        while True:
            try:
                ca = await self._load_once()
            except _Retry as e:
                if time.monotonic() > deadline:
                    raise CaStoreError(f"kubernetes: the CA Secrets in {self.namespace}: {e}") from None
                delay = self._backoff.delay()
                logger.warning("CA: %s; retrying in %.1fs", e, delay)
                await asyncio.sleep(delay)
                continue
            self._backoff.reset()
            self.ca = ca
            return ca

    async def _load_once(self) -> CertificateAuthority:
        plugged = await self._get(CACERTS)
        generated = plugged is not None and ISTIO_GENERATED in (plugged.get("data") or {})
        if plugged is not None and not (self._use_cacerts and generated):
            data = secret_data(plugged)
            try:
                ca = plugged_in(self._display(CACERTS), data)
            except CaSecretError as e:
                raise CaStoreError(f"CA: {e}") from None
            if ca is not None:
                self.secret_name, self.self_signed, self._data = CACERTS, False, data
                logger.info("CA: using the plugged-in CA of Secret %s", self._display(CACERTS))
                return ca
        # istiod NewSelfSignedIstioCAOptions: istio-ca-secret first, then (with
        # USE_CACERTS_FOR_SELF_SIGNED_CA) an istio-generated cacerts, else a new one of those
        name = ISTIO_CA_SECRET
        found = await self._get(name)
        if found is None and self._use_cacerts:
            name, found = CACERTS, plugged if generated else None
        if found is None:
            name = CACERTS if self._use_cacerts else ISTIO_CA_SECRET
            fresh = self._new_root()
            secret = istio_ca_secret(fresh, name, self.namespace)
            status, answer = await self._request("POST", self._path(), secret)
            if status in (200, 201):
                self.secret_name, self.self_signed, self.created = name, True, True
                self._data = secret_data(secret)
                logger.info("CA: created Secret %s with a new self-signed root", self._display(name))
                return fresh
            if status != 409:  # 409: another replica made it first; its root is the one
                self._refused(status, answer, "create")
            found = await self._get(name)
            if found is None:
                raise _Retry(f"Secret {self._display(name)} was created and is gone again")
        data = secret_data(found)
        try:
            ca = self_signed(self._display(name), data)
        except CaSecretError as e:
            raise CaStoreError(f"CA: {e}") from None
        self.secret_name, self.self_signed, self._data = name, True, data
        logger.info("CA: using the self-signed root of Secret %s", self._display(name))
        return ca

    async def _get(self, name: str) -> Mapping[str, Any] | None:
        status, answer = await self._request("GET", f"{self._path()}/{name}")
        if status == 404:
            return None
        if status != 200 or not answer:
            self._refused(status, answer, "read")
        return answer

    def _refused(self, status: int, answer: Mapping[str, Any], verb: str) -> None:
        message = answer.get("message", "")
        what = f"cannot {verb} Secrets in {self.namespace}: HTTP {status}: {message!s:.300}"
        if status in _RETRIED_STATUS:
            raise _Retry(what)
        raise CaStoreError(f"kubernetes: CA: {what}")

    async def _request(self, method: str, path: str, body: Any = None) -> tuple[int, Mapping[str, Any]]:
        """(status, the object answered, or the Status's message); an unreachable server is _Retry."""
        try:
            return 200, await self._client.call(method, path, body, timeout=30)
        except ApiCallError as e:
            if not e.status:
                raise _Retry(f"cannot reach the API server: {e.message}") from None
            return e.status, {"message": e.message}

    def _path(self) -> str:
        return SECRETS.path("v1", self.namespace)

    def _display(self, name: str) -> str:
        return f"{self.namespace}/{name}"

    # --- watch ------------------------------------------------------------------------------

    async def watch(self, on_change: Callable[[CertificateAuthority], None]) -> None:
        """Follow the Secret the CA came from until cancelled; ``on_change`` gets each new CA."""
        if self.ca is None:
            raise RuntimeError("KubeCaStore.watch() before load()")
        name = self.secret_name

        def on_deltas(_: Any, deltas: list[Delta]) -> None:
            for delta in deltas:
                self._changed(name, delta, on_change)

        informer = Informer(
            self._client, SECRETS, "v1", on_deltas, namespace=self.namespace, field_selector=f"metadata.name={name}"
        )
        await informer.run()

    def _changed(self, name: str, delta: Delta, on_change: Callable[[CertificateAuthority], None]) -> None:
        current = self.ca
        assert current is not None
        where = self._display(name)
        if delta.change is EventType.DELETE:
            logger.warning("CA: Secret %s was deleted; the CA in force stays until a restart", where)
            return
        data = secret_data(delta.obj)
        if data == self._data:
            return  # what the CA in force was read from
        try:
            ca = self_signed(where, data) if self.self_signed else plugged_in(where, data)
        except CaSecretError as e:
            logger.error("CA: %s; the CA in force stays", e)
            return
        if ca is None:
            logger.error("CA: Secret %s holds no CA any more; the CA in force stays", where)
            return
        if ca.same_material(current):
            return
        if not self.self_signed:
            refusal = root_change_refusal(current.root_pem, ca.root_pem, self._multi_root)
            if refusal is not None:
                logger.warning("CA: Secret %s changed its root: %s; the CA in force stays", where, refusal)
                return
        self.ca, self._data = ca, data
        logger.info("CA: reloaded from Secret %s", where)
        on_change(ca)

    # --- rotation of the self-signed root --------------------------------------------------

    async def rotate_root(
        self,
        on_change: Callable[[CertificateAuthority], None],
        *,
        check_interval: float,
        grace_percent: float,
        ttl: datetime.timedelta,
        jitter: bool = True,
    ) -> None:
        """istiod's SelfSignedCARootCertRotator for the self-signed root's Secret, until cancelled: every
        ``check_interval`` seconds (the first after a random part of one, with ``jitter``, so
        replicas do not check together) read the Secret, and once its root is in the last
        ``grace_percent`` of its life, renew it from its own key and write it back. The update
        carries the Secret's resourceVersion: of replicas rotating at once one wins, the others
        get 409 and read the winner's root through ``watch()``."""
        if jitter:
            await asyncio.sleep(random.uniform(0, check_interval))
        while True:
            await asyncio.sleep(check_interval)
            try:
                await self._check_root(on_change, grace_percent, ttl)
            except (CaStoreError, _Retry) as e:
                logger.error("CA: root rotation check failed, skipped: %s", e)

    async def _check_root(
        self, on_change: Callable[[CertificateAuthority], None], grace_percent: float, ttl: datetime.timedelta
    ) -> None:
        name = self.secret_name
        where = self._display(name)
        found = await self._get(name)
        if found is None:
            logger.error("CA: Secret %s not found, root rotation skipped", where)
            return
        data = secret_data(found)
        try:
            ca = self_signed(where, data)
        except CaSecretError as e:
            logger.error("CA: %s; root rotation skipped", e)
            return
        if ca.rotation_due_in(grace_percent) > 0:
            return  # not due; a root another replica changed reaches this one through watch()
        renewed = ca.renewed_root(ttl=ttl)
        # istiod updates ca-cert.pem (and ca-key.pem, the same key) of the Secret as it is
        body = dict(found)
        body["data"] = {**(found.get("data") or {}), "ca-cert.pem": _b64(renewed.root_pem.encode())}
        status, answer = await self._request("PUT", f"{self._path()}/{name}", body)
        if status == 409:
            logger.info("CA: another replica rotated the root of Secret %s first", where)
            return
        if status != 200:
            self._refused(status, answer, "update")
        logger.info("CA: the self-signed root of Secret %s was about to expire: renewed until %s",
                    where, renewed.signing_cert.not_valid_after_utc)  # fmt: skip
        self.ca, self._data = renewed, secret_data(body)
        on_change(renewed)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
