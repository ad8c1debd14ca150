"""``POST /debug/diff``: the change preview against exactly what the server serves, for the
proxies connected to it, computed off the event loop.

A preview at mesh-1k is seconds of pure Python: in a worker thread it would hold the GIL, and
every stream's coroutine would wait for it. It runs in a forked child instead: the fork is a
copy-on-write snapshot of the Environment, the served generator and the streams' watches as they
are at that instant, the child computes the preview on its copies (applying the change to its
Environment changes nothing the server holds) and writes the JSON to a pipe; the server only
reads the pipe. The child touches nothing but Python objects and leaves with ``os._exit``, so
the gRPC threads the parent runs are never used in it. One preview runs at a time; one that
takes longer than ``DIFF_DEADLINE`` is killed. bench/preview_cost.py measures it.

A child died of SIGSEGV now and then in its first read of a upb message of the snapshot while
gRPC's C-core fork handlers were on (4 of 950 forks with gRPC clients connected to the same
process); with them off (app/__init__.py) 0 of 800, but the cause is not proven, so a child
killed by a signal is run once more.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from app.config.objects import ConfigKey, ConfigObject
from app.environment import Environment
from app.model.sidecar_scope import SidecarScope
from app.preview.proxies import Watching
from app.preview.push import preview
from app.preview.render import report
from app.preview.request import DiffRequest
from app.xds.generators.source import XdsGenerator
from app.xds.mesh_source import MeshStream

logger = logging.getLogger(__name__)

DIFF_DEADLINE = 300.0  # seconds; mesh-1k with 2,000 proxies takes far less (bench/preview_cost.py)


class PreviewFailed(Exception):
    """The child computing a preview failed or ran out of time: the reason."""


def connected(streams: Iterable[MeshStream], wanted: Sequence[str]) -> list[Watching]:
    """Each connected stream as the push reaches it: its proxy, what it watches, the scope its
    last push used; only the proxies ``wanted`` (ids or connection ids) when any are."""
    out = []
    for stream in streams:
        conn = stream.connection
        if wanted and conn.client.id not in wanted and conn.id not in wanted:
            continue
        scope = conn.note if isinstance(conn.note, SidecarScope) else None
        out.append(Watching(conn.client, {w.type_url: w for w in conn.watched()}, scope))
    return out


def compute(
    env: Environment,
    served: XdsGenerator,
    watching: list[Watching],
    objects: Iterable[ConfigObject],
    request: DiffRequest,
) -> dict[str, Any]:
    """The report of ``request`` (run in the child: it changes ``env``)."""
    current: dict[ConfigKey, ConfigObject] = {obj.key: obj for obj in objects}
    proposal = request.proposal(current)
    return report(preview(env, served, watching, proposal, show_diff=request.show_diff))


def _child(write_fd: int, work: Callable[[], dict[str, Any]]) -> None:
    code = 1
    try:
        try:
            data = json.dumps(work()).encode()
        except Exception as e:  # reported to the parent, which answers 500 and keeps serving
            data = json.dumps({"error": f"{type(e).__name__}: {e}"}).encode()
        with os.fdopen(write_fd, "wb") as out:
            out.write(data)
        code = 0
    finally:
        os._exit(code)


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _read_all(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as f:
        return f.read()


class _ChildKilled(PreviewFailed):
    """The child died of a signal."""


async def in_fork(
    work: Callable[[], dict[str, Any]], running: asyncio.Lock, deadline: float = DIFF_DEADLINE
) -> dict[str, Any]:
    """``work()`` run in a forked child, its JSON result read back without blocking the loop;
    one at a time under ``running``. A child that dies of a signal is run once more (see the
    module docstring)."""
    async with running:
        try:
            return await _forked(work, deadline)
        except _ChildKilled as e:
            logger.warning("POST /debug/diff: %s; computing it once more", e)
            return await _forked(work, deadline)


async def _forked(work: Callable[[], dict[str, Any]], deadline: float) -> dict[str, Any]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        # no collection in the child: it would finalise the parent's garbage, gRPC calls
        # among it, whose C-core threads did not survive the fork (seen: SIGSEGV)
        gc.disable()
        os.close(read_fd)
        _child(write_fd, work)
    os.close(write_fd)
    try:
        data = await asyncio.wait_for(asyncio.to_thread(_read_all, read_fd), deadline)
    except TimeoutError:
        os.kill(pid, signal.SIGKILL)
        raise PreviewFailed(f"the preview took longer than {deadline:g} s and was stopped") from None
    finally:
        _, status = await asyncio.to_thread(os.waitpid, pid, 0)
    if not data:
        error = _ChildKilled if os.WIFSIGNALED(status) else PreviewFailed
        raise error(f"the process computing the preview died ({_ended(status)})")
    found: dict[str, Any] = json.loads(data)
    if "error" in found:
        raise PreviewFailed(str(found["error"]))
    return found
