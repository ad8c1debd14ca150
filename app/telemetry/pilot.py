"""istiod's control-plane metrics, by istiod's names, help texts, labels and buckets
(pilot/pkg/xds/monitoring.go, pkg/xds/monitoring.go), so Istio's control-plane dashboard reads
pilotfish's ``/metrics`` unmodified. The pipeline reports here through the methods below; what
istiod exposes and pilotfish does not measure yet is not exposed (no zero-valued stand-ins)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from app.telemetry.prometheus import Histogram, Metric, render
from app.xds.resources import SHORT_NAMES

# Go's codes.Code.String(), which istiod writes into the ``err`` label
_CODE_NAMES = {
    0: "OK", 1: "Canceled", 2: "Unknown", 3: "InvalidArgument", 4: "DeadlineExceeded", 5: "NotFound",
    6: "AlreadyExists", 7: "PermissionDenied", 8: "ResourceExhausted", 9: "FailedPrecondition", 10: "Aborted",
    11: "OutOfRange", 12: "Unimplemented", 13: "Internal", 14: "Unavailable", 15: "DataLoss", 16: "Unauthenticated",
}  # fmt: skip
_PUSH_BUCKETS = (0.01, 0.1, 0.5, 1, 3, 5, 10, 20, 30)
_PROXY_BUCKETS = (0.1, 0.5, 1, 3, 5, 10, 20, 30)


class PilotMetrics:
    def __init__(self) -> None:
        self.services = Metric("pilot_services", "Total services known to pilot.", "gauge")
        self.xds = Metric("pilot_xds", "Number of endpoints connected to this pilot using XDS.", "gauge")
        self.pushes = Metric("pilot_xds_pushes", "Pilot build and send errors for lds, rds, cds and eds.", "counter")
        self.push_triggers = Metric(
            "pilot_push_triggers",
            "Total number of times a push was triggered, labeled by reason for the push.",
            "counter",
        )
        self.inbound_updates = Metric("pilot_inbound_updates", "Total number of updates received by pilot.", "counter")
        self.total_rejects = Metric(
            "pilot_total_xds_rejects", "Total number of XDS responses from pilot rejected by proxy.", "counter"
        )
        self.rejects = {
            "cds": Metric("pilot_xds_cds_reject", "Pilot rejected CDS configs.", "gauge"),
            "eds": Metric("pilot_xds_eds_reject", "Pilot rejected EDS.", "gauge"),
            "lds": Metric("pilot_xds_lds_reject", "Pilot rejected LDS.", "gauge"),
            "rds": Metric("pilot_xds_rds_reject", "Pilot rejected RDS.", "gauge"),
        }
        self.write_timeouts = Metric("pilot_xds_write_timeout", "Pilot XDS response write timeouts.", "counter")
        self.debounce_time = Histogram(
            "pilot_debounce_time",
            "Delay in seconds between the first config enters debouncing and the merged push request is pushed "
            "into the push queue (includes pushcontext_init_seconds).",
            _PUSH_BUCKETS,
        )
        self.pushcontext_init = Histogram(
            "pilot_pushcontext_init_seconds",
            "Total time in seconds Pilot takes to init pushContext.",
            (0.01, 0.1, 0.5, 1, 3, 5),
        )
        self.convergence = Histogram(
            "pilot_proxy_convergence_time",
            "Delay in seconds between config change and a proxy receiving all required configuration.",
            _PROXY_BUCKETS,
        )
        self._clients: Counter[str] = Counter()

    # --- what the pipeline reports -----------------------------------------------------------

    def connected(self, istio_version: str, delta: int) -> None:
        self._clients[istio_version] += delta
        self.xds.set(self._clients[istio_version], version=istio_version)

    def sent(self, type_url: str) -> None:
        self.pushes.add(type=SHORT_NAMES.get(type_url, type_url))

    def rejected(self, type_url: str, node: str, code: int) -> None:
        """A NACK: by type, and per node with its gRPC code's name, as istiod labels it."""
        short = SHORT_NAMES.get(type_url, type_url)
        self.total_rejects.add(type=short)
        if short in self.rejects:
            self.rejects[short].add(node=node, err=_CODE_NAMES.get(code, f"Code({code})"))

    def pushed(self, reasons: Mapping[str, int], full: bool, debounced: float, init: float, services: int) -> None:
        """A debounced push went into the push queue."""
        for reason, count in reasons.items():
            self.push_triggers.add(count, type=reason)
        self.inbound_updates.add(sum(reasons.values()), type="config" if full else "eds")
        self.debounce_time.observe(debounced)
        if full:
            self.pushcontext_init.observe(init)
        self.services.set(services)

    def render(self) -> str:
        return render(
            [
                self.services,
                self.xds,
                self.pushes,
                self.push_triggers,
                self.inbound_updates,
                self.total_rejects,
                *self.rejects.values(),
                self.write_timeouts,
                self.debounce_time,
                self.pushcontext_init,
                self.convergence,
            ]
        )
