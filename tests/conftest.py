"""Suite-wide fixtures."""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import Cluster, chart_credentials, running_cluster


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    """Tests that run the CLI in-process install a handler on pytest's captured stderr, which is
    closed after the test; left in place, every later log line fails and its traceback piles up in
    the next test's capture (the connect soak saw that as 25 MiB of heap growth)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


# --- the real Kubernetes control plane (tests/support/cluster.py) -------------------------------

_CLUSTERS: list[Cluster] = []
_STARTED: list[str] = []  # how long each control plane took to come up, for the summary


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """etcd + kube-apiserver + kube-controller-manager with Istio's CRDs, one per test session;
    tests keep to namespaces of their own (``kube``)."""
    with running_cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        steps = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in cluster.steps.items())
        _STARTED.append(f"kubernetes control plane up in {cluster.started_in:.1f}s ({steps}); in {cluster.workdir}")
        _CLUSTERS.append(cluster)
        try:
            yield cluster
        finally:
            _CLUSTERS.remove(cluster)


@pytest.fixture
def kube(kube_cluster: Cluster) -> Iterator[Cluster]:
    """The cluster; namespaces the test makes through it (``kube.namespace()``) are deleted after."""
    try:
        yield kube_cluster
    finally:
        kube_cluster.delete_namespaces()


@pytest.fixture(scope="session")
def pilotfish_kubeconfig(kube_cluster: Cluster) -> Path:
    """A kubeconfig with the token of the ServiceAccount charts/pilotfish creates, bound to the
    chart's RBAC: pilotfish reads the cluster with exactly the permissions the chart grants."""
    return chart_credentials(kube_cluster, kube_cluster.workdir / "pilotfish.kubeconfig")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[Any]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failing test that used the cluster shows the end of each control-plane process's log."""
    report = yield
    if report.failed and _CLUSTERS and "kube_cluster" in getattr(item, "fixturenames", ()):
        for title, text in _CLUSTERS[0].log_tails():
            report.sections.append((title, text))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in _STARTED:
        terminalreporter.write_line(line)
