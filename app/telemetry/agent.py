"""The node agent's metrics, by pilot-agent's names (pkg/istio-agent/metrics/metrics.go, which
pilot-agent exports with the ``istio_agent_`` prefix), plus whether its upstream xDS stream is
up now: how the agent's connection to the control plane is doing, on its status port."""

from __future__ import annotations

from app.telemetry.prometheus import Metric, render

PREFIX = "istio_agent_"
CANCELLED = "cancelled"
ERROR = "error"


class AgentMetrics:
    def __init__(self) -> None:
        self.connection_failures = Metric(
            PREFIX + "istiod_connection_failures", "The total number of connection failures to Istiod", "counter"
        )
        self.upstream_terminations = Metric(
            PREFIX + "istiod_connection_terminations", "The total number of connection errors to Istiod", "counter"
        )
        self.envoy_terminations = Metric(
            PREFIX + "envoy_connection_terminations", "The total number of connection errors from envoy", "counter"
        )
        self.requests = Metric(PREFIX + "xds_proxy_requests", "The total number of Xds Proxy Requests", "counter")
        self.responses = Metric(PREFIX + "xds_proxy_responses", "The total number of Xds Proxy Responses", "counter")
        self.upstream_connected = Metric(
            "pilotfish_agent_upstream_connected",
            "Upstream xDS streams to the control plane open now (one per Envoy stream).",
            "gauge",
        )
        self.upstream_connected.set(0)

    def render(self) -> str:
        return render(
            [
                self.connection_failures,
                self.upstream_terminations,
                self.envoy_terminations,
                self.requests,
                self.responses,
                self.upstream_connected,
            ]
        )
