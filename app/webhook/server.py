"""The validating admission webhook over HTTPS: ``POST /validate`` (and ``/validate/``), as
istiod serves it; the decisions are admission.py's."""

from __future__ import annotations

import json
import logging
import ssl
from pathlib import Path
from typing import Any

from aiohttp import web

from app.errors import SettingsError
from app.settings import split_address
from app.webhook.admission import ADMISSION_V1, ReviewError, review

logger = logging.getLogger(__name__)


class WebhookServer:
    def __init__(self, cert: Path, key: Path, *, system_namespace: str = "istio-system") -> None:
        self._cert, self._key = cert, key
        self._system_namespace = system_namespace
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, address: str) -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self._cert, self._key)
        except (OSError, ssl.SSLError) as e:
            raise SettingsError(f"--webhook-cert {self._cert} / --webhook-key {self._key}: {e}") from e
        app = web.Application()
        app.router.add_post("/validate", self._validate)
        app.router.add_post("/validate/", self._validate)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        host, port = split_address(address)
        await web.TCPSite(self._runner, host, port, ssl_context=context).start()
        self.port = self._runner.addresses[0][1]
        logger.info("validation webhook serving on %s:%d", host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _validate(self, request: web.Request) -> web.Response:
        body = await request.read()
        if not body:
            return web.Response(status=400, text="no body found\n")
        if request.content_type != "application/json":
            return web.Response(status=415, text="invalid Content-Type, want `application/json`\n")
        try:
            answer = review(json.loads(body), system_namespace=self._system_namespace)
        except (ValueError, ReviewError) as e:  # istiod answers a review it cannot decode, too
            answer = _undecodable(f"could not decode body: {e}")
        response = answer.get("response", {})
        if not response.get("allowed"):
            logger.info("admission denied: %s", response.get("status", {}).get("message"))
        return web.json_response(answer)


def _undecodable(message: str) -> dict[str, Any]:
    return {
        "apiVersion": ADMISSION_V1,
        "kind": "AdmissionReview",
        "response": {"uid": "", "allowed": False, "status": {"code": 400, "message": message}},
    }
