"""``pilotfish agent``: the node agent beside one Envoy, as istio's pilot-agent (composition root).

It writes Envoy's bootstrap, serves Envoy's ADS on a Unix socket and carries it upstream
(``xds_proxy``), answers the pod's DNS from the latest name table when the proxy captures DNS
(``dns``), reports readiness on the status port, starts Envoy as its child, forwards SIGTERM to
it and exits with Envoy's status. Every address and path has pilot-agent's default and a flag,
so several agents run side by side on one host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import ssl
from collections.abc import Callable
from pathlib import Path

from aiohttp import web
from grpclib.server import Server

from app.agent.bootstrap import AgentConfig, bootstrap_json
from app.agent.certs import (
    CaClient,
    CertificateManager,
    WorkloadCertificate,
    client_context,
    load_certificate,
    private_dir,
    read_root_certificates,
)
from app.agent.dns import DnsProxy, parse_resolv_conf
from app.agent.envoy import Envoy, envoy_argv, ready
from app.agent.sds import SdsServer
from app.agent.settings import AgentSettings
from app.agent.xds_proxy import XdsProxy
from app.settings import split_address

logger = logging.getLogger("pilotfish.agent")


def host_ips() -> list[str]:
    """The host's own addresses, loopback left out (pilot-agent network.GetPrivateIPs); none found
    leaves the choice to ``agent_config`` (localhost of both families, as istio)."""
    with contextlib.suppress(OSError):
        infos = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
        found = [str(info[4][0]) for info in infos]
        return [ip for ip in dict.fromkeys(found) if not ip.startswith(("127.", "::1", "fe80:"))]
    return []


def captures_dns(config: AgentConfig) -> bool:
    """pilot-agent serves DNS only when ISTIO_META_DNS_CAPTURE is on."""
    return config.metadata.get("DNS_CAPTURE") == "true"


class Agent:
    def __init__(self, settings: AgentSettings, config: AgentConfig) -> None:
        self.settings = settings
        self.config = config
        self.dns: DnsProxy | None = None
        if captures_dns(config):
            self.dns = self._dns_proxy()
        on_table = self.dns.update if self.dns is not None else None
        self.certificates: CertificateManager | None = None
        self._key_files: Path | None = None  # where ssl reads the workload key from
        tls = None
        metadata: Callable[[], dict[str, str]] = dict
        if settings.root_cert.exists():
            tls, metadata = self._security(settings)
        else:
            why = "plaintext upstream, no workload certificate (SDS serves mounted files only)"
            logger.info("agent: no root certificate at %s: %s", settings.root_cert, why)
        self.sds = SdsServer(self.certificates)
        upstream = split_address(settings.discovery_address)
        self.xds = XdsProxy(upstream, on_name_table=on_table, tls=tls, metadata=metadata)

    def _security(self, s: AgentSettings) -> tuple[ssl.SSLContext, Callable[[], dict[str, str]]]:
        """The CA client, certificate manager and SDS server; the upstream TLS context, which
        presents each new workload certificate once it is issued."""
        root = read_root_certificates(s.root_cert)
        files = self._key_files = private_dir()
        # pilot-agent's CA_ADDR defaults to the discovery address (the secure port serves both)
        ca_address = split_address(s.ca_address or s.discovery_address)
        ca = CaClient(ca_address, root, s.token_file, files)
        account = str(self.config.metadata.get("SERVICE_ACCOUNT") or "default")
        identity = f"spiffe://{s.trust_domain}/ns/{self.config.namespace}/sa/{account}"
        self.certificates = CertificateManager(ca, identity, key_type=s.key_type, ttl=s.cert_ttl)
        tls = client_context(root, None, files)

        def present(cert: WorkloadCertificate) -> None:
            load_certificate(tls, cert, files)

        self.certificates.subscribe(present)
        return tls, ca.metadata

    def bootstrap(self) -> str:
        s = self.settings
        return bootstrap_json(
            self.config,
            xds_socket_path=str(s.xds_socket),
            admin_address=s.envoy_admin_address,
            sds_socket_path=str(s.sds_socket),
        )

    def _dns_proxy(self) -> DnsProxy:
        s = self.settings
        try:
            resolv = parse_resolv_conf(s.resolv_conf.read_text())
        except OSError as e:
            logger.warning("dns: %s: %s; no search domains", s.resolv_conf, e.strerror)
            resolv = parse_resolv_conf("")
        upstreams = tuple(split_address(a) for a in s.dns_upstreams) or resolv.nameservers
        return DnsProxy(
            upstreams,
            proxy_namespace=self.config.namespace,
            proxy_domain=self.config.dns_domain,
            search=resolv.search,
            address=split_address(s.dns_address),
        )

    async def is_ready(self) -> tuple[bool, str]:
        """pilot-agent's readiness: Envoy is LIVE and, with DNS capture, the first table arrived."""
        if not await ready(self.settings.envoy_admin_address):
            return False, "envoy is not ready"
        if self.dns is not None and not self.dns.has_table:
            return False, "no name table yet"
        return True, ""

    async def _healthz(self, _: web.Request) -> web.Response:
        ok, why = await self.is_ready()
        return web.Response(status=200 if ok else 503, text="ready\n" if ok else f"not ready: {why}\n")

    async def _metrics(self, _: web.Request) -> web.Response:
        """The agent's metrics (pilot-agent serves them with Envoy's on :15020/stats/prometheus)."""
        return web.Response(text=self.xds.metrics.render(), content_type="text/plain", charset="utf-8")

    async def run(self, stop: asyncio.Event) -> int:
        """Serve until Envoy exits (its status) or ``stop`` is set (SIGTERM to Envoy, then its status)."""
        s = self.settings
        s.bootstrap_path.parent.mkdir(parents=True, exist_ok=True)
        s.bootstrap_path.write_text(self.bootstrap())
        s.xds_socket.parent.mkdir(parents=True, exist_ok=True)
        s.xds_socket.unlink(missing_ok=True)  # a socket left by an agent that was killed
        xds = Server([self.xds])
        await xds.start(path=str(s.xds_socket))
        s.sds_socket.parent.mkdir(parents=True, exist_ok=True)
        s.sds_socket.unlink(missing_ok=True)
        sds = Server([self.sds])
        await sds.start(path=str(s.sds_socket))
        renewing = asyncio.create_task(self.certificates.run()) if self.certificates is not None else None
        app = web.Application()
        app.router.add_get("/healthz/ready", self._healthz)
        app.router.add_get("/stats/prometheus", self._metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        host, port = split_address(s.status_address)
        site = web.TCPSite(runner, host, port)
        await site.start()
        envoy = Envoy(envoy_argv(s.envoy_binary, s.bootstrap_path, log_level=s.envoy_log_level))
        try:
            if self.dns is not None:
                await self.dns.start()
            await envoy.start()
            logger.info("agent: envoy pid %s, xds on %s, upstream %s", envoy.pid, s.xds_socket, s.discovery_address)
            exited = asyncio.ensure_future(envoy.wait())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not exited.done():
                envoy.terminate()  # pilot-agent forwards the signal and waits for Envoy to drain
            stopping.cancel()
            code = await exited
            logger.info("agent: envoy exited with %d", code)
            return code
        finally:
            if envoy.pid is not None and envoy.returncode is None:
                await envoy.stop()  # the agent failed, or was cancelled: never leave Envoy behind
            xds.close()
            await xds.wait_closed()
            if renewing is not None:
                renewing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewing
            sds.close()
            await sds.wait_closed()
            if self._key_files is not None:
                shutil.rmtree(self._key_files, ignore_errors=True)
            if self.dns is not None:
                await self.dns.close()
            await runner.cleanup()

