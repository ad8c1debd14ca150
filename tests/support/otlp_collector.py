"""An OTLP trace collector as a process of its own, healthy or failing the ways collectors fail, for
the tests of push tracing under collector faults (tests/unit/test_tracing_collector.py).

Modes: ``ok`` (gRPC, keeps every span), ``slow`` (gRPC, answers after ``--delay`` seconds),
``unavailable`` (gRPC status UNAVAILABLE, as an overloaded collector), ``http503`` (OTLP/HTTP,
503 to every export). On SIGTERM it prints the spans it kept, one JSON object per line
(name, trace id, parent span id, status code and message, string/bool/int attributes), then exits.

Run: python -m tests.support.otlp_collector --port PORT --mode MODE   (prints "serving")
The ``Collector`` class starts one from a test and collects what it printed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

ROOT = Path(__file__).parents[2]


def span_record(span: trace_pb2.Span) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        if kind == "array_value":
            values = kv.value.array_value.values
            attributes[kv.key] = [getattr(v, v.WhichOneof("value") or "string_value") for v in values]
        elif kind is not None:
            attributes[kv.key] = getattr(kv.value, kind)
    return {
        "name": span.name,
        "trace_id": span.trace_id.hex(),
        "parent": span.parent_span_id.hex(),
        "status": span.status.code,
        "message": span.status.message,
        "attributes": attributes,
    }


class _Kept:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[dict[str, Any]] = []

    def add(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self.lock:
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend(span_record(s) for s in scope_spans.spans)


class _Service(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, kept: _Kept, mode: str, delay: float) -> None:
        self.kept, self.mode, self.delay = kept, mode, delay

    def Export(self, request: Any, context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
        if self.mode == "slow":
            time.sleep(self.delay)
        if self.mode == "unavailable":
            context.abort(grpc.StatusCode.UNAVAILABLE, "collector overloaded")
        self.kept.add(request)
        return trace_service_pb2.ExportTraceServiceResponse()


def _serve_http(port: int) -> None:
    class Refusing(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(503)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=("ok", "slow", "unavailable", "http503"), default="ok")
    parser.add_argument("--delay", type=float, default=60.0)
    args = parser.parse_args()
    kept = _Kept()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    if args.mode == "http503":
        _serve_http(args.port)
    else:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=[("grpc.so_reuseport", 0)])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Service(kept, args.mode, args.delay), server)
        server.add_insecure_port(f"127.0.0.1:{args.port}")
        server.start()
    print("serving", flush=True)
    done.wait()
    with kept.lock:
        for span in kept.spans:
            print(json.dumps(span))
    sys.stdout.flush()
    os._exit(0)  # a slow Export may still sleep in a worker thread


class Collector:
    """One collector process on ``port``: started by the constructor, ``stop()`` returns its spans."""

    def __init__(self, port: int, mode: str = "ok") -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.otlp_collector", "--port", str(port), "--mode", mode],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "serving"

    def stop(self) -> list[dict[str, Any]]:
        self.process.send_signal(signal.SIGTERM)
        out, _ = self.process.communicate(timeout=30)
        return [json.loads(line) for line in out.splitlines() if line.strip()]


if __name__ == "__main__":
    main()
