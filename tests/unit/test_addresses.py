"""Every Envoy address built as istiod's BuildAddress (pilot/pkg/networking/util/util.go): port 0
(a unix domain socket) is a ``pipe``, never a ``socket_address``; and Istio's own ServiceEntry
examples (tests/testdata/config/se-example.yaml in the pinned istio module, with its
``unix:///var/run/example/socket`` endpoint) give CDS, EDS and LDS a real Envoy accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from google.protobuf import json_format

from app.model.proxy import Proxy
from app.model.push_context import PushContext
from app.translate.address import build_address
from app.translate.endpoint.for_proxy import eds_cluster_names
from app.xds.generators.reference import generate_clusters, generate_endpoints, generate_listeners
from tests.support.envoy import agent_bootstrap, validate_bootstrap
from tests.support.mesh import push_context, sidecar_proxy
from tests.support.peers import istio_module_dir

UNIX_HOST = "example.unix.local"


@pytest.mark.parametrize(
    ("bind", "port", "expected"),
    [
        ("10.1.0.1", 8080, {"socketAddress": {"address": "10.1.0.1", "portValue": 8080}}),
        ("::", 15006, {"socketAddress": {"address": "::", "portValue": 15006}}),
        ("/var/run/example/socket", 0, {"pipe": {"path": "/var/run/example/socket"}}),
        ("unix:///var/run/app.sock", 0, {"pipe": {"path": "/var/run/app.sock"}}),
        ("unix:///var/run/app.sock", 8080, {"pipe": {"path": "/var/run/app.sock"}}),
    ],
)
def test_build_address_as_istiod(bind: str, port: int, expected: dict[str, object]) -> None:
    assert json_format.MessageToDict(build_address(bind, port)) == expected


@pytest.fixture(scope="module")
def se_example() -> PushContext:
    return push_context((istio_module_dir() / "tests" / "testdata" / "config" / "se-example.yaml").read_text())


@pytest.fixture(scope="module")
def proxy() -> Proxy:
    return sidecar_proxy("app-1.seexamples", "10.12.0.9", {"app": "app"})


def _addresses(push: PushContext, proxy: Proxy) -> list[dict[str, object]]:
    cds = generate_clusters(proxy, push)
    eds = generate_endpoints(proxy, push, eds_cluster_names(cds))
    out = [json_format.MessageToDict(lb.endpoint.address) for la in eds for g in la.endpoints for lb in g.lb_endpoints]
    for c in cds:
        out += [
            json_format.MessageToDict(lb.endpoint.address) for g in c.load_assignment.endpoints for lb in g.lb_endpoints
        ]
    out += [json_format.MessageToDict(listener.address) for listener in generate_listeners(proxy, push)]
    return out


def test_a_unix_socket_service_entry_endpoint_is_a_pipe(se_example: PushContext, proxy: Proxy) -> None:
    [la] = generate_endpoints(proxy, se_example, [f"outbound|8001||{UNIX_HOST}"])
    [group] = la.endpoints
    [lb] = group.lb_endpoints
    assert json_format.MessageToDict(lb.endpoint.address) == {"pipe": {"path": "/var/run/example/socket"}}


def test_no_address_is_a_socket_address_without_a_port(se_example: PushContext, proxy: Proxy) -> None:
    addresses = _addresses(se_example, proxy)
    assert {"pipe": {"path": "/var/run/example/socket"}} in addresses
    sockets = [a["socketAddress"] for a in addresses if "socketAddress" in a]
    assert sockets
    assert all(isinstance(s, dict) and s.get("portValue") for s in sockets), sockets


def test_real_envoy_accepts_cds_eds_and_lds_of_istios_service_entry_examples(
    se_example: PushContext, proxy: Proxy, tmp_path: Path
) -> None:
    """Each ClusterLoadAssignment rides in a static cluster of its own (one Envoy rejecting an
    assignment is what NACKed the whole EDS response), beside the CDS clusters and LDS listeners."""
    cds = generate_clusters(proxy, se_example)
    eds = generate_endpoints(proxy, se_example, eds_cluster_names(cds))
    assert f"outbound|8001||{UNIX_HOST}" in [la.cluster_name for la in eds]
    statics = []
    for i, la in enumerate(eds):
        c = cluster_pb2.Cluster(name=f"eds-{i}", type=cluster_pb2.Cluster.STATIC)
        c.connect_timeout.seconds = 1
        c.load_assignment.CopyFrom(la)
        c.load_assignment.cluster_name = c.name
        statics.append(c)
    lds = generate_listeners(proxy, se_example)
    validate_bootstrap(agent_bootstrap(proxy.id, [*cds, *statics], lds, node_cluster="app.seexamples"), tmp_path)
