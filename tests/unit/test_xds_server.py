"""The xDS server over real gRPC streams (grpc.aio client, in-process server on a free port):
ADS SotW and Delta, a per-type service, bad nodes, NACKs, pushes on config change, and the
debug endpoints that show stream state."""

from __future__ import annotations

import asyncio
import gc
import json
import re
import shutil
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import struct_pb2
from prometheus_client.parser import text_string_to_metric_families

from app.api.nds import NameTable
from app.cli import main
from app.model.proxy import build_proxy
from app.runtime import Runtime
from app.settings import Settings
from app.telemetry.pilot import PilotMetrics
from app.xds.push_request import PushRequest
from app.xds.response import DeltaResponse
from app.xds.server import LARGE_RESPONSE, MAX_QUEUED_BYTES, MAX_QUEUED_REQUESTS, CallWriter, XdsServer, read_requests
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, NAME_TABLE, ROUTE
from app.xds.watch import WatchedResource
from tests.support.bookinfo import BOOKINFO, EXTRA_DR, NODE, RATINGS, REVIEWS

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/"
SEND_TIMEOUT = 2.0


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    config = tmp_path / "config"
    shutil.copytree(BOOKINFO, config)
    settings = Settings(
        config_dir=config,
        xds_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        debounce_after=0.01,
        file_debounce_ms=10,
        xds_send_timeout=SEND_TIMEOUT,
    )
    rt = Runtime(settings)
    stop = asyncio.Event()
    task = asyncio.create_task(rt.run(stop))
    await asyncio.wait_for(rt.started.wait(), 30)
    yield rt
    stop.set()
    await asyncio.wait_for(task, 15)
    gc.unfreeze()  # the runtime froze the test process's heap (app/heap.py)


def node(req: Any, node_id: str = NODE) -> Any:
    req.node.id = node_id
    labels = struct_pb2.Struct()
    labels.update({"app": "productpage", "version": "v1"})
    req.node.metadata.fields["LABELS"].struct_value.CopyFrom(labels)
    return req


class Stream:
    """One client stream: send requests, read responses with a timeout."""

    def __init__(self, channel: grpc.aio.Channel, method: str, delta: bool) -> None:
        req_type = discovery_pb2.DeltaDiscoveryRequest if delta else discovery_pb2.DiscoveryRequest
        resp_type = discovery_pb2.DeltaDiscoveryResponse if delta else discovery_pb2.DiscoveryResponse
        self.call = channel.stream_stream(
            method, request_serializer=req_type.SerializeToString, response_deserializer=resp_type.FromString
        )()
        self._read: asyncio.Future[Any] | None = None

    async def send(self, req: Any) -> None:
        await self.call.write(req)

    async def recv(self, timeout: float = 10) -> Any:
        # a read that times out stays pending: cancelling it would cancel the whole call
        self._read = self._read or asyncio.ensure_future(self.call.read())
        done, _ = await asyncio.wait({self._read}, timeout=timeout)
        assert done, f"no response within {timeout}s"
        read, self._read = self._read, None
        return read.result()

    async def nothing(self, wait: float = 0.3) -> None:
        self._read = self._read or asyncio.ensure_future(self.call.read())
        done, _ = await asyncio.wait({self._read}, timeout=wait)
        assert not done, f"unexpected response: {self._read.result()}"


@pytest.fixture
async def channel(runtime: Runtime) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}") as ch:
        yield ch


def names(resp: Any) -> set[str]:
    out = set()
    for any_msg in resp.resources:
        body = any_msg.resource if hasattr(any_msg, "resource") else any_msg
        if body.type_url == CLUSTER:
            c = cluster_pb2.Cluster()
            body.Unpack(c)
            out.add(c.name)
        elif body.type_url == ENDPOINT:
            out.add(endpoint_pb2.ClusterLoadAssignment.FromString(body.value).cluster_name)
        else:
            out.add(any_msg.name)
    return out


async def test_sotw_ads_cds_then_eds_and_ack(channel: grpc.aio.Channel) -> None:
    s = Stream(channel, ADS + "StreamAggregatedResources", delta=False)
    await s.send(node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER)))
    cds = await s.recv()
    assert cds.type_url == CLUSTER and REVIEWS in names(cds)
    await s.send(
        discovery_pb2.DiscoveryRequest(type_url=CLUSTER, response_nonce=cds.nonce, version_info=cds.version_info)
    )
    await s.send(discovery_pb2.DiscoveryRequest(type_url=ENDPOINT, resource_names=[REVIEWS]))
    eds = await s.recv()
    assert eds.type_url == ENDPOINT and len(eds.resources) == 1
    await s.send(discovery_pb2.DiscoveryRequest(type_url=LISTENER))
    lds = await s.recv()
    assert lds.type_url == LISTENER and len(lds.resources) > 0
    await s.send(discovery_pb2.DiscoveryRequest(type_url=ROUTE, resource_names=["9080"]))
    rds = await s.recv()
    assert rds.type_url == ROUTE and len(rds.resources) == 1
    s.call.cancel()


async def test_delta_ads_wildcard_cds_and_explicit_eds(channel: grpc.aio.Channel) -> None:
    s = Stream(channel, ADS + "DeltaAggregatedResources", delta=True)
    await s.send(node(discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER)))
    cds = await s.recv()
    assert REVIEWS in {r.name for r in cds.resources}
    await s.send(discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER, response_nonce=cds.nonce))
    await s.send(discovery_pb2.DeltaDiscoveryRequest(type_url=ENDPOINT, resource_names_subscribe=[REVIEWS]))
    eds = await s.recv()
    assert [r.name for r in eds.resources] == [REVIEWS]
    s.call.cancel()


async def test_reconnecting_proxies_leave_nothing_behind_in_the_server(runtime: Runtime) -> None:
    """A proxy that reconnects again and again (a new connection each time, presenting what it
    holds, as Envoy after a drop) leaves no stream, connection, proxy class or queued push behind:
    once its streams end, every Connection the server made for them is freed, frozen heap too."""
    target = f"127.0.0.1:{runtime.xds.port}"
    held: dict[str, str] = {}
    connections: list[weakref.ref[Any]] = []
    for _ in range(5):
        async with grpc.aio.insecure_channel(target) as ch:
            s = Stream(ch, ADS + "DeltaAggregatedResources", delta=True)
            first = node(discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER))
            first.initial_resource_versions.update(held)
            await s.send(first)
            if not held:
                cds = await s.recv()
                held = {r.name: r.version for r in cds.resources}
                await s.send(discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER, response_nonce=cds.nonce))
            await _until(lambda: len(runtime.xds.streams) == 1)
            connections += [weakref.ref(stream.connection) for stream in runtime.xds.streams.values()]
            s.call.cancel()
        await _until(lambda: not runtime.xds.streams)
    assert len(connections) == 5
    gc.unfreeze()  # what the HeapKeeper froze is collected too
    gc.collect()
    assert [ref for ref in connections if ref() is not None] == []
    assert runtime.queue.idle()
    assert not runtime.generator._state().proxy_classes


async def _until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not reached in time"
        await asyncio.sleep(0.02)


async def test_per_type_service_serves_only_its_type(channel: grpc.aio.Channel) -> None:
    s = Stream(channel, "/envoy.service.cluster.v3.ClusterDiscoveryService/StreamClusters", delta=False)
    await s.send(node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER)))
    assert REVIEWS in names(await s.recv())
    bad = Stream(channel, "/envoy.service.cluster.v3.ClusterDiscoveryService/DeltaClusters", delta=True)
    await bad.send(node(discovery_pb2.DeltaDiscoveryRequest(type_url=LISTENER)))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await bad.recv()
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    s.call.cancel()


def _raw_sotw_bytes(data: bytes) -> bytes:
    return data


@pytest.mark.parametrize(
    ("what", "payload", "reason"),
    [
        ("not protobuf", b"\xff\xff\xff\xff\x0f", "undecodable request"),
        # DiscoveryRequest.node (2) { id (1): invalid UTF-8 }: a proto3 string must be UTF-8
        ("invalid UTF-8 node id", b"\x12\x04\x0a\x02\xff\xfe", "undecodable request"),
        ("a 100 KB node id", node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER), "x" * 100_000).SerializeToString(),
         "(100000 characters)"),
    ],
)  # fmt: skip
async def test_hostile_requests_end_their_stream_with_a_short_invalid_argument(
    channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture, what: str, payload: bytes, reason: str
) -> None:
    call = channel.stream_stream(
        ADS + "StreamAggregatedResources",
        request_serializer=_raw_sotw_bytes,
        response_deserializer=discovery_pb2.DiscoveryResponse.FromString,
    )()
    await call.write(payload)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(call.read(), 10)
    details = err.value.details() or ""
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, (what, err.value.code(), details[:200])
    assert reason in details and len(details) <= 300, details[:400]
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    good = Stream(channel, ADS + "StreamAggregatedResources", delta=False)  # the server is still up
    await good.send(node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER)))
    assert REVIEWS in names(await good.recv())
    good.call.cancel()


async def test_bad_node_ends_only_that_stream(channel: grpc.aio.Channel) -> None:
    bad = Stream(channel, ADS + "StreamAggregatedResources", delta=False)
    await bad.send(node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER), node_id="nonsense"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await bad.recv()
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "nonsense" in (err.value.details() or "")
    good = Stream(channel, ADS + "StreamAggregatedResources", delta=False)
    await good.send(node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER)))
    assert REVIEWS in names(await good.recv())
    good.call.cancel()


async def test_config_change_is_pushed_on_the_open_stream_with_endpoints_following(
    runtime: Runtime, channel: grpc.aio.Channel
) -> None:
    s = Stream(channel, ADS + "StreamAggregatedResources", delta=False)
    await s.send(node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER)))
    cds = await s.recv()
    await s.send(
        discovery_pb2.DiscoveryRequest(type_url=CLUSTER, response_nonce=cds.nonce, version_info=cds.version_info)
    )
    watched = [REVIEWS, RATINGS]
    await s.send(discovery_pb2.DiscoveryRequest(type_url=ENDPOINT, resource_names=watched))
    eds = await s.recv()
    await s.send(
        discovery_pb2.DiscoveryRequest(
            type_url=ENDPOINT, resource_names=watched, response_nonce=eds.nonce, version_info=eds.version_info
        )
    )
    (runtime.settings.config_dir / "extra-dr.yaml").write_text(EXTRA_DR)  # a rule for ratings
    pushed = await s.recv(timeout=20)
    assert pushed.type_url == CLUSTER and pushed.version_info != cds.version_info
    follow = await s.recv()
    # the re-sent ratings cluster's assignment (unchanged), for it to warm; reviews' is not re-sent
    assert follow.type_url == ENDPOINT and follow.nonce != eds.nonce
    assert names(follow) == {RATINGS}
    s.call.cancel()


async def test_a_config_dir_that_disappears_keeps_the_last_good_config_and_is_followed_again(
    runtime: Runtime, channel: grpc.aio.Channel
) -> None:
    # the watch fails and is restarted with backoff (app/supervise.py); the server never stops
    # and a missing directory is "unknown", not "empty": nothing is deleted
    config = runtime.settings.config_dir
    assert config is not None
    away = config.with_name("config-away")
    config.rename(away)
    await asyncio.sleep(1.0)
    s = Stream(channel, ADS + "StreamAggregatedResources", delta=False)
    await s.send(node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER)))
    cds = await s.recv()
    assert REVIEWS in names(cds)  # still every cluster
    await s.send(
        discovery_pb2.DiscoveryRequest(type_url=CLUSTER, response_nonce=cds.nonce, version_info=cds.version_info)
    )
    away.rename(config)
    (config / "extra-dr.yaml").write_text(EXTRA_DR)
    pushed = await s.recv(timeout=30)  # the restarted watch read the directory again
    assert pushed.type_url == CLUSTER and pushed.version_info != cds.version_info
    s.call.cancel()


async def test_nack_is_visible_in_syncz_and_nothing_is_resent(runtime: Runtime, channel: grpc.aio.Channel) -> None:
    s = Stream(channel, ADS + "StreamAggregatedResources", delta=False)
    await s.send(node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER)))
    cds = await s.recv()
    nack = discovery_pb2.DiscoveryRequest(type_url=CLUSTER, response_nonce=cds.nonce)
    nack.error_detail.code = 3
    nack.error_detail.message = "cluster rejected: test"
    await s.send(nack)
    await s.nothing()
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{runtime.http.port}/debug/syncz") as resp:
            sync = await resp.json()
        async with http.get(f"http://127.0.0.1:{runtime.http.port}/ready") as resp:
            assert resp.status == 200
        async with http.get(
            f"http://127.0.0.1:{runtime.http.port}/debug/config_dump", params={"proxyID": "productpage-v1-0.bookinfo"}
        ) as resp:
            assert resp.status == 200, await resp.text()
            dump = await resp.json()
    [conn] = sync
    assert conn["watches"]["cds"]["lastError"] == "cluster rejected: test"
    assert conn["watches"]["cds"]["nacks"] == 1 and conn["nacks"] == 1
    assert REVIEWS in {c["name"] for c in dump["clusters"]}
    s.call.cancel()


async def test_ads_type_without_generator_is_watched_not_answered_and_stream_stays(channel: grpc.aio.Channel) -> None:
    # Envoy asks for SDS secrets over ADS for credentialName gateways; istiod answers what it
    # serves and ignores the rest, the stream stays up
    secret = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
    s = Stream(channel, ADS + "DeltaAggregatedResources", delta=True)
    await s.send(node(discovery_pb2.DeltaDiscoveryRequest(type_url=secret, resource_names_subscribe=["kubernetes://c"])))
    await s.nothing()
    await s.send(discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER))
    cds = await s.recv()
    assert cds.type_url == CLUSTER and REVIEWS in {r.name for r in cds.resources}
    s.call.cancel()


async def test_client_that_stops_reading_is_closed_and_holds_back_no_one(
    runtime: Runtime, channel: grpc.aio.Channel
) -> None:
    # a client whose receive window stays at gRPC's 64 KiB (no BDP growth) and that never reads
    # again: forced pushes fill the window, the write blocks, and the send timeout ends the stream
    slow_channel = grpc.aio.insecure_channel(f"127.0.0.1:{runtime.xds.port}", options=[("grpc.http2.bdp_probe", 0)])
    slow = Stream(slow_channel, ADS + "StreamAggregatedResources", delta=False)
    await slow.send(node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER), node_id=NODE.replace("productpage", "slow")))
    good = Stream(channel, ADS + "StreamAggregatedResources", delta=False)
    await good.send(node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER)))
    first = await good.recv()
    await good.send(
        discovery_pb2.DiscoveryRequest(type_url=CLUSTER, response_nonce=first.nonce, version_info=first.version_info)
    )
    slow_id = next(i for i in await _stream_ids(runtime) if "slow" in i)
    server_stream = runtime.xds.streams[slow_id]
    pushes = 0
    while slow_id in runtime.xds.streams:  # each forced push re-sends the whole CDS
        # the push worker is released once the write that blocked times out, never parked
        await asyncio.wait_for(server_stream.push(PushRequest(full=True, forced=True)), SEND_TIMEOUT + 5)
        pushes += 1
        assert pushes < 500, "the stream never blocked"
    assert server_stream.closed
    await asyncio.wait_for(server_stream.push(PushRequest(full=True, forced=True)), 1)  # a closed stream takes none
    # the well-behaved stream on the same server is served meanwhile and after
    (runtime.settings.config_dir / "extra-dr.yaml").write_text(EXTRA_DR)
    pushed = await good.recv(timeout=20)
    assert pushed.type_url == CLUSTER and pushed.version_info != first.version_info
    # the slow client, once it reads again, finds its stream ended with istiod's status
    with pytest.raises(grpc.aio.AioRpcError) as err:
        while True:
            await slow.recv()
    assert err.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED, err.value
    assert "timeout sending" in (err.value.details() or "")
    good.call.cancel()
    await slow_channel.close()


async def _stream_ids(runtime: Runtime) -> list[str]:
    for _ in range(100):
        if len(runtime.xds.streams) >= 2:
            return list(runtime.xds.streams)
        await asyncio.sleep(0.05)
    raise AssertionError(f"streams never connected: {list(runtime.xds.streams)}")


async def test_reader_stops_taking_requests_while_the_stream_is_behind() -> None:
    # a client that floods requests is held back by HTTP/2 flow control: the reader waits
    # with MAX_QUEUED_REQUESTS unhandled instead of buffering without bound
    async def flood() -> AsyncIterator[int]:
        for i in range(10 * MAX_QUEUED_REQUESTS):
            yield i

    inbox: asyncio.Queue[object] = asyncio.Queue()
    reader = asyncio.create_task(read_requests(flood(), inbox))
    for _ in range(50):
        await asyncio.sleep(0)
    assert inbox.qsize() == MAX_QUEUED_REQUESTS and not reader.done()
    for _ in range(MAX_QUEUED_REQUESTS):  # the stream handles what is queued ...
        inbox.get_nowait()
        inbox.task_done()
    for _ in range(50):
        await asyncio.sleep(0)
    assert inbox.qsize() == MAX_QUEUED_REQUESTS  # ... and the reader takes the next batch
    reader.cancel()


async def test_reader_stops_taking_requests_once_their_bytes_reach_the_bound() -> None:
    # a few requests of megabytes hold as much as many small ones: the reader stops at their bytes
    big = discovery_pb2.DiscoveryRequest(type_url=CLUSTER, resource_names=["n" * 1024] * 1024)

    async def flood() -> AsyncIterator[discovery_pb2.DiscoveryRequest]:
        for _ in range(MAX_QUEUED_REQUESTS):
            yield big

    inbox: asyncio.Queue[object] = asyncio.Queue()
    reader = asyncio.create_task(read_requests(flood(), inbox))
    for _ in range(50):
        await asyncio.sleep(0)
    assert inbox.qsize() == -(-MAX_QUEUED_BYTES // big.ByteSize()) and not reader.done()
    reader.cancel()


class HeldWrites:
    """A servicer context whose writes complete only when released; counts those in flight."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.in_flight = 0
        self.peak = 0
        self.written: list[str] = []

    async def write(self, resp: DeltaResponse) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await self.release.wait()
            self.written.append(resp.nonce)
        finally:
            self.in_flight -= 1


async def test_large_responses_are_paced_and_small_ones_pass(runtime: Runtime) -> None:
    server = XdsServer(runtime.source, on_disconnect=lambda _: None, metrics=PilotMetrics(), max_large_writes=2)
    context = HeldWrites()
    [cluster] = runtime.generator.generate(CLUSTER, build_proxy(NODE), WatchedResource(CLUSTER, True))[:1]
    large = [DeltaResponse(CLUSTER, f"large{i}", "", [cluster] * LARGE_RESPONSE) for i in range(5)]
    # one stream each: a stream writes one response at a time (CallWriter)
    writes = [asyncio.create_task(server._write(CallWriter(context), resp)) for resp in large]
    await asyncio.sleep(0.05)
    assert context.in_flight == 2  # three wait for a slot, not encoded yet
    small = asyncio.create_task(server._write(CallWriter(context), DeltaResponse(CLUSTER, "small", "", [cluster])))
    await asyncio.sleep(0.05)
    assert context.in_flight == 3  # a small response does not wait behind them
    context.release.set()
    await asyncio.gather(*writes, small)
    assert context.peak == 3 and sorted(context.written) == sorted([*(r.nonce for r in large), "small"])


async def cds_acked_lds_nacked(channel: grpc.aio.Channel) -> Stream:
    """A SotW stream that ACKed its CDS and NACKed its LDS response, as Envoy NACKs (code 13)."""
    s = Stream(channel, ADS + "StreamAggregatedResources", delta=False)
    await s.send(node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER)))
    cds = await s.recv()
    await s.send(
        discovery_pb2.DiscoveryRequest(type_url=CLUSTER, response_nonce=cds.nonce, version_info=cds.version_info)
    )
    await s.send(discovery_pb2.DiscoveryRequest(type_url=LISTENER))
    lds = await s.recv()
    nack = discovery_pb2.DiscoveryRequest(type_url=LISTENER, response_nonce=lds.nonce)
    nack.error_detail.code, nack.error_detail.message = 13, "listener rejected"
    await s.send(nack)
    await asyncio.sleep(0.2)
    return s


async def test_proxy_status_shows_each_types_sync_state_and_the_last_nack(
    runtime: Runtime, channel: grpc.aio.Channel, capsys: pytest.CaptureFixture[str]
) -> None:
    s = await cds_acked_lds_nacked(channel)
    url = f"http://127.0.0.1:{runtime.http.port}"
    assert await asyncio.to_thread(main, ["proxy-status", "--server", url]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["NAME", "PROTOCOL", "CDS", "LDS", "EDS", "RDS", "LAST", "NACK"]
    assert row.split()[:7] == ["productpage-v1-0.bookinfo", "sotw", "SYNCED", "STALE", "NOT", "SENT", "NOT"]
    assert row.endswith("LDS: listener rejected")
    s.call.cancel()


# istiod's metric names that pilotfish exposes: pilot/pkg/xds/monitoring.go, pkg/xds/monitoring.go,
# pilot/pkg/model/push_context.go (pilot_virt_services), pilot/pkg/config/kube/crdclient/metrics.go
ISTIOD_METRICS = {
    "pilot_services", "pilot_xds", "pilot_xds_pushes", "pilot_push_triggers", "pilot_inbound_updates",
    "pilot_total_xds_rejects", "pilot_xds_cds_reject", "pilot_xds_eds_reject", "pilot_xds_lds_reject",
    "pilot_xds_rds_reject", "pilot_xds_write_timeout", "pilot_debounce_time", "pilot_pushcontext_init_seconds",
    "pilot_proxy_convergence_time", "pilot_proxy_queue_time", "pilot_xds_push_time", "pilot_xds_send_time",
    "pilot_xds_config_size_bytes", "pilot_virt_services", "pilot_total_xds_internal_errors",
    "pilot_xds_expired_nonce", "pilot_k8s_cfg_events", "pilot_k8s_reg_events", "istio_build",
    # istiod's validation webhook and injector (the parser names counters without _total)
    "galley_validation_passed", "galley_validation_failed", "galley_validation_http_error",
    "sidecar_injection_requests", "sidecar_injection_success", "sidecar_injection_failure",
    "sidecar_injection_skip", "sidecar_injection_time_seconds",
    # istiod's CA (security/pkg/server/ca/monitoring.go)
    "citadel_server_csr_count", "citadel_server_authentication_failure_count", "citadel_server_csr_sign_err_count",
    "citadel_server_success_cert_issuance_count",
    "citadel_server_root_cert_expiry_timestamp", "citadel_server_root_cert_expiry_seconds",
    "citadel_server_cert_chain_expiry_timestamp", "citadel_server_cert_chain_expiry_seconds",
}  # fmt: skip
PILOTFISH_METRICS = {
    "pilotfish_xds_cache_hits", "pilotfish_xds_cache_misses", "pilotfish_xds_cache_evictions",
    "pilotfish_config_rejections", "pilotfish_xds_auth_failures", "pilotfish_secure_port_refused",
    "pilotfish_xds_rejects_by_config",
    "leader_election_master_status",  # client-go's name (istiod sets no provider for it)
}  # fmt: skip
# the standard process and Python metrics every Python exporter has (prometheus_client's collectors)
STANDARD_METRICS = {
    "process_virtual_memory_bytes", "process_resident_memory_bytes", "process_start_time_seconds",
    "process_cpu_seconds", "process_open_fds", "process_max_fds", "python_info", "python_gc_objects_collected",
    "python_gc_objects_uncollectable", "python_gc_collections",
}  # fmt: skip


async def scrape(runtime: Runtime) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    url = f"http://127.0.0.1:{runtime.http.port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await resp.text()
    assert not re.search(r"^pilot\w+_total[{ ]", text, re.MULTILINE)  # istiod's counters carry no _total suffix
    families = list(text_string_to_metric_families(text))
    names = {f.name for f in families}
    assert names <= ISTIOD_METRICS | PILOTFISH_METRICS | STANDARD_METRICS, names - ISTIOD_METRICS
    assert names >= STANDARD_METRICS
    # the parser names counter samples NAME_total; key them by the family's name as exposed
    return {
        (f.name if s.name == f"{f.name}_total" else s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families
        for s in f.samples
    }


async def test_metrics_move_with_what_happened(runtime: Runtime, channel: grpc.aio.Channel) -> None:
    s = await cds_acked_lds_nacked(channel)
    before = await scrape(runtime)
    assert before[("pilot_xds", (("version", ""),))] == 1  # one stream, no ISTIO_VERSION in its metadata
    assert before[("pilot_xds_pushes", (("type", "cds"),))] == 1
    assert before[("pilot_total_xds_rejects", (("type", "lds"),))] == 1
    assert before[("pilot_xds_lds_reject", (("err", "Internal"), ("node", "productpage-v1-0.bookinfo")))] == 1
    (runtime.settings.config_dir / "extra-dr.yaml").write_text(EXTRA_DR)  # type: ignore[operator]
    pushed = await s.recv(timeout=20)
    assert pushed.type_url == CLUSTER
    await asyncio.sleep(0.2)
    after = await scrape(runtime)
    assert after[("pilot_xds_pushes", (("type", "cds"),))] == 2
    assert after[("pilot_push_triggers", (("type", "config"),))] == 1
    assert after[("pilot_inbound_updates", (("type", "config"),))] == 1
    assert after[("pilot_debounce_time_count", ())] == 1 and after[("pilot_pushcontext_init_seconds_count", ())] == 1
    assert after[("pilot_proxy_convergence_time_count", ())] == 1
    assert after[("pilot_proxy_queue_time_count", ())] == 1
    # the push wrote one CDS response (the stream watches no EDS): its build + write time, its send;
    # the request's answer was timed before it, as istiod's pushXds times both
    assert before[("pilot_xds_push_time_count", (("type", "cds"),))] == 1
    assert after[("pilot_xds_push_time_count", (("type", "cds"),))] == 2
    assert after[("pilot_xds_send_time_count", ())] == before[("pilot_xds_send_time_count", ())] + 1
    size = ("pilot_xds_config_size_bytes_count", (("type", CLUSTER),))
    assert after[size] == before[size] + 1
    assert after[("pilot_services", ())] >= 4  # bookinfo's
    assert after[("pilot_virt_services", ())] >= 1
    assert after[("pilotfish_xds_cache_misses", ())] > before[("pilotfish_xds_cache_misses", ())]
    s.call.cancel()
    await asyncio.sleep(0.2)
    assert (await scrape(runtime))[("pilot_xds", (("version", ""),))] == 0


async def test_proxy_config_prints_what_a_connected_proxy_is_served(
    runtime: Runtime, channel: grpc.aio.Channel, capsys: pytest.CaptureFixture[str]
) -> None:
    s = await cds_acked_lds_nacked(channel)
    url = f"http://127.0.0.1:{runtime.http.port}"
    proxy = "productpage-v1-0.bookinfo"
    assert await asyncio.to_thread(main, ["proxy-config", "clusters", proxy, "--server", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["SERVICE", "FQDN", "PORT", "SUBSET", "DIRECTION", "TYPE"]
    assert ["reviews.bookinfo.svc.cluster.local", "9080", "-", "outbound", "EDS"] in [line.split() for line in lines]
    assert await asyncio.to_thread(main, ["proxy-config", "all", proxy, "--server", url]) == 0
    text = capsys.readouterr().out
    assert "VHOST NAME" in text and "ENDPOINT" in text and "CHAINS" in text
    assert await asyncio.to_thread(main, ["proxy-config", "routes", proxy, "--server", url, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["routes"]
    assert await asyncio.to_thread(main, ["proxy-config", "routes", "nobody.nowhere", "--server", url]) == 2
    assert "no connected proxy 'nobody.nowhere'" in capsys.readouterr().err
    s.call.cancel()


async def test_debug_configz_push_status_and_connections(runtime: Runtime, channel: grpc.aio.Channel) -> None:
    s = await cds_acked_lds_nacked(channel)
    (runtime.settings.config_dir / "extra-dr.yaml").write_text(EXTRA_DR)  # type: ignore[operator]
    await s.recv(timeout=20)  # the push
    base = f"http://127.0.0.1:{runtime.http.port}/debug/"
    async with aiohttp.ClientSession() as session:
        async with session.get(base + "configz") as resp:
            configz = await resp.json()
        async with session.get(base + "push_status") as resp:
            push = await resp.json()
        async with session.get(base + "connections") as resp:
            [connection] = await resp.json()
    # istiod's form: one array of Kubernetes objects, the file's name in pilotfish's annotation
    extra = [o for o in configz if (o["kind"], o["metadata"]["name"]) == ("DestinationRule", "ratings-extra")]
    assert len(extra) == 1 and extra[0]["metadata"]["annotations"]["pilotfish.io/source"].endswith("extra-dr.yaml")
    assert extra[0]["spec"]["host"].startswith("ratings") and not [o for o in configz if o["kind"] == "Event"]
    assert push["full"] is True and push["configsUpdated"] == ["DestinationRule bookinfo/ratings-extra"]
    assert push["proxiesQueued"] == 1 and push["responsesSinceByType"].get("cds") == 1
    assert connection["proxy"] == "productpage-v1-0.bookinfo" and connection["types"] == ["cds", "lds"]
    assert connection["protocol"] == "sotw" and connection["pendingPush"] is False
    # the history: newest first, with its trigger keys, the proxies reached and what each type sent
    latest = push["pushes"][0]
    assert latest["version"] == push["version"]
    assert latest["trigger"]["configs"] == ["DestinationRule bookinfo/ratings-extra"]
    assert latest["proxiesReached"] == 1 and latest["proxies"] == ["productpage-v1-0.bookinfo"]
    assert latest["resourcesSentByType"]["cds"] >= 1
    s.call.cancel()


async def test_a_nack_names_the_objects_its_rejected_resources_were_made_from(
    runtime: Runtime, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    s = Stream(channel, ADS + "StreamAggregatedResources", delta=False)
    await s.send(node(discovery_pb2.DiscoveryRequest(type_url=CLUSTER)))
    cds = await s.recv()
    rejected = "outbound|9080|v2|reviews.bookinfo.svc.cluster.local"
    nack = discovery_pb2.DiscoveryRequest(type_url=CLUSTER, response_nonce=cds.nonce)
    # as Envoy's CDS words it: the clusters it refused, each with the reason
    nack.error_detail.code = 13
    nack.error_detail.message = f"Error adding/updating cluster(s) {rejected}: ring too large"
    await s.send(nack)
    await _until(lambda: bool(runtime.metrics.recent_rejections))
    [logged] = [r.getMessage() for r in caplog.records if "NACK from" in r.getMessage()]
    assert logged.startswith("cds NACK from productpage-v1-0.bookinfo")
    assert "made from DestinationRule bookinfo/reviews (" in logged and "traffic.yaml#1)" in logged
    assert "Service bookinfo/reviews (" in logged
    labels = {dict(k)["kind"]: dict(k) for k in runtime.metrics.rejects_by_config.values}
    assert labels["DestinationRule"] == {
        "type": "cds",
        "kind": "DestinationRule",
        "namespace": "bookinfo",
        "name": "reviews",
    }
    metrics = await scrape(runtime)
    key = (
        "pilotfish_xds_rejects_by_config",
        (("kind", "DestinationRule"), ("name", "reviews"), ("namespace", "bookinfo"), ("type", "cds")),
    )
    assert metrics[key] == 1
    base = f"http://127.0.0.1:{runtime.http.port}/debug/"
    async with aiohttp.ClientSession() as session:
        async with session.get(base + "rejections") as resp:
            rejections = await resp.json()
        query = {"proxyID": "productpage-v1-0.bookinfo", "type": "cds", "name": rejected}
        async with session.get(base + "explain", params=query) as resp:
            explained = await resp.json()
        async with session.get(base + "explain", params={**query, "name": "nope"}) as resp:
            assert resp.status == 404 and "no cds resource 'nope'" in await resp.text()
    [entry] = rejections
    assert entry.startswith("cds NACK from productpage-v1-0.bookinfo, made from DestinationRule bookinfo/reviews (")
    assert entry.endswith(f": Error adding/updating cluster(s) {rejected}: ring too large")
    kinds = {(c["kind"], c["name"]) for c in explained["configs"]}
    assert kinds == {("DestinationRule", "reviews"), ("Service", "reviews")}
    assert explained["endpointShards"][0]["endpoints"] == 3
    # the command, online: the same answer
    url = f"http://127.0.0.1:{runtime.http.port}"
    args = ["explain", "--server", url, "--proxy", "productpage-v1-0.bookinfo", "--type", "cds", rejected, "-o", "json"]
    assert await asyncio.to_thread(main, args) == 0
    assert json.loads(capsys.readouterr().out) == explained
    s.call.cancel()


async def test_a_route_nack_naming_no_resource_blames_the_watched_routes_virtual_service(
    runtime: Runtime, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    s = Stream(channel, ADS + "StreamAggregatedResources", delta=False)
    await s.send(node(discovery_pb2.DiscoveryRequest(type_url=ROUTE, resource_names=["9080"])))
    rds = await s.recv()
    nack = discovery_pb2.DiscoveryRequest(type_url=ROUTE, resource_names=["9080"], response_nonce=rds.nonce)
    nack.error_detail.code, nack.error_detail.message = 13, "header matcher: invalid"
    await s.send(nack)
    await _until(lambda: bool(runtime.metrics.recent_rejections))
    [entry] = runtime.metrics.recent_rejections
    assert entry.startswith("rds NACK from productpage-v1-0.bookinfo, made from ")
    assert "VirtualService bookinfo/reviews (" in entry and entry.endswith(": header matcher: invalid")
    counted = {(dict(k)["kind"], dict(k)["name"], dict(k)["type"]) for k in runtime.metrics.rejects_by_config.values}
    assert ("VirtualService", "reviews", "rds") in counted
    s.call.cancel()


async def test_a_dynamic_dns_service_entry_is_accepted_and_reported_in_configz(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    (runtime.settings.config_dir / "wiki.yaml").write_text(DYNAMIC_DNS_SE)  # type: ignore[operator]
    url = f"http://127.0.0.1:{runtime.http.port}/debug/configz"
    async with aiohttp.ClientSession() as session:
        for _ in range(100):
            async with session.get(url) as resp:
                configz = await resp.json()
            found = [o for o in configz if (o["kind"], o["metadata"]["name"]) == ("ServiceEntry", "wildcard-wiki")]
            if found:
                break
            await asyncio.sleep(0.1)
    [entry] = found
    assert not [o for o in configz if o["kind"] == "Event"]
    [warning] = json.loads(entry["metadata"]["annotations"]["pilotfish.io/warnings"])
    assert warning.startswith("resolution DYNAMIC_DNS: accepted, but pilotfish builds no dynamic forward proxy")
    logged = [r.getMessage() for r in caplog.records]
    assert any("ServiceEntry bookinfo/wildcard-wiki" in m and "DYNAMIC_DNS" in m for m in logged)


DYNAMIC_DNS_SE = """
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: wildcard-wiki, namespace: bookinfo}
spec:
  hosts: ["*.wikipedia.org"]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DYNAMIC_DNS
"""


NDS_SE = """
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: wiki, namespace: bookinfo}
spec:
  hosts: [wiki.corp.example]
  addresses: [192.0.2.44]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 192.0.2.44}]
"""


def name_table(resource: Any) -> dict[str, list[str]]:
    body = resource.resource if hasattr(resource, "resource") else resource
    assert body.type_url == NAME_TABLE
    table = NameTable.FromString(body.value)
    return {host: list(info.ips) for host, info in table.table.items()}


async def test_nds_is_served_on_delta_and_pushed_for_services_not_for_destination_rules(
    runtime: Runtime, channel: grpc.aio.Channel
) -> None:
    # nds.go: one unnamed NameTable; skippedNdsConfigs holds DestinationRule, ServiceEntry is pushed
    s = Stream(channel, ADS + "DeltaAggregatedResources", delta=True)
    await s.send(node(discovery_pb2.DeltaDiscoveryRequest(type_url=NAME_TABLE)))
    first = await s.recv()
    assert first.type_url == NAME_TABLE and [r.name for r in first.resources] == [""]
    assert any(host.startswith("reviews.") for host in name_table(first.resources[0]))
    await s.send(discovery_pb2.DeltaDiscoveryRequest(type_url=NAME_TABLE, response_nonce=first.nonce))
    (runtime.settings.config_dir / "extra-dr.yaml").write_text(EXTRA_DR)
    await s.nothing(1.0)
    (runtime.settings.config_dir / "wiki.yaml").write_text(NDS_SE)
    pushed = await s.recv(timeout=20)
    assert pushed.type_url == NAME_TABLE
    assert name_table(pushed.resources[0])["wiki.corp.example"] == ["192.0.2.44"]
    s.call.cancel()


async def test_nds_over_sotw_and_a_router_gets_no_table(channel: grpc.aio.Channel) -> None:
    s = Stream(channel, ADS + "StreamAggregatedResources", delta=False)
    await s.send(node(discovery_pb2.DiscoveryRequest(type_url=NAME_TABLE)))
    resp = await s.recv()
    assert resp.type_url == NAME_TABLE and len(resp.resources) == 1
    assert any(host.startswith("ratings.") for host in name_table(resp.resources[0]))
    s.call.cancel()
    router = Stream(channel, ADS + "StreamAggregatedResources", delta=False)
    await router.send(node(discovery_pb2.DiscoveryRequest(type_url=NAME_TABLE), NODE.replace("sidecar~", "router~")))
    empty = await router.recv()
    assert empty.type_url == NAME_TABLE and len(empty.resources) == 0
    router.call.cancel()
