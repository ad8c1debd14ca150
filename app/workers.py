"""Validation and parsing that would stall the event loop, run in worker processes.

One event loop serves xDS, the CA, ``/ready`` and the webhook, so nothing on it may take long.
Validating a large object is pure Python (about 0.5 s for a 1.5 MiB one) and a worker *thread*
does not help: it holds the GIL, and the loop's ticks were measured 30-160 ms late while one
ran (an RE2 compile, which does not release the GIL, delays them by all of its time). So the
work goes to child processes (running ``main`` of this module), as ``fn(*args)`` of a
module-level function, and comes back pickled.

``WorkerPool.submit`` returns a ``concurrent.futures.Future`` (an asyncio caller awaits it with
``asyncio.wrap_future``). Each worker process is driven by a thread of the pool, which pickles
the call, waits for the answer and unpickles it: the event loop's thread does neither. A call
still running at its ``deadline`` has its worker killed (the only way to stop it) and fails with
``DeadlineExceeded``; a worker that dies (out of memory, a crash) fails its call with
``WorkerError``; either is replaced for the next call. ``close()`` kills the workers and fails
what is queued. Workers start with the first call (or ``start()``), so nothing runs on import.
"""

from __future__ import annotations

import contextlib
import copyreg
import ctypes
import dataclasses
import gc
import importlib
import io
import logging
import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

from app.errors import ConfigError, PilotfishError

logger = logging.getLogger(__name__)

T = TypeVar("T")

_HEADER = struct.Struct(">Q")  # a frame: its length, then a pickle
_READY = b"ready"
# a worker's program: this module imported by its name (as ``-m`` it would be ``__main__``, and
# what it pickles would name functions the parent's ``__main__`` does not have)
_CHILD = "import sys; from app.workers import main; main(int(sys.argv[1]), sys.argv[2:])"
# workers run at a lower priority than the process serving xDS: on a busy node validation waits
NICE = 5


class WorkerError(PilotfishError):
    """The call failed in the worker (the text names the exception), or the worker died."""


class DeadlineExceeded(WorkerError):
    """The call did not finish by its deadline; its worker was killed."""


# --- pickling: what the loader builds, both ways ------------------------------------------


def _mapping_proxy(items: dict[Any, Any]) -> types.MappingProxyType[Any, Any]:
    return types.MappingProxyType(items)


def _config_error(source: str, kind: str, name: str, field: str, reason: str) -> ConfigError:
    return ConfigError(source, kind, name, field, reason)


_REDUCERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {
    types.MappingProxyType: lambda m: (_mapping_proxy, (dict(m),)),  # labels: read-only maps
    ConfigError: lambda e: (_config_error, (e.source, e.kind, e.name, e.field, e.reason)),
}


_SLOTTED_FIELDS: dict[type, tuple[str, ...] | None] = {}


def _slotted_fields(cls: type) -> tuple[str, ...] | None:
    """The fields of a slotted dataclass that pickles as dataclasses make it (what the loader
    builds), None for any other class."""
    if cls not in _SLOTTED_FIELDS:
        state = getattr(cls.__dict__.get("__getstate__"), "__name__", "")
        slotted = dataclasses.is_dataclass(cls) and "__slots__" in cls.__dict__ and state == "_dataclass_getstate"
        _SLOTTED_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls)) if slotted else None
    return _SLOTTED_FIELDS[cls]


def _slotted(cls: type[T], values: tuple[Any, ...]) -> T:
    obj = object.__new__(cls)
    for name, value in zip(_slotted_fields(cls) or (), values, strict=True):
        object.__setattr__(obj, name, value)  # frozen ones too, as dataclasses' own __setstate__
    return obj


class _Pickler(pickle.Pickler):
    """Read-only maps and ConfigErrors (neither pickles by default), and slotted dataclasses as
    their fields' values: dataclasses' own ``__getstate__``/``__setstate__`` look the fields up
    again for every object (the loads of a start-up's 1,056 objects: pickled in 7.8 ms instead of
    12.4, unpickled in 8.2 instead of 9.5)."""

    dispatch_table = {**copyreg.dispatch_table, **_REDUCERS}

    def reducer_override(self, obj: Any) -> Any:
        names = _slotted_fields(type(obj))
        if names is None:
            return NotImplemented
        return _slotted, (type(obj), tuple([getattr(obj, name) for name in names]))


def dumps(value: Any) -> bytes:
    """``value`` pickled (``_Pickler``)."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


# --- the pool (parent side) ----------------------------------------------------------------


@dataclass
class _Call:
    future: Future[Any]
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    deadline: float | None  # time.monotonic()


@dataclass
class _Worker:
    """One child process and the pipes to it."""

    process: subprocess.Popen[bytes]
    poller: select.poll = field(default_factory=select.poll)

    def __post_init__(self) -> None:
        assert self.process.stdout is not None
        self.poller.register(self.process.stdout.fileno(), select.POLLIN)

    def send(self, payload: bytes) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(_HEADER.pack(len(payload)) + payload)
        stdin.flush()

    def receive(self, deadline: float | None) -> bytes:
        header = self._read(_HEADER.size, deadline)
        return self._read(_HEADER.unpack(header)[0], deadline)

    def _read(self, size: int, deadline: float | None) -> bytes:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        chunks: list[bytes] = []
        while size:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.poller.poll(None if timeout is None else int(timeout * 1000) + 1):
                raise DeadlineExceeded("no answer by the deadline")
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                try:
                    status: int | None = self.process.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    status = None
                raise WorkerError(f"the worker process ended (exit status {status})")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self.process.wait()


class WorkerPool:
    """``size`` worker processes running module-level functions, each call with an optional
    deadline (seconds from ``time.monotonic()``)."""

    def __init__(self, size: int = 1, *, name: str = "worker", preload: Sequence[str] = (), nice: int = NICE) -> None:
        """``preload``: modules a worker imports before it takes calls; ``nice``: added to its
        niceness, so serving keeps the CPU it needs while a worker is busy."""
        self._size = size
        self._name = name
        self._preload = tuple(preload)
        self._nice = nice
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._workers: dict[int, _Worker] = {}  # driver slot -> its live worker
        self._closed = False

    def start(self) -> None:
        """Start the workers now (a first call then finds them ready)."""
        with self._lock:
            if self._closed:
                raise WorkerError(f"the {self._name} pool is closed")
            while len(self._threads) < self._size:
                slot = len(self._threads)
                thread = threading.Thread(target=self._drive, args=(slot,), name=f"{self._name}-{slot}", daemon=True)
                self._threads.append(thread)
                thread.start()

    def submit(self, fn: Callable[..., T], *args: Any, deadline: float | None = None) -> Future[T]:
        future: Future[T] = Future()
        self.start()
        self._calls.put(_Call(future, fn, args, deadline))
        return future

    def close(self) -> None:
        """Kill the workers (a running call fails) and fail every queued call; does not wait."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers = list(self._workers.values())
            threads = len(self._threads)
        for _ in range(threads):
            self._calls.put(None)
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.kill()  # its driver reaps it
        while True:  # what no driver will take any more
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                break
            if call is not None:
                _fail(call.future, WorkerError(f"the {self._name} pool closed"))

    # --- driver threads ---------------------------------------------------------------------

    def _drive(self, slot: int) -> None:
        worker: _Worker | None = None
        try:
            # the worker starts with its driver (``start``), so the first call finds it ready; one
            # that fails to start here is started again for that call, which then reports why
            with contextlib.suppress(WorkerError, OSError):
                worker = self._spawn(slot)
            while True:
                call = self._calls.get()
                if call is None or self._closed:
                    if call is not None:
                        _fail(call.future, WorkerError(f"the {self._name} pool closed"))
                    return
                if not call.future.set_running_or_notify_cancel():
                    continue
                if call.deadline is not None and time.monotonic() >= call.deadline:
                    _fail(call.future, DeadlineExceeded("the deadline passed while the call waited for a worker"))
                    continue
                try:
                    payload = dumps((call.fn, call.args))
                except Exception as e:
                    _fail(call.future, WorkerError(f"cannot send the call: {type(e).__name__}: {e}"))
                    continue
                try:
                    if worker is None:
                        worker = self._spawn(slot)
                    worker.send(payload)
                    answer = worker.receive(call.deadline)
                except (WorkerError, OSError) as e:
                    if worker is not None:
                        self._retire(slot, worker)
                        worker = None
                    _fail(call.future, e if isinstance(e, WorkerError) else WorkerError(f"{type(e).__name__}: {e}"))
                    continue
                try:
                    ok, value = pickle.loads(answer)
                except Exception as e:
                    _fail(call.future, WorkerError(f"cannot read the answer: {type(e).__name__}: {e}"))
                    continue
                if ok:
                    call.future.set_result(value)
                else:
                    _fail(call.future, WorkerError(str(value)))
        finally:
            if worker is not None:
                self._retire(slot, worker)

    def _spawn(self, slot: int) -> _Worker:
        """A new worker, once it has imported what it runs (a few hundred ms)."""
        paths = [p or os.getcwd() for p in sys.path]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        process = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(self._nice), *self._preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        worker = _Worker(process)
        with self._lock:
            self._workers[slot] = worker
            closed = self._closed
        if closed:
            self._retire(slot, worker)
            raise WorkerError(f"the {self._name} pool closed")
        try:
            if worker.receive(time.monotonic() + 60) != _READY:
                raise WorkerError("the worker process did not start")
        except WorkerError:
            self._retire(slot, worker)
            raise
        logger.debug("%s-%d: worker process %d started", self._name, slot, process.pid)
        return worker

    def _retire(self, slot: int, worker: _Worker) -> None:
        with self._lock:
            if self._workers.get(slot) is worker:
                del self._workers[slot]
        worker.kill()


def _fail(future: Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


# --- the worker process (child side) ---------------------------------------------------------


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    data = stream.read(size)
    if len(data) < size:
        return None  # the parent closed the pipe: done
    return data


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """Answer framed ``(fn, args)`` calls until ``requests`` ends."""
    answers.write(_HEADER.pack(len(_READY)) + _READY)
    answers.flush()
    while True:
        header = _read_exactly(requests, _HEADER.size)
        if header is None:
            return
        payload = _read_exactly(requests, _HEADER.unpack(header)[0])
        if payload is None:
            return
        try:
            fn, args = pickle.loads(payload)
            answer = dumps((True, fn(*args)))
        except Exception as e:
            answer = dumps((False, f"{type(e).__name__}: {e}"))
        answers.write(_HEADER.pack(len(answer)) + answer)
        answers.flush()


def main(nice: int, preload: Sequence[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops its workers itself
    _die_with_parent()
    if nice:
        os.nice(nice)
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the answers
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    for module in preload:
        importlib.import_module(module)
    # what the imports made lives as long as the worker: the collections its calls' allocations
    # trigger need not walk it (app/heap.py)
    gc.freeze()
    serve(sys.stdin.buffer, answers)


def _die_with_parent() -> None:
    """Linux: SIGKILL when the thread that started this process ends (its pool's driver, or the
    whole parent killed), so a long call cannot outlive pilotfish."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
