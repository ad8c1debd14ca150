"""Issue 24 item 10, as it was found: ``pilotfish serve`` under a 256-descriptor limit, flooded
with TCP connections to its secure port that never start TLS. Before the relay was bounded, 77
of them used up the process's descriptors and every port stopped answering (the secure port,
plaintext xDS, /ready). Now the secure port refuses beyond its cap (64 under 256, 8 per peer
address) and every port, the secure one included, keeps serving; when the flood goes, the secure
port serves every peer again. The same holds for connections that finish TLS and send the HTTP/2
preface before going silent, the kind that holds three descriptors.

The server runs as a child process (the limit is the process's); the flood comes from other
loopback addresses (127.0.0.2 and up) than the well-behaved clients (127.0.0.1).
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import aiohttp
import grpc
from cryptography.hazmat.primitives.asymmetric import ec
from envoy.service.discovery.v3 import discovery_pb2

from app.agent.certs import build_csr
from app.api import ca as ca_api
from app.xds.type_urls import CLUSTER
from tests.e2e.harness import free_port
from tests.support.bookinfo import BOOKINFO, NODE

NOFILE = 256
TOKENS = "bookinfo-token bookinfo bookinfo-productpage\n"
ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
CSR = "/istio.v1.auth.IstioCertificateService/CreateCertificate"
SERVER_NAME = "pilotfish.istio-system.svc"
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


@contextmanager
def serve_with_few_descriptors(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, int], Path]]:
    config = tmp_path / "config"
    shutil.copytree(BOOKINFO, config)
    (tmp_path / "tokens").write_text(TOKENS)
    ports = {"xds": free_port(), "http": free_port(), "secure": free_port()}
    argv = [
        sys.executable, "-m", "app.cli", "serve",
        "--config-dir", str(config),
        "--xds-address", f"127.0.0.1:{ports['xds']}",
        "--http-address", f"127.0.0.1:{ports['http']}",
        "--secure-xds-address", f"127.0.0.1:{ports['secure']}",
        "--ca-dir", str(tmp_path / "ca"),
        "--trusted-token-file", str(tmp_path / "tokens"),
    ]  # fmt: skip
    log = tmp_path / "pilotfish.log"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))

    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, preexec_fn=limit)
    try:
        yield process, ports, log
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def ready(ports: dict[str, int]) -> bool:
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
            http.get(f"http://127.0.0.1:{ports['http']}/ready") as resp,
        ):
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def plaintext_xds(ports: dict[str, int]) -> bool:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['xds']}") as ch:
        return await cds(ch, None)


async def cds(ch: grpc.aio.Channel, token: str | None) -> bool:
    call = ch.stream_stream(
        ADS,
        request_serializer=discovery_pb2.DiscoveryRequest.SerializeToString,
        response_deserializer=discovery_pb2.DiscoveryResponse.FromString,
    )(metadata=(("authorization", f"Bearer {token}"),) if token else None)
    req = discovery_pb2.DiscoveryRequest(type_url=CLUSTER)
    req.node.id = NODE
    try:
        await call.write(req)
        return bool((await asyncio.wait_for(call.read(), 10)).resources)
    except (grpc.aio.AioRpcError, TimeoutError):
        return False
    finally:
        call.cancel()


async def secure_port(ports: dict[str, int], root: str) -> bool:
    """A certificate by token, then ADS by that token, over TLS: what pilot-agent does first."""
    creds = grpc.ssl_channel_credentials(root.encode())
    options = [("grpc.ssl_target_name_override", SERVER_NAME)]
    async with grpc.aio.secure_channel(f"127.0.0.1:{ports['secure']}", creds, options=options) as ch:
        issue = ch.unary_unary(
            CSR,
            request_serializer=ca_api.IstioCertificateRequest.SerializeToString,
            response_deserializer=ca_api.IstioCertificateResponse.FromString,
        )
        req = ca_api.IstioCertificateRequest(csr=build_csr(ec.generate_private_key(ec.SECP256R1()), "spiffe://x"))
        try:
            chain = (await issue(req, metadata=(("authorization", "Bearer bookinfo-token"),), timeout=10)).cert_chain
        except grpc.aio.AioRpcError:
            return False
        return bool(chain) and await cds(ch, "bookinfo-token")


async def every_port_serves(ports: dict[str, int], root: str) -> dict[str, bool]:
    return {
        "/ready": await ready(ports),
        "plaintext xDS": await plaintext_xds(ports),
        "secure port": await secure_port(ports, root),
    }


async def flood(port: int, sources: list[str]) -> list[asyncio.StreamWriter]:
    """One TCP connection from each of ``sources`` that never says anything."""
    writers = []
    for source in sources:
        with suppress(OSError):
            _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), 5)
            writers.append(writer)
    return writers


async def flood_relayed(port: int, root: str, sources: list[str]) -> list[asyncio.StreamWriter]:
    """From each of ``sources``, TLS and the HTTP/2 preface, then nothing: those the port took."""
    context = ssl.create_default_context(cadata=root)
    context.set_alpn_protocols(["h2"])
    writers = []
    for source in sources:
        with suppress(OSError, TimeoutError):
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    "127.0.0.1", port, ssl=context, server_hostname=SERVER_NAME, local_addr=(source, 0)
                ),
                5,
            )
            writer.write(H2_PREFACE)
            await writer.drain()
            writers.append(writer)
    return writers


async def serves_again(ports: dict[str, int], root: str, log: Path) -> None:
    deadline = time.monotonic() + 20
    while not await secure_port(ports, root):
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        await asyncio.sleep(0.5)


async def test_a_flood_of_silent_connections_under_256_descriptors_leaves_every_port_serving(tmp_path: Path) -> None:
    with serve_with_few_descriptors(tmp_path) as (process, ports, log):
        deadline = time.monotonic() + 60
        while not await ready(ports):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            await asyncio.sleep(0.2)
        root = (tmp_path / "ca" / "root-cert.pem").read_text()
        assert await every_port_serves(ports, root) == dict.fromkeys(("/ready", "plaintext xDS", "secure port"), True)

        # 300 from one peer: it gets 8 places, every port (the secure one too) serves the others
        one_peer = await flood(ports["secure"], ["127.0.0.2"] * 300)
        assert len(one_peer) == 300
        assert await every_port_serves(ports, root) == dict.fromkeys(("/ready", "plaintext xDS", "secure port"), True)

        for writer in one_peer:
            writer.close()

        # 300 from 40 peers fill the cap: the secure port refuses, the other ports serve (within
        # the 10 s handshake timeout, after which the flood's connections are closed anyway)
        many_peers = await flood(ports["secure"], [f"127.0.0.{3 + i % 40}" for i in range(300)])
        serving = await every_port_serves(ports, root)
        assert serving == {"/ready": True, "plaintext xDS": True, "secure port": False}, log.read_text()[-3000:]

        # the flood goes: the secure port serves again
        for writer in many_peers:
            writer.close()
        await serves_again(ports, root, log)

        # the costliest kind: TLS done, the HTTP/2 preface sent, then silence (three descriptors
        # each, no timeout: an idle gRPC connection looks the same); the cap still holds them
        relayed = await flood_relayed(ports["secure"], root, [f"127.0.0.{50 + i % 13}" for i in range(100)])
        assert len(relayed) == 64
        assert len(os.listdir(f"/proc/{process.pid}/fd")) < NOFILE - 16
        assert await ready(ports) and await plaintext_xds(ports)
        for writer in relayed:
            writer.close()
        await serves_again(ports, root, log)
        assert process.poll() is None
    text = log.read_text()
    assert "Too many open files" not in text, text[-3000:]
    assert "refused 127.0.0.2" in text and "peer_cap" in text and "connection_cap" in text, text[-3000:]
