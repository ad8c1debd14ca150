"""The admission webhooks over HTTPS, as istiod serves them: validation, ``POST /validate`` (and
``/validate/``), its decisions admission.py's; sidecar injection, ``POST /inject`` (and
``/inject/...``, whose path may carry proxy env as istiod's does), its decisions injection.py's,
with the injection inputs the runtime hands over at each review (the mesh config may change).

Nothing a request holds may stall the event loop, which also serves xDS, the CA and ``/ready``:
the body is decoded and validated in a worker process (app/workers.py), against a
deadline just short of the API server's own (the ``timeout`` it sends with each call), so the
user sees pilotfish's refusal rather than a timed-out call. A body is read up to
``MAX_REVIEW_BYTES`` (istiod's limit: an UPDATE carries the object and its old version, each up
to the API server's 3 MiB request limit), within the same deadline; the bodies held at once
(arriving, or waiting for and in validation) are bounded by their bytes, ``MAX_BODY_BYTES``,
charged as they arrive, and a review takes one of ``MAX_REVIEWS_IN_FLIGHT`` slots only once its
body is whole. So a sender that stalls holds what it sent, never a slot: eight connections that
sent a byte each used to hold every slot, and every other review was refused for 29 s (istiod
reads each body in a goroutine of its own, and a slow one holds up no other). Every outcome is a
review: too large, too slow, a worker that failed, each is a refusal (allowed false, with the
reason) naming the request's uid when its first bytes hold it.

With ENABLE_NATIVE_SIDECARS=auto in a cluster, ``nodes`` (app/sources/kube/nodes.py) gives the
nodes' kubelet versions, and each review decides whether the proxy is a native sidecar for the
pod's node, as istiod's webhook does; the workers get that one boolean with the inputs. A review
that comes before the nodes are listed waits for them within its deadline.

Validation and injection have workers and in-flight slots of their own, as istiod's handlers are
independent: a rollout of pods whose injection runs to the deadline (a looping template, a pod
of thousands of containers) must not leave Istio config unreviewed, nor the other way round.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from aiohttp import web

from app.config.go_time import go_duration_seconds
from app.errors import listening
from app.inject.inputs import InjectionInputs
from app.inject.native_sidecars import KubeletVersions
from app.settings import split_address
from app.webhook.admission import OUTCOME, review_body, uid_in, undecodable
from app.webhook.injection import BOUND_NODE, inject_review_body
from app.workers import DeadlineExceeded, WorkerError, WorkerPool

logger = logging.getLogger(__name__)

# istiod kube.MaxRequestBodyBytes: twice the API server's 3 MiB request limit, for an UPDATE's
# object and oldObject
MAX_REVIEW_BYTES = 6 * 2**20
# reviews whose body has arrived being validated at once; more wait their turn, within their deadline
MAX_REVIEWS_IN_FLIGHT = 8
# the bytes of bodies held at once (arriving, or waiting for and in validation): past it a body
# waits, within its deadline, for others to be done; the most the slots could hold
MAX_BODY_BYTES = MAX_REVIEWS_IN_FLIGHT * MAX_REVIEW_BYTES
# the API server's default webhook timeout (timeoutSeconds), when a call names none; it allows 30
DEFAULT_TIMEOUT = 10.0
MAX_TIMEOUT = 30.0
# the answer must be back before the API server gives up: validation gets its timeout less this
ANSWER_MARGIN = 1.0
WORKERS = 2
_CHUNK = 1 << 16


class Nodes(Protocol):
    """The nodes' kubelets, as the Node informer keeps them."""

    @property
    def synced(self) -> asyncio.Event: ...

    @property
    def kubelets(self) -> KubeletVersions: ...


class BodyBytes:
    """The bytes of review bodies held at once, charged as they arrive and given back when the
    review is done: a body whose next bytes would pass ``limit`` waits for others to be done."""

    def __init__(self, limit: int = MAX_BODY_BYTES) -> None:
        self.free = limit
        self._waiting: list[asyncio.Future[None]] = []

    async def take(self, size: int) -> None:
        while self.free < size:
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            try:
                await waiter
            finally:
                self._waiting.remove(waiter)
        self.free -= size

    def give(self, size: int) -> None:
        self.free += size
        for waiter in self._waiting:
            if not waiter.done():
                waiter.set_result(None)


class _Unreviewed(Exception):
    """A review that cannot be done: refused with this reason."""


class AdmissionMetrics(Protocol):
    """What the webhooks count, as istiod's validation server and injector do (app/telemetry/pilot.py
    keeps them as galley_validation_* and sidecar_injection_*)."""

    def validated(self, resource: Sequence[str], reason: str) -> None:
        """A review of the (group, version, resource) passed ("") or failed for istiod's reason."""
        ...

    def validation_http_error(self, status: int) -> None:
        """A validation request was answered with this HTTP error, not a review."""
        ...

    def injection_request(self, seconds: float) -> None:
        """An injection request was answered (a review or an HTTP error) in ``seconds``."""
        ...

    def injection_outcome(self, *, answered: bool, failed: bool, skipped: bool) -> None:
        """What it was: a review written (``answered``), refused or an HTTP error (``failed``),
        a pod the policy skips (``skipped``)."""
        ...


# what a review runs in a worker: (the pool, the body, the deadline) -> the answer
_Run = Callable[[WorkerPool, bytes, float], Awaitable[dict[str, Any]]]


class WebhookServer:
    def __init__(
        self,
        tls: Callable[[], ssl.SSLContext],
        *,
        system_namespace: str = "istio-system",
        pool: WorkerPool | None = None,
        injection: Callable[[], InjectionInputs] | None = None,
        nodes: Nodes | None = None,
        metrics: AdmissionMetrics | None = None,
    ) -> None:
        """TLS with the context ``tls()`` gives at start (``file_context`` of the PEM files, or
        pilotfish's own certificate from its CA: certificate.py). ``pool``: where reviews are
        validated (by default, ``WORKERS`` processes of its own); ``injection``: what pods are
        injected with (None: no ``/inject``), in ``WORKERS`` processes of its own; ``nodes``:
        the kubelets native sidecars are decided by per pod (ENABLE_NATIVE_SIDECARS=auto; None:
        the inputs' own ``native_sidecars``), also settable until the first review; ``metrics``:
        told what each review was."""
        self._tls = tls
        self._injection = injection
        self.nodes = nodes
        self._system_namespace = system_namespace
        self._metrics = metrics
        self._runner: web.AppRunner | None = None
        self._pool = pool
        self._own_pool = pool is None
        self._injection_pool: WorkerPool | None = None
        # validation and injection each have their own: neither can hold up the other
        self._in_flight = asyncio.Semaphore(MAX_REVIEWS_IN_FLIGHT)
        self._injecting = asyncio.Semaphore(MAX_REVIEWS_IN_FLIGHT)
        self._validation_bytes = BodyBytes()
        self._injection_bytes = BodyBytes()
        self.port = 0

    async def start(self, address: str) -> None:
        context = self._tls()
        if self._pool is None:
            self._pool = WorkerPool(WORKERS, name="webhook", preload=("app.webhook.admission",))
        self._pool.start()  # the workers import the validation while the server comes up
        if self._injection is not None:
            self._injection_pool = WorkerPool(WORKERS, name="injection", preload=("app.webhook.injection",))
            self._injection_pool.start()
        app = web.Application()
        app.router.add_post("/validate", self._validate)
        app.router.add_post("/validate/", self._validate)
        if self._injection is not None:
            app.router.add_post("/inject", self._inject)
            app.router.add_post("/inject/{params:.*}", self._inject)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        host, port = split_address(address)
        with listening("webhook", address):
            await web.TCPSite(self._runner, host, port, ssl_context=context).start()
        self.port = self._runner.addresses[0][1]
        logger.info("admission webhook serving on %s:%d", host, self.port)

    async def stop(self) -> None:
        pool, self._pool = self._pool, None
        if self._own_pool and pool is not None:
            pool.close()  # first: a review in progress is refused at once, not waited for
        injection_pool, self._injection_pool = self._injection_pool, None
        if injection_pool is not None:
            injection_pool.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _validate(self, request: web.Request) -> web.Response:
        async def run(pool: WorkerPool, body: bytes, deadline: float) -> dict[str, Any]:
            return await _submit(pool, deadline, review_body, body, self._system_namespace)

        return await self._review(request, self._in_flight, self._validation_bytes, run, "validation")

    async def _inject(self, request: web.Request) -> web.Response:
        assert self._injection is not None  # the route exists only with it
        inputs, path = self._injection(), request.path

        async def run(pool: WorkerPool, body: bytes, deadline: float) -> dict[str, Any]:
            nodes = self.nodes
            if nodes is None:
                return await _submit(pool, deadline, inject_review_body, body, inputs, path)
            if not nodes.synced.is_set():
                try:
                    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                        await nodes.synced.wait()
                except TimeoutError:
                    unlisted = "the nodes' kubelet versions are not listed yet (ENABLE_NATIVE_SIDECARS=auto)"
                    raise _Unreviewed(unlisted) from None
            kubelets = nodes.kubelets
            # DetectNativeSidecar for an unbound pod; when every node can run native sidecars, a
            # bound pod gets them too, else its node decides and the worker asks which it is
            decided_for = None if kubelets.every_node_supports else ""
            native = dataclasses.replace(inputs, native_sidecars=kubelets.native_sidecars())
            answer = await _submit(pool, deadline, inject_review_body, body, native, path, decided_for)
            if BOUND_NODE not in answer:
                return answer
            node = str(answer[BOUND_NODE])
            native = dataclasses.replace(inputs, native_sidecars=kubelets.native_sidecars(node))
            return await _submit(pool, deadline, inject_review_body, body, native, path, node)

        started = time.monotonic()
        try:
            return await self._review(request, self._injecting, self._injection_bytes, run, "injection")
        finally:
            if self._metrics is not None:
                self._metrics.injection_request(time.monotonic() - started)

    async def _review(
        self, request: web.Request, slots: asyncio.Semaphore, held: BodyBytes, run: _Run, what: str
    ) -> web.Response:
        """``run`` in a worker once the body has arrived, answered within the API server's timeout."""
        budget = _timeout(request.query.get("timeout")) - ANSWER_MARGIN
        deadline = time.monotonic() + budget
        try:
            async with asyncio.timeout(budget):
                prefix, body = await _read_body(request, MAX_REVIEW_BYTES, held)
        except TimeoutError:  # a slow sender holds what it sent no longer than a review may take
            return self._refused(what, f"not reviewed: the request body did not arrive within {budget:.1f}s", b"")
        if body is None:
            reason = f"the request body is larger than {MAX_REVIEW_BYTES} bytes, the most an admission review can be"
            return self._refused(what, f"not reviewed: {reason}", prefix)
        try:
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await slots.acquire()
            except TimeoutError:
                busy = f"{MAX_REVIEWS_IN_FLIGHT} reviews were in progress for {budget:.1f}s"
                return self._refused(what, f"not reviewed: {busy}", prefix)
            try:
                return await self._answer(request, body, prefix, deadline, budget, run, what)
            finally:
                slots.release()
        finally:
            held.give(len(body))

    async def _answer(
        self, request: web.Request, body: bytes, prefix: bytes, deadline: float, budget: float, run: _Run, what: str
    ) -> web.Response:
        if not body:
            return self._http_error(what, 400, "no body found\n")
        if request.content_type != "application/json":
            return self._http_error(what, 415, "invalid Content-Type, want `application/json`\n")
        pool = self._injection_pool if what == "injection" else self._pool
        if pool is None:
            return self._refused(what, "not reviewed: the webhook is stopping", prefix)
        try:
            answer = await run(pool, body, deadline)
        except _Unreviewed as e:
            return self._refused(what, f"not reviewed: {e}", prefix)
        except DeadlineExceeded:
            return self._refused(what, f"not reviewed: {what} did not finish within {budget:.1f}s", prefix)
        except WorkerError as e:
            if self._pool is None:
                return self._refused(what, "not reviewed: the webhook is stopping", prefix)
            logger.error("admission review failed in its worker: %s", e)
            return self._refused(what, f"not reviewed: {what} failed ({e}); please report it", prefix)
        outcome = answer.pop(OUTCOME, None)
        response = answer.get("response", {})
        if not response.get("allowed"):
            logger.info("admission denied: %s", response.get("status", {}).get("message"))
        if self._metrics is not None:
            self._count(what, response, outcome)
        return web.json_response(answer)

    def _count(self, what: str, response: Mapping[str, Any], outcome: Mapping[str, Any] | None) -> None:
        assert self._metrics is not None
        if what == "injection":
            allowed = response.get("allowed") is True
            skipped = allowed and "patch" not in response  # the policy left the pod as it is
            self._metrics.injection_outcome(answered=True, failed=not allowed, skipped=skipped)
        elif outcome is not None:
            self._metrics.validated(outcome["resource"], outcome["reason"])

    def _refused(self, what: str, message: str, prefix: bytes) -> web.Response:
        """A review pilotfish could not do (too large, too slow, busy, a worker's failure): refused
        with the reason, and for injection counted failed (istiod's handleError)."""
        if what == "injection" and self._metrics is not None:
            self._metrics.injection_outcome(answered=True, failed=True, skipped=False)
        return _refused(message, prefix)

    def _http_error(self, what: str, status: int, text: str) -> web.Response:
        if self._metrics is not None:
            if what == "injection":
                self._metrics.injection_outcome(answered=False, failed=True, skipped=False)
            else:
                self._metrics.validation_http_error(status)
        return web.Response(status=status, text=text)


async def _submit(pool: WorkerPool, deadline: float, work: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    answer: dict[str, Any] = await asyncio.wrap_future(pool.submit(work, *args, deadline=deadline))
    return answer


async def _read_body(request: web.Request, limit: int, held: BodyBytes) -> tuple[bytes, bytes | None]:
    """(the first bytes, the whole body), or (the first bytes, None) past ``limit`` bytes: the
    rest is not read. Each chunk is charged to ``held`` as it arrives; the whole body's bytes
    stay charged (the caller gives them back), and nothing does when there is no body or the
    read fails."""
    if request.content_length is not None and request.content_length > limit:
        return await request.content.read(1024), None
    chunks: list[bytes] = []
    size = 0
    try:
        while chunk := await request.content.read(_CHUNK):
            await held.take(len(chunk))
            size += len(chunk)
            chunks.append(chunk)
            if size > limit:
                held.give(size)
                return b"".join(chunks)[:1024], None
    except BaseException:
        held.give(size)
        raise
    body = b"".join(chunks)
    return body[:1024], body


def _timeout(text: str | None) -> float:
    """The ``timeout`` the API server sends with a webhook call (a Go duration: ``10s``), bounded."""
    seconds = go_duration_seconds(text) if text else None
    if seconds is not None:
        return min(max(float(seconds), ANSWER_MARGIN + 0.5), MAX_TIMEOUT)
    return DEFAULT_TIMEOUT


def _refused(message: str, prefix: bytes) -> web.Response:
    logger.info("admission denied: %s", message)
    return web.json_response(undecodable(message, uid_in(prefix)))
