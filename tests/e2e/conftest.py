"""Fixtures of the end-to-end tests: a real ``pilotfish serve``, real Envoys, real HTTP backends.

Every test runs once with ``api_type: GRPC`` (SotW ADS) and once with ``DELTA_GRPC``. A failing
test shows the logs of every process still running; a process fixture fails its test if
pilotfish does not exit 0 on SIGTERM or Envoy rejected any xDS update.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.backends import Backends
from tests.e2e.harness import ConfigDir
from tests.e2e.processes import LIVE, Envoy, Pilotfish, ProxyIdentity, run_envoy, run_pilotfish
from tests.support.envoy import envoy_binary

API_TYPES = ("GRPC", "DELTA_GRPC")

StartPilotfish = Callable[[ConfigDir], Pilotfish]
StartEnvoy = Callable[[Pilotfish, ProxyIdentity], Envoy]
StartBackends = Callable[[Mapping[str, str]], Backends]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[Any]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        for proc in list(LIVE.values()):
            report.sections.append((f"{proc.name} (pid {proc.process.pid}) log", proc.log_tail()))
    return report


@pytest.fixture(autouse=True, scope="session")
def _envoy_available() -> None:
    envoy_binary()  # CI=true: a missing Envoy fails; elsewhere the e2e tests skip


@pytest.fixture(params=API_TYPES)
def api_type(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


def new_config_dir(path: Path) -> ConfigDir:
    """A config dir holding the mesh config and namespaces every scenario uses."""
    config = ConfigDir(path)
    config.render("mesh.yaml")
    config.render("namespaces.yaml")
    return config


@pytest.fixture
def config_dir(tmp_path: Path) -> ConfigDir:
    return new_config_dir(tmp_path / "config")


@pytest.fixture
def start_pilotfish(tmp_path: Path) -> Iterator[StartPilotfish]:
    with ExitStack() as stack:
        yield lambda config: stack.enter_context(run_pilotfish(config, tmp_path))


@pytest.fixture
def start_envoy(tmp_path: Path, api_type: str, start_pilotfish: StartPilotfish) -> Iterator[StartEnvoy]:
    # depends on start_pilotfish so that Envoys are checked and stopped before their server
    with ExitStack() as stack:
        yield lambda server, proxy: stack.enter_context(run_envoy(server, proxy, api_type, tmp_path))


@pytest.fixture
def start_backends() -> Iterator[StartBackends]:
    with ExitStack() as stack:

        def start(addresses: Mapping[str, str]) -> Backends:
            backends = Backends(addresses).start()
            stack.callback(backends.stop)
            return backends

        yield start
