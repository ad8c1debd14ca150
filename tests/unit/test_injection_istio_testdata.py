"""Fidelity to istiod's injection: the inputs of Istio's own injection tests (TestInjection in
pkg/kube/inject/inject_test.go of the pinned istio module) run with the settings those cases use
must give the ``.injected`` files, both ways TestInjection runs them: through kube-inject's code
(the whole manifest) and through the webhook's (each workload's pod as its controller would create
it, the JSONPatch applied; compared without the status annotation, as TestInjection's webhook
subtest compares).

``CASES`` mirrors TestInjection's case table (in, want, setFlags, inFilePath, mesh, the native
sidecar feature its setup turns off, expectedError); files the table does not name run with the
default settings, as TestInjection adds them. The test's fake cluster has nodes at kubelet 1.33
and 1.34, so native sidecars are on unless a case turns them off.

Documents are compared parsed. Normalized on both sides, and only this: what Go's typed YAML
serialization adds for an empty struct or nil time (``creationTimestamp: null``, and ``{}`` for
``status``, ``strategy``, ``updateStrategy``, ``resources``, ``metadata``), a ``status`` of zeros,
and the workload's (a List's items') own spec scalars that are 0 or false (Go drops ``omitempty`` ones and writes
the others: DeploymentConfig's ``test: false``).

``DIFFERENCES`` lists what pilotfish does not do like istiod, each with its reason; a listed
case must still differ (else the entry goes), any other difference fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from app.api.mesh import MeshConfig
from app.inject.injector import Injector
from app.inject.manifest import kube_inject
from app.inject.patch import create_patch
from app.inject.pipeline import InjectionError
from app.inject.podjson import go_pod
from tests.support.istio_injection import injection_settings, injection_testdata
from tests.support.json_patch import apply_patch

MeshChange = Callable[[MeshConfig], None]


def _tproxy(m: MeshConfig) -> None:
    m.default_config.interception_mode = m.default_config.TPROXY


def _drain_23s(m: MeshConfig) -> None:
    m.default_config.drain_duration.seconds = 23


def _tls_client_key(m: MeshConfig) -> None:
    m.default_config.proxy_metadata["ISTIO_META_TLS_CLIENT_KEY"] = "/etc/identity/client/keys/client-key.pem"


def _tracing_disabled(m: MeshConfig) -> None:
    m.default_config.tracing.SetInParent()


def _inbound_localhost(m: MeshConfig) -> None:
    m.inbound_traffic_policy.mode = m.InboundTrafficPolicy.LOCALHOST


def _otel_semconv(m: MeshConfig) -> None:
    provider = m.extension_providers.add(name="otel")
    provider.opentelemetry.service = "otel-collector.observability.svc.cluster.local"
    provider.opentelemetry.port = 4317
    provider.opentelemetry.service_attribute_enrichment = 1  # OTEL_SEMANTIC_CONVENTIONS


@dataclass(frozen=True)
class Case:
    input: str
    want: str = ""
    flags: tuple[str, ...] = ()
    iop: str = ""
    mesh: MeshChange | None = None
    native: bool = True
    error: str = ""
    compliance: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


_CNI = ("components.cni.enabled=true",)
_STATUS = (
    "values.global.proxy.statusPort=123",
    "values.global.proxy.readinessInitialDelaySeconds=100",
    "values.global.proxy.readinessPeriodSeconds=200",
    "values.global.proxy.readinessFailureThreshold=300",
)
_HOLD = ("values.global.proxy.holdApplicationUntilProxyStarts=true",)
_MULTUS = ("components.cni.enabled=true", "values.cni.provider=multus")

# inject_test.go TestInjection's cases, in its order
TABLE = [
    Case("hello.yaml", "hello.yaml.cni.injected", ("components.cni.enabled=true", "values.cni.provider=default",
                                                   "values.global.network=network1")),
    Case("hello.yaml", "hello.yaml.proxyImageName.injected", ("values.global.proxy.image=proxyTest",)),
    Case("hello.yaml", "hello.yaml.proxyInitImageName.injected", ("values.global.proxy_init.image=proxyInitTest",)),
    Case("hello.yaml", "hello-tproxy.yaml.injected", mesh=_tproxy),
    Case("hello.yaml", "hello-always.yaml.injected", ("values.global.imagePullPolicy=Always",)),
    Case("hello.yaml", "hello-never.yaml.injected", ("values.global.imagePullPolicy=Never",)),
    Case("hello.yaml", "hello-old-version.yaml.injected", native=False),
    Case("format-duration.yaml", "format-duration.yaml.injected", mesh=_drain_23s),
    Case("traffic-params.yaml", "traffic-params.yaml.injected", (
        "values.global.proxy.includeIPRanges=127.0.0.1/24\\,10.96.0.1/24",
        "values.global.proxy.excludeIPRanges=10.96.0.2/24\\,10.96.0.3/24",
        "values.global.proxy.excludeInboundPorts=4\\,5\\,6", "values.global.proxy.statusPort=0")),
    Case("status_params.yaml", "status_params.yaml.injected", _STATUS),
    Case("kubevirtInterfaces.yaml", "kubevirtInterfaces.yaml.injected", _STATUS),
    Case("reroute-virtual-interfaces.yaml", "reroute-virtual-interfaces.yaml.injected", _STATUS),
    Case("hello.yaml", "hello-image-secrets-in-values.yaml.injected", iop="hello-image-secrets-in-values.iop.yaml"),
    Case("hello-image-pull-secret.yaml", "hello-multiple-image-secrets.yaml.injected",
         iop="hello-image-secrets-in-values.iop.yaml"),
    Case("hello.yaml", "hello-template-in-values.yaml.injected", iop="hello-template-in-values.iop.yaml"),
    Case("hello.yaml", "hello-mount-mtls-certs.yaml.injected", ("values.global.mountMtlsCerts=true",)),
    Case("hello.yaml", "hello-cncf-networks.yaml.injected", _MULTUS),
    Case("hello-existing-cncf-networks.yaml", "hello-existing-cncf-networks.yaml.injected", _MULTUS),
    Case("hello-existing-cncf-networks-json.yaml", "hello-existing-cncf-networks-json.yaml.injected", _MULTUS),
    Case("hello.yaml", "hello.proxyHoldsApplication.yaml.injected", _HOLD),
    Case("hello-probes.yaml", "hello-probes.proxyHoldsApplication.yaml.injected", _HOLD),
    Case("hello-probes-proxyHoldApplication-ProxyConfig.yaml"),
    Case("hello-probes-noProxyHoldApplication-ProxyConfig.yaml", flags=_HOLD),
    Case("hello-service.yaml"),
    Case("cronjob.yaml"),
    Case("cronjob.yaml", "cronjob-old-version.yaml.injected", native=False),
    Case("daemonset.yaml", "daemonset-old-version.yaml.injected", native=False),
    Case("job.yaml", "job-old-version.yaml.injected", native=False),
    Case("pod.yaml", "pod-old-version.yaml.injected", native=False),
    Case("replicaset.yaml", "replicaset-old-version.yaml.injected", native=False),
    Case("statefulset.yaml", "statefulset-old-version.yaml.injected", native=False),
    Case("traffic-annotations-bad-includeipranges.yaml", error="includeipranges"),
    Case("traffic-annotations-bad-excludeipranges.yaml", error="excludeipranges"),
    Case("traffic-annotations-bad-includeinboundports.yaml", error="includeinboundports"),
    Case("traffic-annotations-bad-excludeinboundports.yaml", error="excludeinboundports"),
    Case("traffic-annotations-bad-excludeoutboundports.yaml", error="excludeoutboundports"),
    Case("traffic-annotations.yaml", mesh=_tls_client_key),
    Case("proxy-override.yaml"),
    Case("explicit-security-context.yaml"),
    Case("only-proxy-container.yaml"),
    Case("proxy-override-args.yaml"),
    Case("proxy-override-runas.yaml"),
    Case("proxy-override-runas.yaml", "proxy-override-runas.yaml.cni.injected", _CNI),
    Case("proxy-override-runas.yaml", "proxy-override-runas.yaml.tproxy.injected", mesh=_tproxy),
    Case("proxy-override-args.yaml", "proxy-override-args-native.yaml.injected"),
    Case("gateway.yaml"),
    Case("native-sidecar.yaml"),
    Case("native-sidecar.yaml", "native-sidecar-old-version.yaml.injected", native=False),
    Case("native-sidecar-opt-in.yaml"),
    Case("native-sidecar-opt-in.yaml", native=False),
    Case("native-sidecar-opt-out.yaml"),
    Case("native-sidecar-opt-out.yaml", native=False),
    Case("custom-template.yaml", iop="custom-template.iop.yaml"),
    Case("tcp-probes.yaml"),
    Case("hello-host-network-with-ns.yaml"),
    Case("merge-probers.yaml", flags=_HOLD),
    Case("hello-tracing-disabled.yaml", mesh=_tracing_disabled),
    Case("truncate-canonical-name-pod.yaml"),
    Case("truncate-canonical-name-custom-controller-pod.yaml"),
    Case("hello-openshift.yaml", flags=_CNI),
    Case("hello-openshift-custom-injection.yaml", flags=_CNI),
    Case("hello-openshift-tproxy.yaml", flags=_CNI),
    Case("hello-probes-localhost.yaml", mesh=_inbound_localhost),
    Case("proxy-resources-null.yaml", iop="proxy-resources-null.iop.yaml"),
    Case("proxy-resources-null-no-init.yaml", iop="proxy-resources-null.iop.yaml"),
    Case("proxy-resources-zero.yaml", iop="proxy-resources-zero.iop.yaml"),
    Case("proxy-resources-memory-null.yaml", iop="proxy-resources-memory-null.iop.yaml"),
    Case("proxy-resources-mixed-null.yaml", iop="proxy-resources-mixed-null.iop.yaml"),
    Case("sidecar-spire.yaml", iop="spire-template.iop.yaml"),
    Case("gateway-spire.yaml", iop="spire-template.iop.yaml"),
    Case("hello-otel-semconv.yaml", mesh=_otel_semconv),
    Case("hello.yaml", "hello-fips-140-3.yaml.injected", compliance="fips-140-3"),
]  # fmt: skip


def _want(case: Case) -> str:
    return case.want or f"{case.input}.injected"


def cases() -> list[Case]:
    """The table, then every other input with an .injected file, with the default settings."""
    named = {_want(c) for c in TABLE if not c.error} | {f"{c.input}.injected" for c in TABLE if c.error}
    extra = [
        Case(p.name) for p in sorted(injection_testdata().glob("*.yaml"))
        if not p.name.endswith(".iop.yaml") and f"{p.name}.injected" not in named
    ]  # fmt: skip
    return [*TABLE, *extra]


# what pilotfish deliberately does not do as istiod does, by expected output
_OPENSHIFT = (
    "on OpenShift istiod runs the proxy (and the CNI validation) with the top of the namespace's "
    "openshift.io/sa.scc.uid-range and supplemental-groups (GetProxyIDs; TestInjection runs these "
    "through its webhook only); pilotfish does not read namespaces for injection and keeps 1337"
)
DIFFERENCES: dict[str, str] = {
    "hello-openshift.yaml.injected": _OPENSHIFT,
    "hello-openshift-custom-injection.yaml.injected": _OPENSHIFT,
}


def _normalize(value: Any, top: bool = False) -> Any:
    """Drop what Go's typed serialization adds (the module's docstring says what)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            v = [_normalize(i, top=True) for i in v] if top and k == "items" and isinstance(v, list) else _normalize(v)
            if k == "creationTimestamp" and v is None:
                continue
            if k in ("status", "strategy", "updateStrategy", "resources", "metadata") and v == {}:
                continue
            if top and k == "status" and isinstance(v, dict) and not any(v.values()):
                continue
            if top and k == "spec" and isinstance(v, dict):
                v = {sk: sv for sk, sv in v.items() if sv is not False and (sv != 0 or isinstance(sv, bool))}
            out[k] = v
        return out
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return value


def _documents(text: str) -> list[Any]:
    return [_normalize(d, top=True) for d in yaml.safe_load_all(text) if d is not None]


def run_case(case: Case) -> tuple[str, list[str]]:
    """(the output, the warnings) of kube-inject over the case's input."""
    config, values, mesh = injection_settings(tuple(case.flags), case.iop)
    case_mesh = MeshConfig()
    case_mesh.CopyFrom(mesh)
    if case.mesh is not None:
        case_mesh.default_config.SetInParent()
        case.mesh(case_mesh)
    injector = Injector.build(config, values, case_mesh, revision="", native_sidecars=case.native,
                              compliance_policy=case.compliance)  # fmt: skip
    warnings: list[str] = []
    out = kube_inject((injection_testdata() / case.input).read_text(), injector, warnings.append)
    return out, warnings


ALL = cases()


def _id(case: Case) -> str:
    return (case.error and case.input) or _want(case) + ("" if case.native else " (no native sidecars)")


@pytest.mark.parametrize("case", ALL, ids=_id)
def test_injection_matches_istio(case: Case) -> None:
    if case.error:
        with pytest.raises(InjectionError) as raised:
            run_case(case)
        assert case.error in str(raised.value).lower()
        return
    out, _ = run_case(case)
    got, want = _documents(out), _documents((injection_testdata() / _want(case)).read_text())
    if _want(case) in DIFFERENCES:
        assert got != want, f"{_want(case)} now matches istiod: remove it from DIFFERENCES"
        return
    assert got == want


def test_host_network_warning() -> None:
    """TestInjection's expectedLog."""
    _, warnings = run_case(Case("hello-host-network-with-ns.yaml"))
    assert any('Skipping injection because Deployment "sample/hello-host-network" has host networking enabled' in w
               for w in warnings)  # fmt: skip


def test_every_testdata_output_is_a_case() -> None:
    """As TestInjection checks: no .injected file without a case."""
    outputs = {p.name for p in injection_testdata().glob("*.injected")}
    covered = {_want(c) for c in ALL if not c.error}
    assert outputs == covered


# --- the webhook path: TestInjection's "webhook" subtest -------------------------------------

# TestInjection's skipWebhook cases: no pod (a Service), or a CronJob, whose pod the test cannot make
_NO_WEBHOOK = frozenset({"hello-service.yaml.injected", "cronjob.yaml.injected", "cronjob-old-version.yaml.injected"})


def _object_to_pod(doc: dict[str, Any]) -> dict[str, Any]:
    """objectToPod: the pod the workload's controller would create (a generated name, the
    controller as owner; a Deployment's pod is its ReplicaSet's, with the template hash label)."""
    if doc["kind"] == "Pod":
        return dict(doc)
    api_version, kind, name = doc["apiVersion"], doc["kind"], doc["metadata"]["name"]
    template = doc["spec"]["jobTemplate"]["spec"]["template"] if kind == "CronJob" else doc["spec"]["template"]
    meta = dict(template.get("metadata") or {})
    if kind == "Deployment":
        api_version, kind, name = "apps/v1", "ReplicaSet", name + "-fake"
        meta["labels"] = {**(meta.get("labels") or {}), "pod-template-hash": "fake"}
    meta["generateName"] = name + ("-" if doc["kind"] == "Deployment" else "")
    meta["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": name, "controller": True}]
    return {"metadata": meta, "spec": template.get("spec") or {}}


def _pods(text: str) -> list[tuple[dict[str, Any], str]]:
    """splitYamlFile: each injectable document (a List's items too) as (pod, its namespace)."""
    out = []
    for doc in yaml.safe_load_all(text):
        items = doc.get("items") or [] if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
        for item in items:
            if isinstance(item, dict) and item.get("kind") in _WORKLOADS:
                out.append((_object_to_pod(item), (item.get("metadata") or {}).get("namespace", "")))
    return out


_WORKLOADS = frozenset({"Deployment", "DeploymentConfig", "DaemonSet", "StatefulSet", "Job", "ReplicaSet",
                        "ReplicationController", "CronJob", "Pod"})  # fmt: skip


def _comparable(pod: dict[str, Any]) -> Any:
    """normalizeAndCompareDeployments: the status annotation left out."""
    pod = go_pod(pod)
    (pod.get("metadata") or {}).get("annotations", {}).pop("sidecar.istio.io/status", None)
    return _normalize(pod)


WEBHOOK_CASES = [c for c in ALL if not c.error and _want(c) not in _NO_WEBHOOK]


@pytest.mark.parametrize("case", WEBHOOK_CASES, ids=_id)
def test_the_webhook_injects_as_istiod(case: Case) -> None:
    config, values, mesh = injection_settings(tuple(case.flags), case.iop)
    case_mesh = MeshConfig()
    case_mesh.CopyFrom(mesh)
    if case.mesh is not None:
        case_mesh.default_config.SetInParent()
        case.mesh(case_mesh)
    injector = Injector.build(config, values, case_mesh, revision="default", native_sidecars=case.native,
                              compliance_policy=case.compliance)  # fmt: skip
    inputs = _pods((injection_testdata() / case.input).read_text())
    wants = _pods((injection_testdata() / _want(case)).read_text())
    assert len(inputs) == len(wants) and inputs
    results = []
    for (pod, namespace), (want, _) in zip(inputs, wants, strict=True):
        original = go_pod(pod)
        if namespace and not original["metadata"].get("namespace"):
            original["metadata"]["namespace"] = namespace
        injected = injector.inject(original, namespace)
        got = pod if injected is None else apply_patch(pod, create_patch(original, injected))
        results.append(_comparable(got) == _comparable(want))
    if _want(case) in DIFFERENCES:
        assert not all(results), f"{_want(case)} now matches istiod: remove it from DIFFERENCES"
        return
    assert all(results)
