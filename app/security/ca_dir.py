"""``--ca-dir`` followed as it changes, as istiod follows its plugged-in /etc/cacerts
(pilot/pkg/bootstrap/istio_ca.go initCACertsAndCRLWatcher, handleEvent): operators rotate the
intermediate (or a mounted ``cacerts`` Secret is renewed and the kubelet swaps the files in), and
the new one signs from then on without a restart.

The files are checked every ``interval`` (``FileSetStamp``). A changed set is loaded whole; a set
that does not load (half-written, a key that does not match) is logged and the CA in force stays,
as is a new root bundle unless ISTIO_MULTIROOT_MESH allows it (one bundle a subset of the other:
istiod's rule, ``root_change_refusal``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from app.errors import SettingsError
from app.file_stamp import FileSetStamp
from app.security.ca import CA_FILES, CRL_FILE, CertificateAuthority
from app.security.ca_secret import root_change_refusal

logger = logging.getLogger(__name__)

CHECK_INTERVAL = 1.0  # seconds between looks at the files


class CaDirWatch:
    def __init__(self, ca_dir: Path, current: Callable[[], CertificateAuthority], *, multi_root: bool) -> None:
        """``current``: the CA in force now (loaded from ``ca_dir`` at start)."""
        self._dir = ca_dir
        self._current = current
        self._multi_root = multi_root
        self._files = FileSetStamp(ca_dir / name for name in (*CA_FILES, CRL_FILE))

    def check(self) -> CertificateAuthority | None:
        """The dir's CA when its files changed since last looked at and may replace the one in
        force; None otherwise (unchanged, not loadable, or refused: logged)."""
        if not self._files.changed():
            return None
        current = self._current()
        try:
            ca = CertificateAuthority.load(self._dir)
        except SettingsError as e:
            logger.error("CA: %s; the CA in force stays", e)
            return None
        if ca.same_material(current):
            return None
        refusal = root_change_refusal(current.root_pem, ca.root_pem, self._multi_root)
        if refusal is not None:
            logger.warning("CA: CA dir %s changed its root: %s; the CA in force stays", self._dir, refusal)
            return None
        logger.info("CA: CA dir %s loaded again", self._dir)
        return ca

    async def run(self, on_change: Callable[[CertificateAuthority], None], interval: float = CHECK_INTERVAL) -> None:
        """Look at the files every ``interval`` seconds until cancelled; ``on_change`` gets each new CA."""
        while True:
            await asyncio.sleep(interval)
            if (ca := self.check()) is not None:
                on_change(ca)
