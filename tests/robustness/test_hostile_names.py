"""Resource names a client makes up, with numbers Python cannot read: answered as istiod answers
an unknown name, never a stream ended with INTERNAL and a traceback.

A cluster name's port and a route name's port are read as istiod reads them, with Go's
strconv.Atoi (app/config/go_strconv.py). With ``int`` after ``str.isdigit``, an EDS name
``outbound|²||HOST`` ('²' passes isdigit, int refuses it) or one whose port has more than 4,300
digits (int refuses those too), and an RDS name ``HOST:`` and such a port, raised in the
generator: each such request ended its stream with INTERNAL and logged a traceback at ERROR."""

from __future__ import annotations

import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from envoy.service.discovery.v3 import discovery_pb2

from app.runtime import Runtime
from app.xds.type_urls import ENDPOINT, ROUTE
from tests.robustness.serving import Client, serving, with_node
from tests.support.bookinfo import BOOKINFO, NODE

HOST = "reviews.bookinfo.svc.cluster.local"
DIGITS = "9" * 5000


@pytest_asyncio.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    shutil.copytree(BOOKINFO, tmp_path / "config")
    async with serving(tmp_path / "config") as rt:
        yield rt


@pytest.mark.parametrize("delta", [False, True], ids=["sotw", "delta"])
@pytest.mark.parametrize(
    ("type_url", "name"),
    [
        (ENDPOINT, f"outbound|²||{HOST}"),
        (ENDPOINT, f"outbound|{DIGITS}||{HOST}"),
        (ENDPOINT, f"outbound_.{DIGITS}_._.{HOST}"),
        (ROUTE, f"{HOST}:{DIGITS}"),
        (ROUTE, DIGITS),
    ],
    ids=[
        "eds-superscript-port",
        "eds-5000-digit-port",
        "eds-sni-5000-digit-port",
        "rds-host-5000-digit-port",
        "rds-5000-digits",
    ],
)
async def test_a_name_with_a_port_python_cannot_read_is_answered(
    runtime: Runtime, caplog: pytest.LogCaptureFixture, type_url: str, name: str, delta: bool
) -> None:
    if delta:
        req = discovery_pb2.DeltaDiscoveryRequest(type_url=type_url, resource_names_subscribe=[name])
    else:
        req = discovery_pb2.DiscoveryRequest(type_url=type_url, resource_names=[name])
    with caplog.at_level(logging.INFO):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}") as channel:
            client = Client(channel, delta=delta)
            await client.send(with_node(req, NODE))
            answer = await client.recv()
            client.close()
    # one resource, empty, as for any unknown name
    assert len(answer.resources) == 1 and (not delta or answer.resources[0].name == name)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
