"""The server side of TLS over an accepted TCP stream, driven by hand (``ssl.MemoryBIO``), for
the secure port's relay (app/security/server.py).

asyncio can start TLS on an accepted connection (``loop.start_tls``), but only if nothing has
read from it yet, and uvloop starts reading every new connection: the client's ClientHello would
be lost. The relay wants plain TCP first anyway (a connection is admitted or refused before any
TLS work), so it reads raw bytes and hands them to an ``ssl.SSLObject`` here: the handshake,
then records both ways, then close_notify. Single-task safe only as asyncio is: every call into
the SSLObject is synchronous and the two directions interleave only at awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

CHUNK = 256 * 1024


class TlsStream:
    """One server-side TLS connection over ``reader`` / ``writer`` (the raw TCP streams)."""

    def __init__(self, context: ssl.SSLContext, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._reader, self.writer = reader, writer

    def _flush(self) -> None:
        """Send what TLS has written (records, alerts, tickets); the caller drains."""
        if pending := self._outgoing.read():
            self.writer.write(pending)

    async def _fill(self) -> bool:
        """More bytes from the client for TLS to read; False at the end of the stream."""
        data = await self._reader.read(CHUNK)
        if not data:
            self._incoming.write_eof()
            return False
        self._incoming.write(data)
        return True

    async def handshake(self) -> None:
        """The TLS handshake (ssl.SSLError when it fails: its alert is sent first)."""
        try:
            while True:
                try:
                    self.ssl.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    self._flush()
                    await self.writer.drain()
                    if not await self._fill():
                        raise ConnectionResetError("the client left during the TLS handshake") from None
        finally:
            self._flush()  # the last flight, TLS 1.3 tickets, or the alert of a failure
        await self.writer.drain()

    async def read(self) -> bytes:
        """Application data from the client; b"" at its close_notify or the end of the stream."""
        while True:
            try:
                data = self.ssl.read(CHUNK)
            except ssl.SSLWantReadError:
                self._flush()  # what reading made TLS write (a TLS 1.3 key update's answer)
                if not await self._fill():
                    return b""  # the end of the stream without close_notify
                continue
            except ssl.SSLZeroReturnError:
                return b""
            self._flush()
            return data

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self.ssl.write(view) :]
        self._flush()

    async def drain(self) -> None:
        await self.writer.drain()

    def close(self) -> None:
        """close_notify (without waiting for the client's), then the TCP connection."""
        with contextlib.suppress(ssl.SSLError, ValueError):
            self.ssl.unwrap()
        with contextlib.suppress(OSError, RuntimeError):
            self._flush()
        self.writer.close()
