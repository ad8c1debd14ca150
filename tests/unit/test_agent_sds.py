"""The agent's certificates and SDS server against a running pilotfish's CA over real TLS: the
first certificate by token, renewal by certificate at half the lifetime, SDS ``default`` and
``ROOTCA`` to a gRPC client on a Unix socket, a renewal pushed on the open stream."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse
from grpclib.client import Channel
from grpclib.const import Cardinality
from grpclib.server import Server

from app.agent.certs import (
    CaClient,
    CertificateManager,
    WorkloadCertificate,
    build_csr,
    new_key,
    private_dir,
    rotation_delay,
)
from app.agent.sds import ROOT, SDS, SECRET_TYPE, WORKLOAD, SdsServer
from app.runtime import Runtime
from app.security.ca import CertificateAuthority
from tests.support.secure import secure_runtime

IDENTITY = "spiffe://cluster.local/ns/bookinfo/sa/bookinfo-productpage"


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    async with secure_runtime(tmp_path) as rt:
        yield rt


def manager(rt: Runtime, tmp_path: Path, token: str, ttl: datetime.timedelta) -> CertificateManager:
    assert rt.ca is not None and rt.secure is not None
    (tmp_path / "token").write_text(token)
    ca = CaClient(("127.0.0.1", rt.secure.port), rt.ca.root_pem, tmp_path / "token", private_dir())
    return CertificateManager(ca, IDENTITY, ttl=ttl)


def leaf_uris(cert: WorkloadCertificate) -> list[str]:
    leaf = x509.load_pem_x509_certificate(cert.chain_pem.encode())
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return list(san.get_values_for_type(x509.UniformResourceIdentifier))


async def test_first_certificate_by_token_then_renewal_by_certificate(runtime: Runtime, tmp_path: Path) -> None:
    certs = manager(runtime, tmp_path, "bookinfo-token", datetime.timedelta(hours=1))
    first = await certs.renew()
    assert leaf_uris(first) == [IDENTITY]
    assert runtime.ca is not None and first.root_pem == runtime.ca.root_pem
    assert first.not_after - first.not_before == datetime.timedelta(hours=1, minutes=2)
    (tmp_path / "token").write_text("")  # no token any more: the certificate must do
    second = await certs.renew()
    assert leaf_uris(second) == [IDENTITY] and second.key_pem != first.key_pem
    assert certs.issued == 2


async def test_a_refused_token_leaves_no_certificate(runtime: Runtime, tmp_path: Path) -> None:
    certs = manager(runtime, tmp_path, "made-up", datetime.timedelta(hours=1))
    with pytest.raises(Exception, match="authenticate"):
        await certs.renew()
    assert certs.current is None


def test_renewal_at_half_the_lifetime_with_jitter() -> None:
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    cert = WorkloadCertificate(b"", "", "", start, start + datetime.timedelta(hours=24), start)
    delays = {rotation_delay(cert, start) for _ in range(50)}
    assert all(12 * 3600 * 0.98 <= d <= 12 * 3600 * 1.02 for d in delays) and len(delays) > 1
    assert rotation_delay(cert, start + datetime.timedelta(hours=23)) == 0.0


async def test_sds_serves_default_and_rootca_and_pushes_a_renewal(runtime: Runtime, tmp_path: Path) -> None:
    certs = manager(runtime, tmp_path, "bookinfo-token", datetime.timedelta(seconds=20))
    sds = SdsServer(certs)
    server = Server([sds])
    socket = str(tmp_path / "sds.sock")
    await server.start(path=socket)
    renewing = asyncio.create_task(certs.run())
    channel = Channel(path=socket)
    try:
        async with channel.request(
            SDS + "StreamSecrets", Cardinality.STREAM_STREAM, DiscoveryRequest, DiscoveryResponse
        ) as stream:
            await stream.send_message(DiscoveryRequest(type_url=SECRET_TYPE, resource_names=[WORKLOAD]))
            first = await asyncio.wait_for(stream.recv_message(), 15)
            assert first is not None and first.type_url == SECRET_TYPE
            [packed] = first.resources
            secret = secret_pb2.Secret()
            packed.Unpack(secret)
            assert secret.name == WORKLOAD
            assert secret.tls_certificate.certificate_chain.inline_bytes.decode() == certs.current.chain_pem  # type: ignore[union-attr]
            await stream.send_message(
                DiscoveryRequest(
                    type_url=SECRET_TYPE,
                    resource_names=[WORKLOAD],
                    version_info=first.version_info,
                    response_nonce=first.nonce,
                )
            )
            # 20 s lifetime: renewed after about 10 s, pushed on this stream without a request
            pushed = await asyncio.wait_for(stream.recv_message(), 20)
            assert pushed is not None and pushed.version_info != first.version_info
            renewed = secret_pb2.Secret()
            pushed.resources[0].Unpack(renewed)
            assert renewed.tls_certificate.private_key.inline_bytes != secret.tls_certificate.private_key.inline_bytes
            assert sds.pushes == 1
            await stream.cancel()
        async with channel.request(
            SDS + "StreamSecrets", Cardinality.STREAM_STREAM, DiscoveryRequest, DiscoveryResponse
        ) as stream:
            await stream.send_message(DiscoveryRequest(type_url=SECRET_TYPE, resource_names=[ROOT]))
            root = await asyncio.wait_for(stream.recv_message(), 15)
            assert root is not None
            ca = secret_pb2.Secret()
            root.resources[0].Unpack(ca)
            assert runtime.ca is not None
            assert (ca.name, ca.validation_context.trusted_ca.inline_bytes.decode()) == (ROOT, runtime.ca.root_pem)
            await stream.cancel()
    finally:
        channel.close()
        renewing.cancel()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("which", ["expired", "foreign"])
async def test_a_certificate_the_ca_no_longer_accepts_does_not_lock_the_agent_out(
    runtime: Runtime, tmp_path: Path, which: str
) -> None:
    # pilot-agent proves itself with its token; a certificate that expired while the control
    # plane was down, or one of a replaced root, must not stand in the way
    assert runtime.ca is not None
    key = new_key("ec")
    now = datetime.datetime.now(datetime.UTC)
    if which == "expired":
        issuer, when = runtime.ca, now - datetime.timedelta(hours=3)
    else:
        issuer, when = CertificateAuthority.self_signed("cluster.local"), now
    chain = issuer.sign_csr(build_csr(key, IDENTITY), [IDENTITY], datetime.timedelta(hours=1), when)
    leaf = x509.load_pem_x509_certificate(chain[0].encode())
    encoding, form = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    certs = manager(runtime, tmp_path, "bookinfo-token", datetime.timedelta(hours=1))
    certs.current = WorkloadCertificate(
        key.private_bytes(encoding, form, serialization.NoEncryption()),
        "".join(chain[:-1]),
        chain[-1],
        leaf.not_valid_before_utc,
        leaf.not_valid_after_utc,
        now,
    )
    renewed = await certs.renew()
    assert leaf_uris(renewed) == [IDENTITY] and renewed.root_pem == runtime.ca.root_pem


async def test_sds_serves_mounted_files_without_a_ca_and_never_an_empty_answer(tmp_path: Path) -> None:
    # pilot-agent's file-cert: / file-root: names, which istiod gives DestinationRule TLS files
    (tmp_path / "cert.pem").write_text("CHAIN")
    (tmp_path / "key.pem").write_text("KEY")
    (tmp_path / "ca.pem").write_text("CA")
    server = Server([SdsServer(None)])
    socket = str(tmp_path / "sds.sock")
    await server.start(path=socket)
    channel = Channel(path=socket)
    try:
        async with channel.request(
            SDS + "StreamSecrets", Cardinality.STREAM_STREAM, DiscoveryRequest, DiscoveryResponse
        ) as stream:
            # nothing it can serve: no response at all (an empty one would be a NACKed update)
            await stream.send_message(DiscoveryRequest(type_url=SECRET_TYPE, resource_names=[WORKLOAD]))
            pending = asyncio.ensure_future(stream.recv_message())
            done, _ = await asyncio.wait({pending}, timeout=0.5)
            assert not done
            names = [f"file-cert:{tmp_path}/cert.pem~{tmp_path}/key.pem", f"file-root:{tmp_path}/ca.pem"]
            await stream.send_message(DiscoveryRequest(type_url=SECRET_TYPE, resource_names=names))
            answer = await asyncio.wait_for(pending, 5)
            assert answer is not None
            secrets = {}
            for packed in answer.resources:
                found = secret_pb2.Secret()
                packed.Unpack(found)
                secrets[found.name] = found
            cert, root = secrets[names[0]], secrets[names[1]]
            assert cert.tls_certificate.certificate_chain.inline_bytes == b"CHAIN"
            assert cert.tls_certificate.private_key.inline_bytes == b"KEY"
            assert root.validation_context.trusted_ca.inline_bytes == b"CA"
            await stream.cancel()
    finally:
        channel.close()
        server.close()
        await server.wait_closed()
