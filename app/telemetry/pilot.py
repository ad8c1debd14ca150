"""istiod's control-plane metrics, by istiod's names, help texts, labels and buckets
(pilot/pkg/xds/monitoring.go, pkg/xds/monitoring.go), so Istio's control-plane dashboard reads
pilotfish's ``/metrics`` unmodified. The pipeline reports here through the methods below; what
istiod exposes and pilotfish does not measure yet is not exposed (no zero-valued stand-ins)."""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, generate_latest

from app import __version__
from app.telemetry.prometheus import Histogram, Metric, render
from app.xds.cause import Cause
from app.xds.type_urls import SHORT_NAMES

# Go's codes.Code.String(), which istiod writes into the ``err`` label
_CODE_NAMES = {
    0: "OK", 1: "Canceled", 2: "Unknown", 3: "InvalidArgument", 4: "DeadlineExceeded", 5: "NotFound",
    6: "AlreadyExists", 7: "PermissionDenied", 8: "ResourceExhausted", 9: "FailedPrecondition", 10: "Aborted",
    11: "OutOfRange", 12: "Unimplemented", 13: "Internal", 14: "Unavailable", 15: "DataLoss", 16: "Unauthenticated",
}  # fmt: skip
MAX_RECENT_REJECTIONS = 100
# a node as a latest rejection names it: a proxy id is POD.NAMESPACE (at most 253 + 1 + 63), but
# a client may send megabytes of one, and the latest rejections outlive its stream
MAX_NODE_SHOWN = 320
# istiod's debounceTime and pushTime buckets (pilot/pkg/xds/monitoring.go): the same bounds, so that
# histogram_quantile over both control planes' buckets (a revision beside istiod) stays sound
_PUSH_BUCKETS = (0.01, 0.1, 1, 3, 5, 10, 20, 30)
# type URLs a client may send are any text: a label takes the types pilotfish serves, "other" for
# the rest (istiod writes the client's text, a series per type URL a client makes up)
OTHER_TYPE = "other"
# the kinds istiod's kube controller registers handlers for (registerHandlers), by its type label
_REGISTRY_TYPES = {"Service": "Services", "Pod": "Pods", "Node": "Nodes", "EndpointSlice": "EndpointSlice"}
MAX_VALIDATED_RESOURCES = 64
_MAX_NAME = 253  # (group, version, resource) label sets of galley_validation_*
MAX_IDLE_VERSIONS = 16  # pilot_xds series kept at 0 (versions with no stream left)
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
        # labelled by object, not by proxy: bounded by the config objects that made a rejected
        # resource (a proxy label would grow with the mesh; pilot_xds_*_reject has the node)
        self.rejects_by_config = Metric(
            "pilotfish_xds_rejects_by_config",
            "XDS responses rejected by proxies, by a config object the rejected resources were made from.",
            "counter",
        )
        # the latest NACKs, each naming the objects it traced to (/debug/rejections)
        self.recent_rejections: deque[str] = deque(maxlen=MAX_RECENT_REJECTIONS)
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
        self.queue_time = Histogram(
            "pilot_proxy_queue_time",
            "Time in seconds, a proxy is in the push queue before being dequeued.",
            _PROXY_BUCKETS,
        )
        self.push_time = Histogram(
            "pilot_xds_push_time", "Total time in seconds Pilot takes to push lds, rds, cds and eds.", _PUSH_BUCKETS
        )
        self.send_time = Histogram(
            "pilot_xds_send_time",
            "Total time in seconds Pilot takes to send generated configuration.",
            (0.01, 0.1, 1, 3, 5, 10, 20, 30),
        )
        # labelled by the full type URL, as istiod's is
        self.config_size = Histogram(
            "pilot_xds_config_size_bytes",
            "Distribution of configuration sizes pushed to clients",
            (1, 10000, 1000000, 4000000, 10000000, 40000000),
        )
        self.virtual_services = Metric("pilot_virt_services", "Total virtual services known to pilot.", "gauge")
        self.internal_errors = Metric(
            "pilot_total_xds_internal_errors", "Total number of internal XDS errors in pilot.", "counter"
        )
        self.expired_nonces = Metric(
            "pilot_xds_expired_nonce", "Total number of XDS requests with an expired nonce.", "counter"
        )
        self.k8s_cfg_events = Metric("pilot_k8s_cfg_events", "Events from k8s config.", "counter")
        self.k8s_reg_events = Metric("pilot_k8s_reg_events", "Events from k8s registry.", "counter")
        # istiod's CA (security/pkg/server/ca/monitoring.go)
        self.csr_count = Metric("citadel_server_csr_count", "The number of CSRs received by Citadel server.", "counter")
        self.ca_authn_failures = Metric(
            "citadel_server_authentication_failure_count", "The number of authentication failures.", "counter"
        )
        self.csr_sign_errors = Metric(
            "citadel_server_csr_sign_err_count", "The number of errors occurred when signing the CSR.", "counter"
        )
        self.certs_issued = Metric(
            "citadel_server_success_cert_issuance_count",
            "The number of certificates issuances that have succeeded.",
            "counter",
        )
        self.root_cert_expiry = Metric(
            "citadel_server_root_cert_expiry_timestamp",
            "The unix timestamp, in seconds, when the root cert will expire.",
            "gauge",
        )
        self.root_cert_expiry_seconds = Metric(
            "citadel_server_root_cert_expiry_seconds",
            "The time remaining, in seconds, before the root cert will expire. "
            "A negative value indicates the cert is expired.",
            "gauge",
        )
        self.cert_chain_expiry = Metric(
            "citadel_server_cert_chain_expiry_timestamp",
            "The unix timestamp, in seconds, when Istio generated cert chain will expire.",
            "gauge",
        )
        self.cert_chain_expiry_seconds = Metric(
            "citadel_server_cert_chain_expiry_seconds",
            "The time remaining, in seconds, before the Istio Generated cert chain will expire. "
            "A negative value indicates the cert is expired.",
            "gauge",
        )
        # pilotfish's own
        self.xds_auth_failures = Metric(
            "pilotfish_xds_auth_failures", "Secure-port xDS streams refused, by gRPC status.", "counter"
        )
        self.secure_port_refusals = Metric(
            "pilotfish_secure_port_refused",
            "Secure-port connections refused before any gRPC, by reason (caps, handshake, not HTTP/2).",
            "counter",
        )
        self.cache_hits = Metric("pilotfish_xds_cache_hits", "Shared resource cache lookups answered.", "counter")
        self.cache_misses = Metric("pilotfish_xds_cache_misses", "Shared resource cache lookups built.", "counter")
        self.cache_evictions = Metric(
            "pilotfish_xds_cache_evictions", "Shared resource cache entries dropped by a change.", "counter"
        )
        self.config_rejections = Metric(
            "pilotfish_config_rejections", "Config objects rejected and not in force, by kind.", "gauge"
        )
        # client-go's leader election gauge (tools/leaderelection; istiod sets no provider for it)
        self.leader = Metric(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates "
            "master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            "gauge",
        )
        # process_* (CPU, memory, file descriptors, start time), python_gc_*, python_info
        self._process = CollectorRegistry()
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self._process)
        # the validating webhook (pkg/webhooks/validation/server/monitoring.go) and the injector
        # (pkg/kube/inject/monitoring.go): the control-plane dashboard's webhook panels
        self.validation_passed = Metric("galley_validation_passed", "Resource is valid", "counter")
        self.validation_failed = Metric("galley_validation_failed", "Resource validation failed", "counter")
        self.validation_http_errors = Metric(
            "galley_validation_http_error", "Resource validation http serve errors", "counter"
        )
        self._validated: set[tuple[str, ...]] = set()  # (group, version, resource) labelled as such
        self.injection_requests = Metric(
            "sidecar_injection_requests_total", "Total number of sidecar injection requests.", "counter"
        )
        self.injection_successes = Metric(
            "sidecar_injection_success_total", "Total number of successful sidecar injection requests.", "counter"
        )
        self.injection_failures = Metric(
            "sidecar_injection_failure_total", "Total number of failed sidecar injection requests.", "counter"
        )
        self.injection_skips = Metric(
            "sidecar_injection_skip_total", "Total number of skipped sidecar injection requests.", "counter"
        )
        self.injection_time = Histogram(
            "sidecar_injection_time_seconds",
            "Total time taken for injection in seconds.",
            (0.1, 1, 3, 5, 10, 20, 30, 60),
        )
        # pkg/version RecordComponentBuildTag("pilot"): the control-plane dashboard's versions panel
        self.build = Metric("istio_build", "Istio component build info", "gauge")
        self.build.set(1, component="pilot", tag=__version__)
        self._clients: Counter[str] = Counter()  # ISTIO_VERSION -> streams
        self._streams: Counter[str] = Counter()  # node -> streams
        self._rejecting: set[str] = set()  # nodes with a pilot_xds_*_reject series

    # --- what the pipeline reports -----------------------------------------------------------

    def connected(self, node: str, istio_version: str, delta: int) -> None:
        """A stream of ``node`` (its proxy id), of that ISTIO_VERSION, connected (1) or ended
        (-1). ISTIO_VERSION and node ids are the client's text, and a client reconnecting under
        ever new ones would grow ``/metrics`` without bound (istiod keeps every series): a node's
        reject series go with its last stream, and a version's series, at 0 with its last
        stream as istiod's, is dropped then once more than ``MAX_IDLE_VERSIONS`` are at 0."""
        # a label is the client's text: one longer than a name can be is not kept as such
        istio_version = istio_version if len(istio_version) <= _MAX_NAME else OTHER_TYPE
        node = node if len(node) <= MAX_NODE_SHOWN else OTHER_TYPE
        clients = self._clients[istio_version] + delta
        self.xds.set(max(clients, 0), version=istio_version)
        if clients > 0:
            self._clients[istio_version] = clients
        else:
            del self._clients[istio_version]
            if len(self.xds.values) - len(self._clients) > MAX_IDLE_VERSIONS:
                del self.xds.values[(("version", istio_version),)]
        streams = self._streams[node] + delta
        if streams > 0:
            self._streams[node] = streams
            return
        del self._streams[node]
        if node in self._rejecting:
            self._rejecting.discard(node)
            for gauge in self.rejects.values():
                gauge.values = {k: v for k, v in gauge.values.items() if ("node", node) not in k}

    def sent(self, type_url: str, seconds: float, size: int) -> None:
        """A response was written: its type, the write's time and the resources' size."""
        self.pushes.add(type=_short(type_url))
        self.send_time.observe(seconds)
        self.config_size.observe(size, type=type_url if type_url in SHORT_NAMES else OTHER_TYPE)

    def pushed_type(self, type_url: str, seconds: float) -> None:
        """A response of this type (a push's or a request's answer) was built and written in
        ``seconds``."""
        self.push_time.observe(seconds, type=_short(type_url))

    def write_timeout(self) -> None:
        """A response write passed the send timeout (the stream was given up)."""
        self.write_timeouts.add()

    def auth_failure(self, code: str) -> None:
        """A secure-port stream was refused (UNAUTHENTICATED, PERMISSION_DENIED)."""
        self.xds_auth_failures.add(code=code)

    def secure_port_refused(self, reason: str) -> None:
        """The secure port closed a connection before relaying it (app/security/server.py)."""
        self.secure_port_refusals.add(reason=reason)

    def certificate_request(self, outcome: str) -> None:
        """The CA answered a CSR: ``success``, ``authn_error`` or ``sign_error``."""
        self.csr_count.add()
        {"success": self.certs_issued, "authn_error": self.ca_authn_failures, "sign_error": self.csr_sign_errors}[
            outcome
        ].add()

    def ca_expiry(self, root: float, chain: float | None) -> None:
        """When the CA's first root and the first certificate of its chain expire (unix
        seconds; no chain: a self-signed root), as istiod's RecordCertsExpiry records them."""
        self.root_cert_expiry.set(root)
        self.cert_chain_expiry.values.clear()
        if chain is not None:
            self.cert_chain_expiry.set(chain)

    def expired_nonce(self, type_url: str) -> None:
        self.expired_nonces.add(type=_short(type_url))

    def config_event(self, kind: str, event: str) -> None:
        """An Istio config object came from Kubernetes (istiod's crdclient events)."""
        self.k8s_cfg_events.add(type=kind, event=event)

    def registry_event(self, kind: str, event: str) -> None:
        """A Kubernetes object of the service registry came (istiod's kube controller counts its
        informers' events under their own names; the Namespace handlers, filtered to the system
        namespace's and traffic distribution changes, are not counted here)."""
        name = _REGISTRY_TYPES.get(kind)
        if name is not None:
            self.k8s_reg_events.add(type=name, event=event)

    def rejected(self, type_url: str, node: str, code: int, error: str, causes: Sequence[Cause]) -> None:
        """A NACK: by type, and per node with its gRPC code's name, as istiod labels it; by each
        config object the rejected resources were made from; and kept for /debug/rejections."""
        short = _short(type_url)
        self.total_rejects.add(type=short)
        if short in self.rejects:
            # Go names codes past 16 Code(N); a client sends any int32, so those share one value
            labelled = node if len(node) <= MAX_NODE_SHOWN else OTHER_TYPE
            self.rejects[short].add(node=labelled, err=_CODE_NAMES.get(code, "Code(other)"))
            self._rejecting.add(labelled)
        for cause in causes:
            self.rejects_by_config.add(type=short, kind=cause.kind, namespace=cause.namespace, name=cause.name)
        made = ", made from " + ", ".join(map(str, causes)) if causes else ""
        who = node if len(node) <= MAX_NODE_SHOWN else f"{node[:MAX_NODE_SHOWN]}... ({len(node)} characters)"
        self.recent_rejections.append(f"{short} NACK from {who}{made}: {error}")

    def pushed(
        self, reasons: Mapping[str, int], full: bool, debounced: float, init: float, services: int, vs: int
    ) -> None:
        """A debounced push went into the push queue."""
        for reason, count in reasons.items():
            self.push_triggers.add(count, type=reason)
        self.inbound_updates.add(sum(reasons.values()), type="config" if full else "eds")
        self.debounce_time.observe(debounced)
        if full:
            self.pushcontext_init.observe(init)
        self.services.set(services)
        self.virtual_services.set(vs)

    def validated(self, resource: Sequence[str], reason: str) -> None:
        """A review of the resource (group, version, resource) passed ("") or failed for istiod's
        reason. The resource is the request's text: past ``MAX_VALIDATED_RESOURCES`` distinct
        ones, a new one is labelled ``other``, so a caller making them up cannot grow /metrics."""
        key = tuple(resource)
        long = any(len(part) > _MAX_NAME for part in key)  # an API group is a DNS name: 253 at most
        if long or (key not in self._validated and len(self._validated) >= MAX_VALIDATED_RESOURCES):
            key = (OTHER_TYPE,) * 3
        else:
            self._validated.add(key)
        group, version, plural = key
        if reason:
            self.validation_failed.add(group=group, version=version, resource=plural, reason=reason)
        else:
            self.validation_passed.add(group=group, version=version, resource=plural)

    def validation_http_error(self, status: int) -> None:
        self.validation_http_errors.add(status=str(status))

    def injection_request(self, seconds: float) -> None:
        self.injection_requests.add()
        self.injection_time.observe(seconds)

    def injection_outcome(self, *, answered: bool, failed: bool, skipped: bool) -> None:
        """istiod counts a success for every review written, a failed injection included (its
        handleError counts the failure, then the review goes out)."""
        if answered:
            self.injection_successes.add()
        if failed:
            self.injection_failures.add()
        if skipped:
            self.injection_skips.add()

    def cache_state(self, hits: int, misses: int, evictions: int) -> None:
        self.cache_hits.set(hits)
        self.cache_misses.set(misses)
        self.cache_evictions.set(evictions)

    def leader_status(self, lock: str, leading: bool) -> None:
        """This replica started or stopped leading the lease ``lock``."""
        self.leader.set(1 if leading else 0, name=lock)

    def rejections(self, by_kind: Mapping[str, int]) -> None:
        self.config_rejections.values.clear()
        for kind, count in by_kind.items():
            self.config_rejections.set(count, kind=kind)

    def render(self) -> str:
        """istiod's metrics, then the standard process and Python metrics (prometheus_client's
        collectors, as every Python exporter exposes them)."""
        now = time.time()  # istiod's expiry seconds are derived gauges: the time left when scraped
        for at, left in ((self.root_cert_expiry, self.root_cert_expiry_seconds),
                         (self.cert_chain_expiry, self.cert_chain_expiry_seconds)):  # fmt: skip
            left.values = {labels: value - now for labels, value in at.values.items()}
        return render(
            [
                self.services,
                self.virtual_services,
                self.xds,
                self.pushes,
                self.push_triggers,
                self.inbound_updates,
                self.total_rejects,
                *self.rejects.values(),
                self.rejects_by_config,
                self.write_timeouts,
                self.debounce_time,
                self.pushcontext_init,
                self.convergence,
                self.queue_time,
                self.push_time,
                self.send_time,
                self.config_size,
                self.internal_errors,
                self.expired_nonces,
                self.k8s_cfg_events,
                self.k8s_reg_events,
                self.csr_count,
                self.ca_authn_failures,
                self.csr_sign_errors,
                self.certs_issued,
                self.root_cert_expiry,
                self.root_cert_expiry_seconds,
                self.cert_chain_expiry,
                self.cert_chain_expiry_seconds,
                self.xds_auth_failures,
                self.secure_port_refusals,
                self.cache_hits,
                self.cache_misses,
                self.cache_evictions,
                self.config_rejections,
                self.leader,
                self.validation_passed,
                self.validation_failed,
                self.validation_http_errors,
                self.injection_requests,
                self.injection_successes,
                self.injection_failures,
                self.injection_skips,
                self.injection_time,
                self.build,
            ]
        ) + generate_latest(self._process).decode()


def _short(type_url: str) -> str:
    """istiod's GetMetricType for the types pilotfish serves; one label for any other text."""
    return SHORT_NAMES.get(type_url, OTHER_TYPE)
