"""Benchmark: how late the event loop runs while one worst-case config object is validated.

pilotfish serves xDS, the CA, ``/ready`` and the validating webhook from one event loop, so an
object that takes seconds to validate on it stalls every stream. This runs a uvloop event loop
with a ticker (``asyncio.sleep(tick)``, its lateness recorded) and, for each object, sends it
through each path that validates it, one at a time:

* ``webhook``: a real ``WebhookServer`` over HTTPS, the AdmissionReview POSTed by a client in
  another process (so the client's work is not the loop's);
* ``kube``: a ``KubeSource`` fed the object as its informer hands over a watch event (the JSON
  line decoded on the loop, as the informer does), until its event comes out of ``watch()``;
* ``files``: a ``FileSource`` watching a directory the object's YAML file is written to.

Per object and path: the seconds until the answer or event, the loop's lateness during that time
(max, p99, p50 in ms) and the outcome (the review's verdict, the event or the rejection). Each
path first handles a small valid object, so worker processes are running before the window.
Written to bench/results/loop_lag-LABEL.json. Usage:
    python -m bench.loop_lag [--label after] [--objects hosts-5000,regex-300] [--paths webhook,kube,files]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import trustme
import uvloop
import yaml

from app.config.objects import EventType
from app.sources.files import FileSource
from app.sources.kube.resources import ISTIO_RESOURCES
from app.sources.kube.source import KubeSource
from app.sources.kube.store import Delta
from app.webhook.file_certificate import file_context
from app.webhook.server import WebhookServer

RESULTS = Path(__file__).parent / "results"
NS = "bench"
ROUTE = {"route": [{"destination": {"host": "reviews"}}]}


def virtual_service(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": name, "namespace": NS}
    return {"apiVersion": "networking.istio.io/v1", "kind": "VirtualService", "metadata": meta, "spec": spec}


def _hosts(n: int) -> dict[str, Any]:
    return {"hosts": [f"h{i}.example.com" for i in range(n)], "http": [ROUTE]}


def _regexes(n: int, pattern: str) -> dict[str, Any]:
    """n routes, each matching a regex of its own (unique: nothing is compiled once for all)."""
    routes = [{"match": [{"uri": {"regex": f"/r{i:05d}/" + pattern}}], **ROUTE} for i in range(n)]
    return {"hosts": ["reviews"], "http": routes}


def _routes(n: int) -> dict[str, Any]:
    match = [{"uri": {"prefix": "/p"}, "headers": {"x-user": {"exact": "jason"}}}]
    routes = [{"match": [{**match[0], "uri": {"prefix": f"/p{i}"}}], **ROUTE, "timeout": "5s"} for i in range(n)]
    return {"hosts": ["reviews"], "http": routes}


# name -> (what it is, its spec)
OBJECTS: dict[str, tuple[str, Callable[[], dict[str, Any]]]] = {
    # the issue's measurements: 13.9 s and 8.3 s on the loop before
    "hosts-5000": ("5,000 hosts (quadratic overlap check before)", lambda: _hosts(5000)),
    "regex-300": ("300 routes of unique regexes of ~116K RE2 instructions each", lambda: _regexes(300, r"\pN{500}")),
    # under the bounds: each regex just below Envoy's 32768 program size, until the object's budget
    "regex-budget": ("300 routes of unique regexes of ~30K instructions each", lambda: _regexes(300, r"\pN{128}")),
    # as large as the API server stores (etcd's 1.5 MiB): linear checks, still ~0.3 s of Python
    "hosts-60000": ("60,000 hosts, 1.3 MiB", lambda: _hosts(60000)),
    "routes-10000": ("10,000 routes, 1.3 MiB", lambda: _routes(10000)),
}
SMALL = virtual_service("warm-up", {"hosts": ["ratings"], "http": [ROUTE]})


class Ticker:
    """Sleeps ``tick`` seconds over and over, recording how late each wake-up was."""

    def __init__(self, tick: float) -> None:
        self.tick = tick
        self.late: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(self.tick)
            self.late.append(time.perf_counter() - start - self.tick)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(self.tick * 2)
        try:
            yield
        finally:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def measure(self, work: Awaitable[str]) -> dict[str, Any]:
        """Run ``work`` (its outcome: text), with the lateness of the ticks that woke meanwhile
        and of the one that was waiting when it ended."""
        await asyncio.sleep(self.tick * 2)  # the tick that waited while the object was made is not counted
        first = len(self.late)
        start = time.perf_counter()
        outcome = await work
        seconds = time.perf_counter() - start
        await asyncio.sleep(self.tick * 2)  # a tick blocked until the end is recorded too
        late = sorted(self.late[first:]) or [0.0]
        return {
            "seconds": round(seconds, 3),
            "lag_max_ms": round(late[-1] * 1000, 1),
            "lag_p99_ms": round(late[min(len(late) - 1, int(len(late) * 0.99))] * 1000, 1),
            "lag_p50_ms": round(statistics.median(late) * 1000, 2),
            "ticks": len(late),
            "outcome": outcome[:240],
        }


# --- the paths --------------------------------------------------------------------------------

_CLIENT = """
import json, ssl, sys, urllib.request, urllib.error
body = open(sys.argv[2], "rb").read()
request = urllib.request.Request(sys.argv[1], data=body, headers={"Content-Type": "application/json"})
context = ssl.create_default_context(cafile=sys.argv[3])
try:
    with urllib.request.urlopen(request, context=context, timeout=600) as resp:
        answer = json.loads(resp.read())["response"]
        status = answer.get("status", {}).get("message", "")
        print(json.dumps({"http": resp.status, "allowed": answer["allowed"], "message": status}))
except urllib.error.HTTPError as e:
    print(json.dumps({"http": e.code, "message": e.read().decode(errors="replace")[:200]}))
"""


def review_body(obj: dict[str, Any], uid: str) -> bytes:
    request = {"uid": uid, "operation": "CREATE", "namespace": NS, "object": obj}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


class WebhookPath:
    name = "webhook"

    def __init__(self, workdir: Path) -> None:
        self._dir = workdir
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1")
        cert.cert_chain_pems[0].write_to_path(str(workdir / "tls.crt"))
        cert.private_key_pem.write_to_path(str(workdir / "tls.key"))
        ca.cert_pem.write_to_path(str(workdir / "ca.crt"))
        self._server = WebhookServer(partial(file_context, workdir / "tls.crt", workdir / "tls.key"))

    async def start(self) -> None:
        await self._server.start("127.0.0.1:0")
        await self.prepare(SMALL, "warm-up")()

    async def stop(self) -> None:
        await self._server.stop()

    def prepare(self, obj: dict[str, Any], name: str) -> Callable[[], Awaitable[str]]:
        body = self._dir / f"{name}.json"
        body.write_bytes(review_body(obj, f"uid-{name}"))
        url = f"https://127.0.0.1:{self._server.port}/validate?timeout=30s"

        async def send() -> str:
            client = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _CLIENT, url, str(body), str(self._dir / "ca.crt"),
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, _ = await client.communicate()
            return out.decode().strip()

        return send


class _NoClient:
    async def close(self) -> None:
        pass


class KubePath:
    name = "kube"

    def __init__(self, workdir: Path) -> None:
        self._source = KubeSource(_NoClient())  # type: ignore[arg-type]  # never started: fed directly
        self._resource = next(r for r in ISTIO_RESOURCES if str(r.kind) == "VirtualService")
        self._watch = self._source.watch()

    async def start(self) -> None:
        await self.prepare(SMALL, "warm-up")()

    async def stop(self) -> None:
        await self._watch.aclose()
        await self._source.close()

    def prepare(self, obj: dict[str, Any], name: str) -> Callable[[], Awaitable[str]]:
        line = json.dumps({"type": "ADDED", "object": obj}).encode()
        return lambda: self._send(line)

    async def _send(self, line: bytes) -> str:
        event = json.loads(line)  # as the informer reads a watch line, on the loop
        self._source._on_deltas(self._resource, [Delta(EventType.ADD, event["object"])])
        before = len(self._source.rejections())
        waiting = asyncio.ensure_future(anext(self._watch))
        while not waiting.done():  # a rejection yields no event: watch the rejections as well
            await asyncio.wait([waiting], timeout=0.01)
            rejected = self._source.rejections()
            if len(rejected) > before:
                waiting.cancel()
                await asyncio.wait([waiting])
                self._watch = self._source.watch()
                return f"rejected: {rejected[-1]}"
        return "accepted: " + ", ".join(f"{e.type.value} {e.obj.key}" for e in waiting.result())


class FilesPath:
    name = "files"

    def __init__(self, workdir: Path) -> None:
        self._dir = workdir / "config"
        self._dir.mkdir()
        self._source = FileSource(self._dir, debounce_ms=20)
        self._watch = self._source.watch()
        self._pending: asyncio.Future[Any] | None = None

    async def start(self) -> None:
        self._source.load()
        await self.prepare(SMALL, "warm-up")()

    async def stop(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            await asyncio.wait([self._pending])
        await self._watch.aclose()
        await self._source.close()

    def prepare(self, obj: dict[str, Any], name: str) -> Callable[[], Awaitable[str]]:
        staged = self._dir.parent / f"{name}.yaml"  # written outside the config dir, moved in
        staged.write_text(yaml.dump(obj, Dumper=yaml.CSafeDumper))
        return lambda: self._send(staged)

    async def _send(self, staged: Path) -> str:
        rejected = len(self._source.rejections())
        staged.rename(self._dir / staged.name)
        while True:
            if self._pending is None:
                self._pending = asyncio.ensure_future(anext(self._watch))
            await asyncio.wait([self._pending], timeout=0.01)
            if self._pending.done():
                events, self._pending = self._pending.result(), None
                return "accepted: " + ", ".join(f"{e.type.value} {e.obj.key}" for e in events)
            errors = self._source.rejections()
            if len(errors) > rejected:
                return f"rejected: {errors[-1]}"


PATHS = {"webhook": WebhookPath, "kube": KubePath, "files": FilesPath}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    ticker = Ticker(args.tick_ms / 1000)
    results: list[dict[str, Any]] = []
    async with ticker.running():
        idle = await ticker.measure(_idle(args.idle))
        for path_name in args.paths:
            with tempfile.TemporaryDirectory(prefix="loop-lag-") as tmp:
                path = PATHS[path_name](Path(tmp))
                await path.start()
                try:
                    for name in args.objects:
                        what, spec = OBJECTS[name]
                        obj = virtual_service(name, spec())
                        size = len(json.dumps(obj))
                        print(f"{path_name} {name} ({size:,} bytes)...", file=sys.stderr, flush=True)
                        row = {"path": path_name, "object": name, "what": what, "bytes": size}
                        send = path.prepare(obj, name)
                        row.update(await ticker.measure(send()))
                        print(f"  {json.dumps(row)}", file=sys.stderr, flush=True)
                        results.append(row)
                finally:
                    await path.stop()
    return {
        "benchmark": "loop_lag",
        "label": args.label,
        "tick_ms": args.tick_ms,
        "python": platform.python_version(),
        "loop": "uvloop",
        "idle": idle,
        "results": results,
    }


async def _idle(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "idle"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default="after")
    parser.add_argument("--objects", default=",".join(OBJECTS), type=lambda s: s.split(","))
    parser.add_argument("--paths", default=",".join(PATHS), type=lambda s: s.split(","))
    parser.add_argument("--tick-ms", type=float, default=5.0)
    parser.add_argument("--idle", type=float, default=2.0, help="seconds of ticking with nothing to do, for reference")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    report = uvloop.run(run(args))
    out = args.out or RESULTS / f"loop_lag-{args.label}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
