"""Push tracing when the OTLP collector fails: a real collector process (tests/support/otlp_collector.py)
that is down, slow, refusing (gRPC UNAVAILABLE, HTTP 503), and a real pilotfish Runtime exporting
to it configured only by OTEL_* variables.

Stopping must not wait on the collector: the SDK's own shutdown waited up to 30 s for its export
thread (each export retrying for 10 s), so SIGTERM with the collector down took 30 s, up to
Kubernetes' SIGKILL, where istiod is gone within its 10 s shutdownDuration. A bound, not a speed:
the runtime here has a 1 s grace, and the SDK's would be 10 to 30 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.config.objects import ConfigKey, Kind
from app.runtime import Runtime
from app.settings import Settings
from app.telemetry.tracing import tracing_from_env
from app.xds.push_request import PushRequest
from tests.support.bookinfo import BOOKINFO
from tests.support.cluster import free_port
from tests.support.otlp_collector import Collector

DR = ConfigKey(Kind.DESTINATION_RULE, "bookinfo", "reviews")


def otel_env(port: int, protocol: str = "grpc") -> dict[str, str]:
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }


@contextlib.contextmanager
def exporting_env(port: int, protocol: str) -> Iterator[None]:
    """OTEL_* for an OTLP exporter to the port, in os.environ (the SDK's exporters read it there)."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in otel_env(port, protocol).items():
            patch.setenv(key, value)
        yield


@contextlib.contextmanager
def collector(port: int, mode: str) -> Iterator[None]:
    if mode == "down":  # nothing listens on the port
        yield
        return
    process = Collector(port, mode)
    try:
        yield
    finally:
        process.stop()


def traced_pushes(rt: Runtime, count: int, key: ConfigKey = DR) -> None:
    """``count`` pushes that reached no proxy: two spans each, ended at once and queued for export."""
    assert rt.tracer is not None
    now = time.monotonic()
    for _ in range(count):
        handle = rt.tracer.push_fired(PushRequest(full=True, configs_updated=frozenset({key}), start=now), now)
        assert handle is not None
        rt.tracer.push_queued(handle, 0)


def bookinfo_settings(workdir: Path, **overrides: Any) -> Settings:
    config = workdir / "config"
    shutil.copytree(BOOKINFO, config)
    return Settings(config_dir=config, xds_address="127.0.0.1:0", http_address="127.0.0.1:0", **overrides)


@pytest.mark.parametrize(("mode", "protocol"), [("down", "grpc"), ("slow", "grpc"), ("http503", "http/protobuf")])
async def test_stopping_does_not_wait_on_a_failing_collector(mode: str, protocol: str, tmp_path: Path) -> None:
    port = free_port()
    settings = bookinfo_settings(tmp_path, shutdown_grace=1.0)
    with collector(port, mode), exporting_env(port, protocol):
        rt = Runtime(settings, tracing_from_env(os.environ))
        stop = asyncio.Event()
        task = asyncio.create_task(rt.run(stop))
        try:
            await asyncio.wait_for(rt.started.wait(), 30)
            traced_pushes(rt, 1500)  # more than a batch: the SDK's flush exports batch after batch
            await asyncio.sleep(0.5)  # the export thread is now held by the collector
        finally:
            stopped_at = time.monotonic()
            stop.set()
            await asyncio.wait_for(task, 60)
            took = time.monotonic() - stopped_at
            gc.unfreeze()
    # the grace for the streams (none here) and 1 s for the spans, then at most 1 s more
    assert took < 5.0, f"stopping took {took:.1f}s with the collector {mode}"


async def test_traces_arrive_once_a_collector_down_at_start_comes_up(tmp_path: Path) -> None:
    port = free_port()
    later = ConfigKey(Kind.DESTINATION_RULE, "bookinfo", "later")
    with exporting_env(port, "grpc"):
        rt = Runtime(bookinfo_settings(tmp_path, shutdown_grace=1.0), tracing_from_env(os.environ))
        stop = asyncio.Event()
        task = asyncio.create_task(rt.run(stop))
        collected: list[dict[str, Any]] = []
        try:
            await asyncio.wait_for(rt.started.wait(), 30)
            traced_pushes(rt, 3)  # exported into nothing: retried, then dropped
            await asyncio.sleep(1.0)
            up = Collector(port, "ok")
            try:
                for _ in range(30):  # the exporter reconnects, at the latest once its current export gives up (10 s)
                    traced_pushes(rt, 1, later)
                    await asyncio.sleep(0.5)
            finally:
                collected = up.stop()
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)
            gc.unfreeze()
    arrived = [s for s in collected if s["name"] == "pilotfish.push"]
    assert any("DestinationRule/bookinfo/later" in s["attributes"]["pilotfish.push.configs_updated"] for s in arrived)
