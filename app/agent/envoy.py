"""Envoy as the agent's child process: its command line (as istio's pkg/envoy/proxy.go), start,
SIGTERM, exit status, and whether its admin endpoint says LIVE.

``Envoy`` is an async context manager: leaving it sends SIGTERM and waits (shielded from
cancellation), killing Envoy if it outlives ``stop_timeout``, so no child outlives the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import aiohttp

DEFAULT_DRAIN_TIME_S = 45  # ProxyConfig.drainDuration default


def envoy_argv(
    binary: str,
    bootstrap_path: str | Path,
    *,
    drain_time_s: int = DEFAULT_DRAIN_TIME_S,
    ipv6: bool = False,
    concurrency: int | None = None,
    log_level: str | None = None,
    admin_address_path: str | Path | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command pilot-agent runs (pkg/envoy/proxy.go ``args``). ``--disable-hot-restart``
    means no shared-memory base id, so any number of Envoys share a host without
    ``--base-id``/``--use-dynamic-base-id``. ``admin_address_path``: Envoy writes its bound admin
    address there (for an admin port of 0)."""
    argv = [
        binary,
        "-c", str(bootstrap_path),
        "--drain-time-s", str(drain_time_s),
        "--drain-strategy", "immediate",  # clients are told to go away as soon as draining starts
        "--local-address-ip-version", "v6" if ipv6 else "v4",  # v6 only when every node IP is IPv6
        "--file-flush-interval-msec", "1000",  # access logs within 1s rather than 10s
        "--disable-hot-restart",
        "--allow-unknown-static-fields",
    ]  # fmt: skip
    if log_level:
        argv += ["-l", log_level]
    if admin_address_path is not None:
        argv += ["--admin-address-path", str(admin_address_path)]
    argv += list(extra_args)
    if concurrency:
        argv += ["--concurrency", str(concurrency)]
    return argv


class Envoy:
    """One Envoy process started from ``argv`` (see ``envoy_argv``)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
        stop_timeout: float = 10.0,
    ) -> None:
        self.argv = list(argv)
        self._stdout, self._stderr = stdout, stderr
        self._stop_timeout = stop_timeout
        self._process: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def returncode(self) -> int | None:
        """None while running (or not started); negative -N if a signal N ended it."""
        return self._process.returncode if self._process else None

    async def start(self) -> None:
        if self._process is not None:
            raise RuntimeError("envoy already started")
        self._process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=self._stdout, stderr=self._stderr
        )

    def terminate(self) -> None:
        """SIGTERM (Envoy shuts down and exits 0); a no-op once it has exited."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    async def wait(self) -> int:
        """Envoy's exit status, once it exits."""
        if self._process is None:
            raise RuntimeError("envoy not started")
        return await self._process.wait()

    async def stop(self, timeout: float | None = None) -> int:
        """SIGTERM, then the exit status; SIGKILL if Envoy is still running after ``timeout``."""
        self.terminate()
        try:
            return await asyncio.wait_for(self.wait(), timeout if timeout is not None else self._stop_timeout)
        except TimeoutError:
            self.kill()
            return await self.wait()

    async def __aenter__(self) -> Envoy:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._process is not None and self._process.returncode is None:
            # shielded: a cancelled agent must still reap its child
            await asyncio.shield(self.stop())

    def _signal(self, sig: signal.Signals) -> None:
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # exited, not yet reaped
                self._process.send_signal(sig)


def read_admin_address(path: str | Path) -> str | None:
    """The ``HOST:PORT`` Envoy wrote to ``--admin-address-path``; None until it has."""
    try:
        text = Path(path).read_text().strip()
    except FileNotFoundError:
        return None
    return text or None


async def server_state(admin_address: str, timeout: float = 2.0) -> str | None:
    """What Envoy's ``/ready`` says (LIVE, PRE_INITIALIZING, INITIALIZING, DRAINING), or None if
    the admin endpoint at ``admin_address`` (``HOST:PORT``) does not answer."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.get(f"http://{admin_address}/ready") as response,
        ):
            return (await response.text()).strip()
    except (aiohttp.ClientError, TimeoutError):
        return None


async def ready(admin_address: str, timeout: float = 2.0) -> bool:
    """True when Envoy's ``/ready`` answers 200 LIVE: every initial CDS/LDS fetch has completed
    (with istio's initial_fetch_timeout of 0s, only once the control plane has answered)."""
    return await server_state(admin_address, timeout) == "LIVE"
