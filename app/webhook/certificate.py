"""pilotfish's own serving certificate for its webhooks, from its CA, as istiod's DNS certificate
(pilot/pkg/bootstrap/certcontroller.go initDNSCertsIstiod): when no ``--webhook-cert`` is given,
the CA signs a certificate for the names the API server calls (``istiod[-REV].NS.svc``) and the
CA's root is what the webhook configurations must trust (their ``caBundle``, patched in by
ca_bundle.py).

The certificate is renewed at half its life and re-issued at once when the root changes
(``set_root``; istiod polls the root and regenerates). Handshakes from then on present the new
one; the key never touches a disk (a memfd, as the secure port's).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
from collections.abc import Callable

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from app.security.ca import CertificateAuthority
from app.security.server import SERVER_CERT_TTL, memory_file

logger = logging.getLogger(__name__)


def istiod_dns_names(namespace: str, revision: str) -> tuple[str, ...]:
    """The names istiod's DNS certificate carries (bootstrap getDNSNames): its known Services in
    the system namespace, and ``istiod-REV`` for a revision; pilotfish adds its own name."""
    hosts = ["istiod", "istiod-remote", "istio-pilot", "pilotfish"]
    if revision and revision != "default":
        hosts += [f"istiod-{revision}", f"pilotfish-{revision}"]
    return tuple(sorted(f"{host}.{namespace}.svc" for host in hosts))


class ServingCertificate:
    """A TLS server context presenting a certificate of ``ca()`` for ``dns_names`` (and
    ``ips``); ``ca_bundle`` is the root PEM clients are to trust."""

    def __init__(
        self,
        ca: Callable[[], CertificateAuthority],
        dns_names: tuple[str, ...],
        ips: tuple[str, ...] = (),
        *,
        ttl: datetime.timedelta = SERVER_CERT_TTL,
    ) -> None:
        """``ca``: the CA in force now (another part of pilotfish may replace it)."""
        self._ca = ca
        self._names = (dns_names, ips)
        self._ttl = ttl
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca_bundle = ""
        self.certificate = ""  # the leaf presented now (PEM)
        self._root_changed = asyncio.Event()
        self.renew()

    def renew(self) -> None:
        """A new key and certificate from the current CA; its root becomes the bundle."""
        ca = self._ca()
        key = ec.generate_private_key(ec.SECP256R1())
        chain = ca.server_certificate(key, *self._names, self._ttl)
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        with memory_file("".join(chain).encode()) as cert_path, memory_file(key_pem) as key_path:
            self.context.load_cert_chain(cert_path, key_path)
        self.certificate = chain[0]
        self.ca_bundle = ca.root_pem

    def set_root(self, root_pem: str) -> None:
        """The CA's root changed (rotation, a plugged-in CA replaced): issue from the new CA now
        and wake ``run`` so the caller re-patches; a root equal to the bundle changes nothing."""
        if root_pem == self.ca_bundle:
            return
        self.renew()
        if self.ca_bundle != root_pem:
            logger.warning("webhook certificate: the CA's root is not the one announced; serving under the CA's")
        self._root_changed.set()
        logger.info("webhook certificate re-issued under a new root")

    async def run(self, on_renewed: Callable[[], None]) -> None:
        """Renew at half life, and after each root change; ``on_renewed`` is told each time."""
        while True:
            try:
                async with asyncio.timeout(self._ttl.total_seconds() / 2):
                    await self._root_changed.wait()
                self._root_changed.clear()
            except TimeoutError:
                self.renew()
                logger.info("webhook certificate renewed")
            on_renewed()
