"""``--webhook-cert`` / ``--webhook-key``: the webhooks' certificate from PEM files, loaded again
when they change, as istiod reloads its custom TLS files (pilot/pkg/bootstrap/certcontroller.go
initFileCertificateWatches). In a cluster they are a ``kubernetes.io/tls`` Secret mounted as a
volume, which cert-manager renews before it expires and the kubelet swaps in; read once, the
certificate would be served until it expired and every admission call after failed.

The files are checked every ``interval`` (``FileSetStamp``). A changed pair is tried on a context
of its own first and taken into the one the server hands out only when the key matches the
certificate, so a rotation seen half-written leaves the pair in force; handshakes from then on
present the new one."""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

from app.errors import SettingsError
from app.file_stamp import FileSetStamp

logger = logging.getLogger(__name__)

CHECK_INTERVAL = 1.0  # seconds between looks at the files


def file_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context with the certificate and key of ``--webhook-cert`` / ``--webhook-key``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise SettingsError(f"--webhook-cert {cert} / --webhook-key {key}: {e}") from e
    return context


class FileCertificate:
    """``context`` presents the pair in the files now; ``run()`` follows them."""

    def __init__(self, cert: Path, key: Path) -> None:
        """Raises SettingsError naming the files when they do not hold a matching pair."""
        self._cert, self._key = cert, key
        self._files = FileSetStamp((cert, key))
        self.context = file_context(cert, key)

    def check(self) -> bool:
        """Take the files' pair if they changed since last looked at and hold a good one; True if taken."""
        if not self._files.changed():
            return False
        try:
            file_context(self._cert, self._key)  # the whole pair, before the context in use changes
            self.context.load_cert_chain(self._cert, self._key)
        except (SettingsError, OSError, ssl.SSLError) as e:
            logger.error("webhook certificate: %s; the certificate in force stays", e)
            return False
        logger.info("webhook certificate: %s loaded again", self._cert)
        return True

    async def run(self, interval: float = CHECK_INTERVAL) -> None:
        """Look at the files every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            self.check()
