"""The differential test (issue 27): istiod and pilotfish read the same cluster (the bookinfo
sample of the pinned istio module, its DestinationRules and VirtualServices; traffic policies
and ServiceEntries from data/traffic-policy.yaml; the sleep sample in a namespace a Sidecar
scopes, with DNS capture, data/scoped.yaml; an ingress gateway with the bookinfo Gateway and an
HTTPS server, data/gateway.yaml; Telemetry access logging over the mesh config's,
data/telemetry.yaml), a proxy's node asks each for CDS, EDS, LDS and RDS over ADS (and NDS, when
its agent captures DNS), and every difference must be one expected_differences.yaml lists
(intended, or a known defect with both values).

CI runs the productpage sidecar, the scoped sleep sidecar and the gateway;
``DIFFERENTIAL_FULL=1`` (``make differential``) runs the proxy of every workload of the scene.
``DIFFERENTIAL_DUMP=FILE`` appends every difference found, as JSON lines, for reviewing the list."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf import json_format

from app.cli import main
from app.debug.xds_diff.compare import plain
from app.debug.xds_diff.diff import TYPES, judge, load_expected, report
from app.xds.fetch import FetchError, Resources, fetch
from tests.differential.istiod import Istiod, running_istiod
from tests.differential.scene import (
    ENVOY_FILTER,
    Scene,
    bookinfo,
    deployments,
    features,
    gateway,
    istio_testdata,
    placed,
    project_config_sets,
    samples,
    scoped,
    traffic_policy,
)
from tests.differential.scene import TELEMETRY as TELEMETRIES
from tests.e2e.istio_proxy import istio_version
from tests.e2e.processes import Pilotfish, run_pilotfish
from tests.support.cluster import Cluster, chart_role

CI_PROXIES = ("productpage-v1", "sleep", "istio-ingressgateway", "web")
FULL = os.environ.get("DIFFERENTIAL_FULL") == "1"
PROXIES = deployments() if FULL else CI_PROXIES
AGENTS = frozenset({"sleep"})  # its pilot-agent captures DNS (scene.scoped): it asks for NDS
CASES = [(w, t) for w in PROXIES for t in TYPES if t != "nds" or w in AGENTS]


@dataclass
class Planes:
    """The scene and both control planes serving it; each proxy's config fetched once."""

    scene: Scene
    istiod: Istiod
    pilotfish: Pilotfish
    placeholders: dict[str, str]
    left_out: list[str]  # corpus objects not put in the cluster (istio_testdata says why)
    fetched: dict[str, dict[str, Resources]] = dataclasses.field(default_factory=dict)

    def config(self, workload: str) -> dict[str, Resources]:
        """``{"istiod": ..., "pilotfish": ...}`` for ``workload``'s sidecar (fetched on first use)."""
        if workload not in self.fetched:
            pod = self.scene.workloads[workload]
            node, agent = pod.node(istio_version()), pod.agent
            try:
                self.fetched[workload] = {
                    "istiod": asyncio.run(fetch(self.istiod.xds_address, node, agent)),
                    "pilotfish": asyncio.run(fetch(f"127.0.0.1:{self.pilotfish.xds_port}", node, agent)),
                }
            except FetchError as e:
                logs = f"istiod log:\n{self.istiod.process.tail(60)}\n{self.pilotfish.describe()}"
                raise AssertionError(f"{workload}: {e}\n{logs}") from None
        return self.fetched[workload]


@pytest.fixture(scope="module")
def planes(
    kube_cluster: Cluster, pilotfish_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Planes]:
    workdir = tmp_path_factory.mktemp("differential")
    scene = Scene.create(kube_cluster)
    try:
        chart_role(kube_cluster, scene.system)  # pilotfish keeps its CA root in the system namespace
        bookinfo_namespace = bookinfo(scene)
        traffic_namespace = traffic_policy(scene)
        scoped_namespace = scoped(scene, bookinfo_namespace)
        gateway_namespace = gateway(scene, bookinfo_namespace)
        features_namespace = features(scene, bookinfo_namespace)
        namespaces = {
            "BOOKINFO": bookinfo_namespace, "FEATURES": features_namespace, "TRAFFIC": traffic_namespace,
            "SCOPED": scoped_namespace, "GATEWAY": gateway_namespace,
        }  # fmt: skip
        placed(scene, TELEMETRIES, namespaces)
        placed(scene, ENVOY_FILTER, namespaces)
        samples(scene)
        left_out = project_config_sets(scene) + istio_testdata(scene)
        args = ("--system-namespace", scene.system)
        with (
            pytest.MonkeyPatch.context() as env,
            running_istiod(kube_cluster, scene.system, workdir / "istiod") as istiod,
        ):
            env.setenv("PILOTFISH_KUBE_CONTROLLERS", "false")  # istiod writes what a leader writes
            with run_pilotfish(None, workdir, kubeconfig=pilotfish_kubeconfig, extra_args=args) as pilotfish:
                yield Planes(scene, istiod, pilotfish, scene.placeholders(), left_out)
    finally:
        kube_cluster.delete_namespaces()
        scene.delete_nodes()


@pytest.mark.parametrize(("workload", "type_"), CASES)
def test_no_differences_beyond_the_reviewed_list(planes: Planes, workload: str, type_: str) -> None:
    held = planes.config(workload)
    istiod = plain(held["istiod"], type_, planes.placeholders)
    pilotfish = plain(held["pilotfish"], type_, planes.placeholders)
    assert istiod, f"istiod sent {workload}'s proxy no {type_}"
    judged = judge(type_, istiod, pilotfish, load_expected(), workload)
    text = report(f"bookinfo x {workload}", judged)
    print(f"\n{text}")
    if dump := os.environ.get("DIFFERENTIAL_DUMP"):
        with open(dump, "a") as out:
            for d in [*judged.unlisted, *(d for d, _ in judged.listed)]:
                out.write(json.dumps({"proxy": workload, **dataclasses.asdict(d)}) + "\n")
    assert not judged.unlisted, text


def _compare_argv(planes: Planes, workload: str, istiod: str, pilotfish: str) -> list[str]:
    node = planes.scene.workloads[workload].node(istio_version())
    metadata = json_format.MessageToDict(node.metadata)
    return ["compare-istiod", "--istiod", istiod, "--pilotfish", pilotfish, "--node-id", node.id,
            "--metadata-json", json.dumps(metadata), "-o", "json"]  # fmt: skip


def test_compare_istiod_finds_nothing_beyond_the_reviewed_list(
    planes: Planes, capsys: pytest.CaptureFixture[str]
) -> None:
    """``pilotfish compare-istiod``: the same fetch and judgement a user runs against their mesh."""
    pilotfish = f"127.0.0.1:{planes.pilotfish.xds_port}"
    assert main(_compare_argv(planes, "sleep", planes.istiod.xds_address, pilotfish)) == 0
    judged = {j["type"]: j for j in json.loads(capsys.readouterr().out)}
    assert set(judged) == {"cds", "eds", "lds", "rds", "nds"}  # an agent with DNS capture: NDS too
    assert all(not j["unlisted"] for j in judged.values())
    assert judged["eds"]["identical"] == judged["eds"]["resources"] > 0


def test_compare_istiod_reports_differences_the_list_does_not_cover(
    planes: Planes, capsys: pytest.CaptureFixture[str]
) -> None:
    """The two sides swapped: every intended difference (a filter only istiod adds) is now one the
    list does not cover, and the command says so and exits 1."""
    pilotfish = f"127.0.0.1:{planes.pilotfish.xds_port}"
    assert main(_compare_argv(planes, "productpage-v1", pilotfish, planes.istiod.xds_address)) == 1
    judged = {j["type"]: j for j in json.loads(capsys.readouterr().out)}
    unlisted = judged["cds"]["unlisted"]
    assert unlisted and all(d["path"] == "filters" and d["istiod"] == "<absent>" for d in unlisted)


def test_the_istio_corpus_is_in_the_cluster_but_what_it_cannot_hold(planes: Planes) -> None:
    """What of Istio's tests/testdata/config the scene left out, each with its reason: the two
    objects of the shared cluster's default namespace and what the API server refuses."""
    print("\n".join(["left out of the corpus:", *planes.left_out]))
    assert all(": " in line for line in planes.left_out)
    assert sum(line.endswith(("PeerAuthentication default/default", "DestinationRule default/locality"))
               for line in planes.left_out) == 2  # fmt: skip
    assert len(planes.left_out) < 10


def test_the_pods_of_a_node_with_topology_labels_have_its_locality_on_both_sides(planes: Planes) -> None:
    """examples/bookinfo's pods run on a Node in us-east1/us-east1-b (its nodes.yaml): both
    control planes give their endpoints that Node's locality (istiod getPodLocality), so the
    identical EDS above is the Node's locality read alike, not no locality at all."""
    held = planes.config("productpage-v1")
    name = "outbound|9080||details.bookinfo.svc.cluster.local"
    for side in ("istiod", "pilotfish"):
        groups = plain(held[side], "eds", planes.placeholders)[name]["endpoints"]
        found = {(g["locality"].get("region"), g["locality"].get("zone")) for g in groups}
        assert found == {("us-east1", "us-east1-b")}, f"{side}: {groups}"


CUSTOM = [("web", "ext-authz-grpc"), ("istio-ingressgateway", "ext-authz-http")]


@pytest.mark.parametrize(("workload", "provider"), CUSTOM)
def test_the_custom_policies_are_ext_authz_filters_on_both_sides(planes: Planes, workload: str, provider: str) -> None:
    """The scene's CUSTOM policies name providers both control planes can use: the identical
    listeners above carry the provider's ext_authz filter, not the deny a bad provider gives."""
    held = planes.config(workload)
    for side in ("istiod", "pilotfish"):
        text = json.dumps(plain(held[side], "lds", planes.placeholders))
        assert "envoy.filters.http.ext_authz" in text and f"istio-ext-authz-{provider}-ns[" in text, side
        assert "deny-due-to-bad-CUSTOM-action" not in text, side


# (proxy, what its listeners carry on both sides, what they do not): data/telemetry.yaml in force
TELEMETRY = [
    # productpage's inbound: the selecting SERVER Telemetry's audit-json with its filter, and
    # SkyWalking; outbound the root namespace's zipkin
    (
        "productpage-v1",
        (
            '"path": "/dev/stderr"',
            "request.path.startsWith('/api')",
            "envoy.tracers.skywalking",
            "envoy.tracers.zipkin",
        ),
        (),
    ),
    # web: its namespace's audit-json with a filter outbound, envoy inbound (SERVER); inbound
    # traced to OpenTelemetry with the custom tags
    (
        "web",
        (
            "response.code >= 400",
            "envoy.access_loggers.extension_filters.cel",
            '"path": "/dev/stdout"',
            "envoy.tracers.opentelemetry",
            '"x-user"',
        ),
        (),
    ),
    # sleep: the access log services of its namespace's Telemetry, on the ServiceEntry ext-authz
    (
        "sleep",
        (
            "envoy.access_loggers.open_telemetry",
            "outbound|9000||ext-authz.example.com",
            "envoy.access_loggers.http_grpc",
            "outbound|8000||ext-authz.example.com",
            "envoy.tracers.datadog",
        ),
        ("envoy.tracers.zipkin", "istio.canonical_service"),
    ),
    # the gateway: the root namespace's envoy only, not defaultProviders' audit-json beside it,
    # and its zipkin
    ("istio-ingressgateway", ('"path": "/dev/stdout"', "envoy.tracers.zipkin"), ('"path": "/dev/stderr"',)),
]


@pytest.mark.parametrize(("workload", "present", "absent"), TELEMETRY)
def test_the_telemetry_access_logs_are_in_force_on_both_sides(
    planes: Planes, workload: str, present: tuple[str, ...], absent: tuple[str, ...]
) -> None:
    """The identical listeners above carry what the scene's Telemetries configure (access logs
    and tracing), not the mesh config's defaultProviders both would fall back to without them."""
    held = planes.config(workload)
    for side in ("istiod", "pilotfish"):
        text = json.dumps(plain(held[side], "lds", planes.placeholders))
        assert [w for w in present if w not in text] == [] and [w for w in absent if w in text] == [], side


# (proxy, type, what it carries on both sides, what it does not): data/envoy-filter.yaml in force
ENVOY_FILTERS = [
    ("productpage-v1", "lds", ("envoy.lua", "x-lua", "outbound.lua"), ()),
    ("productpage-v1", "cds", ("32768",), ("BlackHoleCluster",)),
    ("web", "lds", ("42s", "4096"), ("envoy.lua",)),
    ("web", "rds", ("static.example", "/healthz", "x-features-filter"), ()),
    ("web", "cds", ("static-upstream",), ("BlackHoleCluster",)),
    ("sleep", "cds", (), ("BlackHoleCluster", "static-upstream")),
    ("istio-ingressgateway", "lds", ("gateway.lua",), ("envoy.lua",)),
    ("istio-ingressgateway", "rds", ("x-gateway-filter",), ()),
]


@pytest.mark.parametrize(("workload", "type_", "present", "absent"), ENVOY_FILTERS)
def test_the_envoy_filters_are_in_force_on_both_sides(
    planes: Planes, workload: str, type_: str, present: tuple[str, ...], absent: tuple[str, ...]
) -> None:
    """The identical resources above carry what the scene's EnvoyFilters patch in (and not
    what they remove), so the comparison is of patched config."""
    held = planes.config(workload)
    for side in ("istiod", "pilotfish"):
        text = json.dumps(plain(held[side], type_, planes.placeholders))
        assert [w for w in present if w not in text] == [] and [w for w in absent if w in text] == [], side
