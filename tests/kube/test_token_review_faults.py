"""TokenReview under faults a real API server cannot be made to produce on cue, against the
emulator (tests/support/kube_api.py) with pilotfish's client: an error status
refuses without caching the refusal, and a slow review that one caller gives up on still
answers the others. The rest runs against the real kube-apiserver (test_token_review.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.security.token_review import TokenReviewer
from app.sources.kube.client import api_client
from tests.support.kube_api import KubeApi


async def test_an_unreachable_api_server_refuses_without_caching(tmp_path: Path) -> None:
    api = KubeApi(service_account_tokens={"jwt-of-web": "system:serviceaccount:shop:web"})
    async with api.serve(tmp_path) as kubeconfig:
        client = api_client(kubeconfig)
        try:
            reviewer = TokenReviewer(client)
            api.fail(1, 503)
            assert await reviewer.authenticate("jwt-of-web") is None
            assert await reviewer.authenticate("jwt-of-web") == ("shop", "web")  # asked again
        finally:
            await client.close()


async def test_a_caller_that_gives_up_does_not_cancel_the_review_others_wait_for(tmp_path: Path) -> None:
    api = KubeApi(service_account_tokens={"jwt-of-web": "system:serviceaccount:shop:web"}, delay=0.3)
    async with api.serve(tmp_path) as kubeconfig:
        client = api_client(kubeconfig)
        try:
            reviewer = TokenReviewer(client)
            impatient = asyncio.create_task(reviewer.authenticate("jwt-of-web"))
            patient = asyncio.create_task(reviewer.authenticate("jwt-of-web"))
            await asyncio.sleep(0.1)
            impatient.cancel()
            assert await asyncio.wait_for(patient, 10) == ("shop", "web")
        finally:
            await client.close()
