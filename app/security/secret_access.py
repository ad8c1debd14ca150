"""Whether a proxy's service account may read its namespace's Secrets, asked of the API server
as istiod asks before it sends a ``credentialName`` key pair (pilot/pkg/credentials/kube/
secrets.go Authorize): a SubjectAccessReview for the user ``system:serviceaccount:NS:SA`` (no
groups), verb ``list``, resource ``secrets``, in NS.

Answers are cached by user as istiod caches them: an allowed one for five minutes (no need to
revoke quickly), a refusal, or a failed review, for one minute; concurrent questions about one
user share one review. A refusal is istiod's error text, ``SA/NS is not authorized to read
secrets: REASON``, which the SDS generator logs when it leaves the Secret out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from app.sources.kube.client import KubeClient

logger = logging.getLogger("pilotfish.security")

ALLOWED_TTL = 5 * 60.0  # istiod: cacheTTL * 5 for a success
REFUSED_TTL = 60.0  # istiod cacheTTL


class SecretAccessReviewer:
    def __init__(self, client: KubeClient, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self._cache: dict[str, tuple[float, str | None]] = {}  # user -> (expires, refusal or None)
        self._inflight: dict[str, asyncio.Future[str | None]] = {}
        self.reviews = 0  # SubjectAccessReviews sent

    async def authorize(self, namespace: str, service_account: str) -> str | None:
        """None when the account may list Secrets in ``namespace``, else why not."""
        user = f"system:serviceaccount:{namespace}:{service_account}"
        now = self._clock()
        cached = self._cache.get(user)
        if cached is not None and cached[0] > now:
            return cached[1]
        review = self._inflight.get(user)
        if review is None:
            # a task of its own: a stream that goes away does not cancel what others wait for
            asking = self._review_and_cache(user, namespace, service_account)
            review = self._inflight[user] = asyncio.ensure_future(asking)
        return await asyncio.shield(review)

    async def _review_and_cache(self, user: str, namespace: str, service_account: str) -> str | None:
        try:
            refusal = await self._review(user, namespace, service_account)
        except Exception as e:  # the API server unreachable or refusing us: cached as istiod caches it
            refusal = f"{e}"
            logger.warning("SubjectAccessReview for %s failed: %s", user, e)
        finally:
            self._inflight.pop(user, None)
        now = self._clock()
        # expired answers go, as istiod clears them (the cache holds no more than the accounts asking)
        for stale in [u for u, (expires, _) in self._cache.items() if expires <= now]:
            del self._cache[stale]
        self._cache[user] = (now + (REFUSED_TTL if refusal else ALLOWED_TTL), refusal)
        return refusal

    async def _review(self, user: str, namespace: str, service_account: str) -> str | None:
        self.reviews += 1
        attributes = {"namespace": namespace, "verb": "list", "resource": "secrets"}
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "resourceAttributes": attributes},
        }
        answer = await self._client.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
        status = answer.get("status") or {}
        if status.get("allowed"):
            return None
        reason = str(status.get("reason") or "")
        return f"{service_account}/{namespace} is not authorized to read secrets: {reason}"
