"""``/metrics`` against what Istio's own dashboards query and istiod defines, both read from the pinned
istio.io/istio module: every istiod metric the dashboards (manifests/addons/dashboards) query is
exported by pilotfish or listed in ``NOT_EXPORTED`` with the reason the README gives; every metric
pilotfish exports under an istiod name has istiod's type and, for a histogram, istiod's buckets
(histogram_quantile over a revision beside istiod sums both control planes' buckets by ``le``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from app.telemetry.pilot import PilotMetrics
from app.telemetry.prometheus import Histogram, Metric
from tests.support.peers import istio_module_dir

# where istiod defines the metrics pilotfish exports under its names (pkg/monitoring)
DEFINITIONS = (
    "pilot/pkg/xds/monitoring.go",
    "pkg/xds/monitoring.go",
    "pilot/pkg/model/push_context.go",
    "pilot/pkg/config/kube/crdclient/metrics.go",
    "pilot/pkg/serviceregistry/kube/controller/controller.go",
    "security/pkg/server/ca/monitoring.go",
    "pkg/kube/inject/monitoring.go",
    "pkg/webhooks/validation/server/monitoring.go",
    "pkg/version/stats.go",
)
DASHBOARDS = ("pilot-dashboard.gen.json", "istio-mesh-dashboard.gen.json", "istio-performance-dashboard.json")
# what the dashboards query that is not istiod's own exposition: the kubelet's (cAdvisor) and Envoy's
NOT_ISTIOD = ("container_", "envoy_")
# the README's "Metrics beside istiod's dashboards" says the same
NOT_EXPORTED = {
    "go_goroutines": "Go runtime: pilotfish is Python (process_* and python_gc_* instead)",
    "go_memstats_alloc_bytes": "Go runtime",
    "go_memstats_alloc_bytes_total": "Go runtime",
    "go_memstats_heap_alloc_bytes": "Go runtime",
    "go_memstats_heap_inuse_bytes": "Go runtime",
    "go_memstats_heap_sys_bytes": "Go runtime",
    "go_memstats_mallocs_total": "Go runtime",
    "go_memstats_stack_inuse_bytes": "Go runtime",
}
_KINDS = {"Sum": "counter", "Gauge": "gauge", "Distribution": "histogram"}
_DEFINITION = re.compile(r'monitoring\.New(Sum|Gauge|Distribution)\(\s*"([a-z0-9_]+)"')
_BUCKETS = re.compile(r"\[\]float64\{([^}]*)\}")
_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def istiod_metrics() -> dict[str, tuple[str, tuple[float, ...] | None]]:
    """name -> (type, buckets for a histogram) as the pinned istiod defines them."""
    out: dict[str, tuple[str, tuple[float, ...] | None]] = {}
    for path in DEFINITIONS:
        text = (istio_module_dir() / path).read_text()
        found = list(_DEFINITION.finditer(text))
        assert found, f"no metric definitions in {path}"
        for i, match in enumerate(found):
            kind = _KINDS[match.group(1)]
            buckets = None
            if kind == "histogram":
                end = found[i + 1].start() if i + 1 < len(found) else len(text)
                listed = _BUCKETS.search(text, match.end(), end)
                assert listed is not None, f"{match.group(2)}: no buckets in {path}"
                buckets = tuple(float(b) for b in listed.group(1).replace("\n", "").split(",") if b.strip())
            out[match.group(2)] = (kind, buckets)
    return out


def dashboard_queries() -> Iterator[str]:
    def walk(node: object) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "expr" and isinstance(value, str):
                    yield value
                else:
                    yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)

    folder = istio_module_dir() / "manifests" / "addons" / "dashboards"
    for name in DASHBOARDS:
        yield from walk(json.loads((folder / name).read_text()))


def pilotfish_metrics() -> dict[str, Metric | Histogram]:
    metrics = PilotMetrics()
    out: dict[str, Metric | Histogram] = {}
    for value in vars(metrics).values():
        for one in value.values() if isinstance(value, dict) else (value,):
            if isinstance(one, Metric | Histogram):
                out[one.name] = one
    return out


def exported_names() -> set[str]:
    """The names ``/metrics`` shows: TYPE lines' and samples' (prometheus_client's counters are
    typed without the _total their samples carry)."""
    text = PilotMetrics().render()
    return {m.group(1) for m in re.finditer(r"^(?:# TYPE )?([a-zA-Z_:][a-zA-Z0-9_:]*)", text, re.MULTILINE)}


def test_every_istiod_metric_the_dashboards_query_is_exported_or_said_why_not() -> None:
    istiod = istiod_metrics()
    queried: set[str] = set()
    for query in dashboard_queries():
        for name in _NAME.findall(query):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if base in istiod or name.startswith(("process_", "go_")):
                queried.add(base if base in istiod else name)
            else:
                assert not name.startswith(("pilot_", "galley_", "citadel_", "sidecar_")), name
    assert {"pilot_xds_push_time", "pilot_xds", "istio_build", "process_open_fds"} <= queried  # read them
    exported = exported_names()
    missing = sorted(name for name in queried - exported if name not in NOT_EXPORTED)
    assert not missing, f"queried by Istio's dashboards, neither exported nor said why not: {missing}"
    stale = sorted(name for name in NOT_EXPORTED if name in exported)
    assert not stale, f"listed as not exported, but exported: {stale}"


def test_metrics_under_istiod_names_have_istiods_type_and_buckets() -> None:
    istiod = istiod_metrics()
    compared = 0
    for name, metric in pilotfish_metrics().items():
        if name not in istiod:
            assert name.startswith(("pilotfish_", "leader_election_", "citadel_server_root_cert_expiry_seconds",
                                    "citadel_server_cert_chain_expiry_seconds")), f"{name}: not istiod's"  # fmt: skip
            continue
        kind, buckets = istiod[name]
        if isinstance(metric, Histogram):
            assert kind == "histogram", f"{name}: istiod's is a {kind}"
            assert tuple(metric.buckets) == buckets, f"{name}: buckets {metric.buckets}, istiod's {buckets}"
        else:
            assert metric.kind == kind, f"{name}: a {metric.kind}, istiod's is a {kind}"
        compared += 1
    assert compared >= 25
