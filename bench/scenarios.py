"""The measured scenarios, each against one running server and its connected fleet.

* ``connect_storm``: every sidecar opens its stream at once; time until each holds CDS, EDS, LDS
  and RDS (all of them, or how many did within the timeout), streams that failed, bytes.
* ``push``: a change (a file rewrite for pilotfish, a control call for the floor) at time t0;
  the push is over when every expected sidecar received something and nobody received anything
  for QUIET seconds. Per sidecar that received anything: its last response (= its last ACK)
  minus t0, nothing subtracted; plus what was received, per type, per group of sidecars.
* ``churn``: every 10th sidecar drops its connection and reconnects at once, presenting what it
  holds (Delta ``initial_resource_versions``); what was resent and when each was done.

The ``SCOPED`` pushes run on a mesh with one Sidecar per namespace (egress ``./*``,
``istio-system/*``) and change only the changed service's namespace: what they report is split
into ``namespace`` (its sidecars, the expected ones) and ``other_namespaces`` (which should
receive nothing), by ``namespace_groups``.

Each also reports the server's CPU seconds and the load client's (this process, all threads)
over the scenario, and the server's peak RSS so far and RSS at the end (where memory peaks).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from app.xds.client import ENVOY_ORDER, SHORT
from bench.envoy import SimulatedEnvoy
from bench.figures import percentiles, received, stream_errors
from bench.fleet import Fleet
from bench.processes import ServerProcess
from bench.profile import Profiler
from bench.recording import Recorder

# a DestinationRule change and an endpoint added, in the changed service's namespace only
SCOPED = ("sidecar-dr-change", "sidecar-endpoint-add")
QUIET = 1.0  # seconds without any response that end a push
CHURN_EVERY = 10  # every 10th sidecar (10 %) reconnects in the churn scenario

Trigger = Callable[[], Awaitable[float]]  # makes the change; returns its time.monotonic()


@dataclass
class Run:
    fleet: Fleet
    server: ServerProcess
    timeout: float
    recorder: Recorder | None = None
    profiler: Profiler | None = None  # py-spy on the server during each scenario


def namespace_groups(envoys: Sequence[SimulatedEnvoy], namespace: str) -> dict[str, list[SimulatedEnvoy]]:
    """A scoped push's groups: the sidecars of ``namespace`` and all the others."""
    return {
        "namespace": [e for e in envoys if e.identity.namespace == namespace],
        "other_namespaces": [e for e in envoys if e.identity.namespace != namespace],
    }


class _Cost:
    """Server and client CPU seconds from construction to ``figures()``."""

    def __init__(self, server: ServerProcess) -> None:
        self._server = server
        self._server_cpu = server.cpu_seconds()
        self._client_cpu = time.process_time()

    def figures(self) -> dict[str, float]:
        return {
            "server_cpu_s": round(self._server.cpu_seconds() - self._server_cpu, 2),
            "client_cpu_s": round(time.process_time() - self._client_cpu, 2),
            # where the server's memory peaked: its peak so far, and its RSS once this is over
            "server_peak_rss_mb": round(self._server.peak_rss_mb()),
            "server_rss_mb": round(self._server.rss_mb()),
        }


async def connect_storm(run: Run) -> dict[str, object]:
    cost = _Cost(run.server)
    fleet = run.fleet
    fleet.start()
    completed = await fleet.wait_complete(run.timeout)
    now = time.monotonic()
    done = [e.complete_at - fleet.started for e in fleet.envoys if e.complete_at is not None]
    errors = stream_errors(fleet.envoys)
    stuck = [e for e in fleet.envoys if e.complete_at is None]
    incomplete: dict[str, int] = {}  # what the sidecars that did not complete got: "cds+eds", "nothing"
    for envoy in stuck:
        held = "+".join(SHORT[t] for t in ENVOY_ORDER if t in envoy.ads.acked) or "nothing"
        incomplete[held] = incomplete.get(held, 0) + 1
    return {
        "proxies": len(fleet.envoys),
        "completed": len(done),
        "timed_out": not completed,
        "incomplete_holding": incomplete,
        "incomplete_stream_errors": stream_errors(stuck),
        "seconds": round(max(done), 3) if completed else None,
        **percentiles(done),
        "streams_failed": sum(errors.values()),
        "reconnects": sum(e.reconnects for e in fleet.envoys),
        "stream_errors": errors,
        "received": received(fleet.envoys, fleet.started, now),
        **cost.figures(),
    }


async def push(
    run: Run,
    name: str,
    trigger: Trigger,
    expected: Sequence[SimulatedEnvoy],
    groups: Mapping[str, Sequence[SimulatedEnvoy]] | None = None,
) -> dict[str, object]:
    """One change pushed; ``groups`` (default: every sidecar, as "received") are reported apart."""
    fleet = run.fleet
    errors_before = {id(e): len(e.stream_errors) for e in fleet.envoys}
    cost = _Cost(run.server)
    if run.recorder is not None:
        run.recorder.window = name
    try:
        t0 = await trigger()
        settled = await fleet.settle(t0, expected, QUIET, run.timeout)
    finally:
        if run.recorder is not None:
            run.recorder.window = None
    end = time.monotonic()
    figures: dict[str, object] = {
        "expected_proxies": len(expected),
        "expected_received": sum(1 for e in expected if e.events and e.events[-1].at >= t0),
        "timed_out": not settled,
        "window_s": round(end - t0, 3),
        **cost.figures(),
    }
    for group, members in (groups or {"received": fleet.envoys}).items():
        figures[group] = received(members, t0, end)
    figures["stream_errors"] = stream_errors(fleet.envoys, errors_before)
    return figures


async def churn(run: Run, offset: int = 0, new_connections: bool = True) -> dict[str, object]:
    """``offset``: which tenth reconnects (the sidecars at offset, offset + 10, ...);
    ``new_connections`` False: each opens its new stream on the connection it had."""
    fleet = run.fleet
    churned = fleet.envoys[offset % CHURN_EVERY :: CHURN_EVERY]
    others = [e for i, e in enumerate(fleet.envoys) if (i - offset) % CHURN_EVERY]
    errors_before = {id(e): len(e.stream_errors) for e in fleet.envoys}
    cost = _Cost(run.server)
    t0 = time.monotonic()
    for envoy in churned:
        envoy.reconnect(new_connections)
    settled = await fleet.settle(t0, churned, QUIET, run.timeout)
    end = time.monotonic()
    return {
        "proxies_churned": len(churned),
        "timed_out": not settled,
        "window_s": round(end - t0, 3),
        **cost.figures(),
        "received": received(churned, t0, end),  # times: from the disconnect to the last response
        "others_received": received(others, t0, end)["proxies_received"],
        "stream_errors": stream_errors(fleet.envoys, errors_before),
    }


async def storm_then(
    run: Run, scenarios: Mapping[str, Callable[[], Awaitable[dict[str, object]]]], wanted: Callable[[str], bool]
) -> dict[str, object]:
    """The connect storm, then the ``wanted`` scenarios in order; none after a storm that did
    not complete (they would measure its backlog)."""
    storm = await _profiled(run, "storm", lambda: connect_storm(run))
    figures: dict[str, object] = {"storm": storm}
    if storm["timed_out"]:
        figures["skipped"] = "the connect storm did not complete; later scenarios would measure its backlog"
        return figures
    for name, scenario in scenarios.items():
        if wanted(name):
            figures[name] = await _profiled(run, name, scenario)
    return figures


async def _profiled(run: Run, name: str, scenario: Callable[[], Awaitable[dict[str, object]]]) -> dict[str, object]:
    if run.profiler is None:
        return await scenario()
    profile: dict[str, object] = {}
    async with run.profiler.scenario(run.server.popen.pid, name, profile):
        figures = await scenario()
    return {**figures, **profile}
