"""The agent's identity from its environment, the Envoy bootstrap it writes (checked by a real
Envoy), Envoy as its child process, and the DNS-capture iptables rules it prints."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from aiohttp import web
from envoy.config.bootstrap.v3 import bootstrap_pb2
from envoy.extensions.resource_monitors.downstream_connections.v3 import downstream_connections_pb2  # noqa: F401
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401
from google.protobuf import json_format

from app.agent.bootstrap import (
    AgentConfig,
    AgentConfigError,
    agent_config,
    bootstrap_json,
    build_bootstrap,
    parse_downward_api,
)
from app.agent.dns import parse_resolv_conf
from app.agent.envoy import Envoy, envoy_argv, read_admin_address, ready, server_state
from app.agent.iptables import dns_capture_rules
from app.model.proxy import ProxyType, build_proxy
from tests.e2e.harness import free_port
from tests.support.envoy import envoy_binary, validate_bootstrap

POD_ENV = {
    "POD_NAME": "reviews-v1-5d8f",
    "POD_NAMESPACE": "bookinfo",
    "INSTANCE_IP": "10.1.2.3",
    "SERVICE_ACCOUNT": "bookinfo-reviews",
    "ISTIO_META_CLUSTER_ID": "east",
    "ISTIO_META_NETWORK": "net-1",
    "ISTIO_META_INTERCEPTION_MODE": "REDIRECT",
    "ISTIO_META_DNS_CAPTURE": "1",
    "ISTIO_META_DNS_AUTO_ALLOCATE": "false",
    "ISTIO_META_WORKLOAD_NAME": "reviews-v1",
    "ISTIO_METAJSON_LABELS": '{"app": "reviews", "version": "v1"}',
    "PATH": "/usr/bin",
}


def sidecar(**env: str) -> AgentConfig:
    return agent_config({**POD_ENV, **env}, host_ips=["10.1.2.3"], istio_version="1.28.0")


# --- identity -------------------------------------------------------------------------------------


def test_node_id_and_metadata_from_the_pod_environment() -> None:
    cfg = sidecar()
    assert cfg.node_id == "sidecar~10.1.2.3~reviews-v1-5d8f.bookinfo~bookinfo.svc.cluster.local"
    assert cfg.cluster == "reviews.bookinfo"  # app label . namespace
    assert cfg.api_type == "DELTA_GRPC"  # ISTIO_DELTA_XDS defaults to true
    assert cfg.metadata == {
        # ISTIO_META_ prefix stripped
        "CLUSTER_ID": "east",
        "NETWORK": "net-1",
        "INTERCEPTION_MODE": "REDIRECT",
        "DNS_CAPTURE": "true",  # a StringBool: "1" read as Go's ParseBool; false is left out
        "WORKLOAD_NAME": "reviews-v1",
        # ISTIO_METAJSON_ objects merge at the top level, as istio's extractMetadata does
        "app": "reviews",
        "version": "v1",
        "ISTIO_VERSION": "1.28.0",
        "INSTANCE_IPS": "10.1.2.3",
        "NAME": "reviews-v1-5d8f",
        "NAMESPACE": "bookinfo",
        "SERVICE_ACCOUNT": "bookinfo-reviews",
        "LABELS": {"app": "reviews", "version": "v1"},
    }


def test_pilotfish_reads_the_node_the_agent_writes() -> None:
    cfg = sidecar(ISTIO_META_DNS_AUTO_ALLOCATE="true")
    proxy = build_proxy(cfg.node_id, json.loads(json.dumps(cfg.metadata)))
    assert proxy.type is ProxyType.SIDECAR
    assert proxy.id == "reviews-v1-5d8f.bookinfo"
    assert proxy.namespace == "bookinfo"
    assert proxy.ip_addresses == ("10.1.2.3",)
    assert proxy.labels == {"app": "reviews", "version": "v1"}
    assert (proxy.cluster_id, proxy.network, proxy.istio_version) == ("east", "net-1", "1.28.0")
    assert (proxy.interception_mode, proxy.dns_capture, proxy.dns_auto_allocate) == ("REDIRECT", True, True)


def test_defaults_without_instance_ip_labels_or_host_ips() -> None:
    cfg = agent_config({"POD_NAME": "gw-1", "POD_NAMESPACE": "istio-system"}, proxy_type="router")
    # pilot-agent initProxy: no usable address at all -> 127.0.0.1 and ::1; the first names the node
    assert cfg.ip_addresses == ("127.0.0.1", "::1")
    assert cfg.node_id == "router~127.0.0.1~gw-1.istio-system~istio-system.svc.cluster.local"
    assert cfg.cluster == "istio-proxy.istio-system"
    assert "LABELS" not in cfg.metadata and "ISTIO_VERSION" not in cfg.metadata
    assert cfg.metadata["INSTANCE_IPS"] == "127.0.0.1,::1"
    assert agent_config({}).cluster == "istio-proxy"


def test_instance_ip_comes_first_and_is_not_repeated() -> None:
    cfg = agent_config({"INSTANCE_IP": "10.0.0.9", "POD_NAMESPACE": "ns"}, host_ips=["10.0.0.7", "10.0.0.9"])
    assert cfg.ip_addresses == ("10.0.0.9", "10.0.0.7")
    assert agent_config({"INSTANCE_IP": "not-an-ip"}, host_ips=["10.0.0.7"]).ip_addresses == ("10.0.0.7",)


def test_pod_variables_win_over_istio_meta_and_service_cluster_falls_back() -> None:
    env = {"POD_NAMESPACE": "real", "ISTIO_META_NAMESPACE": "stale", "ISTIO_META_WORKLOAD_NAME": "ratings-v1"}
    cfg = agent_config(env)
    assert cfg.metadata["NAMESPACE"] == "real"
    assert cfg.cluster == "ratings-v1.real"  # no app label: the workload name
    assert agent_config(env, service_cluster="custom").cluster == "custom"
    assert agent_config(env, service_cluster="istio-proxy").cluster == "ratings-v1.real"


def test_downward_api_labels_overlay_and_locality() -> None:
    pod_labels = parse_downward_api(
        'app="details"\npod-template-hash="7f9c"\ntopology.istio.io/locality="us-east1.us-east1-b.rack-4"\n'
    )
    cfg = agent_config(POD_ENV, pod_labels=pod_labels)
    assert cfg.metadata["LABELS"] == {
        "app": "details",  # the pod's labels win over ISTIO_METAJSON_LABELS
        "version": "v1",
        "topology.istio.io/locality": "us-east1.us-east1-b.rack-4",
        "istio-locality": "us-east1/us-east1-b/rack-4",
    }
    assert cfg.cluster == "details.bookinfo"
    assert cfg.locality == "us-east1/us-east1-b/rack-4"
    node = build_bootstrap(cfg)["node"]
    assert node["locality"] == {"region": "us-east1", "zone": "us-east1-b", "sub_zone": "rack-4"}


def test_bad_input_is_refused() -> None:
    with pytest.raises(AgentConfigError, match="DNS_CAPTURE"):
        agent_config({"ISTIO_META_DNS_CAPTURE": "yes"})
    with pytest.raises(AgentConfigError, match="proxy type"):
        agent_config({}, proxy_type="waypoint")
    assert agent_config({"ISTIO_DELTA_XDS": "false"}).api_type == "GRPC"
    assert agent_config({"ISTIO_METAJSON_X": "{not json"}).metadata == {"INSTANCE_IPS": "127.0.0.1,::1"}


# --- bootstrap ------------------------------------------------------------------------------------


def test_bootstrap_structure() -> None:
    b = build_bootstrap(sidecar(), xds_socket_path="/tmp/agent/XDS", admin_address="127.0.0.1:15999")
    assert b["node"]["id"] == "sidecar~10.1.2.3~reviews-v1-5d8f.bookinfo~bookinfo.svc.cluster.local"
    assert b["node"]["cluster"] == "reviews.bookinfo"
    assert "locality" not in b["node"]
    assert b["admin"]["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": 15999}
    ads = b["dynamic_resources"]["ads_config"]
    assert ads["api_type"] == "DELTA_GRPC"
    assert ads["set_node_on_first_message_only"] is True
    assert ads["grpc_services"] == [{"envoy_grpc": {"cluster_name": "xds-grpc"}}]
    ads_source = {"ads": {}, "initial_fetch_timeout": "0s", "resource_api_version": "V3"}
    assert b["dynamic_resources"]["cds_config"] == b["dynamic_resources"]["lds_config"] == ads_source
    [xds] = b["static_resources"]["clusters"]
    assert xds["name"] == "xds-grpc" and xds["type"] == "STATIC"
    endpoint = xds["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    assert endpoint["address"] == {"pipe": {"path": "/tmp/agent/XDS"}}
    options = xds["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert options["explicit_http_config"] == {"http2_protocol_options": {}}
    # proto3 JSON Envoy's own schema accepts
    parsed = json_format.ParseDict(b, bootstrap_pb2.Bootstrap())
    assert parsed.node.metadata["LABELS"]["app"] == "reviews"
    assert parsed.static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.pipe.path


def test_bootstrap_options() -> None:
    grpc = agent_config({"ISTIO_DELTA_XDS": "0", "POD_NAMESPACE": "ns"})
    b = build_bootstrap(grpc, admin_address="[::1]:0", sds_socket_path="/run/sds")
    assert b["dynamic_resources"]["ads_config"]["api_type"] == "GRPC"
    assert b["admin"]["address"]["socket_address"] == {"address": "::1", "port_value": 0}
    assert [c["name"] for c in b["static_resources"]["clusters"]] == ["sds-grpc", "xds-grpc"]
    sds = b["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    assert sds["address"] == {"pipe": {"path": "/run/sds"}}
    assert json.loads(bootstrap_json(grpc, admin_address="[::1]:0", sds_socket_path="/run/sds")) == b


@pytest.mark.parametrize("delta", ["true", "false"])
def test_real_envoy_accepts_the_bootstrap(delta: str, tmp_path: Path) -> None:
    cfg = agent_config({**POD_ENV, "ISTIO_DELTA_XDS": delta, "ISTIO_METAJSON_LABELS": '{"istio-locality": "r.z"}'})
    validate_bootstrap(build_bootstrap(cfg, xds_socket_path=str(tmp_path / "XDS")), tmp_path)
    validate_bootstrap(build_bootstrap(cfg, admin_address="[::1]:0", sds_socket_path=str(tmp_path / "SDS")), tmp_path)


# --- Envoy as a child process ---------------------------------------------------------------------


def test_envoy_argv() -> None:
    argv = envoy_argv("/bin/envoy", "/etc/b.json", drain_time_s=5, concurrency=2, admin_address_path="/tmp/a")
    assert argv[:3] == ["/bin/envoy", "-c", "/etc/b.json"]
    assert "--disable-hot-restart" in argv  # any number of Envoys per host, no base id to pick
    for flag, value in (("--drain-time-s", "5"), ("--concurrency", "2"), ("--admin-address-path", "/tmp/a")):
        assert argv[argv.index(flag) + 1] == value
    assert argv[argv.index("--local-address-ip-version") + 1] == "v4"
    assert envoy_argv("e", "b", extra_args=["--base-id", "7"])[-2:] == ["--base-id", "7"]
    assert "--concurrency" not in envoy_argv("e", "b")


@pytest.fixture
def logs() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


async def _admin_address(envoy: Envoy, path: Path) -> str:
    for _ in range(600):
        address = read_admin_address(path)
        if address is not None:
            return address
        if envoy.returncode is not None:
            log = path.with_suffix(".log").read_text(errors="replace")[-4000:]
            raise AssertionError(f"envoy exited with {envoy.returncode}\n{log}")
        await asyncio.sleep(0.1)
    raise AssertionError("envoy wrote no admin address in 60s")


def _envoy(tmp_path: Path, name: str, logs: ExitStack) -> tuple[Envoy, Path]:
    """An Envoy (not started) on the agent's bootstrap, admin on a port of its choosing, written
    to ``NAME.admin``; its output in ``NAME.log``."""
    binary = envoy_binary()
    bootstrap = tmp_path / f"{name}.json"
    # nobody serves the agent's socket: Envoy starts, but its CDS/LDS never arrive
    bootstrap.write_text(bootstrap_json(sidecar(), xds_socket_path=str(tmp_path / "XDS"), admin_address="127.0.0.1:0"))
    admin_path = tmp_path / f"{name}.admin"
    log = logs.enter_context((tmp_path / f"{name}.log").open("wb"))
    argv = envoy_argv(binary, bootstrap, drain_time_s=1, admin_address_path=admin_path, log_level="warning")
    return Envoy(argv, stdout=log, stderr=log), admin_path


async def test_envoy_runs_waits_for_ads_and_exits_0_on_sigterm(tmp_path: Path, logs: ExitStack) -> None:
    first, first_admin = _envoy(tmp_path, "first", logs)
    second, second_admin = _envoy(tmp_path, "second", logs)
    async with first, second:  # two Envoys on one host: no hot-restart base id to clash
        a, b = await _admin_address(first, first_admin), await _admin_address(second, second_admin)
        assert a != b
        # initial_fetch_timeout 0s: with no control plane behind the socket Envoy waits for CDS
        # for ever, so its admin answers but /ready stays 503 PRE_INITIALIZING, never LIVE
        assert await server_state(a) == "PRE_INITIALIZING"
        assert await ready(a) is False
        first.terminate()
        assert await asyncio.wait_for(first.wait(), 30) == 0
        first.terminate()  # already gone: a no-op
        assert await server_state(a) is None
        assert second.returncode is None
    assert second.returncode == 0  # leaving the block stopped it


async def test_a_cancelled_agent_still_stops_envoy(tmp_path: Path, logs: ExitStack) -> None:
    envoy, admin_path = _envoy(tmp_path, "cancelled", logs)
    started = asyncio.Event()

    async def agent() -> None:
        async with envoy:
            await _admin_address(envoy, admin_path)
            started.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(agent())
    await asyncio.wait_for(started.wait(), 60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert envoy.returncode == 0


async def test_ready_means_200_live() -> None:
    state = {"text": "LIVE", "status": "200"}

    async def handler(_: web.Request) -> web.Response:
        return web.Response(text=state["text"] + "\n", status=int(state["status"]))

    app = web.Application()
    app.router.add_get("/ready", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    address = f"127.0.0.1:{port}"
    try:
        assert await ready(address) is True
        state.update(text="DRAINING", status="503")
        assert await ready(address) is False
        assert await server_state(address) == "DRAINING"
    finally:
        await runner.cleanup()
    assert await ready(address) is False  # nothing listening


# --- DNS capture rules ----------------------------------------------------------------------------


def test_dns_capture_for_the_resolv_conf_servers() -> None:
    resolv = parse_resolv_conf("# k8s\nnameserver 10.96.0.10\nsearch ns.svc.cluster.local\noptions ndots:5\n")
    servers = [host for host, _ in resolv.nameservers]
    assert servers == ["10.96.0.10"]
    rules = dns_capture_rules(servers, dns_port=15053)
    lines = rules.splitlines()
    assert lines[0] == "*nat" and "*raw" in lines and lines[-1] == "COMMIT"
    assert ":ISTIO_OUTPUT_DNS - [0:0]" in lines
    # TCP and UDP to the resolver go to the agent
    assert "-A ISTIO_OUTPUT_DNS -p udp --dport 53 -d 10.96.0.10/32 -j REDIRECT --to-ports 15053" in lines
    assert "-A ISTIO_OUTPUT_DNS -p tcp --dport 53 -d 10.96.0.10/32 -j REDIRECT --to-ports 15053" in lines
    # ... except the proxy's own queries, which return before the DNS chain
    uid_return = lines.index("-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN")
    assert uid_return < lines.index("-A ISTIO_OUTPUT -j ISTIO_OUTPUT_DNS")
    assert "-A ISTIO_OUTPUT -m owner --gid-owner 1337 -j RETURN" in lines
    # conntrack zones in the raw table
    assert "-A ISTIO_OUTPUT_DNS -p udp --dport 53 -m owner --uid-owner 1337 -j CT --zone 1" in lines
    assert "-A ISTIO_OUTPUT_DNS -p udp --sport 15053 -m owner --uid-owner 1337 -j CT --zone 2" in lines
    assert "-A ISTIO_INBOUND -p udp --sport 53 -s 10.96.0.10/32 -j CT --zone 1" in lines


def test_dns_capture_all_other_ports_and_families() -> None:
    rules = dns_capture_rules(capture_all=True, proxy_uids=(3,), proxy_gids=(4,), dns_port=25053)
    assert "-A ISTIO_OUTPUT_DNS -p udp --dport 53 -j REDIRECT --to-ports 25053" in rules
    assert "-A ISTIO_OUTPUT -m owner --uid-owner 3 -j RETURN" in rules
    assert "-A ISTIO_OUTPUT -m owner --gid-owner 4 -j RETURN" in rules
    assert "--sport 25053" in rules and "1337" not in rules
    both = ["10.96.0.10", "fd00::10", "bogus"]
    assert "-d fd00::10/128 -j REDIRECT" in dns_capture_rules(both, ipv6=True)
    assert "fd00::10" not in dns_capture_rules(both)
    assert dns_capture_rules([]) == ""  # istio: no servers and not capture-all: DNS capture disabled
