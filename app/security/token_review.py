"""Service-account tokens checked by the Kubernetes API server, as istiod's KubeJWTAuthenticator
does (security/pkg/server/ca/authenticate/kubeauth): a TokenReview for the ``istio-ca``
audience; ``system:serviceaccount:NS:SA`` is the identity.

Answers are cached by the token's hash for a short TTL (aiocache, DESIGN §2: TTL caching of slow
async look-ups) and concurrent reviews of one token share one request, so a reconnect storm of
a thousand agents is a handful of TokenReviews, not a thousand.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

from aiocache import SimpleMemoryCache

from app.sources.kube.client import KubeClient

logger = logging.getLogger("pilotfish.security")

AUDIENCE = "istio-ca"  # istiod TOKEN_AUDIENCES
ACCEPTED_TTL = 60.0  # seconds a reviewed token stands
REFUSED_TTL = 5.0  # a refused one is asked about again soon (it may just have been created)
_PREFIX = "system:serviceaccount:"


def service_account(username: str) -> tuple[str, str] | None:
    """``system:serviceaccount:NS:SA`` -> (NS, SA)."""
    if not username.startswith(_PREFIX):
        return None
    namespace, sep, account = username[len(_PREFIX) :].partition(":")
    return (namespace, account) if sep and namespace and account and ":" not in account else None


class TokenReviewer:
    def __init__(self, client: KubeClient, audiences: tuple[str, ...] = (AUDIENCE,)) -> None:
        self._client = client
        self._audiences = audiences
        self._cache = SimpleMemoryCache()
        self._inflight: dict[str, asyncio.Future[tuple[str, str] | None]] = {}  # by token hash
        self.reviews = 0  # TokenReviews sent

    async def authenticate(self, token: str) -> tuple[str, str] | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = await self._cache.get(key)
        if cached is not None:  # a refusal is cached as ()
            return (cached[0], cached[1]) if cached else None
        review = self._inflight.get(key)
        if review is None:
            # a task of its own: a caller that goes away (a deadline, a disconnect) does not
            # cancel the review the others wait for
            review = self._inflight[key] = asyncio.ensure_future(self._review_and_cache(key, token))
        return await asyncio.shield(review)

    async def _review_and_cache(self, key: str, token: str) -> tuple[str, str] | None:
        try:
            result = await self._review(token)
            await self._cache.set(key, result or (), ttl=ACCEPTED_TTL if result else REFUSED_TTL)
            return result
        except Exception as e:  # the API server unreachable or refusing us: not the token's fault
            logger.warning("TokenReview failed: %s", e)
            return None
        finally:
            self._inflight.pop(key, None)

    async def _review(self, token: str) -> tuple[str, str] | None:
        self.reviews += 1
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": list(self._audiences)},
        }
        review = await self._client.call("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body)
        status = review.get("status") or {}
        user = status.get("user") or {}
        if not status.get("authenticated") or not user:
            return None
        audiences = status.get("audiences")
        if audiences and not set(audiences) & set(self._audiences):
            return None
        return service_account(str(user.get("username") or ""))
