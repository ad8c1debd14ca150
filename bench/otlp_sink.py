"""A local OTLP/gRPC trace receiver for the load benchmark's tracing-on runs: it accepts spans,
counts them (and the spans named pilotfish.push), and on SIGTERM prints the counts as JSON.
A process of its own, so receiving spans costs neither the server nor the load client.
Usage: python -m bench.otlp_sink --address 127.0.0.1:PORT   (prints "serving" when it listens)
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class Sink(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts = {"exports": 0, "spans": 0, "push_spans": 0, "bytes": 0}

    def Export(self, request: Any, context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
        spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
        with self.lock:
            self.counts["exports"] += 1
            self.counts["spans"] += len(spans)
            self.counts["push_spans"] += sum(1 for s in spans if s.name == "pilotfish.push")
            self.counts["bytes"] += request.ByteSize()
        return trace_service_pb2.ExportTraceServiceResponse()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    args = parser.parse_args()
    sink = Sink()
    options = [("grpc.max_receive_message_length", 64 << 20)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=options)
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
    server.add_insecure_port(args.address)
    server.start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    print("serving", flush=True)
    done.wait()
    server.stop(1).wait()
    with sink.lock:
        print(json.dumps(sink.counts), flush=True)


if __name__ == "__main__":
    main()
